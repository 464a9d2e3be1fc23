// Package tokenizer turns text into token ids and back using the vocabulary
// stored in a GGUF file (FromGGUF) or a Hugging Face tokenizer.json
// (FromHFJSON): SentencePiece-style (tokenizer.ggml.model "llama": merge
// the adjacent pair whose merged piece has the best score, with <0xXX>
// byte fallback) and byte-level BPE ("gpt2": merge the pair of lowest rank
// within each piece of the pre-tokenizer split, which is GPT-2's, Llama
// 3's or Qwen2's; see preTokenizer).
//
// Control tokens written in the input text (e.g. "<s>", "<|eot_id|>") are
// not recognized by Encode, so user input can never inject one;
// EncodeSpecial recognizes them, for text the server writes itself (chat
// templates), and EscapeSpecial keeps user text embedded in such text from
// matching.
//
// Decoding is incremental and UTF-8-safe (Decoder): bytes of a character
// split across tokens are held until the token that completes it arrives.
//
// The Llama 3 and Qwen3 vocabularies are checked against the reference
// encoder (transformers.js's tokenizers) on the corpus in
// testdata/tokenizer; scripts/make-tokenizer-fixtures.sh regenerates the
// fixtures.
package tokenizer

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/turnstile-llm/turnstile/model/gguf"
)

// Kind is the tokenization algorithm.
type Kind int

// The supported tokenizer kinds.
const (
	SPM Kind = iota // tokenizer.ggml.model = "llama"
	BPE             // tokenizer.ggml.model = "gpt2"
)

// Token types of tokenizer.ggml.token_type (llama.cpp's values).
const (
	typeNormal      = 1
	typeUnknown     = 2
	typeControl     = 3
	typeUserDefined = 4
	typeUnused      = 5
	typeByte        = 6
)

// spmSpace is SentencePiece's visible space, U+2581 "▁".
const spmSpace = "\u2581"

// unkSurface is how an unknown token decodes (SentencePiece's default).
const unkSurface = " \u2047 "

// Tokenizer is immutable once FromGGUF or FromHFJSON returns it and safe
// for concurrent use.
type Tokenizer struct {
	kind           Kind
	tokens         []string
	scores         []float32
	pieces         [][]byte // decoded bytes of each token
	isControl      []bool   // control, unknown and unused tokens: never text
	index          map[string]int32
	byteTok        [256]int32 // SPM: id of <0xXX>; BPE: id of the mapped byte's char; -1 if none
	ranks          map[pair]int32
	bos, eos, unk  int32
	addBOS         bool
	addSpacePrefix bool
	// words caches BPE's merges by pre-tokenized word (BPE only): prompts
	// repeat their words (system prompts, tool schemas, conversation
	// history), and merging was most of encoding's time, as in Hugging
	// Face's tokenizers, which cache words the same way.
	words *lru.Cache[string, []int32]
	// plain finds user-defined tokens in text (Encode); special also finds
	// control and unknown ones (EncodeSpecial); control finds only those
	// (EscapeSpecial).
	plain, special, control *matcher
	// BPE only: the pre-tokenizer split; ignoreMerges emits a piece that
	// is a whole vocabulary token as that token without merging (Llama 3);
	// nfc normalizes text to Unicode NFC first (Qwen2).
	pre          preTokenizer
	ignoreMerges bool
	nfc          bool
}

