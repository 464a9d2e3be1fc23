package grammar

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Limits bound what one grammar may cost. Every compiler front end checks
// its input against them and refuses with an error that names the limit.
type Limits struct {
	// States bounds the automaton states of the whole grammar, and of any
	// intermediate automaton built on the way.
	States int
	// Rules bounds the number of rules.
	Rules int
	// Configs bounds how many parses a matcher follows at once (ambiguous
	// grammars); a token that would exceed it is rejected.
	Configs int
	// Time bounds one compilation's wall time (0: none).
	Time time.Duration
}

// DefaultLimits are the bounds used when a front end is given none: a
// grammar of up to 200,000 automaton states (tens of MB at most), 10,000
// rules, 512 simultaneous parses and 5 s of compilation.
var DefaultLimits = Limits{States: 200_000, Rules: 10_000, Configs: 512, Time: 5 * time.Second}

// Builder collects rules; Build checks and freezes them into a Grammar.
type Builder struct {
	names []string
	defs  []*Expr
}

// Declare adds a rule to define later (rules may refer to each other, and
// to themselves, in any order).
func (b *Builder) Declare(name string) RuleID {
	b.names = append(b.names, name)
	b.defs = append(b.defs, nil)
	return RuleID(len(b.names) - 1)
}

// Define sets the body of a declared rule.
func (b *Builder) Define(r RuleID, e *Expr) { b.defs[r] = e }

// Rule declares and defines a rule at once.
func (b *Builder) Rule(name string, e *Expr) RuleID {
	r := b.Declare(name)
	b.Define(r, e)
	return r
}

// Name returns the name r was declared with.
func (b *Builder) Name(r RuleID) string { return b.names[r] }

// Grammar is a compiled, immutable grammar over bytes, shared by every
// matcher built from it (safe for concurrent use). Its token tables are
// built lazily per vocabulary position and cached.
type Grammar struct {
	states    []gstate
	ruleStart []int32
	ruleNames []string
	top       RuleID    // the synthetic rule that calls the root once
	follow    []byteSet // per rule: bytes that may come right after it returns
	limits    Limits

	mu     sync.Mutex
	caches map[*Vocab]*tokenCache
}

// gstate is one automaton state of the flattened grammar.
type gstate struct {
	rule   RuleID
	accept bool
	// final: accepting with nothing to read or call, so a call that returns
	// here can replace its caller's frame (a tail call).
	final bool
	trans []dtrans // targets are global state ids
	calls []gcall
}

type gcall struct {
	rule  RuleID
	start int32 // the callee's start state
	ret   int32 // where the caller continues
}

func (s *gstate) next(c byte) int32 {
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

// NumStates is the number of automaton states of the grammar.
func (g *Grammar) NumStates() int { return len(g.states) }

// Build freezes the rules into a Grammar whose language is root's. It
// refuses undefined rules, rules that can never finish (a reference cycle
// with no way out), left recursion, an empty language and grammars above
// lim, each with an error naming the rule.
func (b *Builder) Build(root RuleID, lim Limits) (*Grammar, error) {
	if lim.States <= 0 {
		lim = DefaultLimits
	}
	return b.buildWith(root, lim, newBudget(lim))
}

// buildWith is Build spending an existing budget (a front end's).
func (b *Builder) buildWith(root RuleID, lim Limits, bud *budget) (*Grammar, error) {
	if lim.States <= 0 {
		lim = DefaultLimits
	}
	if len(b.names)+1 > lim.Rules {
		return nil, fmt.Errorf("grammar has %d rules, more than the limit of %d: %w", len(b.names), lim.Rules, errTooLarge)
	}
	// The top rule calls root once, so that root may be called recursively
	// and still match the empty string where the grammar allows it.
	names := append(slices.Clone(b.names), "<top>")
	defs := append(slices.Clone(b.defs), Ref(root))
	top := RuleID(len(names) - 1)
	rules := make([]*dfa, len(names))
	total := 0
	for r, e := range defs {
		if e == nil {
			return nil, fmt.Errorf("rule %q is used but never defined", names[r])
		}
		d, err := compileExpr(e, bud)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", names[r], err)
		}
		total += len(d.states)
		if total > lim.States {
			return nil, fmt.Errorf("grammar has more than %d automaton states: %w", lim.States, errTooLarge)
		}
		rules[r] = d
	}
	if err := checkCalls(rules, names); err != nil {
		return nil, err
	}
	if err := dropUnproductive(rules, names, top, bud); err != nil {
		return nil, err
	}
	if err := removeEmpty(rules, top, bud); err != nil {
		return nil, err
	}
	if err := checkLeftRecursion(rules, names, top); err != nil {
		return nil, err
	}
	g := flatten(rules, names, top)
	if len(g.states) > lim.States {
		return nil, fmt.Errorf("grammar has %d automaton states, more than the limit of %d: %w", len(g.states), lim.States, errTooLarge)
	}
	g.limits = lim
	if err := g.computeFollow(bud); err != nil {
		return nil, err
	}
	return g, nil
}

