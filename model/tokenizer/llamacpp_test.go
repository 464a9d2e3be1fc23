package tokenizer

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The fixtures under testdata/tokenizer/llamacpp are written by
// scripts/make-llama-tokenize-fixtures.sh: what llama.cpp's llama-tokenize
// gives each corpus line (without BOS) for stories260K.gguf and for the
// real Llama 3 and Qwen3 vocabularies written as GGUFs by
// TestWriteLlamaCppGGUF.

var writeGGUF = flag.String("write-gguf", "", "TestWriteLlamaCppGGUF writes llama3.gguf and qwen3.gguf (vocabulary only) into this directory")

// llamaCppVocabs are the GGUFs TestWriteLlamaCppGGUF writes: the fixture
// vocabulary and the tokenizer.ggml.pre llama.cpp's converter gives it.
var llamaCppVocabs = []struct{ name, pre string }{{"llama3", "llama-bpe"}, {"qwen3", "qwen2"}}

// TestWriteLlamaCppGGUF writes, with -write-gguf DIR, the vocabulary-only
// GGUFs the fixture script runs llama-tokenize on (Llama 3's is 9 MB, so
// they are not committed).
func TestWriteLlamaCppGGUF(t *testing.T) {
	if *writeGGUF == "" {
		t.Skip("needs -write-gguf DIR")
	}
	require.NoError(t, os.MkdirAll(*writeGGUF, 0o755))
	for _, v := range llamaCppVocabs {
		hf, _ := hfFixture(t, v.name)
		b := ggufVocab(t, hf, v.pre, hfTypes(hf))
		require.NoError(t, os.WriteFile(filepath.Join(*writeGGUF, v.name+".gguf"), b, 0o644))
	}
}

// llamaCppFixture is one testdata/tokenizer/llamacpp/*.json.
type llamaCppFixture struct {
	LlamaCpp string `json:"llama_cpp"` // llama-tokenize --version
	Model    string
	Cases    []struct {
		Text    string
		IDs     []int32 // --no-parse-special: Encode
		Special []int32 // special tokens parsed: EncodeSpecial
	}
}

// llamaCppDivergence is a corpus line where llama.cpp departs from the
// Hugging Face tokenizer and turnstile deliberately keeps Hugging Face's
// answer (which TestReferenceVocabularies checks on the same line). ids and
// special say which of the two encodings differ; the other must still
// match llama.cpp.
type llamaCppDivergence struct {
	ids, special bool
	why          string
}

// qwenNFC: Qwen's tokenizer.json has an NFC normalizer, which llama.cpp
// does not apply (llama-vocab.cpp normalizes only for WPM/UGM), so text
// that is not in NFC encodes as its decomposed bytes there.
var qwenNFC = llamaCppDivergence{true, true, "llama.cpp skips Qwen's NFC normalizer; turnstile keeps HF's NFC"}

// llamaCppDivergences, by fixture and corpus text. stories260K and Llama 3
// have none.
var llamaCppDivergences = map[string]map[string]llamaCppDivergence{
	"qwen3": {
		"e\u0301":               qwenNFC,
		"cafe\u0301":            qwenNFC,
		"a\u0308o\u0308u\u0308": qwenNFC,
		"Z\u0324\u0354\u0367\u0311\u0313a\u0308\u0356\u032d\u0308\u0307lgo": qwenNFC,
		"\u1100\u1161\u11a8": qwenNFC,
		"A\u030a":            qwenNFC,
		"\u212b":             qwenNFC,
		// Qwen's <|fim_prefix|>, <|fim_suffix|> and <|fim_middle|> are
		// added tokens with special false (user-defined in the GGUF), so
		// HF splits them out of any text; llama.cpp's vocabulary loader
		// retypes FIM (and EOG) tokens it recognizes by name to control,
		// so with --no-parse-special it encodes them as text. With
		// special tokens parsed the two agree.
		"<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>": {ids: true, why: "llama.cpp retypes Qwen's user-defined FIM tokens to control; turnstile keeps HF's always-split user-defined tokens"},
	},
}

func TestLlamaCppFixtures(t *testing.T) {
	tokenizers := map[string]func(t *testing.T) *Tokenizer{
		"stories260K": func(t *testing.T) *Tokenizer { return stories(t) },
	}
	for _, v := range llamaCppVocabs {
		tokenizers[v.name] = func(t *testing.T) *Tokenizer {
			hf, _ := hfFixture(t, v.name)
			return ggufLike(t, hf, v.pre, hfTypes(hf))
		}
	}
	corpus := readFixture(t, "corpus.json")
	var lines []string
	require.NoError(t, json.Unmarshal(corpus, &lines))
	for _, name := range []string{"stories260K", "llama3", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			var fx llamaCppFixture
			b, err := loadFixture("llamacpp/" + name + ".json")
			require.NoError(t, err, "run scripts/make-llama-tokenize-fixtures.sh")
			require.NoError(t, json.Unmarshal(b, &fx))
			// One case per corpus line, then the vocabulary's own extras
			// (stories260K: its SentencePiece control tokens as text).
			require.GreaterOrEqual(t, len(fx.Cases), len(lines), "one case per corpus line")
			extra := map[string]bool{}
			for _, c := range fx.Cases[len(lines):] {
				extra[c.Text] = true
			}
			require.Equal(t, name == "stories260K", len(extra) > 0, "extra cases")
			tk := tokenizers[name](t)
			for text := range llamaCppDivergences[name] {
				require.Contains(t, lines, text, "divergence not in the corpus")
			}
			for i, c := range fx.Cases {
				if i < len(lines) {
					require.Equal(t, lines[i], c.Text, "case %d", i)
				}
				d := llamaCppDivergences[name][c.Text]
				for _, e := range []struct {
					what     string
					want     []int32
					got      []int32
					diverges bool
				}{
					{"Encode", c.IDs, tk.Encode(c.Text, false), d.ids},
					{"EncodeSpecial", c.Special, tk.EncodeSpecial(c.Text, false), d.special},
				} {
					if e.diverges {
						// Listed divergences must still diverge, or the
						// list is stale.
						require.NotEqual(t, e.want, e.got, "case %d %q: %s now matches llama.cpp; drop the divergence", i, c.Text, e.what)
						t.Logf("case %d %q: %s differs from llama.cpp: %s", i, c.Text, e.what, d.why)
						continue
					}
					require.Equal(t, e.want, e.got, "case %d %q: %s", i, c.Text, e.what)
				}
			}
		})
	}
}