// FromGGUF builds the tokenizer from f's tokenizer.ggml.* metadata. Keys read:
// model, tokens, scores (SPM; zeros when absent), token_type (normal when
// absent), merges (BPE), pre (BPE's pre-tokenizer, "default" when absent;
// see preNames), bos/eos/unknown_token_id, add_bos_token (default true for
// llama and for the Llama 3 pre-tokenizer, as llama.cpp has it, false
// otherwise), add_space_prefix (default true for llama, false for gpt2).
// The Llama 3 pre-tokenizer also selects ignore_merges and qwen2 selects
// NFC normalization, as those models' tokenizer.json files do.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	model, err := f.String("tokenizer.ggml.model")
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t := &Tokenizer{bos: -1, eos: -1, unk: -1}
	switch model {
	case "llama":
		t.kind, t.addBOS, t.addSpacePrefix = SPM, true, true
	case "gpt2":
		t.kind = BPE
	default:
		return nil, fmt.Errorf("tokenizer: tokenizer.ggml.model = %q is not supported (accepted: llama, gpt2)", model)
	}
	if t.kind == BPE && f.Has("tokenizer.ggml.pre") {
		name, err := f.String("tokenizer.ggml.pre")
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		if t.pre, err = parsePre(name); err != nil {
			return nil, err
		}
		switch t.pre {
		case preLlama3:
			t.ignoreMerges, t.addBOS = true, true
		case preQwen2:
			t.nfc = true
		}
	}
	if t.tokens, err = f.Strings("tokenizer.ggml.tokens"); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	n := len(t.tokens)
	if n == 0 || n > 1<<31-1 {
		return nil, fmt.Errorf("tokenizer: tokenizer.ggml.tokens has %d entries", n)
	}
	t.scores = make([]float32, n)
	if f.Has("tokenizer.ggml.scores") {
		s, err := f.Float32s("tokenizer.ggml.scores")
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		if len(s) != n {
			return nil, fmt.Errorf("tokenizer: tokenizer.ggml.scores has %d entries, tokens has %d", len(s), n)
		}
		t.scores = s
	}
	types := make([]int32, n)
	for i := range types {
		types[i] = typeNormal
	}
	if f.Has("tokenizer.ggml.token_type") {
		tt, err := f.Int32s("tokenizer.ggml.token_type")
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		if len(tt) != n {
			return nil, fmt.Errorf("tokenizer: tokenizer.ggml.token_type has %d entries, tokens has %d", len(tt), n)
		}
		types = tt
	}
	for _, k := range []struct {
		key string
		dst *int32
	}{{"tokenizer.ggml.bos_token_id", &t.bos}, {"tokenizer.ggml.eos_token_id", &t.eos}, {"tokenizer.ggml.unknown_token_id", &t.unk}} {
		if !f.Has(k.key) {
			continue
		}
		id, err := f.Int(k.key)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		if id < 0 || id >= n {
			return nil, fmt.Errorf("tokenizer: %s = %d is outside the vocabulary [0, %d)", k.key, id, n)
		}
		*k.dst = int32(id)
	}
	for _, k := range []struct {
		key string
		dst *bool
	}{{"tokenizer.ggml.add_bos_token", &t.addBOS}, {"tokenizer.ggml.add_space_prefix", &t.addSpacePrefix}} {
		if !f.Has(k.key) {
			continue
		}
		if *k.dst, err = f.Bool(k.key); err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
	}
	if t.addBOS && t.bos < 0 {
		return nil, errors.New("tokenizer: add_bos_token is set but tokenizer.ggml.bos_token_id is absent")
	}
	var merges []pair
	if t.kind == BPE {
		if merges, err = ggufMerges(f); err != nil {
			return nil, err
		}
	}
	if err := t.build(types, merges); err != nil {
		return nil, err
	}
	return t, nil
}

// build makes the lookup tables once tokens, their types (one per token)
// and, for BPE, the merges in rank order are known.
func (t *Tokenizer) build(types []int32, merges []pair) error {
	if t.kind == BPE {
		var err error
		if t.words, err = lru.New[string, []int32](wordCacheEntries); err != nil {
			return fmt.Errorf("tokenizer: word cache: %w", err)
		}
	}
	n := len(t.tokens)
	t.index = make(map[string]int32, n)
	for i, s := range t.tokens {
		if _, dup := t.index[s]; !dup {
			t.index[s] = int32(i)
		}
	}
	for i := range t.byteTok {
		t.byteTok[i] = -1
	}
	t.plain = newMatcher(t.tokens, types, typeUserDefined)
	t.special = newMatcher(t.tokens, types, typeUserDefined, typeControl, typeUnknown)
	t.control = newMatcher(t.tokens, types, typeControl, typeUnknown)
	t.pieces = make([][]byte, n)
	t.isControl = make([]bool, n)
	for i, ty := range types {
		t.isControl[i] = ty == typeControl || ty == typeUnknown || ty == typeUnused
	}
	if t.kind == SPM {
		t.initSPM(types)
	} else {
		t.initBPE(types, merges)
	}
	return nil
}