func checkCalls(rules []*dfa, names []string) error {
	for r, d := range rules {
		for _, s := range d.states {
			for _, c := range s.calls {
				if int(c.rule) < 0 || int(c.rule) >= len(rules) {
					return fmt.Errorf("rule %q refers to rule id %d, which does not exist", names[r], c.rule)
				}
			}
		}
	}
	return nil
}

// dropUnproductive finds the rules that can match some string, removes
// calls to the others and fails when the top rule cannot match anything.
func dropUnproductive(rules []*dfa, names []string, top RuleID, b *budget) error {
	prod, err := fixRules(rules, b, func(d *dfa, marked []bool) bool { return d.reachesAccept(marked) })
	if err != nil {
		return err
	}
	if !prod[top] {
		root := rules[top].states[0].calls[0].rule
		return fmt.Errorf("rule %q cannot match any string (every way through it recurses without end, or a part of it matches nothing): %w", names[root], ErrEmpty)
	}
	for r, d := range rules {
		dead := func(c dcall) bool { return !prod[c.rule] }
		if !slices.ContainsFunc(d.states, func(s dstate) bool { return slices.ContainsFunc(s.calls, dead) }) {
			continue
		}
		// Copy before cutting: a rule's automaton may be shared.
		nd := &dfa{states: slices.Clone(d.states)}
		for i := range nd.states {
			nd.states[i].calls = slices.DeleteFunc(slices.Clone(nd.states[i].calls), dead)
		}
		rules[r] = nd.trim()
	}
	return nil
}

// fixRules computes the least set of rules for which holds(rule, set) is
// true, with a worklist: a rule is looked at again only when one it calls
// joins the set, so a long chain of rules costs its length, not its
// square.
func fixRules(rules []*dfa, b *budget, holds func(d *dfa, marked []bool) bool) ([]bool, error) {
	callers := make([][]RuleID, len(rules))
	for r, d := range rules {
		for _, s := range d.states {
			for _, c := range s.calls {
				callers[c.rule] = append(callers[c.rule], RuleID(r))
			}
		}
	}
	marked := make([]bool, len(rules))
	queued := make([]bool, len(rules))
	work := make([]RuleID, 0, len(rules))
	for r := range rules {
		work = append(work, RuleID(r))
		queued[r] = true
	}
	for len(work) > 0 {
		if err := b.tick(); err != nil {
			return nil, err
		}
		r := work[len(work)-1]
		work = work[:len(work)-1]
		queued[r] = false
		if marked[r] || !holds(rules[r], marked) {
			continue
		}
		marked[r] = true
		for _, c := range callers[r] {
			if !marked[c] && !queued[c] {
				queued[c] = true
				work = append(work, c)
			}
		}
	}
	return marked, nil
}

// reachesAccept: some path from the start reaches acceptance, taking calls
// only to rules marked ok.
func (d *dfa) reachesAccept(ok []bool) bool {
	seen := make([]bool, len(d.states))
	stack := []int32{0}
	seen[0] = true
	for len(stack) > 0 {
		s := &d.states[stack[len(stack)-1]]
		stack = stack[:len(stack)-1]
		if s.accept {
			return true
		}
		for _, t := range s.trans {
			if !seen[t.to] {
				seen[t.to] = true
				stack = append(stack, t.to)
			}
		}
		for _, c := range s.calls {
			if ok[c.rule] && !seen[c.to] {
				seen[c.to] = true
				stack = append(stack, c.to)
			}
		}
	}
	return false
}

