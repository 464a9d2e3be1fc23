package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/turnstile-llm/turnstile/model/gguf"
	"golang.org/x/text/unicode/norm"
)

// byteToRune is GPT-2's reversible byte → printable character mapping:
// printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100
// onwards in byte order, so every token string is visible text.
func byteToRune() [256]rune {
	var m [256]rune
	next := rune(256)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m[b] = rune(b)
		} else {
			m[b] = next
			next++
		}
	}
	return m
}

// initBPE fills pieces, byteTok and ranks; merges are in rank order (the
// first of duplicates counts).
func (t *Tokenizer) initBPE(types []int32, merges []pair) {
	b2r := byteToRune()
	r2b := make(map[rune]byte, 256)
	for b, r := range b2r {
		r2b[r] = byte(b)
	}
	for i, s := range t.tokens {
		switch types[i] {
		case typeControl, typeUnused:
			continue
		case typeUnknown:
			t.pieces[i] = []byte(unkSurface)
			continue
		case typeUserDefined:
			// Added tokens are stored as their text, not byte-mapped
			// (llama.cpp and Hugging Face both decode them verbatim).
			t.pieces[i] = []byte(s)
			continue
		}
		// Map each character back to its byte; characters outside the
		// mapping (user-defined tokens) keep their UTF-8.
		p := make([]byte, 0, len(s))
		for _, r := range s {
			if b, ok := r2b[r]; ok {
				p = append(p, b)
			} else {
				p = utf8.AppendRune(p, r)
			}
		}
		t.pieces[i] = p
	}
	for b, r := range b2r {
		if id, ok := t.index[string(r)]; ok {
			t.byteTok[b] = id
		}
	}
	t.ranks = make(map[pair]int32, len(merges))
	for i, m := range merges {
		if _, dup := t.ranks[m]; !dup {
			t.ranks[m] = int32(i)
		}
	}
}

// ggufMerges reads tokenizer.ggml.merges, each "left right".
func ggufMerges(f *gguf.File) ([]pair, error) {
	merges, err := f.Strings("tokenizer.ggml.merges")
	if err != nil {
		return nil, fmt.Errorf("tokenizer: gpt2 vocabulary: %w", err)
	}
	out := make([]pair, len(merges))
	for i, m := range merges {
		l, r, ok := strings.Cut(m, " ")
		if !ok || l == "" || r == "" || strings.Contains(r, " ") {
			return nil, fmt.Errorf("tokenizer: tokenizer.ggml.merges[%d] = %q is not \"left right\"", i, m)
		}
		out[i] = pair{l, r}
	}
	return out, nil
}

// pair is a merge rule's two sides (keyed as a struct so lookups need no
// concatenated string).
type pair struct{ left, right string }

// encodeBPE splits text with the vocabulary's pre-tokenizer, maps each
// piece's bytes to characters and merges pairs by rank.
func (t *Tokenizer) encodeBPE(out []int32, text string) []int32 {
	if t.nfc {
		text = norm.NFC.String(text)
	}
	b2r := byteToRune()
	var mapped strings.Builder
	m := merger{prio: func(l, r, merged string) (float64, bool) {
		rank, ok := t.ranks[pair{l, r}]
		if !ok {
			return 0, false
		}
		if _, ok := t.index[merged]; !ok {
			return 0, false
		}
		return -float64(rank), true
	}}
	for _, word := range t.pre.split(nil, text) {
		cache := t.words != nil && len(word) <= maxCachedWord
		if cache {
			if ids, ok := t.words.Get(word); ok {
				out = append(out, ids...)
				continue
			}
		}
		start := len(out)
		out = t.mergeWord(out, &m, &mapped, &b2r, word)
		if cache {
			// The key is copied: word shares the prompt's memory.
			t.words.Add(strings.Clone(word), slices.Clone(out[start:]))
		}
	}
	return out
}

// Word cache bounds: words, and the longest word cached, bytes (longer
// ones are rare and would let one prompt fill the cache).
const (
	wordCacheEntries = 1 << 15
	maxCachedWord    = 64
)

// mergeWord appends word's tokens: its bytes mapped to BPE's characters,
// merged by rank.
func (t *Tokenizer) mergeWord(out []int32, m *merger, mapped *strings.Builder, b2r *[256]rune, word string) []int32 {
	mapped.Reset()
	for i := 0; i < len(word); i++ {
		mapped.WriteRune(b2r[word[i]])
	}
	m.text = mapped.String()
	if t.ignoreMerges {
		if id, ok := t.index[m.text]; ok {
			return append(out, id)
		}
	}
	for _, p := range m.run() {
		if id, ok := t.index[p]; ok {
			out = append(out, id)
			continue
		}
		// A single mapped byte missing from the vocabulary.
		for _, r := range p {
			if id, ok := t.index[string(r)]; ok {
				out = append(out, id)
			} else if t.unk >= 0 {
				out = append(out, t.unk)
			}
		}
	}
	return out
}
