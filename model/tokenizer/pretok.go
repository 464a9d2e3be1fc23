package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// preTokenizer is the split a byte-level BPE vocabulary applies to text
// before merging: each piece is merged on its own, so no token spans two
// pieces. The splits are the pre_tokenizer regexes of the models' own
// tokenizer.json files, written as scanners over runes because Go's regexp
// has no lookahead (\s+(?!\S)).
type preTokenizer int

// The supported splits.
const (
	// preGPT2 is GPT-2's pattern:
	//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
	preGPT2 preTokenizer = iota
	// preLlama3 is Llama 3's pattern:
	//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
	//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	preLlama3
	// preQwen2 is Llama 3's pattern with \p{N} instead of \p{N}{1,3}:
	// digits one at a time (Qwen2, Qwen2.5, Qwen3).
	preQwen2
)

// parsePre resolves a GGUF tokenizer.ggml.pre value (llama.cpp's names).
// "default" keeps GPT-2's split, which is what this package applied to
// every gpt2 vocabulary before it read the key (llama.cpp's own "default"
// is a different, multi-regex split).
func parsePre(name string) (preTokenizer, error) {
	switch name {
	case "default", "gpt2", "gpt-2":
		return preGPT2, nil
	case "llama3", "llama-v3", "llama-bpe":
		return preLlama3, nil
	case "qwen2":
		return preQwen2, nil
	}
	return 0, fmt.Errorf("tokenizer: tokenizer.ggml.pre = %q is not supported (accepted: default, gpt2, gpt-2, llama3, llama-v3, llama-bpe, qwen2)", name)
}

