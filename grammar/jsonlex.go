package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
)

// Whitespace is the policy for whitespace between JSON tokens.
type Whitespace int

const (
	// WhitespaceBounded allows, between tokens, nothing, one space, or one
	// newline followed by up to 20 spaces or tabs: compact and
	// pretty-printed JSON both pass, and a model cannot loop on blanks.
	WhitespaceBounded Whitespace = iota
	// WhitespaceCompact allows none.
	WhitespaceCompact
)

// expr is the whitespace allowed between two JSON tokens. The bounded
// indentation is one shared rule (declared in b on first use), called only
// after a newline, so each place whitespace may appear costs three states
// rather than a copy of the counter.
func (w Whitespace) expr(b *Builder) *Expr {
	if w == WhitespaceCompact {
		return Empty()
	}
	// Not nullable (the call is optional instead), so callers need no
	// rewriting to skip it.
	indent := b.Rule("indent", Repeat(bytesExpr(setOf(' ', '\t')), 1, 20))
	return Opt(Alt(Lit(" "), Seq(Lit("\n"), Opt(Ref(indent)))))
}

var hexDigit = bytesExpr(rangeSet('0', '9').union(rangeSet('a', 'f')).union(rangeSet('A', 'F')))

// jsonStringBody is any JSON string content, escapes of every kind
// included (the language of a string with no constraints).
func jsonStringBody() *Expr {
	raw := runeClass([]rune{0x20, '"' - 1, '"' + 1, '\\' - 1, '\\' + 1, utf8.MaxRune})
	esc := Seq(Lit(`\`), Alt(bytesExpr(setOf('"', '\\', '/', 'b', 'f', 'n', 'r', 't')), Seq(Lit("u"), Repeat(hexDigit, 4, 4))))
	return Star(Alt(raw, esc))
}

// jsonStringDFA is a whole JSON string with no constraints, quotes
// included, compiled once: every schema with a string uses it.
var jsonStringDFA = sync.OnceValue(func() *dfa {
	d, err := compileExpr(Seq(Lit(`"`), jsonStringBody(), Lit(`"`)), newBudget(DefaultLimits))
	if err != nil {
		panic(err) // a fixed expression of a few dozen states
	}
	return d
})

// jsonNumberExpr is any JSON number.
func jsonNumberExpr() *Expr {
	digits := Plus(ByteRange('0', '9'))
	intPart := Alt(Lit("0"), Seq(ByteRange('1', '9'), Star(ByteRange('0', '9'))))
	return Seq(Opt(Lit("-")), intPart, Opt(Seq(Lit("."), digits)), Opt(Seq(bytesExpr(setOf('e', 'E')), Opt(bytesExpr(setOf('+', '-'))), digits)))
}

// jsonIntegerExpr is a JSON integer written without a fraction or an
// exponent (how every serializer writes one).
func jsonIntegerExpr() *Expr {
	return Seq(Opt(Lit("-")), Alt(Lit("0"), Seq(ByteRange('1', '9'), Star(ByteRange('0', '9')))))
}

// textDFA turns a DFA over the UTF-8 bytes of decoded string content into
// a DFA over its JSON text, without the quotes: characters JSON requires
// escaped are written escaped (\" \\ \b \f \n \r \t, other controls as
// \u00XX in either case of hex), every other character raw. This is the
// canonical spelling every serializer uses, and it keeps string
// constraints (patterns, lengths, formats, excluded names) exact.
func textDFA(d *dfa, b *budget) (*dfa, error) {
	n := &nfa{b: b}
	for range d.states {
		n.newState()
	}
	n.accept = n.newState()
	short := map[byte]byte{'"': '"', '\\': '\\', '\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't'}
	for i, s := range d.states {
		if s.accept {
			n.eps[i] = append(n.eps[i], n.accept)
		}
		for _, t := range s.trans {
			// Bytes written raw go on one edge; the others each get their
			// escape.
			raw := rangeSet(t.lo, t.hi).minus(rangeSet(0, 0x1f)).minus(setOf('"', '\\'))
			if !raw.empty() {
				n.edges[i] = append(n.edges[i], nfaEdge{set: raw, to: t.to})
			}
			for c := int(t.lo); c <= int(t.hi) && c < 0x60; c++ {
				b := byte(c)
				var ex *Expr
				switch e, ok := short[b]; {
				case ok:
					ex = Lit(`\` + string(e))
				case b < 0x20:
					hi, lo := "0123456789abcdef"[b>>4], "0123456789abcdef"[b&15]
					ex = Seq(Lit(`\u00`), bytesExpr(setOf(hi, upper(hi))), bytesExpr(setOf(lo, upper(lo))))
				default:
					continue
				}
				if err := n.add(ex, int32(i), t.to); err != nil {
					return nil, err
				}
			}
		}
	}
	out, err := n.determinize(b)
	if err != nil {
		return nil, err
	}
	return out.trim().minimize(), nil
}

func upper(c byte) byte {
	if c >= 'a' && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}

// appendJSON writes v compactly: numbers as written, strings with only
// the escapes JSON requires (as JSON.stringify does), object members in
// the given order. v is what decodeOrdered returns.
func appendJSON(b []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, x)
	case json.Number:
		return appendNumber(b, x)
	case string:
		return appendString(b, x)
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSON(b, e)
		}
		return append(b, ']')
	case *object:
		b = append(b, '{')
		for i, m := range x.members {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, m.key)
			b = append(b, ':')
			b = appendJSON(b, m.val)
		}
		return append(b, '}')
	}
	panic(fmt.Sprintf("grammar: appendJSON of %T", v))
}

// appendNumber writes n as it was written (json.Number keeps the text):
// 1.0 and 1 are different texts, and draft 4 tells them apart.
func appendNumber(b []byte, n json.Number) []byte {
	return append(b, n...)
}

func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			b = append(b, `\"`...)
		case '\\':
			b = append(b, `\\`...)
		case '\b':
			b = append(b, `\b`...)
		case '\f':
			b = append(b, `\f`...)
		case '\n':
			b = append(b, `\n`...)
		case '\r':
			b = append(b, `\r`...)
		case '\t':
			b = append(b, `\t`...)
		default:
			if c < 0x20 {
				b = append(b, `\u00`...)
				b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
			} else {
				b = append(b, c)
			}
		}
	}
	return append(b, '"')
}

