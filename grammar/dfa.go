package grammar

import (
	"fmt"
	"slices"
)

// compileExpr builds the minimal DFA of e within the budget.
func compileExpr(e *Expr, b *budget) (*dfa, error) {
	if e.op == opDFA {
		return e.d, nil
	}
	n := newNFA(b)
	if err := n.add(e, 0, n.accept); err != nil {
		return nil, err
	}
	d, err := n.determinize(b)
	if err != nil {
		return nil, err
	}
	return d.trim().minimize(), nil
}

// trim drops the states that cannot be reached from the start or cannot
// reach an accepting state (calls are taken to succeed), and the
// transitions into them. The result has at least the start state.
func (d *dfa) trim() *dfa {
	n := len(d.states)
	// Backward: which states reach acceptance.
	rev := make([][]int32, n)
	for i, s := range d.states {
		for _, t := range s.trans {
			rev[t.to] = append(rev[t.to], int32(i))
		}
		for _, c := range s.calls {
			rev[c.to] = append(rev[c.to], int32(i))
		}
	}
	live := make([]bool, n)
	var stack []int32
	for i, s := range d.states {
		if s.accept {
			live[i] = true
			stack = append(stack, int32(i))
		}
	}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, p := range rev[s] {
			if !live[p] {
				live[p] = true
				stack = append(stack, p)
			}
		}
	}
	// Forward from the start through live states, renumbering.
	id := make([]int32, n)
	for i := range id {
		id[i] = -1
	}
	order := []int32{0}
	id[0] = 0
	for k := 0; k < len(order); k++ {
		s := &d.states[order[k]]
		for _, t := range s.trans {
			if live[t.to] && id[t.to] < 0 {
				id[t.to] = int32(len(order))
				order = append(order, t.to)
			}
		}
		for _, c := range s.calls {
			if live[c.to] && id[c.to] < 0 {
				id[c.to] = int32(len(order))
				order = append(order, c.to)
			}
		}
	}
	out := &dfa{states: make([]dstate, len(order))}
	for k, old := range order {
		s := &d.states[old]
		ns := dstate{accept: s.accept}
		for _, t := range s.trans {
			if id[t.to] >= 0 {
				ns.trans = append(ns.trans, dtrans{t.lo, t.hi, id[t.to]})
			}
		}
		for _, c := range s.calls {
			if id[c.to] >= 0 {
				ns.calls = append(ns.calls, dcall{c.rule, id[c.to]})
			}
		}
		ns.trans = mergeTrans(ns.trans)
		out.states[k] = ns
	}
	return out
}

