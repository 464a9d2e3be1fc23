package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"golang.org/x/text/unicode/norm"
)

// The fixtures under testdata/tokenizer are written by
// scripts/make-tokenizer-fixtures.sh: the real GPT-2, Llama 3 and Qwen3
// tokenizer.json files and the ids the reference encoder
// (@lenml/tokenizers, a port of transformers.js) gives each corpus line.

const fixtureDir = "../../testdata/tokenizer"

// reference is a vocabulary's reference.json.
type reference struct {
	Encoder, Vocabulary string
	AddsBOS             bool  `json:"adds_bos"`
	BOSID               int32 `json:"bos_id"`
	EOSID               int32 `json:"eos_id"`
	Cases               []struct {
		Source  string // corpus (corpus.json) or random (the script's seeded generator)
		Text    string
		Special []int32 // every added token in text split out (transformers' default)
		Plain   []int32 // special added tokens encoded as text
		Pre     []string
	}
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := loadFixture(name)
	require.NoError(t, err, "run scripts/make-tokenizer-fixtures.sh")
	return b
}

// loadFixture reads testdata/tokenizer/name, gunzipped if it ends in .gz.
func loadFixture(name string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(fixtureDir, name))
	if err != nil || filepath.Ext(name) != ".gz" {
		return b, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}

// hfLoaded is a vocabulary loaded from the fixtures, with its reference.
type hfLoaded struct {
	tk  *Tokenizer
	ref *reference
}

// hfFixtures loads each vocabulary once per test binary (a Tokenizer is
// immutable, so tests may share it); loading Llama 3's takes about a
// second.
var hfFixtures = map[string]func() (hfLoaded, error){
	"gpt2":   sync.OnceValues(func() (hfLoaded, error) { return loadHF("gpt2") }),
	"llama3": sync.OnceValues(func() (hfLoaded, error) { return loadHF("llama3") }),
	"qwen3":  sync.OnceValues(func() (hfLoaded, error) { return loadHF("qwen3") }),
}

func loadHF(name string) (hfLoaded, error) {
	var files [3][]byte
	for i, f := range []string{"/tokenizer.json.gz", "/tokenizer_config.json", "/reference.json"} {
		b, err := loadFixture(name + f)
		if err != nil {
			return hfLoaded{}, err
		}
		files[i] = b
	}
	tk, err := FromHFJSON(files[0], files[1])
	if err != nil {
		return hfLoaded{}, err
	}
	var ref reference
	if err := json.Unmarshal(files[2], &ref); err != nil {
		return hfLoaded{}, err
	}
	return hfLoaded{tk, &ref}, nil
}

// hfFixture is vocabulary name (gpt2, llama3, qwen3) from its tokenizer.json and
// tokenizer_config.json, with its reference.
func hfFixture(t testing.TB, name string) (*Tokenizer, *reference) {
	t.Helper()
	l, err := hfFixtures[name]()
	require.NoError(t, err, "run scripts/make-tokenizer-fixtures.sh")
	require.NotEmpty(t, l.ref.Cases)
	return l.tk, l.ref
}

// ggufLike writes tk's vocabulary as a GGUF the way llama.cpp's converter
// does (tokens by id, token types, merges "a b" in rank order, the pre
// name) and loads it with FromGGUF.
func ggufLike(t testing.TB, tk *Tokenizer, pre string, types []int32) *Tokenizer {
	t.Helper()
	f, err := gguf.Parse(ggufVocab(t, tk, pre, types))
	require.NoError(t, err)
	g, err := FromGGUF(f)
	require.NoError(t, err)
	return g
}

// ggufVocab is the vocabulary-only GGUF ggufLike loads. It names the
// architecture llama so that llama.cpp loads it too (with vocab_only it
// reads no hyperparameters and no tensors); see TestWriteLlamaCppGGUF.
func ggufVocab(t testing.TB, tk *Tokenizer, pre string, types []int32) []byte {
	t.Helper()
	merges := make([]string, len(tk.ranks))
	for p, r := range tk.ranks {
		merges[r] = p.left + " " + p.right
	}
	require.NotContains(t, merges, "", "ranks are dense")
	keys := map[string]any{
		"general.architecture":         "llama",
		"tokenizer.ggml.model":         "gpt2",
		"tokenizer.ggml.pre":           pre,
		"tokenizer.ggml.tokens":        tk.tokens,
		"tokenizer.ggml.token_type":    types,
		"tokenizer.ggml.merges":        merges,
		"tokenizer.ggml.add_bos_token": tk.addBOS,
	}
	if tk.bos >= 0 {
		keys["tokenizer.ggml.bos_token_id"] = uint32(tk.bos)
	}
	if tk.eos >= 0 {
		keys["tokenizer.ggml.eos_token_id"] = uint32(tk.eos)
	}
	w := gguf.NewWriter()
	for k, v := range keys {
		require.NoError(t, w.Set(k, v))
	}
	var buf bytes.Buffer
	_, err := w.WriteTo(&buf)
	require.NoError(t, err)
	return buf.Bytes()
}

