package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// FuzzStoriesRoundTrip: Encode and Decode never panic, byte fallback makes
// decode(encode(s)) == s exact for valid UTF-8, and streaming gives the
// same text as Decode.
func FuzzStoriesRoundTrip(f *testing.F) {
	tk := stories(f)
	for _, s := range texts {
		f.Add(s)
	}
	f.Add("\xff\xfe invalid \xe2\x82")
	f.Fuzz(func(t *testing.T, s string) {
		ids := tk.Encode(s, true)
		out := tk.Decode(ids)
		if utf8.ValidString(s) {
			require.Equal(t, s, out)
			if s != "" {
				require.Equal(t, referenceSPM(tk, s), ids[1:], "%q", s)
			}
		}
		require.True(t, utf8.ValidString(out))
		d := tk.NewDecoder()
		var b strings.Builder
		for _, id := range ids {
			b.WriteString(d.Add(id))
		}
		b.WriteString(d.Flush())
		require.Equal(t, out, b.String())
	})
}

// FuzzGPT2: the pre-tokenizer covers the text exactly and BPE round-trips
// every byte string (the vocabulary has all 256 byte characters).
func FuzzGPT2(f *testing.F) {
	tk, err := FromGGUF(gpt2File(f, gpt2Merges))
	require.NoError(f, err)
	for _, s := range append(texts, "it's the world\n\n  hello's") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		require.Equal(t, s, strings.Join(preTokenize(s), ""))
		out := tk.Decode(tk.Encode(s, false))
		if utf8.ValidString(s) {
			require.Equal(t, s, out)
		}
	})
}