// removeEmpty makes every rule but the top one match only non-empty
// strings, and lets callers of a rule that matched the empty string skip
// the call instead. Afterwards a call always reads at least one byte
// before it can return, which keeps the matcher's expansion finite.
func removeEmpty(rules []*dfa, top RuleID, b *budget) error {
	nullable, err := fixRules(rules, b, func(d *dfa, marked []bool) bool { return d.nullable(marked) })
	if err != nil {
		return err
	}
	for r, d := range rules {
		needs := nullable[r] && RuleID(r) != top
		for _, s := range d.states {
			for _, c := range s.calls {
				if nullable[c.rule] {
					needs = true
				}
			}
		}
		if !needs {
			continue
		}
		n := newNFA(b)
		n.eps, n.begin, n.end, n.edges, n.calls = nil, nil, nil, nil, nil
		for range d.states {
			n.newState()
		}
		acc := n.newState()
		n.accept = acc
		for i, s := range d.states {
			if s.accept {
				n.eps[i] = append(n.eps[i], acc)
			}
			for _, t := range s.trans {
				n.edges[i] = append(n.edges[i], nfaEdge{set: rangeSet(t.lo, t.hi), to: t.to})
			}
			for _, c := range s.calls {
				n.calls[i] = append(n.calls[i], nfaCall{c.rule, c.to})
				if nullable[c.rule] {
					n.eps[i] = append(n.eps[i], c.to)
				}
			}
		}
		nd, err := n.determinize(b)
		if err != nil {
			return err
		}
		nd = nd.trim().minimize()
		if nullable[r] && RuleID(r) != top && nd.states[0].accept {
			// A fresh start with the old start's moves, not accepting.
			s0 := nd.states[0]
			fresh := dstate{trans: slices.Clone(s0.trans), calls: slices.Clone(s0.calls)}
			nd.states = append(nd.states, dstate{})
			copy(nd.states[1:], nd.states[:len(nd.states)-1])
			nd.states[0] = fresh
			for i := range nd.states {
				s := &nd.states[i]
				for k := range s.trans {
					s.trans[k].to++
				}
				for k := range s.calls {
					s.calls[k].to++
				}
			}
			nd = nd.trim()
		}
		rules[r] = nd
	}
	return nil
}

// nullable: the start reaches acceptance through calls to nullable rules
// alone.
func (d *dfa) nullable(null []bool) bool {
	seen := make([]bool, len(d.states))
	stack := []int32{0}
	seen[0] = true
	for len(stack) > 0 {
		s := &d.states[stack[len(stack)-1]]
		stack = stack[:len(stack)-1]
		if s.accept {
			return true
		}
		for _, c := range s.calls {
			if null[c.rule] && !seen[c.to] {
				seen[c.to] = true
				stack = append(stack, c.to)
			}
		}
	}
	return false
}

// checkLeftRecursion refuses a rule that can call itself before reading a
// byte: the matcher would expand it forever.
func checkLeftRecursion(rules []*dfa, names []string, top RuleID) error {
	const (
		white = iota
		grey
		black
	)
	color := make([]int, len(rules))
	var path []RuleID
	var visit func(r RuleID) error
	visit = func(r RuleID) error {
		color[r] = grey
		path = append(path, r)
		for _, c := range rules[r].states[0].calls {
			switch color[c.rule] {
			case grey:
				i := slices.Index(path, c.rule)
				var cyc []string
				for _, p := range path[i:] {
					cyc = append(cyc, fmt.Sprintf("%q", names[p]))
				}
				cyc = append(cyc, fmt.Sprintf("%q", names[c.rule]))
				return fmt.Errorf("left recursion: %s can call itself before reading anything", strings.Join(cyc, " -> "))
			case white:
				if err := visit(c.rule); err != nil {
					return err
				}
			}
		}
		path = path[:len(path)-1]
		color[r] = black
		return nil
	}
	for r := range rules {
		if color[r] == white {
			if err := visit(RuleID(r)); err != nil {
				return err
			}
		}
	}
	return nil
}

