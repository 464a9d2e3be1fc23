package grammar

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// nfa is a Thompson automaton over bytes with rule calls. Zero-width
// assertions (begin: only before the first byte; end: only after the last)
// come from regular expressions' anchors.
type nfa struct {
	eps    [][]int32
	begin  [][]int32
	end    [][]int32
	edges  [][]nfaEdge
	calls  [][]nfaCall
	accept int32
	b      *budget
}

type nfaEdge struct {
	set byteSet
	to  int32
	rs  []byteRange // set as ranges, computed on first use
}

func (e *nfaEdge) ranges() []byteRange {
	if e.rs == nil {
		e.rs = rangesOf(e.set)
	}
	return e.rs
}

// sweepEvent opens or closes an edge's range at a byte (256: past the end).
type sweepEvent struct {
	at   int16
	to   int32
	open bool
}

type nfaCall struct {
	rule RuleID
	to   int32
}

// errTooLarge is wrapped by every error about a size or time limit.
var errTooLarge = errors.New("too large")

// budget bounds one compilation: the states of any automaton built on the
// way, and the wall time.
type budget struct {
	states   int
	deadline time.Time
	ticks    int
	limit    time.Duration
}

func newBudget(l Limits) *budget {
	b := &budget{states: l.States, limit: l.Time}
	if l.Time > 0 {
		b.deadline = time.Now().Add(l.Time)
	}
	return b
}

// tick fails once the deadline has passed (checked every 256 calls).
func (b *budget) tick() error {
	if b.ticks++; b.ticks&255 != 0 || b.deadline.IsZero() {
		return nil
	}
	if time.Now().After(b.deadline) {
		return fmt.Errorf("compiling took more than %v: %w", b.limit, errTooLarge)
	}
	return nil
}

func newNFA(b *budget) *nfa {
	n := &nfa{b: b}
	n.newState() // 0: start
	n.accept = n.newState()
	return n
}

func (n *nfa) newState() int32 {
	n.eps = append(n.eps, nil)
	n.begin = append(n.begin, nil)
	n.end = append(n.end, nil)
	n.edges = append(n.edges, nil)
	n.calls = append(n.calls, nil)
	return int32(len(n.eps) - 1)
}

func (n *nfa) full() error {
	if len(n.eps) > 4*n.b.states {
		return fmt.Errorf("automaton has more than %d states: %w", 4*n.b.states, errTooLarge)
	}
	return n.b.tick()
}

// add builds paths from → to that read e. Every construct adds edges out of
// from, into to and among fresh states only, never into from or out of to,
// so pieces compose without creating paths between siblings.
func (n *nfa) add(e *Expr, from, to int32) error {
	if err := n.full(); err != nil {
		return err
	}
	switch e.op {
	case opEmpty:
		n.eps[from] = append(n.eps[from], to)
	case opNone:
	case opBytes:
		n.edges[from] = append(n.edges[from], nfaEdge{set: e.set, to: to})
	case opLit:
		cur := from
		for i, c := range e.lit {
			next := to
			if i < len(e.lit)-1 {
				next = n.newState()
			}
			n.edges[cur] = append(n.edges[cur], nfaEdge{set: setOf(c), to: next})
			cur = next
		}
	case opSeq:
		cur := from
		for i, s := range e.subs {
			next := to
			if i < len(e.subs)-1 {
				next = n.newState()
			}
			if err := n.add(s, cur, next); err != nil {
				return err
			}
			cur = next
		}
	case opAlt:
		for _, s := range e.subs {
			if err := n.add(s, from, to); err != nil {
				return err
			}
		}
	case opRepeat:
		return n.addRepeat(e.subs[0], e.min, e.max, from, to)
	case opRef:
		n.calls[from] = append(n.calls[from], nfaCall{e.rule, to})
	case opGraph:
		g := e.graph
		st := make([]int32, g.States)
		for i := range st {
			st[i] = n.newState()
		}
		n.eps[from] = append(n.eps[from], st[0])
		for _, a := range g.Accept {
			n.eps[st[a]] = append(n.eps[st[a]], to)
		}
		for _, ed := range g.Edges {
			a, b := st[ed.From], st[ed.To]
			if a == b {
				// A self-loop goes through fresh states so that the
				// edge's expression never sees from == to.
				x, y := n.newState(), n.newState()
				n.eps[a] = append(n.eps[a], x)
				n.eps[y] = append(n.eps[y], a)
				a, b = x, y
			}
			if err := n.add(ed.E, a, b); err != nil {
				return err
			}
		}
	case opAnd:
		a, err := compileExpr(e.subs[0], n.b)
		if err != nil {
			return err
		}
		b, err := compileExpr(e.subs[1], n.b)
		if err != nil {
			return err
		}
		p, err := product(a, b, func(x, y bool) bool { return x && y }, n.b)
		if err != nil {
			return err
		}
		return n.add(p.toExpr(), from, to)
	case opDFA:
		st := make([]int32, len(e.d.states))
		for i := range st {
			st[i] = n.newState()
		}
		n.eps[from] = append(n.eps[from], st[0])
		for i, s := range e.d.states {
			if s.accept {
				n.eps[st[i]] = append(n.eps[st[i]], to)
			}
			for _, t := range s.trans {
				n.edges[st[i]] = append(n.edges[st[i]], nfaEdge{set: rangeSet(t.lo, t.hi), to: st[t.to], rs: []byteRange{{t.lo, t.hi}}})
			}
			for _, c := range s.calls {
				n.calls[st[i]] = append(n.calls[st[i]], nfaCall{c.rule, st[c.to]})
			}
		}
	case opAssertBegin:
		n.begin[from] = append(n.begin[from], to)
	case opAssertEnd:
		n.end[from] = append(n.end[from], to)
	default:
		return fmt.Errorf("grammar: unknown expression op %d", e.op)
	}
	return nil
}

