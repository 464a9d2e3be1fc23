package grammar

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"hash/maphash"
	"sync"
)

// sharedTables holds what grammars over one vocabulary share: raw tables
// and root subtrees of local sets, keyed by structural signature (a
// subtree's key adds its byte), least recently used first out past
// maxSharedBytes.
type sharedTables struct {
	mu    sync.Mutex
	bytes int
	index map[string]*list.Element
	lru   list.List
}

type sharedEntry struct {
	key  string
	val  any
	size int
}

// maxSharedBytes bounds a vocabulary's shared tables.
const maxSharedBytes = 128 << 20

func (s *sharedTables) get(key string) any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.index[key]; ok {
		s.lru.MoveToFront(e)
		return e.Value.(*sharedEntry).val
	}
	return nil
}

func (s *sharedTables) put(key string, val any, size int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.index == nil {
		s.index = map[string]*list.Element{}
	}
	if _, ok := s.index[key]; ok {
		return
	}
	size += len(key) + 64
	s.index[key] = s.lru.PushFront(&sharedEntry{key, val, size})
	s.bytes += size
	for s.bytes > maxSharedBytes && s.lru.Len() > 1 {
		e := s.lru.Back()
		se := e.Value.(*sharedEntry)
		s.lru.Remove(e)
		delete(s.index, se.key)
		s.bytes -= se.size
	}
}

// key names local set id by what it reads in its next depth bytes, for
// sharing tables of tokens no longer than depth: "" when it has no name.
// A set with one parse of one frame whose state calls nothing within
// depth bytes is named by a hash of that state's automaton unrolled to
// depth bytes, so the states of a counted string far from its bounds
// share one name with each other and with an unbounded string. Any
// other set is named by its structural signature.
func (c *tokenCache) key(g *Grammar, id int32, depth int) string {
	set := &c.local.sets[id]
	exit := "0"
	if set.exit {
		exit = "1"
	}
	if len(set.stacks) == 1 && len(set.stacks[0]) == 1 {
		if h, ok := c.deepHash(g, set.stacks[0][0], depth); ok {
			var b [17]byte
			b[0] = byte(depth)
			binary.LittleEndian.PutUint64(b[1:], h[0])
			binary.LittleEndian.PutUint64(b[9:], h[1])
			return "d" + exit + string(b[:])
		}
	}
	if sig := c.local.signature(g, id); sig != "" {
		return "x" + exit + sig
	}
	return ""
}

// deepHash is 128 bits naming a state's automaton unrolled to a depth.
type deepHash [2]uint64

// deepHash hashes what state q reads in its next depth bytes: its flags
// and, for each transition, its byte range and the hash of its target one
// byte shallower. ok is false when a state within reach calls a rule.
// Seeds are the vocabulary's, so grammars over it compare.
func (c *tokenCache) deepHash(g *Grammar, q int32, depth int) (deepHash, bool) {
	k := int64(q)<<6 | int64(depth)
	if h, ok := c.deep[k]; ok {
		return h, h != deepHash{}
	}
	s := &g.states[q]
	var buf []byte
	ok := len(s.calls) == 0
	if ok {
		flags := byte(0)
		if s.accept {
			flags |= 1
		}
		if s.final {
			flags |= 2
		}
		if len(s.trans) > 0 {
			flags |= 4
		}
		buf = append(buf, flags)
		if depth > 0 {
			for _, t := range s.trans {
				th, tok := c.deepHash(g, t.to, depth-1)
				if !tok {
					ok = false
					break
				}
				buf = append(buf, t.lo, t.hi)
				buf = binary.LittleEndian.AppendUint64(buf, th[0])
				buf = binary.LittleEndian.AppendUint64(buf, th[1])
			}
		}
	}
	var h deepHash
	if ok {
		h = deepHash{maphash.Bytes(c.v.seeds[0], buf), maphash.Bytes(c.v.seeds[1], buf)}
		if h == (deepHash{}) {
			h[0] = 1 // the zero hash marks "no name"
		}
	}
	c.deep[k] = h
	return h, ok
}

// maxSharedStates bounds the part of a grammar a shared local set may
// reach: small lexical positions (inside a string, a number, a keyword)
// recur across grammars, large structural ones do not.
const maxSharedStates = 64

// signature names local set id by its structure alone: its parses, with
// the states they can reach (through transitions, callees and
// continuations) numbered in breadth-first order, and those states'
// accepting flags, transitions and calls. Two sets with one signature
// read every byte string alike, in any grammar: their raw tables and
// subtrees are the same. "" when more than maxSharedStates states are
// reachable.
func (l *localDFA) signature(g *Grammar, id int32) string {
	if s, ok := l.sigs[id]; ok {
		return s
	}
	set := &l.sets[id]
	index := map[int32]int32{}
	var order []int32
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
	for _, st := range set.stacks {
		for _, s := range st {
			ok = ok && visit(s)
		}
	}
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
		l.sigs[id] = ""
		return ""
	}
	var buf []byte
	if set.exit {
		buf = append(buf, 1)
	} else {
		buf = append(buf, 0)
	}
	buf = binary.AppendUvarint(buf, uint64(len(set.stacks)))
	for _, st := range set.stacks {
		buf = binary.AppendUvarint(buf, uint64(len(st)))
		for _, s := range st {
			buf = binary.AppendUvarint(buf, uint64(index[s]))
		}
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
	sum := sha256.Sum256(buf)
	sig := string(sum[:])
	l.sigs[id] = sig
	return sig
}
