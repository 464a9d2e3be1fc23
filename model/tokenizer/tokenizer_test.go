package tokenizer

import (
	"bytes"
	"sort"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"github.com/turnstile-llm/turnstile/model/gguf"
)

func stories(t testing.TB) *Tokenizer {
	t.Helper()
	p, err := gguf.TestModelPath()
	require.NoError(t, err, "run `make model`")
	f, err := gguf.Open(p)
	require.NoError(t, err)
	tk, err := FromGGUF(f)
	require.NoError(t, err)
	// The tokenizer copies what it needs out of the metadata, which is
	// heap memory, not the mapping; closing the file is safe.
	require.NoError(t, f.Close())
	return tk
}

func pieces(tk *Tokenizer, ids []int32) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = tk.Token(id)
	}
	return out
}

func TestStoriesVocab(t *testing.T) {
	tk := stories(t)
	require.Equal(t, SPM, tk.Kind())
	require.Equal(t, 512, tk.VocabSize())
	require.Equal(t, int32(1), tk.BOS())
	require.Equal(t, int32(2), tk.EOS())
	require.True(t, tk.AddBOS())
	for _, tc := range []struct {
		id   int32
		want string
	}{
		{1, ""}, {2, ""}, {0, " \u2047 "}, {13, "\n"}, {3, "\x00"}, {258, "\xff"},
		{403, " Once"}, {260, "he"}, {-1, ""}, {512, ""},
	} {
		require.Equal(t, tc.want, string(tk.Piece(tc.id)), "id %d", tc.id)
	}
}

// TestStoriesKnownIDs: the ids follow from the vocabulary by hand. Every
// character of "▁Once▁upon▁a▁time" starts as a symbol; the best-scored
// merges build "▁Once" (403), "▁upon" (407), "▁a" (261) and "▁time" (378),
// each a whole vocabulary entry, and no pair of them is a token.
func TestStoriesKnownIDs(t *testing.T) {
	tk := stories(t)
	for _, tc := range []struct {
		text   string
		ids    []int32
		pieces []string
	}{
		{"Once upon a time", []int32{1, 403, 407, 261, 378}, []string{"<s>", "▁Once", "▁upon", "▁a", "▁time"}},
		{"Once upon a time, there was a little girl named Lily.",
			[]int32{1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426},
			[]string{"<s>", "▁Once", "▁upon", "▁a", "▁time", ",", "▁there", "▁was", "▁a", "▁little", "▁g", "ir", "l", "▁named", "▁Lily", "."}},
		// Newline and an emoji have no token: byte fallback.
		{"a\n😀", []int32{1, 261, 13, 243, 162, 155, 131}, []string{"<s>", "▁a", "<0x0A>", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>"}},
		{"", []int32{1}, []string{"<s>"}},
	} {
		ids := tk.Encode(tc.text, true)
		require.Equal(t, tc.ids, ids, tc.text)
		require.Equal(t, tc.pieces, pieces(tk, ids), tc.text)
		require.Equal(t, tc.text, tk.Decode(ids))
	}
	require.Equal(t, []int32{403}, tk.Encode("Once", false))
}

// referenceSPM is llama2.c's encoder, written independently of merge.go as
// an oracle: characters (or their bytes) become tokens first, then the
// best-scoring adjacent pair whose concatenation is a token is merged,
// leftmost on ties, until none is left.
func referenceSPM(tk *Tokenizer, text string) []int32 {
	text = strings.ReplaceAll(" "+text, " ", spmSpace)
	var ids []int32
	for _, r := range text {
		if id, ok := tk.index[string(r)]; ok {
			ids = append(ids, id)
			continue
		}
		for _, b := range []byte(string(r)) {
			ids = append(ids, int32(b)+3)
		}
	}
	for {
		best, at := float32(-1e30), -1
		for i := 0; i+1 < len(ids); i++ {
			id, ok := tk.index[tk.tokens[ids[i]]+tk.tokens[ids[i+1]]]
			if ok && tk.scores[id] > best {
				best, at = tk.scores[id], i
			}
		}
		if at < 0 {
			return ids
		}
		ids[at] = tk.index[tk.tokens[ids[at]]+tk.tokens[ids[at+1]]]
		ids = append(ids[:at+1], ids[at+2:]...)
	}
}

var texts = []string{
	"Once upon a time",
	"The little dog ran to the park. He was very happy!",
	"  two leading spaces and trailing  ",
	"line one\nline two\n\n\ttabbed",
	"Ünïcödé: naïve café, 東京, Ελληνικά, 😀👍🏽",
	"Lily said, \"I want to play with the ball.\" Tom laughed.",
	"1234567890 + 42 = 1234567932",
	"a",
	" ",
	"\n",
}

func TestStoriesRoundTripAndReference(t *testing.T) {
	tk := stories(t)
	for _, s := range texts {
		ids := tk.Encode(s, true)
		require.Equal(t, s, tk.Decode(ids), "%q", s)
		require.Equal(t, s, tk.Decode(tk.Encode(s, false)), "%q", s)
		require.Equal(t, referenceSPM(tk, s), ids[1:], "%q", s)
		// Pieces concatenate back to the text with its one prefix space.
		var b []byte
		for _, id := range ids {
			b = append(b, tk.Piece(id)...)
		}
		require.Equal(t, " "+s, string(b))
	}
}

func TestEncodeConcurrent(t *testing.T) {
	tk := stories(t)
	want := tk.Encode(texts[1], true)
	var wg sync.WaitGroup
	got := make([][]int32, 4)
	for g := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[g] = tk.Encode(texts[1], true)
		}()
	}
	wg.Wait()
	for _, g := range got {
		require.Equal(t, want, g)
	}
}

