package grammar

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"sync"
)

// tokTable says, for one grammar position with its callers unknown, which
// text tokens it accepts outright (read whole inside the position's rule
// and what that rule calls), and which might be accepted by leaving the
// rule part-way (grouped by the bytes left once it has returned, which
// the callers must accept), and whether the position can return before
// reading anything.
type tokTable struct {
	mode   tableMode
	list   []int32  // listAccept: the accepted tokens; listReject: the text tokens not accepted
	bits   []uint64 // bitsAccept
	groups []suffixGroup
	exit0  bool
	bytes  int // memory held, for the cache's bound
}

type tableMode uint8

const (
	listAccept tableMode = iota
	listReject
	bitsAccept
)

type suffixGroup struct {
	suffix []byte
	toks   []int32
}

// tokenCache holds one grammar's token tables for one vocabulary, and the
// local automaton they are walked with. It lives in the Grammar, guarded
// by its mutex.
type tokenCache struct {
	v      *Vocab
	local  *localDFA
	tables map[uint64]*tokTable
	sigs   map[int32]string
	bytes  int
	// scratch for walks
	states []int32
	acc    []uint64
}

// maxCacheBytes bounds a grammar's tables and local automaton per
// vocabulary; past it they are dropped and rebuilt as needed.
const maxCacheBytes = 64 << 20

func (g *Grammar) cache(v *Vocab) *tokenCache {
	c := g.caches[v]
	if c == nil || c.bytes > maxCacheBytes {
		c = &tokenCache{v: v, local: newLocalDFA(g), tables: map[uint64]*tokTable{}, sigs: map[int32]string{}}
		g.caches[v] = c
	}
	return c
}

// table returns the token table of grammar state q (callers lock g.mu).
func (g *Grammar) table(c *tokenCache, q int32) (*tokTable, error) {
	set := c.local.startSet(g, q)
	rule := g.states[q].rule
	key := uint64(set)<<32 | uint64(uint32(rule))
	if t := c.tables[key]; t != nil {
		return t, nil
	}
	sig := g.signature(c, q)
	if sig != "" {
		if t := c.v.shared.get(sig); t != nil {
			c.tables[key] = t
			return t, nil
		}
	}
	t := g.buildTable(c, set, rule)
	if c.local.overflow {
		// A position whose local parses outnumber the limit: its table
		// would take too long to build, and its masks with it.
		c.local.overflow = false
		return nil, fmt.Errorf("more than %d parses of the grammar at once (too ambiguous): %w", g.limits.Configs, errTooLarge)
	}
	c.tables[key] = t
	c.bytes += t.bytes + 64
	if sig != "" {
		c.v.shared.put(sig, t)
	}
	return t, nil
}

// maxSharedStates bounds the part of a grammar a shareable position may
// reach: small lexical positions (inside a string, a number, a keyword)
// recur across grammars, large structural ones do not.
const maxSharedStates = 64

// signature names the language read from state q by its structure alone:
// the states reachable from q (through transitions, callees and
// continuations) numbered in breadth-first order, with their accepting
// flags, transitions and calls, and the bytes that may follow q's rule.
// Two positions with one signature have the same token table, in any
// grammar over the same vocabulary. "" when more than maxSharedStates
// states are reachable.
func (g *Grammar) signature(c *tokenCache, q int32) string {
	if s, ok := c.sigs[q]; ok {
		return s
	}
	index := map[int32]int32{q: 0}
	order := []int32{q}
	visit := func(s int32) bool {
		if _, ok := index[s]; !ok {
			if len(order) >= maxSharedStates {
				return false
			}
			index[s] = int32(len(order))
			order = append(order, s)
		}
		return true
	}
	ok := true
	for k := 0; k < len(order) && ok; k++ {
		s := &g.states[order[k]]
		for _, t := range s.trans {
			ok = ok && visit(t.to)
		}
		for _, cl := range s.calls {
			ok = ok && visit(cl.start) && visit(cl.ret)
		}
	}
	if !ok {
		c.sigs[q] = ""
		return ""
	}
	h := sha256.New()
	var buf []byte
	f := g.follow[g.states[q].rule]
	for _, w := range f {
		buf = binary.LittleEndian.AppendUint64(buf, w)
	}
	for _, id := range order {
		s := &g.states[id]
		flags := byte(0)
		if s.accept {
			flags |= 1
		}
		if s.final {
			flags |= 2
		}
		buf = append(buf, 0xfe, flags)
		for _, t := range s.trans {
			buf = append(buf, t.lo, t.hi)
			buf = binary.AppendUvarint(buf, uint64(index[t.to]))
		}
		buf = append(buf, 0xff)
		for _, cl := range s.calls {
			buf = binary.AppendUvarint(buf, uint64(index[cl.start]))
			buf = binary.AppendUvarint(buf, uint64(index[cl.ret]))
		}
	}
	h.Write(buf)
	sig := string(h.Sum(nil))
	c.sigs[q] = sig
	return sig
}