// object is a JSON object with its members in document order.
type object struct {
	members []member
}

type member struct {
	key string
	val any
}

func (o *object) get(k string) (any, bool) {
	for _, m := range o.members {
		if m.key == k {
			return m.val, true
		}
	}
	return nil, false
}

// decodeOrdered parses one JSON value keeping object member order;
// numbers stay json.Number. Duplicate keys keep the last value, as
// JSON.parse does.
func decodeOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("unexpected data after the JSON value")
	}
	return v, nil
}

// maxDepth bounds the nesting of a decoded document.
const maxDepth = 1000

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("JSON nested deeper than %d levels", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				if i := slices.IndexFunc(o.members, func(m member) bool { return m.key == k }); i >= 0 {
					o.members[i].val = v
				} else {
					o.members = append(o.members, member{k, v})
				}
			}
			_, err := dec.Token()
			return o, err
		case '[':
			a := []any{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token()
			return a, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil
	}
}

// toPlain converts an ordered value to what encoding/json would decode
// (maps for objects, json.Number kept), for validators.
func toPlain(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = toPlain(e)
		}
		return out
	case *object:
		m := make(map[string]any, len(x.members))
		for _, e := range x.members {
			m[e.key] = toPlain(e.val)
		}
		return m
	}
	return v
}

// ratOf parses a JSON number exactly.
func ratOf(n json.Number) (*big.Rat, bool) {
	return new(big.Rat).SetString(string(n))
}