func (t *Tokenizer) initSPM(types []int32) {
	for i, s := range t.tokens {
		switch types[i] {
		case typeControl, typeUnused:
			// decodes to nothing
		case typeUnknown:
			t.pieces[i] = []byte(unkSurface)
		case typeByte:
			if b, ok := parseByteToken(s); ok {
				t.pieces[i] = []byte{b}
				if t.byteTok[b] < 0 {
					t.byteTok[b] = int32(i)
				}
			}
		default:
			t.pieces[i] = []byte(strings.ReplaceAll(s, spmSpace, " "))
		}
	}
}

// parseByteToken reads "<0xXX>".
func parseByteToken(s string) (byte, bool) {
	if len(s) != 6 || !strings.HasPrefix(s, "<0x") || s[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(s[3:5], 16, 8)
	return byte(v), err == nil
}

// Kind reports the algorithm.
func (t *Tokenizer) Kind() Kind { return t.kind }

// BOS is the beginning-of-sequence id, -1 if the vocabulary has none.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS is the end-of-sequence id, -1 if the vocabulary has none.
func (t *Tokenizer) EOS() int32 { return t.eos }

// VocabSize is the number of tokens.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// AddBOS reports whether prompts should start with BOS (tokenizer.ggml.add_bos_token).
func (t *Tokenizer) AddBOS() bool { return t.addBOS }

// Token returns the vocabulary string of id ("" when out of range).
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// IsControl reports whether id is a control, unknown or unused token:
// one that never stands for text (a grammar never allows it as text).
func (t *Tokenizer) IsControl(id int32) bool {
	return id < 0 || int(id) >= len(t.isControl) || t.isControl[id]
}

// Piece returns the bytes that id decodes to (▁ → ' ', <0x0A> → '\n',
// GPT-2 byte chars → their bytes); control and unused tokens and ids out of
// range decode to nothing, the unknown token to " ⁇ ". The slice is shared:
// do not modify it.
func (t *Tokenizer) Piece(id int32) []byte {
	if id < 0 || int(id) >= len(t.pieces) {
		return nil
	}
	return t.pieces[id]
}

// Encode tokenizes text, starting with BOS when addBOS (and the vocabulary
// has one). SPM prepends one space to non-empty text when add_space_prefix
// is set, as SentencePiece does. Text is text: control tokens written in
// it (e.g. "<|eot_id|>") are encoded as their characters, never as the
// tokens. User-defined tokens (Hugging Face's added tokens that are not
// special, such as Qwen3's "<think>") are recognized, as both llama.cpp
// and Hugging Face tokenizers do.
func (t *Tokenizer) Encode(text string, addBOS bool) []int32 {
	return t.encode(text, addBOS, t.plain, false)
}

// EncodeContinuation tokenizes text as Encode does, but as text that
// continues a sequence rather than starts one: no BOS, and no space
// prefix at its start (a SentencePiece vocabulary's add_space_prefix).
// It is how a model's generated text is tokenized when it follows a
// prompt, for example a JSON document checked token by token against a
// grammar.
func (t *Tokenizer) EncodeContinuation(text string) []int32 {
	return t.encodeFrom(text, false, t.plain, false, false)
}

// Decode returns the text of ids. Like llama.cpp, when the vocabulary adds
// a space prefix the first text-bearing token loses one leading space, so
// Decode(Encode(s, true)) == s. Invalid UTF-8 becomes U+FFFD.
func (t *Tokenizer) Decode(ids []int32) string {
	d := t.NewDecoder()
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(d.Add(id))
	}
	b.WriteString(d.Flush())
	return b.String()
}
