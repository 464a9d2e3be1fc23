package tokenizer

import (
	"sort"
	"strings"
	"unicode/utf8"
)

// escapeMark is what EscapeSpecial inserts to keep special-token text from
// matching. U+FDD0 is a Unicode noncharacter, reserved for internal use
// and never meant to appear in interchanged text.
const escapeMark = "\uFDD0"

// matcher finds token strings in text, leftmost first and then longest,
// as Hugging Face tokenizers split added tokens out of text.
type matcher struct {
	// byFirst lists candidate ids by their string's first byte, longest
	// string first.
	byFirst [256][]int32
	tokens  []string // the vocabulary (shared, read-only)
	empty   bool
}

// newMatcher indexes the tokens whose type is in types. Empty strings
// never match.
func newMatcher(tokens []string, types []int32, want ...int32) *matcher {
	m := &matcher{tokens: tokens, empty: true}
	for i, s := range tokens {
		if s == "" {
			continue
		}
		for _, w := range want {
			if types[i] == w {
				m.byFirst[s[0]] = append(m.byFirst[s[0]], int32(i))
				m.empty = false
				break
			}
		}
	}
	for b := range m.byFirst {
		c := m.byFirst[b]
		sort.SliceStable(c, func(i, j int) bool { return len(tokens[c[i]]) > len(tokens[c[j]]) })
	}
	return m
}

// find returns the byte offset, id and length of the first match in text;
// at is -1 when there is none.
func (m *matcher) find(text string) (at int, id int32, n int) {
	if m.empty {
		return -1, -1, 0
	}
	for i := 0; i < len(text); i++ {
		if id, n := m.at(text, i); n > 0 {
			return i, id, n
		}
	}
	return -1, -1, 0
}

// at returns the longest token that starts at text[i:], n == 0 if none.
func (m *matcher) at(text string, i int) (id int32, n int) {
	for _, c := range m.byFirst[text[i]] {
		if s := m.tokens[c]; strings.HasPrefix(text[i:], s) {
			return c, len(s)
		}
	}
	return -1, 0
}

// encode tokenizes text, splitting out the tokens m finds first: each is
// emitted as itself and the text between them is encoded as text, piece
// by piece (no token spans a special one). unescape undoes EscapeSpecial
// in the text pieces.
func (t *Tokenizer) encode(text string, addBOS bool, m *matcher, unescape bool) []int32 {
	return t.encodeFrom(text, addBOS, m, unescape, true)
}

// encodeFrom is encode; start says text begins the input (an SPM
// vocabulary's space prefix applies to it).
func (t *Tokenizer) encodeFrom(text string, addBOS bool, m *matcher, unescape, start bool) []int32 {
	out := make([]int32, 0, len(text)/2+2)
	if addBOS && t.bos >= 0 {
		out = append(out, t.bos)
	}
	// SPM prefixes a space to text at the start and after each special
	// token, as llama.cpp does.
	first := start
	for text != "" {
		at, id, n := m.find(text)
		frag := text
		if at >= 0 {
			frag = text[:at]
		}
		if unescape {
			frag = unescapeSpecial(frag)
		}
		if frag != "" {
			out = t.encodeText(out, frag, first)
			first = false
		}
		if at < 0 {
			break
		}
		out = append(out, id)
		first = true
		text = text[at+n:]
	}
	return out
}

// encodeText appends the ids of plain text (non-empty). first is set when
// the text starts the input or follows a special token.
func (t *Tokenizer) encodeText(out []int32, text string, first bool) []int32 {
	if t.kind == SPM {
		if t.addSpacePrefix && first {
			text = " " + text
		}
		return t.encodeSPM(out, strings.ReplaceAll(text, " ", spmSpace))
	}
	return t.encodeBPE(out, text)
}

// EncodeSpecial tokenizes text in which special-token strings stand for
// the tokens themselves (llama.cpp's parse_special): control, unknown and
// user-defined tokens written in text become those tokens. It is for text
// the server itself writes, such as a rendered chat template; text from
// users goes through Encode, or through EscapeSpecial before it is
// embedded. U+FDD0 is EscapeSpecial's mark: EncodeSpecial drops a lone
// one and reads a doubled one as one U+FDD0 of text.
func (t *Tokenizer) EncodeSpecial(text string, addBOS bool) []int32 {
	return t.encode(text, addBOS, t.special, true)
}

// EscapeSpecial returns s changed so that EncodeSpecial encodes it as
// Encode would encode s: every occurrence of a control or unknown token's
// string gets a U+FDD0 after its first character (so it no longer
// matches), and each U+FDD0 already in s is doubled. User-defined tokens
// are left alone, since Encode recognizes them too. Two cases escape
// imperfectly, and real vocabularies have neither: a special token of a
// single character cannot be broken by a mark, and a user-defined token
// that a control token's string starts with is broken along with it.
// Escaping applies to whole occurrences within s: text joined to s later
// (a template writing half a token next to it) is not covered.
func (t *Tokenizer) EscapeSpecial(s string) string {
	if t.control.empty && !strings.Contains(s, escapeMark) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], escapeMark) {
			b.WriteString(escapeMark + escapeMark)
			i += len(escapeMark)
			continue
		}
		_, w := utf8.DecodeRuneInString(s[i:])
		b.WriteString(s[i : i+w])
		if _, n := t.control.at(s, i); n > w {
			b.WriteString(escapeMark)
		}
		i += w
	}
	return b.String()
}

// unescapeSpecial undoes EscapeSpecial's marks.
func unescapeSpecial(s string) string {
	if !strings.Contains(s, escapeMark) {
		return s
	}
	var b strings.Builder
	for {
		k := strings.Index(s, escapeMark)
		if k < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:k])
		s = s[k+len(escapeMark):]
		if strings.HasPrefix(s, escapeMark) {
			b.WriteString(escapeMark)
			s = s[len(escapeMark):]
		}
	}
}