func TestDecoderSplitCharacters(t *testing.T) {
	tk := stories(t)
	emoji := []int32{243, 162, 155, 131} // 😀 = F0 9F 98 80
	for _, tc := range []struct {
		name  string
		dec   *Decoder
		ids   []int32
		outs  []string
		flush string
	}{
		{"emoji over four byte tokens", tk.NewDecoder(), append([]int32{1, 403}, emoji...), []string{"", "Once", "", "", "", "😀"}, ""},
		{"continuation keeps the space", tk.NewContinuation(), []int32{403, 407}, []string{" Once", " upon"}, ""},
		{"incomplete at the end", tk.NewContinuation(), emoji[:3], []string{"", "", ""}, "\uFFFD"},
		{"broken sequence", tk.NewContinuation(), []int32{243, 261}, []string{"", "\uFFFD a"}, ""},
		{"invalid byte at once", tk.NewContinuation(), []int32{258, 13}, []string{"\uFFFD", "\n"}, ""},
		{"control tokens are silent", tk.NewDecoder(), []int32{1, 2, 0}, []string{"", "", "\u2047 "}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, id := range tc.ids {
				out := tc.dec.Add(id)
				require.Equal(t, tc.outs[i], out, "token %d", i)
				require.True(t, utf8.ValidString(out))
			}
			require.Equal(t, tc.flush, tc.dec.Flush())
			require.Equal(t, "", tc.dec.Flush())
		})
	}
}

// gpt2File builds a tiny GPT-2 vocabulary: the 256 byte characters, the
// merges below and the tokens they form, plus an end-of-text control token
// and the extra tokens (type normal unless types says otherwise); keys are
// more tokenizer.ggml.* values.
func gpt2File(t testing.TB, merges []string) *gguf.File {
	return gpt2FileWith(t, merges, nil, nil)
}

func gpt2FileWith(t testing.TB, merges []string, keys map[string]any, extra map[string]int32) *gguf.File {
	t.Helper()
	b2r := byteToRune()
	var toks []string
	var types []int32
	for _, r := range b2r {
		toks = append(toks, string(r))
		types = append(types, typeNormal)
	}
	for _, m := range merges {
		toks = append(toks, strings.Replace(m, " ", "", 1))
		types = append(types, typeNormal)
	}
	toks = append(toks, "<|endoftext|>")
	types = append(types, typeControl)
	names := make([]string, 0, len(extra))
	for s := range extra {
		names = append(names, s)
	}
	sort.Strings(names)
	for _, s := range names {
		toks = append(toks, s)
		types = append(types, extra[s])
	}
	w := gguf.NewWriter()
	for k, v := range keys {
		require.NoError(t, w.Set(k, v))
	}
	require.NoError(t, w.Set("tokenizer.ggml.model", "gpt2"))
	require.NoError(t, w.Set("tokenizer.ggml.tokens", toks))
	require.NoError(t, w.Set("tokenizer.ggml.token_type", types))
	require.NoError(t, w.Set("tokenizer.ggml.merges", merges))
	require.NoError(t, w.Set("tokenizer.ggml.bos_token_id", uint32(256+len(merges))))
	require.NoError(t, w.Set("tokenizer.ggml.eos_token_id", uint32(256+len(merges))))
	var buf bytes.Buffer
	_, err := w.WriteTo(&buf)
	require.NoError(t, err)
	f, err := gguf.Parse(buf.Bytes())
	require.NoError(t, err)
	return f
}