func (n *nfa) addRepeat(e *Expr, min, max int, from, to int32) error {
	cur := from
	for i := 0; i < min; i++ {
		next := n.newState()
		if err := n.add(e, cur, next); err != nil {
			return err
		}
		cur = next
	}
	if max < 0 {
		// cur -ε-> loop; loop -e-> back -ε-> loop; loop -ε-> to
		loop, back := n.newState(), n.newState()
		n.eps[cur] = append(n.eps[cur], loop)
		if err := n.add(e, loop, back); err != nil {
			return err
		}
		n.eps[back] = append(n.eps[back], loop)
		n.eps[loop] = append(n.eps[loop], to)
		return nil
	}
	for i := min; i < max; i++ {
		n.eps[cur] = append(n.eps[cur], to)
		next := to
		if i < max-1 {
			next = n.newState()
		}
		if err := n.add(e, cur, next); err != nil {
			return err
		}
		cur = next
	}
	if min == max {
		n.eps[cur] = append(n.eps[cur], to)
	}
	return nil
}

// dfa is a deterministic automaton over bytes with rule calls: from a state
// a byte has at most one transition and a rule at most one call. State 0 is
// the start; a missing transition rejects.
type dfa struct {
	states []dstate
}

type dstate struct {
	accept bool
	trans  []dtrans // sorted by lo, disjoint
	calls  []dcall  // sorted by rule
}

type dtrans struct {
	lo, hi byte
	to     int32
}

type dcall struct {
	rule RuleID
	to   int32
}

// next returns the target on byte c, or -1.
func (s *dstate) next(c byte) int32 {
	for _, t := range s.trans {
		if c < t.lo {
			return -1
		}
		if c <= t.hi {
			return t.to
		}
	}
	return -1
}

// determinize runs the subset construction within the budget.
func (n *nfa) determinize(b *budget) (*dfa, error) {
	d := &determinizer{n: n, mark: make([]uint32, len(n.eps)), index: map[string]int32{}, open: map[int32]int{}}
	var start []int32
	startEnded := d.closure([]int32{0}, true, &start)
	d.intern(start, startEnded)
	for i := 0; i < len(d.sets); i++ {
		if len(d.out.states) > b.states {
			return nil, fmt.Errorf("automaton has more than %d states: %w", b.states, errTooLarge)
		}
		if err := b.tick(); err != nil {
			return nil, err
		}
		d.expand(i)
	}
	return &d.out, nil
}

type determinizer struct {
	n       *nfa
	events  []sweepEvent
	open    map[int32]int
	targets []int32
	mark    []uint32
	gen     uint32
	sets    [][]int32 // per DFA state: its normal NFA states
	index   map[string]int32
	out     dfa
	key     []byte
	stack   []int32
}

// closure adds to *normal every state reachable from seeds by ε (and begin
// assertions when atStart), and returns those reachable through an end
// assertion: they may accept but never read another byte.
func (d *determinizer) closure(seeds []int32, atStart bool, normal *[]int32) (ended []int32) {
	d.gen++
	n := d.n
	d.stack = append(d.stack[:0], seeds...)
	for _, s := range seeds {
		d.mark[s] = d.gen
	}
	var endSeeds []int32
	for len(d.stack) > 0 {
		s := d.stack[len(d.stack)-1]
		d.stack = d.stack[:len(d.stack)-1]
		*normal = append(*normal, s)
		follow := n.eps[s]
		if atStart {
			follow = append(follow[:len(follow):len(follow)], n.begin[s]...)
		}
		for _, t := range follow {
			if d.mark[t] != d.gen {
				d.mark[t] = d.gen
				d.stack = append(d.stack, t)
			}
		}
		endSeeds = append(endSeeds, n.end[s]...)
	}
	if len(endSeeds) == 0 {
		return nil
	}
	// States after an end assertion: ε, begin (at the start) and further
	// end assertions only.
	d.gen++
	d.stack = d.stack[:0]
	for _, s := range endSeeds {
		if d.mark[s] != d.gen {
			d.mark[s] = d.gen
			d.stack = append(d.stack, s)
		}
	}
	for len(d.stack) > 0 {
		s := d.stack[len(d.stack)-1]
		d.stack = d.stack[:len(d.stack)-1]
		ended = append(ended, s)
		follow := append(n.eps[s][:len(n.eps[s]):len(n.eps[s])], n.end[s]...)
		if atStart {
			follow = append(follow, n.begin[s]...)
		}
		for _, t := range follow {
			if d.mark[t] != d.gen {
				d.mark[t] = d.gen
				d.stack = append(d.stack, t)
			}
		}
	}
	return ended
}

