package tokenizer

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSplitLlama3AndQwen2: each case follows from the regexes by hand
// (leftmost alternative first, greedy runs, backtracking only where the
// pattern needs it).
func TestSplitLlama3AndQwen2(t *testing.T) {
	for _, tc := range []struct {
		name       string
		text       string
		llama3     []string
		qwen2      []string // nil: same as llama3
		sameAsGPT2 bool
	}{
		{name: "words", text: "Hello world", llama3: []string{"Hello", " world"}, sameAsGPT2: true},
		{name: "digits in threes", text: "1234567 12", llama3: []string{"123", "456", "7", " ", "12"},
			qwen2: []string{"1", "2", "3", "4", "5", "6", "7", " ", "1", "2"}},
		{name: "contractions any case", text: "it's IT'S we'LL they'Re",
			llama3: []string{"it", "'s", " IT", "'S", " we", "'LL", " they", "'Re"}},
		{name: "apostrophe prefixes a word", text: "'hello 'sup", llama3: []string{"'hello", " '", "sup"}},
		// [^\r\n\p{L}\p{N}]? takes any one non-newline character before letters.
		{name: "symbol or tab before letters", text: "(foo)\tbar", llama3: []string{"(foo", ")", "\tbar"}},
		{name: "punctuation keeps trailing newlines", text: "x;\n\ny", llama3: []string{"x", ";\n\n", "y"}},
		{name: "space before punctuation", text: "a !?", llama3: []string{"a", " !?"}},
		// \s*[\r\n]+ ends at the run's last newline; the rest is separate.
		{name: "newline runs", text: "a \n\n  b", llama3: []string{"a", " \n\n", " ", " b"}},
		{name: "crlf", text: "a\r\n\r\nb", llama3: []string{"a", "\r\n\r\n", "b"}},
		{name: "newline before a word", text: "\nfoo", llama3: []string{"\n", "foo"}},
		// \s+(?!\S) leaves the last space for the word; a lone space before
		// a digit is \s+ on its own.
		{name: "space runs", text: "a   b  1", llama3: []string{"a", "  ", " b", " ", " ", "1"}},
		{name: "trailing spaces", text: "end  ", llama3: []string{"end", "  "}},
		{name: "trailing newline and spaces", text: "x\n  ", llama3: []string{"x", "\n", "  "}},
		{name: "letters of any script", text: "naïve 東京 Ελλάδα", llama3: []string{"naïve", " 東京", " Ελλάδα"}},
		// A combining mark is \p{M}: neither letter nor number.
		{name: "combining mark", text: "cafe\u0301s", llama3: []string{"cafe", "\u0301s"}},
		{name: "emoji", text: "hi 👍🏽!", llama3: []string{"hi", " 👍🏽!"}},
		{name: "invalid bytes are symbols", text: "\xff\xfeab \xff", llama3: []string{"\xff\xfe", "ab", " \xff"}},
		{name: "invalid byte before letters", text: "\xffab", llama3: []string{"\xffab"}},
		{name: "code", text: "if (x == 10) {\n\treturn;\n}", llama3: []string{"if", " (", "x", " ==", " ", "10", ")", " {\n", "\treturn", ";\n", "}"},
			qwen2: []string{"if", " (", "x", " ==", " ", "1", "0", ")", " {\n", "\treturn", ";\n", "}"}},
		// \s is Unicode White_Space, as in the Rust (Oniguruma) engine of
		// Hugging Face tokenizers and in llama.cpp: U+0085 is a space and
		// U+FEFF is not. The JavaScript reference differs on both (it gives
		// " \u0085", "x" and " ", "\ufeffb"), so the corpus avoids them.
		{name: "NEL is a space", text: " \u0085x", llama3: []string{" ", "\u0085x"}},
		{name: "BOM is a symbol", text: " \ufeffb", llama3: []string{" \ufeff", "b"}},
		{name: "empty", text: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.llama3, preLlama3.split(nil, tc.text))
			want := tc.qwen2
			if want == nil {
				want = tc.llama3
			}
			require.Equal(t, want, preQwen2.split(nil, tc.text))
			if tc.sameAsGPT2 {
				require.Equal(t, tc.llama3, preGPT2.split(nil, tc.text))
			}
		})
	}
}

func TestParsePre(t *testing.T) {
	for name, want := range map[string]preTokenizer{
		"default": preGPT2, "gpt2": preGPT2, "gpt-2": preGPT2,
		"llama-bpe": preLlama3, "llama3": preLlama3, "llama-v3": preLlama3, "qwen2": preQwen2,
	} {
		got, err := parsePre(name)
		require.NoError(t, err, name)
		require.Equal(t, want, got, name)
	}
	_, err := parsePre("deepseek-v3")
	require.ErrorContains(t, err, `"deepseek-v3"`)
	require.ErrorContains(t, err, "llama-bpe")
	require.ErrorContains(t, err, "qwen2")
}

// FuzzPreTokenizers: every split covers its text exactly with non-empty
// pieces, and Qwen2's split refines Llama 3's (it only cuts digit runs
// further).
func FuzzPreTokenizers(f *testing.F) {
	for _, s := range append(texts, "a \n\n  b", "x;\r\n", "1234567", "'S'll", "\xff\xfe\t\u00a0z") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range []preTokenizer{preGPT2, preLlama3, preQwen2} {
			got := p.split(nil, s)
			require.Equal(t, s, strings.Join(got, ""), "%v %q", p, s)
			for _, w := range got {
				require.NotEmpty(t, w, "%v %q", p, s)
			}
		}
		require.GreaterOrEqual(t, len(preQwen2.split(nil, s)), len(preLlama3.split(nil, s)))
	})
}
