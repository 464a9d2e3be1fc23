package grammar

import (
	"encoding/binary"
	"slices"
	"strings"
)

// localDFA determinizes, lazily, the grammar's pushdown automaton for
// reading bytes from a position whose callers are unknown: a state of it
// (a local set) is the set of parses that began at one grammar position,
// each a stack of states whose bottom frame stands for that position's
// rule. A parse may call rules (pushing frames) and return to frames it
// pushed; returning from the bottom frame is an exit, recorded but not
// followed (what comes next depends on the callers). Walking a vocabulary
// trie through this automaton costs one table lookup per trie node once
// the sets it meets are known.
type localDFA struct {
	// overflow is set when a set had more parses than the grammar's
	// Configs limit (it was cut there; the caller must fail).
	overflow bool
	sets     []localSet
	index    map[string]int32
	trans    []int32 // per set, per byte: 0 unknown, 1 no parse survives, id+2
	exit     []bool  // per set: its exit flag (sets[id].exit, dense for walks)
	stateSet []int32 // per grammar state: its start set id+1 (0 unknown)
	sigs     map[int32]string
	key      []byte
}

type localSet struct {
	stacks [][]int32 // parses whose top can read a byte, sorted
	exit   bool      // some parse can return from the bottom frame here
}

func newLocalDFA(g *Grammar) *localDFA {
	return &localDFA{index: map[string]int32{}, stateSet: make([]int32, len(g.states)), sigs: map[int32]string{}}
}

// startSet returns the local set of the single parse at state q.
func (l *localDFA) startSet(g *Grammar, q int32) int32 {
	if v := l.stateSet[q]; v > 0 {
		return v - 1
	}
	set, ok := g.closeStacks([][]int32{{q}})
	if !ok {
		l.overflow = true
		set = localSet{} // reads nothing; the caller fails
	}
	id := l.intern(set)
	l.stateSet[q] = id + 1
	return id
}

// next returns the set after reading c from set id, or -1 when no parse
// survives.
func (l *localDFA) next(g *Grammar, id int32, c byte) int32 {
	v := l.trans[int(id)<<8|int(c)]
	if v == 0 {
		v = l.compute(g, id, c)
		l.trans[int(id)<<8|int(c)] = v
	}
	return v - 2
}

func (l *localDFA) compute(g *Grammar, id int32, c byte) int32 {
	var moved [][]int32
	for _, st := range l.sets[id].stacks {
		if to := g.states[st[len(st)-1]].next(c); to >= 0 {
			ns := slices.Clone(st)
			ns[len(ns)-1] = to
			moved = append(moved, ns)
		}
	}
	if len(moved) == 0 {
		return 1
	}
	set, ok := g.closeStacks(moved)
	if !ok {
		// Dead for this walk; the table's builder reports the overflow.
		l.overflow = true
		return 1
	}
	if len(set.stacks) == 0 && !set.exit {
		return 1
	}
	return l.intern(set) + 2
}

func (l *localDFA) intern(s localSet) int32 {
	l.key = l.key[:0]
	if s.exit {
		l.key = append(l.key, 1)
	} else {
		l.key = append(l.key, 0)
	}
	for _, st := range s.stacks {
		l.key = binary.AppendUvarint(l.key, uint64(len(st)))
		for _, x := range st {
			l.key = binary.AppendUvarint(l.key, uint64(x))
		}
	}
	if id, ok := l.index[string(l.key)]; ok {
		return id
	}
	id := int32(len(l.sets))
	l.index[string(l.key)] = id
	l.sets = append(l.sets, s)
	l.exit = append(l.exit, s.exit)
	l.trans = append(l.trans, make([]int32, 256)...)
	return id
}

// closeStacks expands parses through calls (pushing the callee, or
// replacing a frame whose continuation is final: a tail call) and returns
// to frames below the top that were pushed locally, and keeps those whose
// top reads bytes, sorted and without duplicates. ok is false when the
// parses outnumber the grammar's Configs limit.
func (g *Grammar) closeStacks(seed [][]int32) (localSet, bool) {
	var out localSet
	seen := map[string]bool{}
	var keep []string
	work := seed
	kept := map[string][]int32{}
	for len(work) > 0 {
		if len(seen) > 4*g.limits.Configs || len(keep) > g.limits.Configs {
			return localSet{}, false
		}
		st := work[len(work)-1]
		work = work[:len(work)-1]
		k := stackKey(st)
		if seen[k] {
			continue
		}
		seen[k] = true
		s := &g.states[st[len(st)-1]]
		if len(s.trans) > 0 {
			kept[k] = st
			keep = append(keep, k)
		}
		if s.accept {
			if len(st) == 1 {
				out.exit = true
			} else {
				work = append(work, st[:len(st)-1:len(st)-1])
			}
		}
		for _, c := range s.calls {
			var ns []int32
			if g.states[c.ret].final {
				ns = append(slices.Clone(st[:len(st)-1]), c.start)
			} else {
				ns = append(slices.Clone(st[:len(st)-1]), c.ret, c.start)
			}
			work = append(work, ns)
		}
	}
	if len(keep) > g.limits.Configs {
		return localSet{}, false
	}
	slices.Sort(keep)
	for _, k := range keep {
		out.stacks = append(out.stacks, kept[k])
	}
	return out, true
}

func stackKey(st []int32) string {
	var b strings.Builder
	var buf [binary.MaxVarintLen64]byte
	for _, x := range st {
		n := binary.PutUvarint(buf[:], uint64(x))
		b.Write(buf[:n])
	}
	return b.String()
}