// hfTypes are the token types FromHFJSON gave tk, read back from the
// matchers (control and unknown in control, user-defined in plain).
func hfTypes(tk *Tokenizer) []int32 {
	types := make([]int32, len(tk.tokens))
	for i := range types {
		types[i] = typeNormal
	}
	for _, m := range []struct {
		m  *matcher
		tp int32
	}{{tk.control, typeControl}, {tk.plain, typeUserDefined}} {
		for _, ids := range m.m.byFirst {
			for _, id := range ids {
				types[id] = m.tp
			}
		}
	}
	return types
}

func TestReferenceVocabularies(t *testing.T) {
	for _, v := range []struct{ name, pre string }{{"gpt2", "gpt2"}, {"llama3", "llama-bpe"}, {"qwen3", "qwen2"}} {
		t.Run(v.name, func(t *testing.T) {
			hf, ref := hfFixture(t, v.name)
			require.Equal(t, ref.AddsBOS, hf.AddBOS())
			require.Equal(t, ref.BOSID, hf.BOS())
			require.Equal(t, ref.EOSID, hf.EOS())
			g := ggufLike(t, hf, v.pre, hfTypes(hf))
			b2r := byteToRune()
			for name, tk := range map[string]*Tokenizer{"tokenizer.json": hf, "gguf": g} {
				for i, c := range ref.Cases {
					require.Equal(t, c.Plain, tk.Encode(c.Text, false), "%s: %s case %d %q: Encode", name, c.Source, i, c.Text)
					require.Equal(t, c.Special, tk.EncodeSpecial(c.Text, false), "%s: %s case %d %q: EncodeSpecial", name, c.Source, i, c.Text)
					want := c.Text
					if tk.nfc {
						want = norm.NFC.String(want)
					}
					require.Equal(t, want, tk.Decode(tk.Encode(c.Text, false)), "%s: %s case %d %q: decode", name, c.Source, i, c.Text)
					var pre []string
					for _, w := range tk.pre.split(nil, want) {
						var m []rune
						for j := 0; j < len(w); j++ {
							m = append(m, b2r[w[j]])
						}
						pre = append(pre, string(m))
					}
					require.Equal(t, c.Pre, pre, "%s: %s case %d %q: pre-tokenizer", name, c.Source, i, c.Text)
				}
			}
		})
	}
}

// TestHFVocabularyShape: what the loader reads from the real files.
func TestHFVocabularyShape(t *testing.T) {
	for _, tc := range []struct {
		name         string
		vocab        int
		pre          preTokenizer
		ignoreMerges bool
		nfc          bool
		control      []string
		userDefined  []string
	}{
		// GPT-2's pre_tokenizer is a lone ByteLevel with its own regex;
		// <|endoftext|> is its only added token.
		{"gpt2", 50257, preGPT2, false, false, []string{"<|endoftext|>"}, nil},
		{"llama3", 128256, preLlama3, true, false, []string{"<|begin_of_text|>", "<|eot_id|>", "<|reserved_special_token_0|>"}, nil},
		{"qwen3", 151669, preQwen2, false, true, []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}, []string{"<think>", "</think>", "<tool_call>", "<|fim_prefix|>"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk, _ := hfFixture(t, tc.name)
			require.Equal(t, BPE, tk.Kind())
			require.Equal(t, tc.vocab, tk.VocabSize())
			require.Equal(t, tc.pre, tk.pre)
			require.Equal(t, tc.ignoreMerges, tk.ignoreMerges)
			require.Equal(t, tc.nfc, tk.nfc)
			types := hfTypes(tk)
			for _, s := range tc.control {
				require.Equal(t, int32(typeControl), types[tk.index[s]], s)
				require.Empty(t, tk.Piece(tk.index[s]), s)
			}
			for _, s := range tc.userDefined {
				require.Equal(t, int32(typeUserDefined), types[tk.index[s]], s)
				require.Equal(t, s, string(tk.Piece(tk.index[s])), s)
			}
		})
	}
}

// fuzzHF checks a real vocabulary on any input: decode(encode(s)) is s (in
// NFC when the vocabulary normalizes), the pieces of the ids are exactly
// the (normalized) bytes even for invalid UTF-8, and escaped text
// encodes as plain text under EncodeSpecial.
func fuzzHF(f *testing.F, name string) {
	tk, ref := hfFixture(f, name)
	for _, c := range ref.Cases {
		f.Add(c.Text)
	}
	f.Add("\xff\xfe<|eot_id|>\xe2\x82 'S 123456\r\n\n")
	f.Fuzz(func(t *testing.T, s string) {
		want := s
		if tk.nfc {
			want = norm.NFC.String(s)
		}
		ids := tk.Encode(s, false)
		var b []byte
		for _, id := range ids {
			b = append(b, tk.Piece(id)...)
		}
		require.Equal(t, want, string(b), "%q", s)
		if utf8.ValidString(s) {
			require.Equal(t, want, tk.Decode(ids), "%q", s)
		}
		require.Equal(t, ids, tk.EncodeSpecial(tk.EscapeSpecial(s), false), "%q", s)
	})
}

func FuzzLlama3(f *testing.F) { fuzzHF(f, "llama3") }
func FuzzQwen3(f *testing.F)  { fuzzHF(f, "qwen3") }
