package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/model/gguf"
)

// hfCopy copies the (flat) Hugging Face directory src to a new directory,
// overwriting the files of replace, and returns it.
func hfCopy(t *testing.T, src string, replace map[string][]byte) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "m")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	ents, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644))
	}
	for name, b := range replace {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	return dir
}

// tokenizer_config.json's chat_template as a string, absent, null, or the
// list of named templates (transformers takes the one named "default");
// a list without one, a malformed entry or another JSON type is refused
// with what was found, and the directory once.
func TestHFChatTemplateForms(t *testing.T) {
	plain := gguf.LlamaConfig{Dim: 64, Layers: 1, Heads: 4, KVHeads: 2, FFN: 96, Vocab: 300, ContextLength: 256}
	base := hfTwin(t, writeArch(t, plain), plain)
	for _, c := range []struct {
		name     string
		template any // the chat_template value; absent when omitted
		omit     bool
		want     string
		err      string
	}{
		{name: "string", template: "{{ messages[0]['content'] }}", want: "{{ messages[0]['content'] }}"},
		{name: "absent", omit: true, want: ""},
		{name: "null", template: nil, want: ""},
		{name: "list", template: []map[string]string{{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}}, want: "D"},
		{name: "no default", template: []map[string]string{{"name": "tool_use", "template": "T"}, {"name": "rag", "template": "R"}},
			err: `chat_template lists 2 templates ("tool_use", "rag") but none named "default"`},
		{name: "empty list", template: []map[string]string{}, err: `chat_template lists 0 templates () but none named "default"`},
		{name: "no template", template: []map[string]any{{"name": "default"}}, err: `chat_template[0] is {"name":"default"}, want {"name": string, "template": string}`},
		{name: "number", template: 7, err: `chat_template is 7, want a string or a list of {"name", "template"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			tc := map[string]any{"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "add_bos_token": true}
			if !c.omit {
				tc["chat_template"] = c.template
			}
			b, err := json.Marshal(tc)
			require.NoError(t, err)
			dir := hfCopy(t, base, map[string][]byte{"tokenizer_config.json": b})
			m, err := LoadLlama(dir, LlamaOptions{})
			if c.err != "" {
				require.ErrorContains(t, err, "tokenizer_config.json: "+c.err)
				require.Equal(t, 1, strings.Count(err.Error(), dir), "%v", err)
				return
			}
			require.NoError(t, err)
			defer func() { require.NoError(t, m.Close()) }()
			require.Equal(t, c.want, m.ChatTemplate())
		})
	}
}

// config.json's vocab_size may exceed the tokenizer's tokens (embedding and
// output rows padded, as Qwen2.5's 151936 for 151665 tokens): the padding
// rows are dropped, so the runner's logits have one entry per token (a
// padded id cannot be sampled, and is refused as input) and they are the
// unpadded model's first entries, for untied and tied output.
func TestHFPaddedVocab(t *testing.T) {
	for _, tied := range []bool{false, true} {
		plain := gguf.LlamaConfig{Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFN: 96, Vocab: 300, ContextLength: 256, TiedOutput: tied}
		full := hfTwin(t, writeArch(t, plain), plain)
		const tokens = 280
		tj, err := json.Marshal(synthHFTokenizer(tokens))
		require.NoError(t, err)
		padded := hfCopy(t, full, map[string][]byte{"tokenizer.json": tj})

		f, err := LoadLlama(full, LlamaOptions{})
		require.NoError(t, err)
		defer func() { require.NoError(t, f.Close()) }()
		p, err := LoadLlama(padded, LlamaOptions{})
		require.NoError(t, err)
		defer func() { require.NoError(t, p.Close()) }()
		require.Equal(t, 300, f.Config().Vocab)
		require.Equal(t, tokens, p.Config().Vocab)
		require.Equal(t, tokens, p.Tokenizer().VocabSize())
		require.Equal(t, tokens, p.embd.Rows)
		require.Equal(t, tokens, p.output.Rows)
		require.NoError(t, p.output.Validate())
		require.Equal(t, []int32{257, 258}, p.StopIDs())

		toks := make([]int32, 24)
		for i := range toks {
			toks[i] = int32((i*37 + 11) % tokens)
		}
		gf, gp := teacherForced(t, f, toks, 8), teacherForced(t, p, toks, 8)
		for i := range gp {
			require.Len(t, gp[i], tokens, "tied=%v position %d", tied, i)
			require.Equal(t, gf[i][:tokens], gp[i], "tied=%v position %d", tied, i)
		}

		// A padded id as input: the step is refused, naming it.
		h := newHarness(t, newTestRunner(t, p, CPURunnerConfig{Seats: 1, KVBlocks: 4, BlockSize: 16, MaxBatchTokens: 16, KeepLogits: true}))
		h.build(part{newSeq(0, 0), []int32{5, tokens + 3}, true})
		require.ErrorContains(t, h.r.Execute(&h.b, &h.out), "token 283 (index 1) outside vocab 280")
	}
}