// minimize merges equivalent states with Valmari and Lehtinen's
// partition refinement for partial DFAs (O(m log n)); symbols are the
// DFA's byte classes and its called rules. The start stays state 0.
// d must be trimmed (every state reachable and co-reachable).
func (d *dfa) minimize() *dfa {
	n := len(d.states)
	if n <= 1 {
		return d
	}
	// Byte classes: cut 0..255 at every range boundary.
	var cut [257]bool
	for _, s := range d.states {
		for _, t := range s.trans {
			cut[t.lo] = true
			cut[int(t.hi)+1] = true
		}
	}
	var class [256]int32
	k := int32(-1)
	for b := 0; b < 256; b++ {
		if cut[b] || b == 0 {
			k++
		}
		class[b] = k
	}
	nByte := k + 1
	var tail, head, label []int32
	for i, s := range d.states {
		for _, t := range s.trans {
			for c := class[t.lo]; c <= class[t.hi]; c++ {
				tail = append(tail, int32(i))
				head = append(head, t.to)
				label = append(label, c)
			}
		}
		for _, c := range s.calls {
			tail = append(tail, int32(i))
			head = append(head, c.to)
			label = append(label, nByte+int32(c.rule))
		}
	}
	m := len(tail)
	var B, C refinable
	B.init(n)
	finals := false
	for i, s := range d.states {
		if s.accept {
			B.mark(int32(i))
			finals = true
		}
	}
	if finals {
		B.split()
	}
	C.init(m)
	if m > 0 {
		// Group the transitions by label: a counting sort, stable.
		maxLabel := int32(0)
		for _, l := range label {
			maxLabel = max(maxLabel, l)
		}
		at := make([]int32, maxLabel+2)
		for _, l := range label {
			at[l+1]++
		}
		for l := int32(1); l <= maxLabel+1; l++ {
			at[l] += at[l-1]
		}
		for t, l := range label {
			C.elems[at[l]] = int32(t)
			at[l]++
		}
		C.sets = 0
		a := label[C.elems[0]]
		for i := 0; i < m; i++ {
			t := C.elems[i]
			if label[t] != a {
				a = label[t]
				C.past[C.sets] = int32(i)
				C.sets++
				C.first[C.sets] = int32(i)
				C.marked[C.sets] = 0
			}
			C.set[t] = C.sets
			C.loc[t] = int32(i)
		}
		C.past[C.sets] = int32(m)
		C.sets++
	}
	// Incoming transitions of each state.
	adjStart := make([]int32, n+1)
	for _, h := range head {
		adjStart[h+1]++
	}
	for i := 0; i < n; i++ {
		adjStart[i+1] += adjStart[i]
	}
	adj := make([]int32, m)
	fill := slices.Clone(adjStart[:n])
	for t, h := range head {
		adj[fill[h]] = int32(t)
		fill[h]++
	}
	b, c := int32(1), int32(0)
	for c < C.sets {
		for i := C.first[c]; i < C.past[c]; i++ {
			B.mark(tail[C.elems[i]])
		}
		B.split()
		c++
		for b < B.sets {
			for i := B.first[b]; i < B.past[b]; i++ {
				q := B.elems[i]
				for j := adjStart[q]; j < adjStart[q+1]; j++ {
					C.mark(adj[j])
				}
			}
			C.split()
			b++
		}
	}
	// Renumber blocks from the start's, in breadth-first order.
	remap := make([]int32, B.sets)
	for i := range remap {
		remap[i] = -1
	}
	rep := []int32{0}
	remap[B.set[0]] = 0
	for k := 0; k < len(rep); k++ {
		s := &d.states[rep[k]]
		visit := func(to int32) {
			if blk := B.set[to]; remap[blk] < 0 {
				remap[blk] = int32(len(rep))
				rep = append(rep, to)
			}
		}
		for _, t := range s.trans {
			visit(t.to)
		}
		for _, cl := range s.calls {
			visit(cl.to)
		}
	}
	out := &dfa{states: make([]dstate, len(rep))}
	for k, r := range rep {
		s := &d.states[r]
		ns := dstate{accept: s.accept}
		for _, t := range s.trans {
			ns.trans = append(ns.trans, dtrans{t.lo, t.hi, remap[B.set[t.to]]})
		}
		ns.trans = mergeTrans(ns.trans)
		for _, cl := range s.calls {
			ns.calls = append(ns.calls, dcall{cl.rule, remap[B.set[cl.to]]})
		}
		out.states[k] = ns
	}
	return out
}

// refinable is a partition of 0..n-1 into sets that can be split by
// marking elements (Valmari and Lehtinen's data structure).
type refinable struct {
	sets                       int32
	elems, loc, set            []int32
	first, past, marked, touch []int32
	ntouch                     int
}

func (p *refinable) init(n int) {
	p.sets = 0
	if n > 0 {
		p.sets = 1
	}
	p.elems = make([]int32, n)
	p.loc = make([]int32, n)
	p.set = make([]int32, n)
	for i := range p.elems {
		p.elems[i], p.loc[i] = int32(i), int32(i)
	}
	p.first = make([]int32, n+1)
	p.past = make([]int32, n+1)
	p.marked = make([]int32, n+1)
	p.touch = make([]int32, n+1)
	if n > 0 {
		p.past[0] = int32(n)
	}
}

