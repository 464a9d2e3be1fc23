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
	// Built deterministic: raw bytes never include the backslash every
	// escape starts with, and each escape spells one byte, so every state
	// of d gets its raw edges and, when it reads bytes that must be
	// escaped, a small tree of escape states ending at their targets.
	out := &dfa{states: make([]dstate, len(d.states))}
	add := func() int32 {
		out.states = append(out.states, dstate{})
		return int32(len(out.states) - 1)
	}
	short := map[byte]byte{'"': '"', '\\': '\\', '\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't'}
	const hexd = "0123456789abcdef"
	trees := map[[0x60]int32]int32{} // escape trees by their targets
	for i := range d.states {
		if len(out.states) > b.states {
			return nil, fmt.Errorf("automaton has more than %d states: %w", b.states, errTooLarge)
		}
		if err := b.tick(); err != nil {
			return nil, err
		}
		s := &d.states[i]
		out.states[i].accept = s.accept
		var trans []dtrans
		var escTo [0x60]int32 // escaped byte's target+1 (0: none)
		escaped := false
		for _, t := range s.trans {
			raw := rangeSet(t.lo, t.hi).minus(rangeSet(0, 0x1f)).minus(setOf('"', '\\'))
			for _, r := range rangesOf(raw) {
				trans = append(trans, dtrans{lo: r.lo, hi: r.hi, to: t.to})
			}
			for c := int(t.lo); c <= int(t.hi) && c < 0x60; c++ {
				if _, ok := short[byte(c)]; ok || c < 0x20 {
					escTo[c] = t.to + 1
					escaped = true
				}
			}
		}
		if escaped {
			// States whose escapes lead to the same places share one tree
			// (most do: escaped bytes rarely matter to a constraint).
			if e, ok := trees[escTo]; ok {
				trans = append(trans, dtrans{lo: '\\', hi: '\\', to: e})
				slices.SortFunc(trans, func(a, b dtrans) int { return int(a.lo) - int(b.lo) })
				out.states[i].trans = trans
				continue
			}
			e := add()
			trees[escTo] = e
			trans = append(trans, dtrans{lo: '\\', hi: '\\', to: e})
			var et []dtrans
			var u, z1, z2 int32 = -1, -1, -1
			var hiState [2]int32
			for c := range 0x60 {
				if escTo[c] == 0 {
					continue
				}
				to := escTo[c] - 1
				if l, ok := short[byte(c)]; ok {
					et = append(et, dtrans{lo: l, hi: l, to: to})
					continue
				}
				// \u00XX in either case of hex.
				if u < 0 {
					u, z1, z2 = add(), add(), add()
					et = append(et, dtrans{lo: 'u', hi: 'u', to: u})
					out.states[u].trans = []dtrans{{lo: '0', hi: '0', to: z1}}
					out.states[z1].trans = []dtrans{{lo: '0', hi: '0', to: z2}}
				}
				h := c >> 4
				if hiState[h] == 0 {
					hiState[h] = add()
					out.states[z2].trans = append(out.states[z2].trans, dtrans{lo: hexd[h], hi: hexd[h], to: hiState[h]})
				}
				lo := hexd[c&15]
				ht := &out.states[hiState[h]].trans
				*ht = append(*ht, dtrans{lo: lo, hi: lo, to: to})
				if up := upper(lo); up != lo {
					*ht = append(*ht, dtrans{lo: up, hi: up, to: to})
				}
			}
			slices.SortFunc(et, func(a, b dtrans) int { return int(a.lo) - int(b.lo) })
			out.states[e].trans = et
		}
		slices.SortFunc(trans, func(a, b dtrans) int { return int(a.lo) - int(b.lo) })
		out.states[i].trans = trans
	}
	for i := range out.states {
		slices.SortFunc(out.states[i].trans, func(a, b dtrans) int { return int(a.lo) - int(b.lo) })
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

// quoteDFA wraps a text DFA (textDFA's: it reads no raw '"') in quotes,
// built directly rather than compiled from a sequence. ok is false when d
// reads '"' from an accepting state.
func quoteDFA(d *dfa) (q *dfa, ok bool) {
	n := int32(len(d.states))
	q = &dfa{states: make([]dstate, n+2)}
	start, end := n, n+1 // renumbered below so the start is 0
	q.states[end].accept = true
	q.states[start].trans = []dtrans{{lo: '"', hi: '"', to: 0}}
	for i, s := range d.states {
		if len(s.calls) > 0 {
			return nil, false
		}
		trans := slices.Clone(s.trans)
		if s.accept {
			k, _ := slices.BinarySearchFunc(trans, byte('"'), func(t dtrans, c byte) int { return int(t.lo) - int(c) })
			if k > 0 && trans[k-1].hi >= '"' || k < len(trans) && trans[k].lo == '"' {
				return nil, false
			}
			trans = slices.Insert(trans, k, dtrans{lo: '"', hi: '"', to: end})
		}
		q.states[i].trans = trans
	}
	// Swap the new start into place 0.
	perm := func(x int32) int32 {
		switch x {
		case 0:
			return start
		case start:
			return 0
		}
		return x
	}
	q.states[0], q.states[start] = q.states[start], q.states[0]
	for i := range q.states {
		for j := range q.states[i].trans {
			q.states[i].trans[j].to = perm(q.states[i].trans[j].to)
		}
	}
	return q, true
}