// sharedTables holds token tables shared between grammars over one
// vocabulary, keyed by signature, least recently used first out past
// maxSharedBytes.
type sharedTables struct {
	mu    sync.Mutex
	bytes int
	index map[string]*list.Element
	lru   list.List
}

type sharedEntry struct {
	sig string
	t   *tokTable
}

// maxSharedBytes bounds a vocabulary's shared tables.
const maxSharedBytes = 128 << 20

func (s *sharedTables) get(sig string) *tokTable {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.index[sig]; ok {
		s.lru.MoveToFront(e)
		return e.Value.(*sharedEntry).t
	}
	return nil
}

func (s *sharedTables) put(sig string, t *tokTable) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.index == nil {
		s.index = map[string]*list.Element{}
	}
	if _, ok := s.index[sig]; ok {
		return
	}
	s.index[sig] = s.lru.PushFront(&sharedEntry{sig, t})
	s.bytes += t.bytes + 64
	for s.bytes > maxSharedBytes && s.lru.Len() > 1 {
		e := s.lru.Back()
		se := e.Value.(*sharedEntry)
		s.lru.Remove(e)
		delete(s.index, se.sig)
		s.bytes -= se.t.bytes + 64
	}
}

func (g *Grammar) buildTable(c *tokenCache, start int32, rule RuleID) *tokTable {
	v, l := c.v, c.local
	before := len(l.sets)
	if c.states == nil {
		c.states = make([]int32, v.maxDepth+1)
		c.acc = make([]uint64, v.MaskWords())
	}
	states, acc := c.states, c.acc
	clear(acc)
	states[0] = start
	follow := g.follow[rule]
	nAcc := 0
	groups := map[string][]int32{}
	nb, nd, ne, nt := v.nodeByte, v.nodeDepth, v.nodeEnd, v.nodeTok
	for i := 0; i < len(nb); {
		d := int(nd[i])
		s := states[d-1]
		b := nb[i]
		if d >= 2 && l.sets[s].exit && follow.has(b) {
			// The rule may return after d-1 bytes; the rest of every token
			// below is for the callers to accept.
			for j := i; j < int(ne[i]); j++ {
				for t := nt[j]; t >= 0; t = v.dupTok[t] {
					k := string(v.pieces[t][d-1:])
					groups[k] = append(groups[k], t)
				}
			}
		}
		ns := l.trans[int(s)<<8|int(b)]
		if ns == 0 {
			ns = l.compute(g, s, b)
			l.trans[int(s)<<8|int(b)] = ns
		}
		if ns == 1 {
			i = int(ne[i])
			continue
		}
		states[d] = ns - 2
		for t := nt[i]; t >= 0; t = v.dupTok[t] {
			acc[t>>6] |= 1 << (t & 63)
			nAcc++
		}
		i++
	}
	t := &tokTable{exit0: l.sets[start].exit}
	nText := 0
	for _, w := range v.text {
		nText += bits.OnesCount64(w)
	}
	words := len(acc)
	switch {
	case nAcc*4 <= words*8 && nAcc <= nText-nAcc:
		t.mode = listAccept
		t.list = make([]int32, 0, nAcc)
		forBits(acc, func(id int32) { t.list = append(t.list, id) })
		t.bytes = 4 * nAcc
	case (nText-nAcc)*4 <= words*8:
		t.mode = listReject
		t.list = make([]int32, 0, nText-nAcc)
		for w := range acc {
			rej := v.text[w] &^ acc[w]
			for rej != 0 {
				k := bits.TrailingZeros64(rej)
				rej &= rej - 1
				t.list = append(t.list, int32(w*64+k))
			}
		}
		t.bytes = 4 * (nText - nAcc)
	default:
		t.mode = bitsAccept
		t.bits = slices.Clone(acc)
		t.bytes = 8 * words
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		t.groups = append(t.groups, suffixGroup{suffix: []byte(k), toks: groups[k]})
		t.bytes += len(k) + 4*len(groups[k]) + 48
	}
	c.bytes += (len(l.sets) - before) * (256*4 + 64)
	return t
}

// forBits calls f with the index of every set bit.
func forBits(m []uint64, f func(int32)) {
	for w, x := range m {
		for x != 0 {
			k := bits.TrailingZeros64(x)
			x &= x - 1
			f(int32(w*64 + k))
		}
	}
}