var gpt2Merges = []string{"Ġ t", "h e", "Ġt he", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "' s", "Ċ Ċ"}

func TestGPT2(t *testing.T) {
	tk, err := FromGGUF(gpt2File(t, gpt2Merges))
	require.NoError(t, err)
	require.Equal(t, BPE, tk.Kind())
	require.False(t, tk.AddBOS())
	for _, tc := range []struct {
		text   string
		pieces []string
	}{
		// Without a leading space "the" has no "t he" merge; "hello" is
		// built by rank: "h e", "l l", "he ll", "hell o"; no "Ġ hello".
		{"the hello world", []string{"t", "he", "Ġ", "hello", "Ġworld"}},
		// "Ġt he" (rank 2) needs "Ġ t" (0) and "h e" (1) first.
		{" the", []string{"Ġthe"}},
		// "'s" is a contraction word; "hello's" splits before it.
		{"hello's", []string{"hello", "'s"}},
		// Two newlines merge; the space before "x" stays with it.
		{"\n\n x", []string{"ĊĊ", "Ġ", "x"}},
		{"é!", []string{"Ã", "©", "!"}},
	} {
		ids := tk.Encode(tc.text, false)
		require.Equal(t, tc.pieces, pieces(tk, ids), "%q", tc.text)
		require.Equal(t, tc.text, tk.Decode(ids), "%q", tc.text)
	}
	ids := tk.Encode("hi", true)
	require.Equal(t, tk.BOS(), ids[0])
	require.Equal(t, "hi", tk.Decode(ids))
	require.Empty(t, tk.Piece(tk.BOS()))
}

func TestPreTokenize(t *testing.T) {
	for _, tc := range []struct {
		text string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"it's they're we'll I'd", []string{"it", "'s", " they", "'re", " we", "'ll", " I", "'d"}},
		{"abc123 456def", []string{"abc", "123", " 456", "def"}},
		{"hi!!  there", []string{"hi", "!!", " ", " there"}},
		{"a   \n  b", []string{"a", "   \n ", " b"}},
		{"x\n\ny", []string{"x", "\n", "\n", "y"}},
		{"end  ", []string{"end", "  "}},
		{" ?'x", []string{" ?'", "x"}},
		{"naïve 東京", []string{"naïve", " 東京"}},
		{"\xff\xfeab", []string{"\xff\xfe", "ab"}},
		{"", nil},
	} {
		got := preTokenize(tc.text)
		require.Equal(t, tc.want, got, "%q", tc.text)
	}
}