func (p *refinable) mark(e int32) {
	s := p.set[e]
	i := p.loc[e]
	j := p.first[s] + p.marked[s]
	p.elems[i] = p.elems[j]
	p.loc[p.elems[i]] = i
	p.elems[j] = e
	p.loc[e] = j
	if p.marked[s] == 0 {
		p.touch[p.ntouch] = s
		p.ntouch++
	}
	p.marked[s]++
}

func (p *refinable) split() {
	for p.ntouch > 0 {
		p.ntouch--
		s := p.touch[p.ntouch]
		j := p.first[s] + p.marked[s]
		if j == p.past[s] {
			p.marked[s] = 0
			continue
		}
		z := p.sets
		if p.marked[s] <= p.past[s]-j {
			p.first[z] = p.first[s]
			p.past[z] = j
			p.first[s] = j
		} else {
			p.past[z] = p.past[s]
			p.first[z] = j
			p.past[s] = j
		}
		for i := p.first[z]; i < p.past[z]; i++ {
			p.set[p.elems[i]] = z
		}
		p.marked[s], p.marked[z] = 0, 0
		p.sets++
	}
}

// toExpr turns d back into an expression (a graph), to embed it elsewhere.
func (d *dfa) toExpr() *Expr {
	g := &Graph{States: len(d.states)}
	for i, s := range d.states {
		if s.accept {
			g.Accept = append(g.Accept, i)
		}
		byTarget := map[int32]*byteSet{}
		var targets []int32
		for _, t := range s.trans {
			bs := byTarget[t.to]
			if bs == nil {
				bs = &byteSet{}
				byTarget[t.to] = bs
				targets = append(targets, t.to)
			}
			bs.addRange(t.lo, t.hi)
		}
		for _, to := range targets {
			g.Edges = append(g.Edges, GraphEdge{i, int(to), bytesExpr(*byTarget[to])})
		}
		for _, c := range s.calls {
			g.Edges = append(g.Edges, GraphEdge{i, int(c.to), Ref(c.rule)})
		}
	}
	return GraphExpr(g)
}

// product builds the product automaton of two call-free DFAs, accepting
// where keep(accept in a, accept in b) holds. A missing transition on one
// side is a dead state there (index -1), so difference works.
func product(a, b *dfa, keep func(x, y bool) bool, bud *budget) (*dfa, error) {
	type pair struct{ x, y int32 }
	index := map[pair]int32{{0, 0}: 0}
	queue := []pair{{0, 0}}
	out := &dfa{}
	for k := 0; k < len(queue); k++ {
		if len(queue) > bud.states {
			return nil, fmt.Errorf("automaton has more than %d states: %w", bud.states, errTooLarge)
		}
		if err := bud.tick(); err != nil {
			return nil, err
		}
		p := queue[k]
		var sa, sb *dstate
		if p.x >= 0 {
			sa = &a.states[p.x]
		}
		if p.y >= 0 {
			sb = &b.states[p.y]
		}
		ns := dstate{accept: keep(sa != nil && sa.accept, sb != nil && sb.accept)}
		for c := 0; c < 256; {
			tx, hx := rangeAt(sa, byte(c))
			ty, hy := rangeAt(sb, byte(c))
			hi := min(hx, hy)
			if tx >= 0 || ty >= 0 {
				q := pair{tx, ty}
				id, ok := index[q]
				if !ok {
					id = int32(len(queue))
					index[q] = id
					queue = append(queue, q)
				}
				ns.trans = append(ns.trans, dtrans{byte(c), byte(hi), id})
			}
			c = hi + 1
		}
		ns.trans = mergeTrans(ns.trans)
		out.states = append(out.states, ns)
	}
	return out.trim().minimize(), nil
}