// flatten numbers the states of the rules reachable from top globally.
func flatten(rules []*dfa, names []string, top RuleID) *Grammar {
	reach := make([]bool, len(rules))
	stack := []RuleID{top}
	reach[top] = true
	for len(stack) > 0 {
		r := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, s := range rules[r].states {
			for _, c := range s.calls {
				if !reach[c.rule] {
					reach[c.rule] = true
					stack = append(stack, c.rule)
				}
			}
		}
	}
	g := &Grammar{ruleStart: make([]int32, len(rules)), ruleNames: names, top: top, caches: map[*Vocab]*tokenCache{}}
	for r, d := range rules {
		g.ruleStart[r] = -1
		if reach[r] {
			g.ruleStart[r] = int32(len(g.states))
			for range d.states {
				g.states = append(g.states, gstate{rule: RuleID(r)})
			}
		}
	}
	for r, d := range rules {
		if !reach[r] {
			continue
		}
		off := g.ruleStart[r]
		for i, s := range d.states {
			gs := &g.states[off+int32(i)]
			gs.accept = s.accept
			for _, t := range s.trans {
				gs.trans = append(gs.trans, dtrans{t.lo, t.hi, t.to + off})
			}
			for _, c := range s.calls {
				gs.calls = append(gs.calls, gcall{rule: c.rule, start: g.ruleStart[c.rule], ret: c.to + off})
			}
		}
	}
	for i := range g.states {
		s := &g.states[i]
		s.final = s.accept && len(s.trans) == 0 && len(s.calls) == 0
	}
	return g
}

// computeFollow finds, for every rule, the bytes that can be read right
// after it returns, over all its call sites (a superset is safe: it only
// filters which token tails are worth checking). Worklists keep it linear
// in the grammar for long chains of rules.
func (g *Grammar) computeFollow(b *budget) error {
	n := len(g.ruleStart)
	// first[r]: the bytes rule r can start with (callees read at least one
	// byte, so a call's first bytes are the callee's).
	first := make([]byteSet, n)
	callers := make([][]RuleID, n)
	for i := range g.states {
		s := &g.states[i]
		for _, c := range s.calls {
			callers[c.rule] = append(callers[c.rule], s.rule)
		}
	}
	stateFirst := func(q int32) byteSet {
		s := &g.states[q]
		var f byteSet
		for _, t := range s.trans {
			f = f.union(rangeSet(t.lo, t.hi))
		}
		for _, c := range s.calls {
			f = f.union(first[c.rule])
		}
		return f
	}
	work := []RuleID{}
	queued := make([]bool, n)
	for r := range n {
		if g.ruleStart[r] >= 0 {
			work = append(work, RuleID(r))
			queued[r] = true
		}
	}
	for len(work) > 0 {
		if err := b.tick(); err != nil {
			return err
		}
		r := work[len(work)-1]
		work = work[:len(work)-1]
		queued[r] = false
		if f := stateFirst(g.ruleStart[r]); f != first[r] {
			first[r] = f
			for _, c := range callers[r] {
				if !queued[c] {
					queued[c] = true
					work = append(work, c)
				}
			}
		}
	}
	// follow[R] holds first(ret) of every call of R, and follow[caller]
	// when the caller can end right after it: propagate along those edges.
	g.follow = make([]byteSet, n)
	tails := make([][]RuleID, n) // caller rule -> callees in tail position
	for i := range g.states {
		s := &g.states[i]
		for _, c := range s.calls {
			g.follow[c.rule] = g.follow[c.rule].union(stateFirst(c.ret))
			if g.states[c.ret].accept {
				tails[s.rule] = append(tails[s.rule], c.rule)
			}
		}
	}
	work = work[:0]
	for r := range n {
		work = append(work, RuleID(r))
		queued[r] = true
	}
	for len(work) > 0 {
		if err := b.tick(); err != nil {
			return err
		}
		r := work[len(work)-1]
		work = work[:len(work)-1]
		queued[r] = false
		for _, t := range tails[r] {
			if f := g.follow[t].union(g.follow[r]); f != g.follow[t] {
				g.follow[t] = f
				if !queued[t] {
					queued[t] = true
					work = append(work, t)
				}
			}
		}
	}
	return nil
}

// errUnsupported is wrapped by every error about a feature the compilers
// refuse (as opposed to input that is malformed).
var errUnsupported = errors.New("not supported")

// ErrEmpty is wrapped by the error of a grammar that matches no string at
// all (a schema no value satisfies).
var ErrEmpty = errors.New("the language is empty")

// Bytes estimates the memory g holds: its automaton and the token tables
// built so far (the tables shared through the vocabulary are not counted).
func (g *Grammar) Bytes() int {
	n := 0
	for i := range g.states {
		s := &g.states[i]
		n += 48 + 8*len(s.trans) + 12*len(s.calls)
	}
	g.mu.Lock()
	for _, c := range g.caches {
		n += c.bytes
	}
	g.mu.Unlock()
	return n
}