func TestFromGGUFErrors(t *testing.T) {
	build := func(set map[string]any) *gguf.File {
		w := gguf.NewWriter()
		base := map[string]any{
			"tokenizer.ggml.model":        "llama",
			"tokenizer.ggml.tokens":       []string{"<unk>", "<s>", "</s>", "a"},
			"tokenizer.ggml.scores":       []float32{0, 0, 0, -1},
			"tokenizer.ggml.bos_token_id": uint32(1),
		}
		for k, v := range set {
			base[k] = v
		}
		for k, v := range base {
			if v != nil {
				require.NoError(t, w.Set(k, v))
			}
		}
		var buf bytes.Buffer
		_, err := w.WriteTo(&buf)
		require.NoError(t, err)
		f, err := gguf.Parse(buf.Bytes())
		require.NoError(t, err)
		return f
	}
	for _, tc := range []struct {
		set  map[string]any
		want string
	}{
		{map[string]any{"tokenizer.ggml.model": nil}, "tokenizer.ggml.model"},
		{map[string]any{"tokenizer.ggml.model": "bert"}, `"bert"`},
		{map[string]any{"tokenizer.ggml.tokens": nil}, "tokenizer.ggml.tokens"},
		{map[string]any{"tokenizer.ggml.scores": []float32{1}}, "scores has 1 entries, tokens has 4"},
		{map[string]any{"tokenizer.ggml.token_type": []int32{1, 1}}, "token_type has 2 entries"},
		{map[string]any{"tokenizer.ggml.bos_token_id": uint32(9)}, "bos_token_id = 9"},
		{map[string]any{"tokenizer.ggml.bos_token_id": nil}, "bos_token_id is absent"},
		{map[string]any{"tokenizer.ggml.add_bos_token": uint8(1)}, "add_bos_token"},
		{map[string]any{"tokenizer.ggml.model": "gpt2"}, "tokenizer.ggml.merges"},
		{map[string]any{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.merges": []string{"ab"}}, `merges[0] = "ab"`},
		{map[string]any{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "tekken"}, `tokenizer.ggml.pre = "tekken" is not supported`},
		{map[string]any{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": uint8(1)}, "tokenizer.ggml.pre"},
	} {
		_, err := FromGGUF(build(tc.set))
		require.ErrorContains(t, err, tc.want)
	}
	tk, err := FromGGUF(build(map[string]any{"tokenizer.ggml.add_bos_token": false, "tokenizer.ggml.add_space_prefix": false}))
	require.NoError(t, err)
	require.False(t, tk.AddBOS())
	require.Equal(t, []int32{3, 3}, tk.Encode("aa", tk.AddBOS()))
}

// TestGGUFPre: tokenizer.ggml.pre selects the split and what goes with it
// in llama.cpp and the models' tokenizer.json: Llama 3 adds BOS by default
// and takes a piece that is a whole token as it is (ignore_merges); Qwen2
// normalizes to NFC.
func TestGGUFPre(t *testing.T) {
	// "xyz" is a token no merge builds; "é" (U+00E9) is "Ã©" mapped.
	extra := map[string]int32{"xyz": typeNormal, "Ã©": typeNormal}
	for _, tc := range []struct {
		pre    string
		addBOS bool
		text   string
		pieces []string
	}{
		{"gpt2", false, "xyz 123", []string{"x", "y", "z", "Ġ", "1", "2", "3"}},
		{"default", false, "1234", []string{"1", "2", "3", "4"}},
		{"llama-bpe", true, "xyz 1234", []string{"xyz", "Ġ", "1", "2", "3", "4"}},
		{"qwen2", false, "xyz", []string{"x", "y", "z"}},
		// NFC composes e + U+0301 into é, a whole token.
		{"qwen2", false, "e\u0301", []string{"Ã©"}},
		{"llama-bpe", true, "e\u0301", []string{"e", "Ì", "ģ"}},
	} {
		tk, err := FromGGUF(gpt2FileWith(t, []string{"Ã ©"}, map[string]any{"tokenizer.ggml.pre": tc.pre}, extra))
		require.NoError(t, err, tc.pre)
		require.Equal(t, tc.addBOS, tk.AddBOS(), tc.pre)
		ids := tk.Encode(tc.text, false)
		require.Equal(t, tc.pieces, pieces(tk, ids), "%s %q", tc.pre, tc.text)
	}
}

// TestEncodeContinuation: text that continues a sequence gets no space
// prefix (SPM) and no BOS; its pieces are exactly its bytes, and a BPE
// vocabulary, which adds no prefix, encodes it as Encode does.
func TestEncodeContinuation(t *testing.T) {
	tk := stories(t)
	gpt, err := FromGGUF(gpt2File(t, gpt2Merges))
	require.NoError(t, err)
	for _, s := range append([]string{`{"a":1,"b":"xy"}`, " leading space", "x"}, texts...) {
		ids := tk.EncodeContinuation(s)
		var b []byte
		for _, id := range ids {
			require.NotEqual(t, tk.BOS(), id)
			b = append(b, tk.Piece(id)...)
		}
		require.Equal(t, s, string(b), "%q", s)
		d := tk.NewContinuation()
		var text strings.Builder
		for _, id := range ids {
			text.WriteString(d.Add(id))
		}
		text.WriteString(d.Flush())
		require.Equal(t, s, text.String(), "%q", s)
		require.Equal(t, gpt.Encode(s, false), gpt.EncodeContinuation(s), "%q", s)
	}
	require.Empty(t, tk.EncodeContinuation(""))
}
