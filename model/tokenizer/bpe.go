package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/turnstile-llm/turnstile/model/gguf"
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

func (t *Tokenizer) initBPE(f *gguf.File, types []int32) error {
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
	merges, err := f.Strings("tokenizer.ggml.merges")
	if err != nil {
		return fmt.Errorf("tokenizer: gpt2 vocabulary: %w", err)
	}
	t.ranks = make(map[pair]int32, len(merges))
	for i, m := range merges {
		l, r, ok := strings.Cut(m, " ")
		if !ok || l == "" || r == "" || strings.Contains(r, " ") {
			return fmt.Errorf("tokenizer: tokenizer.ggml.merges[%d] = %q is not \"left right\"", i, m)
		}
		if _, dup := t.ranks[pair{l, r}]; !dup {
			t.ranks[pair{l, r}] = int32(i)
		}
	}
	return nil
}

// pair is a merge rule's two sides (keyed as a struct so lookups need no
// concatenated string).
type pair struct{ left, right string }

// encodeBPE splits text with the GPT-2 pre-tokenizer, maps each word's
// bytes to characters and merges pairs by rank.
func (t *Tokenizer) encodeBPE(out []int32, text string) []int32 {
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
	for _, word := range preTokenize(text) {
		mapped.Reset()
		for i := 0; i < len(word); i++ {
			mapped.WriteRune(b2r[word[i]])
		}
		m.text = mapped.String()
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
	}
	return out
}

// preTokenize splits text as GPT-2's pattern
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// does (Go's regexp has no lookahead, hence by hand). An invalid UTF-8 byte
// counts as a symbol character. The pieces cover text exactly, in order.
func preTokenize(text string) []string {
	var out []string
	at := func(i int) (rune, int) {
		if i >= len(text) {
			return -1, 0
		}
		return utf8.DecodeRuneInString(text[i:])
	}
	isOther := func(r rune) bool {
		return r >= 0 && !unicode.IsSpace(r) && !unicode.IsLetter(r) && !unicode.IsNumber(r)
	}
	run := func(i int, in func(rune) bool) int {
		for {
			r, n := at(i)
			if n == 0 || !in(r) {
				return i
			}
			i += n
		}
	}
	for i := 0; i < len(text); {
		if text[i] == '\'' {
			if n := contraction(text[i+1:]); n > 0 {
				out = append(out, text[i:i+1+n])
				i += 1 + n
				continue
			}
		}
		j := i
		if text[j] == ' ' {
			j++
		}
		r, _ := at(j)
		var end int
		switch {
		case r >= 0 && unicode.IsLetter(r):
			end = run(j, unicode.IsLetter)
		case r >= 0 && unicode.IsNumber(r):
			end = run(j, unicode.IsNumber)
		case isOther(r):
			end = run(j, isOther)
		default:
			// Whitespace at i: take the run, but leave its last character
			// for the next word when a non-space follows (\s+(?!\S)).
			end = run(i, unicode.IsSpace)
			if end < len(text) {
				_, last := utf8.DecodeLastRuneInString(text[i:end])
				if end-last > i {
					end -= last
				}
			}
		}
		out = append(out, text[i:end])
		i = end
	}
	return out
}

// contraction returns the length of a GPT-2 contraction suffix at the start
// of s (after the apostrophe), 0 if none.
func contraction(s string) int {
	for _, c := range []string{"re", "ve", "ll", "s", "t", "m", "d"} {
		if strings.HasPrefix(s, c) {
			return len(c)
		}
	}
	return 0
}
