package tokenizer

import (
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// specialVocab is the tiny GPT-2 vocabulary with Llama-3- and Qwen-style
// control tokens, a user-defined one, and a pair where one control token
// is a prefix of another.
func specialVocab(t testing.TB) *Tokenizer {
	tk, err := FromGGUF(gpt2FileWith(t, gpt2Merges, nil, map[string]int32{
		"<|eot_id|>": typeControl, "<|im_start|>": typeControl, "<|im": typeControl,
		"<think>": typeUserDefined, "[x]": typeControl,
	}))
	require.NoError(t, err)
	return tk
}

func id(t testing.TB, tk *Tokenizer, s string) int32 {
	t.Helper()
	i, ok := tk.index[s]
	require.True(t, ok, s)
	return i
}

func TestEncodeSpecial(t *testing.T) {
	tk := specialVocab(t)
	eot, ims, im, think, x := id(t, tk, "<|eot_id|>"), id(t, tk, "<|im_start|>"), id(t, tk, "<|im"), id(t, tk, "<think>"), id(t, tk, "[x]")
	textOf := func(s string) []int32 { return tk.Encode(s, false) }
	cat := func(parts ...[]int32) []int32 {
		var out []int32
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for _, tc := range []struct {
		name           string
		text           string
		plain, special []int32
	}{
		{"control token is text to Encode", "a<|eot_id|>b", cat(textOf("a<|"), textOf("eot"), textOf("_id|>b")), cat(textOf("a"), []int32{eot}, textOf("b"))},
		{"user-defined token is a token to both", "<think>hi", cat([]int32{think}, textOf("hi")), cat([]int32{think}, textOf("hi"))},
		{"longest match wins", "<|im_start|>x<|im", nil, cat([]int32{ims}, textOf("x"), []int32{im})},
		{"adjacent tokens", "[x][x]<|eot_id|>", nil, []int32{x, x, eot}},
		// No token spans the boundary: " world" after a token is merged
		// on its own, as "Ġworld".
		{"pieces between tokens are encoded alone", "hello<|eot_id|> world", nil, cat(textOf("hello"), []int32{eot}, textOf(" world"))},
		{"nothing special", "the world", textOf("the world"), textOf("the world")},
		{"empty", "", []int32{}, []int32{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.plain != nil {
				require.Equal(t, tc.plain, tk.Encode(tc.text, false))
			}
			require.Equal(t, tc.special, tk.EncodeSpecial(tc.text, false))
		})
	}
	require.NotContains(t, tk.Encode("<|eot_id|>", false), eot)
	require.Equal(t, "a<|eot_id|>b", tk.Decode(tk.Encode("a<|eot_id|>b", false)))
	// Control tokens decode to nothing, user-defined ones to their text.
	require.Equal(t, "a<think>b", tk.Decode(tk.EncodeSpecial("a<|eot_id|><think>b", false)))
	ids := tk.EncodeSpecial("hi", true)
	require.Equal(t, tk.BOS(), ids[0])
}

func TestEscapeSpecial(t *testing.T) {
	tk := specialVocab(t)
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"a<|eot_id|>b", "a<\uFDD0|eot_id|>b"},
		{"<|im_start|>", "<\uFDD0|im_start|>"},
		{"[x][x]", "[\uFDD0x][\uFDD0x]"},
		{"<think>", "<think>"},
		{"mark \uFDD0 here", "mark \uFDD0\uFDD0 here"},
		{"\xff<|eot_id|>\xff", "\xff<\uFDD0|eot_id|>\xff"},
	} {
		got := tk.EscapeSpecial(tc.in)
		require.Equal(t, tc.want, got, "%q", tc.in)
		require.Equal(t, tc.in, unescapeSpecial(got), "%q", tc.in)
		require.Equal(t, tk.Encode(tc.in, false), tk.EncodeSpecial(got, false), "%q", tc.in)
	}
}

// TestStoriesSpecial: SentencePiece control tokens in text, and the space
// prefix llama.cpp adds after each special token.
func TestStoriesSpecial(t *testing.T) {
	tk := stories(t)
	require.Equal(t, []int32{1, 403}, tk.EncodeSpecial("<s>Once", false))
	require.Equal(t, []int32{1, 403, 2, 1, 403}, tk.EncodeSpecial("Once</s><s>Once", true))
	plain := tk.Encode("<s>Once", false)
	require.NotContains(t, plain, int32(1))
	require.Equal(t, "<s>Once", tk.Decode(plain))
	require.Equal(t, plain, tk.EncodeSpecial(tk.EscapeSpecial("<s>Once"), false))
}

// FuzzEscapeSpecial: EncodeSpecial of escaped text is Encode of the text,
// for any text, so text embedded in a template can never turn into a
// control token; neither call panics.
func FuzzEscapeSpecial(f *testing.F) {
	tk := specialVocab(f)
	for _, s := range []string{"a<|eot_id|>b", "<think><|im_start|>", "\uFDD0\uFDD0<|im", "[x]\xff[", "hello's world\n\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		require.Equal(t, tk.Encode(s, false), tk.EncodeSpecial(tk.EscapeSpecial(s), false), "%q", s)
		ids := tk.EncodeSpecial(s, false)
		require.True(t, utf8.ValidString(tk.Decode(ids)))
	})
}
