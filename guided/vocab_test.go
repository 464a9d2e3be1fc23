package guided

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/grammar"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/model/tokenizer"
)

// TestVocabOf: the grammar vocabulary spans the runner's logits: ids
// past the tokenizer's are padding that no mask allows; a tokenizer wider
// than the logits, or without a stop token, is refused.
func TestVocabOf(t *testing.T) {
	path, err := gguf.TestModelPath()
	require.NoError(t, err, "run `make model`")
	f, err := gguf.Open(path)
	require.NoError(t, err)
	tok, err := tokenizer.FromGGUF(f)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	n := tok.VocabSize()
	for _, tc := range []struct {
		name    string
		width   int
		stops   []int32
		wantErr string
	}{
		{"the tokenizer's width", n, []int32{tok.EOS()}, ""},
		{"padded", n + 70, []int32{-1, tok.EOS()}, ""},
		{"narrower than the tokenizer", n - 1, []int32{tok.EOS()}, fmt.Sprintf("the tokenizer has %d tokens, more than the %d logits", n, n-1)},
		{"no stop", n, []int32{-1}, "no end-of-sequence token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := VocabOf(tok, tc.stops, tc.width)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.width, v.Size())
			require.Equal(t, []int32{tok.EOS()}, v.Stops())
			g, err := grammar.CompileRegex(`[a-z ]+`, grammar.DefaultLimits)
			require.NoError(t, err)
			dec, err := New(1, v)
			require.NoError(t, err)
			require.NoError(t, dec.Start(0, g))
			mask, err := dec.Fill(0)
			require.NoError(t, err)
			allowed := func(id int) bool { return mask[id/64]&(1<<(id%64)) != 0 }
			text := tok.Encode("cat", false)
			require.True(t, allowed(int(text[0])), "a text token")
			for id := n; id < tc.width; id++ {
				require.False(t, allowed(id), "padding id %d", id)
			}
		})
	}
}
