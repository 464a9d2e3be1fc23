package grammar

// Expr is an expression over bytes: byte sets, literals, sequences,
// alternatives and bounded or unbounded repetition form regular languages;
// a reference to a rule makes the language context-free. Expressions are
// immutable once built and may be shared between rules.
type Expr struct {
	op    exprOp
	set   byteSet // opBytes
	lit   []byte  // opLit
	subs  []*Expr // opSeq, opAlt; opRepeat has one
	min   int     // opRepeat
	max   int     // opRepeat; -1 for unbounded
	rule  RuleID  // opRef
	graph *Graph  // opGraph
	d     *dfa    // opDFA
}

type exprOp uint8

const (
	opEmpty exprOp = iota // the empty string
	opNone                // no string at all
	opBytes               // one byte of a set
	opLit                 // a literal byte string
	opSeq
	opAlt
	opRepeat
	opRef
	opGraph
	opAssertBegin // zero-width: only before the first byte (regex ^)
	opAssertEnd   // zero-width: only after the last byte (regex $)
	opAnd         // the intersection of two call-free expressions
	opDFA         // a compiled automaton, shared and never modified
)

// RuleID names a rule of a Builder.
type RuleID int32

// Graph is a finite automaton whose edges are expressions, for languages
// that are awkward as trees (JSON object members with optional properties
// and separators between them build linearly as a graph, exponentially as
// an expression). State 0 is the start.
type Graph struct {
	States int
	Accept []int
	Edges  []GraphEdge
}

// GraphEdge goes From one state To another reading E.
type GraphEdge struct {
	From, To int
	E        *Expr
}

var (
	emptyExpr = &Expr{op: opEmpty}
	noneExpr  = &Expr{op: opNone}
)

// Empty matches only the empty string.
func Empty() *Expr { return emptyExpr }

// None matches nothing.
func None() *Expr { return noneExpr }

// Lit matches s exactly.
func Lit(s string) *Expr {
	if s == "" {
		return emptyExpr
	}
	return &Expr{op: opLit, lit: []byte(s)}
}

// Byte matches one byte of set.
func bytesExpr(set byteSet) *Expr {
	if set.empty() {
		return noneExpr
	}
	return &Expr{op: opBytes, set: set}
}

// ByteRange matches one byte in [lo, hi].
func ByteRange(lo, hi byte) *Expr { return bytesExpr(rangeSet(lo, hi)) }

// Seq matches its parts one after another.
func Seq(parts ...*Expr) *Expr {
	var flat []*Expr
	for _, p := range parts {
		switch p.op {
		case opEmpty:
			continue
		case opNone:
			return noneExpr
		case opSeq:
			flat = append(flat, p.subs...)
		default:
			flat = append(flat, p)
		}
	}
	switch len(flat) {
	case 0:
		return emptyExpr
	case 1:
		return flat[0]
	}
	return &Expr{op: opSeq, subs: flat}
}

// Alt matches any one of its alternatives.
func Alt(alts ...*Expr) *Expr {
	var flat []*Expr
	for _, a := range alts {
		switch a.op {
		case opNone:
			continue
		case opAlt:
			flat = append(flat, a.subs...)
		default:
			flat = append(flat, a)
		}
	}
	switch len(flat) {
	case 0:
		return noneExpr
	case 1:
		return flat[0]
	}
	return &Expr{op: opAlt, subs: flat}
}

// Repeat matches e between min and max times; max < 0 means no bound.
func Repeat(e *Expr, min, max int) *Expr {
	if max >= 0 && max < min {
		return noneExpr
	}
	if max == 0 || e.op == opEmpty {
		return emptyExpr
	}
	if e.op == opNone {
		if min == 0 {
			return emptyExpr
		}
		return noneExpr
	}
	if min == 1 && max == 1 {
		return e
	}
	return &Expr{op: opRepeat, subs: []*Expr{e}, min: min, max: max}
}

// Opt matches e or nothing.
func Opt(e *Expr) *Expr { return Repeat(e, 0, 1) }

// Star matches e any number of times.
func Star(e *Expr) *Expr { return Repeat(e, 0, -1) }

// Plus matches e one or more times.
func Plus(e *Expr) *Expr { return Repeat(e, 1, -1) }

// Ref matches rule r.
func Ref(r RuleID) *Expr { return &Expr{op: opRef, rule: r} }

// GraphExpr matches the paths of g from its start to an accepting state.
func GraphExpr(g *Graph) *Expr { return &Expr{op: opGraph, graph: g} }

// hasRefs reports whether e references any rule.
func (e *Expr) hasRefs() bool {
	switch e.op {
	case opRef:
		return true
	case opSeq, opAlt, opRepeat:
		for _, s := range e.subs {
			if s.hasRefs() {
				return true
			}
		}
	case opGraph:
		for _, ed := range e.graph.Edges {
			if ed.E.hasRefs() {
				return true
			}
		}
	}
	return false
}