// intern returns the DFA state of a closed set, adding it when new.
func (d *determinizer) intern(normal, ended []int32) int32 {
	slices.Sort(normal)
	slices.Sort(ended)
	// Keep only states that matter: those with edges, calls or the accept.
	k := normal[:0]
	for _, s := range normal {
		if len(d.n.edges[s]) > 0 || len(d.n.calls[s]) > 0 || s == d.n.accept {
			k = append(k, s)
		}
	}
	normal = k
	acc := slices.Contains(normal, d.n.accept) || slices.Contains(ended, d.n.accept)
	d.key = d.key[:0]
	for _, s := range normal {
		d.key = append(d.key, byte(s), byte(s>>8), byte(s>>16), byte(s>>24))
	}
	if acc {
		d.key = append(d.key, 0xff, 0xff, 0xff, 0xff) // accept after an end assertion
	}
	if id, ok := d.index[string(d.key)]; ok {
		return id
	}
	id := int32(len(d.out.states))
	d.index[string(d.key)] = id
	d.sets = append(d.sets, slices.Clone(normal))
	d.out.states = append(d.out.states, dstate{accept: acc})
	return id
}

func (d *determinizer) expand(i int) {
	n := d.n
	set := d.sets[i]
	// Sweep the byte axis: every edge range opens at lo and closes after
	// hi; between two boundaries the open edges' targets are one
	// transition.
	d.events = d.events[:0]
	for _, s := range set {
		for k := range n.edges[s] {
			e := &n.edges[s][k]
			for _, r := range e.ranges() {
				d.events = append(d.events, sweepEvent{int16(r.lo), e.to, true}, sweepEvent{int16(r.hi) + 1, e.to, false})
			}
		}
	}
	slices.SortFunc(d.events, func(a, b sweepEvent) int { return int(a.at) - int(b.at) })
	var trans []dtrans
	// open counts the ranges covering the sweep position per target.
	clear(d.open)
	nopen := 0
	for k := 0; k < len(d.events); {
		at := d.events[k].at
		for ; k < len(d.events) && d.events[k].at == at; k++ {
			ev := d.events[k]
			if ev.open {
				if d.open[ev.to] == 0 {
					nopen++
				}
				d.open[ev.to]++
			} else {
				if d.open[ev.to]--; d.open[ev.to] == 0 {
					delete(d.open, ev.to)
					nopen--
				}
			}
		}
		if nopen == 0 || at > 255 {
			continue
		}
		end := int16(256)
		if k < len(d.events) {
			end = d.events[k].at
		}
		targets := d.targets[:0]
		for t := range d.open {
			targets = append(targets, t)
		}
		d.targets = targets
		var normal []int32
		ended := d.closure(targets, false, &normal)
		to := d.intern(normal, ended)
		trans = append(trans, dtrans{byte(at), byte(end - 1), to})
	}
	trans = mergeTrans(trans)
	var byRule map[RuleID][]int32
	for _, s := range set {
		for _, c := range n.calls[s] {
			if byRule == nil {
				byRule = map[RuleID][]int32{}
			}
			byRule[c.rule] = append(byRule[c.rule], c.to)
		}
	}
	var calls []dcall
	for r, targets := range byRule {
		var normal []int32
		ended := d.closure(targets, false, &normal)
		calls = append(calls, dcall{r, d.intern(normal, ended)})
	}
	slices.SortFunc(calls, func(a, b dcall) int { return int(a.rule) - int(b.rule) })
	d.out.states[i].trans = trans
	d.out.states[i].calls = calls
}

// forRanges calls f with each maximal run of bytes in s.
func forRanges(s byteSet, f func(lo, hi byte)) {
	for c := 0; c < 256; c++ {
		if !s.has(byte(c)) {
			continue
		}
		e := c
		for e+1 < 256 && s.has(byte(e+1)) {
			e++
		}
		f(byte(c), byte(e))
		c = e
	}
}

// mergeTrans joins adjacent sorted ranges with the same target.
func mergeTrans(t []dtrans) []dtrans {
	out := t[:0]
	for _, x := range t {
		if k := len(out); k > 0 && out[k-1].to == x.to && int(out[k-1].hi)+1 == int(x.lo) {
			out[k-1].hi = x.hi
			continue
		}
		out = append(out, x)
	}
	return out
}
