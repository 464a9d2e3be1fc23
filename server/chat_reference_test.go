package server

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/turnstile-llm/turnstile/model/tokenizer"
)

// TestChatTemplateReference renders the real Llama 3 and Qwen3 chat
// templates (their tokenizer_config.json's chat_template) on the
// conversations of testdata/tokenizer/chat.json and compares text and
// token ids with what @huggingface/jinja (transformers.js's renderer) and
// the reference encoder give; scripts/make-tokenizer-fixtures.sh writes
// the fixtures.
func TestChatTemplateReference(t *testing.T) {
	dir := filepath.Join("..", "testdata", "tokenizer")
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err, "run scripts/make-tokenizer-fixtures.sh")
		if filepath.Ext(name) == ".gz" {
			zr, err := gzip.NewReader(bytes.NewReader(b))
			require.NoError(t, err)
			b, err = io.ReadAll(zr)
			require.NoError(t, err)
		}
		return b
	}
	var convs []struct {
		Name     string
		Messages []message
	}
	require.NoError(t, json.Unmarshal(read("chat.json"), &convs))
	for _, vocab := range []string{"llama3", "qwen3"} {
		t.Run(vocab, func(t *testing.T) {
			config := read(vocab + "/tokenizer_config.json")
			tok, err := tokenizer.FromHFJSON(read(vocab+"/tokenizer.json.gz"), config)
			require.NoError(t, err)
			var cfg struct {
				ChatTemplate string `json:"chat_template"`
			}
			require.NoError(t, json.Unmarshal(config, &cfg))
			c, err := newChatTemplate(cfg.ChatTemplate, tok.Token(tok.BOS()), tok.Token(tok.EOS()))
			require.NoError(t, err)
			c = c.withSpecial(tok)
			var ref struct {
				Renders []struct {
					Name string
					Text string
					IDs  []int32
				}
			}
			require.NoError(t, json.Unmarshal(read(vocab+"/chat.json"), &ref))
			require.Len(t, ref.Renders, len(convs))
			for i, conv := range convs {
				want := ref.Renders[i]
				require.Equal(t, conv.Name, want.Name)
				text, bos, err := c.render(conv.Messages, nil, nil)
				require.NoError(t, err, conv.Name)
				if bos {
					text = tok.Token(tok.BOS()) + text
				}
				require.Equal(t, want.Text, text, "%s: %s", vocab, conv.Name)
				text, bos, err = c.render(conv.Messages, nil, nil)
				require.NoError(t, err)
				require.Equal(t, want.IDs, c.encode(tok, text, bos), "%s: %s", vocab, conv.Name)
			}
		})
	}
}