// The pre_tokenizer regexes of Hugging Face tokenizer.json files that the
// splits implement, byte for byte.
const (
	regexGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	regexLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	regexQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// preForRegex resolves a Split pre-tokenizer's regex.
func preForRegex(re string) (preTokenizer, error) {
	switch re {
	case regexGPT2:
		return preGPT2, nil
	case regexLlama3:
		return preLlama3, nil
	case regexQwen2:
		return preQwen2, nil
	}
	return 0, fmt.Errorf("tokenizer: pre_tokenizer regex %q is not supported (accepted: the GPT-2, Llama 3 and Qwen2 patterns)", re)
}

// String names the split as its main GGUF name.
func (p preTokenizer) String() string {
	switch p {
	case preGPT2:
		return "gpt2"
	case preLlama3:
		return "llama-bpe"
	case preQwen2:
		return "qwen2"
	}
	return fmt.Sprintf("preTokenizer(%d)", int(p))
}

// split appends text's pieces to dst. The pieces cover text exactly, in
// order; an invalid UTF-8 byte counts as one symbol character (neither
// letter, number nor space).
func (p preTokenizer) split(dst []string, text string) []string {
	switch p {
	case preLlama3:
		return splitLlama3(dst, text, 3)
	case preQwen2:
		return splitLlama3(dst, text, 1)
	}
	return splitGPT2(dst, text)
}

// preTokenize is GPT-2's split of text.
func preTokenize(text string) []string { return splitGPT2(nil, text) }

// scanner reads runes of text by byte offset.
type scanner string

// at returns the rune at byte i and its width; (-1, 0) at the end. An
// invalid byte is utf8.RuneError of width 1.
func (s scanner) at(i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	return utf8.DecodeRuneInString(string(s[i:]))
}

// run returns the end of the run of runes from i that satisfy in, taking
// at most limit runes (limit <= 0: no limit).
func (s scanner) run(i int, in func(rune) bool, limit int) int {
	for n := 0; limit <= 0 || n < limit; n++ {
		r, w := s.at(i)
		if w == 0 || !in(r) {
			break
		}
		i += w
	}
	return i
}

// isLetter, isNumber and isSpace are \p{L}, \p{N} and \s. \s is Unicode
// White_Space (what unicode.IsSpace reports), as in the Rust regex and
// Oniguruma engines Hugging Face tokenizers use. JavaScript's \s differs in
// two characters: it excludes U+0085 and includes U+FEFF.
func isLetter(r rune) bool { return r >= 0 && unicode.IsLetter(r) }
func isNumber(r rune) bool { return r >= 0 && unicode.IsNumber(r) }
func isSpace(r rune) bool  { return r >= 0 && unicode.IsSpace(r) }

// isOther is [^\s\p{L}\p{N}] (an invalid byte is one).
func isOther(r rune) bool { return r >= 0 && !isSpace(r) && !isLetter(r) && !isNumber(r) }

func isNewline(r rune) bool { return r == '\r' || r == '\n' }

// spaceEnd handles a whitespace run at i that the earlier alternatives
// did not take: \s+(?!\S) keeps the run's last character for the next
// piece when a non-space follows, and \s+ takes a lone one.
func (s scanner) spaceEnd(i int) int {
	end := s.run(i, isSpace, 0)
	if end < len(s) {
		_, last := utf8.DecodeLastRuneInString(string(s[i:end]))
		if end-last > i {
			end -= last
		}
	}
	return end
}

// splitGPT2 is GPT-2's pattern (see preGPT2).
func splitGPT2(dst []string, text string) []string {
	s := scanner(text)
	for i := 0; i < len(text); {
		if text[i] == '\'' {
			if n := contraction(text[i+1:], false); n > 0 {
				dst = append(dst, text[i:i+1+n])
				i += 1 + n
				continue
			}
		}
		j := i
		if text[j] == ' ' {
			j++
		}
		r, _ := s.at(j)
		var end int
		switch {
		case isLetter(r):
			end = s.run(j, isLetter, 0)
		case isNumber(r):
			end = s.run(j, isNumber, 0)
		case isOther(r):
			end = s.run(j, isOther, 0)
		default:
			end = s.spaceEnd(i)
		}
		dst = append(dst, text[i:end])
		i = end
	}
	return dst
}

// splitLlama3 is Llama 3's pattern (see preLlama3) with digit runs of at
// most maxDigits. The alternatives are tried in the regex's order at each
// position, as a backtracking engine does.
func splitLlama3(dst []string, text string, maxDigits int) []string {
	s := scanner(text)
	for i := 0; i < len(text); {
		end := s.llama3At(i, maxDigits)
		dst = append(dst, text[i:end])
		i = end
	}
	return dst
}

// llama3At returns the end of the piece that starts at i (i < len(s)).
func (s scanner) llama3At(i, maxDigits int) int {
	text := string(s)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if text[i] == '\'' {
		if n := contraction(text[i+1:], true); n > 0 {
			return i + 1 + n
		}
	}
	r, w := s.at(i)
	next, _ := s.at(i + w)
	switch {
	// [^\r\n\p{L}\p{N}]?\p{L}+
	case isLetter(r):
		return s.run(i, isLetter, 0)
	case !isNewline(r) && !isNumber(r) && isLetter(next):
		return s.run(i+w, isLetter, 0)
	// \p{N}{1,3}
	case isNumber(r):
		return s.run(i, isNumber, maxDigits)
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	case isOther(r) || (r == ' ' && isOther(next)):
		j := i
		if r == ' ' {
			j += w
		}
		return s.run(s.run(j, isOther, 0), isNewline, 0)
	}
	// r is whitespace. \s*[\r\n]+: the longest prefix of the whitespace
	// run that ends in a newline, if it has one.
	end := s.run(i, isSpace, 0)
	if k := strings.LastIndexAny(text[i:end], "\r\n"); k >= 0 {
		return i + k + 1
	}
	return s.spaceEnd(i)
}

// contraction returns the length of a contraction suffix at the start of
// s (after the apostrophe), 0 if none. fold matches ASCII letters of
// either case, as Llama 3's (?i:...) does for these ASCII alternatives
// (the JavaScript and llama.cpp ports spell it [sS] etc.; full Unicode
// case folding would also let U+017F match 's').
func contraction(s string, fold bool) int {
	for _, c := range []string{"re", "ve", "ll", "s", "t", "m", "d"} {
		if len(s) < len(c) {
			continue
		}
		if p := s[:len(c)]; p == c || (fold && asciiLower(p) == c) {
			return len(c)
		}
	}
	return 0
}

// asciiLower lowers ASCII capitals only.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