// rangeAt returns the target on c (-1 if none) and the last byte of the
// run starting at c that has the same target.
func rangeAt(s *dstate, c byte) (int32, int) {
	if s == nil {
		return -1, 255
	}
	for _, t := range s.trans {
		if c < t.lo {
			return -1, int(t.lo) - 1
		}
		if c <= t.hi {
			return t.to, int(t.hi)
		}
	}
	return -1, 255
}

// isEmpty reports whether d accepts nothing (after trim, only a
// non-accepting start with no transitions remains).
func (d *dfa) isEmpty() bool {
	return len(d.states) == 1 && !d.states[0].accept && len(d.states[0].trans) == 0 && len(d.states[0].calls) == 0
}

// matches runs a call-free DFA over s.
func (d *dfa) matches(s []byte) bool {
	st := int32(0)
	for _, c := range s {
		st = d.states[st].next(c)
		if st < 0 {
			return false
		}
	}
	return d.states[st].accept
}

// sortCalls keeps a state's calls ordered by rule.
func sortCalls(c []dcall) {
	slices.SortFunc(c, func(a, b dcall) int { return int(a.rule) - int(b.rule) })
}

// repeatUnit builds the DFA of min to max (max < 0: unbounded) strings of
// unit's language directly, one copy of unit per count, where compiling
// the repetition would determinize and minimize an automaton as large.
// unit must read at least one byte, start in a state nothing returns to,
// and end in accepting states with nothing left to read (one UTF-8
// scalar value, say); ok is false when it does not.
func repeatUnit(unit *dfa, min, max int, b *budget) (d *dfa, ok bool, err error) {
	if unit.states[0].accept || len(unit.states[0].calls) > 0 {
		return nil, false, nil
	}
	// inner numbers unit's states other than the start and the accepting
	// ones: each copy holds them after its start.
	inner := make([]int32, len(unit.states))
	n := 0
	for i, s := range unit.states {
		inner[i] = -1
		if len(s.calls) > 0 {
			return nil, false, nil
		}
		for _, t := range s.trans {
			if t.to == 0 {
				return nil, false, nil
			}
		}
		switch {
		case s.accept && len(s.trans) > 0:
			return nil, false, nil
		case i > 0 && !s.accept:
			inner[i] = int32(n)
			n++
		}
	}
	// Copy k reads the k+1st unit. The last copy is only its start: the
	// end of a bounded repetition, or the loop of an unbounded one, which
	// reads its units through the previous copy's inner states (they lead
	// where its own would).
	copies := max + 1
	if max < 0 {
		copies = min + 1
	}
	per := 1 + n
	total := (copies-1)*per + 1
	if max < 0 && min == 0 {
		total = per // the loop is the only copy, with its own inner states
	}
	if total > b.states {
		return nil, true, fmt.Errorf("automaton has more than %d states: %w", b.states, errTooLarge)
	}
	d = &dfa{states: make([]dstate, total)}
	last := int32((copies - 1) * per)
	for k := range copies {
		base := int32(k * per)
		d.states[base].accept = k >= min
		if err := b.tick(); err != nil {
			return nil, true, err
		}
		next, innerBase := base+int32(per), base+1
		if k == copies-1 {
			if max >= 0 {
				break // max units read
			}
			next = last
			if k > 0 {
				innerBase = base - int32(per) + 1
			}
		}
		for i, s := range unit.states {
			from := base
			if i > 0 {
				if inner[i] < 0 || (k == copies-1 && k > 0) {
					continue
				}
				from = innerBase + inner[i]
			}
			trans := make([]dtrans, len(s.trans))
			for j, t := range s.trans {
				to := next
				if !unit.states[t.to].accept {
					to = innerBase + inner[t.to]
				}
				trans[j] = dtrans{lo: t.lo, hi: t.hi, to: to}
			}
			d.states[from].trans = trans
		}
	}
	return d, true, nil
}
