package grammar

import (
	"fmt"
	"math/bits"
	"slices"
)

// A position's token table comes in parts. What depends only on the
// parses that start there (its local set): the short tokens it reads
// whole inside its rule and what that rule calls (a raw table), the same
// for the long tokens, and the trie nodes before which the rule may
// return part-way through a token. Raw tables are shared between
// positions and grammars that read alike (see tokenCache.key). What
// depends on the rule's callers: the tokens that return part-way,
// grouped by the bytes left once the rule has returned, kept only where
// the next byte can follow the rule.

// rawTable is a local set's short tokens, for any rule and callers.
type rawTable struct {
	mode tableMode
	list []int32  // listAccept: the accepted tokens; listReject: the text tokens not accepted
	bits []uint64 // bitsAccept
	// exits are the short trie's nodes (depth ≥ 2, preorder) before which
	// some parse can return from the bottom frame: the tokens below leave
	// the rule after depth-1 bytes.
	exits []int32
	exit0 bool // the rule can return before reading anything
	size  int  // bytes held
}

type tableMode uint8

const (
	listAccept tableMode = iota
	listReject
	bitsAccept
)

// subtree is the part of a table under one child of a trie's root, for a
// local set reached by reading that child's byte: shared between
// positions whose next sets read alike (inside any JSON string, say, a
// first letter leads to the same place). A local set's long tokens are a
// subtree too, of the whole long trie.
type subtree struct {
	acc   []int32 // accepted tokens below (the child's own included)
	exits []int32
}

func (s *subtree) size() int { return 4*(len(s.acc)+len(s.exits)) + 64 }

// tokTable is one grammar position's token table.
type tokTable struct {
	*rawTable
	long   *subtree
	groups []suffixGroup
	size   int // bytes of the groups
}

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
	tables map[uint64]*tokTable // by local set and rule
	raws   map[int32]*rawTable  // by local set
	longs  map[int32]*subtree   // by local set
	deep   map[int64]deepHash   // by grammar state and depth
	bytes  int
	// scratch for walks
	states []int32
	acc    []uint64
	ids    []int32
	exits  []int32
}

// maxCacheBytes bounds a grammar's tables and local automaton per
// vocabulary; past it they are dropped and rebuilt as needed.
const maxCacheBytes = 64 << 20

func (g *Grammar) cache(v *Vocab) *tokenCache {
	c := g.caches[v]
	if c == nil || c.bytes > maxCacheBytes {
		c = &tokenCache{
			v: v, local: newLocalDFA(g),
			tables: map[uint64]*tokTable{}, raws: map[int32]*rawTable{}, longs: map[int32]*subtree{}, deep: map[int64]deepHash{},
			states: make([]int32, max(v.short.maxDepth, v.long.maxDepth)+1),
			acc:    make([]uint64, v.MaskWords()),
		}
		g.caches[v] = c
	}
	return c
}

// errAmbiguous is the error of a position whose local parses outnumber
// the grammar's Configs limit: its table would take too long to build,
// and its masks with it.
func (g *Grammar) errAmbiguous() error {
	return fmt.Errorf("more than %d parses of the grammar at once (too ambiguous): %w", g.limits.Configs, errTooLarge)
}

// table returns the token table of grammar state q (callers lock g.mu).
func (g *Grammar) table(c *tokenCache, q int32) (*tokTable, error) {
	l := c.local
	before := len(l.sets)
	set := l.startSet(g, q)
	if l.overflow {
		l.overflow = false
		return nil, g.errAmbiguous()
	}
	rule := g.states[q].rule
	key := uint64(set)<<32 | uint64(uint32(rule))
	if t := c.tables[key]; t != nil {
		return t, nil
	}
	raw, err := g.raw(c, set)
	if err != nil {
		return nil, err
	}
	long, err := g.longTokens(c, set)
	if err != nil {
		return nil, err
	}
	t := &tokTable{rawTable: raw, long: long}
	byKey := map[string][]int32{}
	groupExits(c.v, &c.v.short, raw.exits, g.follow[rule], byKey)
	groupExits(c.v, &c.v.long, long.exits, g.follow[rule], byKey)
	t.groups, t.size = sortGroups(byKey)
	c.tables[key] = t
	c.bytes += t.size + 64 + (len(l.sets)-before)*(256*4+64)
	return t, nil
}

// raw returns local set id's raw table: this grammar's, another's that
// reads alike, or built.
func (g *Grammar) raw(c *tokenCache, set int32) (*rawTable, error) {
	if raw := c.raws[set]; raw != nil {
		return raw, nil
	}
	key := c.key(g, set, shortBytes)
	if key != "" {
		if raw, ok := c.v.shared.get("r" + key).(*rawTable); ok {
			c.raws[set] = raw
			return raw, nil
		}
	}
	raw, err := g.buildRaw(c, set)
	if err != nil {
		return nil, err
	}
	if key != "" {
		c.v.shared.put("r"+key, raw, raw.size)
	} else {
		c.bytes += raw.size
	}
	c.raws[set] = raw
	return raw, nil
}

// longTokens returns local set id's long tokens: walked, or shared with
// the sets of the same structure.
func (g *Grammar) longTokens(c *tokenCache, set int32) (*subtree, error) {
	if s := c.longs[set]; s != nil {
		return s, nil
	}
	sig := c.local.signature(g, set)
	if sig != "" {
		if s, ok := c.v.shared.get("l" + sig).(*subtree); ok {
			c.longs[set] = s
			return s, nil
		}
	}
	s := &subtree{}
	tr := &c.v.long
	for i := 0; i < len(tr.nodes); i = int(tr.nodes[i].end) {
		ns := c.local.next(g, set, tr.nodes[i].b)
		if c.local.overflow {
			c.local.overflow = false
			return nil, g.errAmbiguous()
		}
		if ns < 0 {
			continue
		}
		ids, exits := g.walk(c, tr, i, ns)
		if c.local.overflow {
			c.local.overflow = false
			return nil, g.errAmbiguous()
		}
		s.acc = append(s.acc, ids...)
		s.exits = append(s.exits, exits...)
	}
	if sig != "" {
		c.v.shared.put("l"+sig, s, s.size())
	} else {
		c.bytes += s.size()
	}
	c.longs[set] = s
	return s, nil
}

// groupExits groups the tokens below tr's exit nodes whose byte can
// follow the rule by the bytes left once it has returned.
func groupExits(v *Vocab, tr *trie, exits []int32, follow byteSet, byKey map[string][]int32) {
	for _, j := range exits {
		n := &tr.nodes[j]
		if !follow.has(n.b) {
			continue
		}
		d := int(n.depth)
		for k := int(j); k < int(n.end); k++ {
			for t := tr.nodes[k].tok; t >= 0; t = v.dupTok[t] {
				s := string(v.pieces[t][d-1:])
				byKey[s] = append(byKey[s], t)
			}
		}
	}
}

func sortGroups(byKey map[string][]int32) ([]suffixGroup, int) {
	if len(byKey) == 0 {
		return nil, 0
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	groups := make([]suffixGroup, 0, len(keys))
	size := 0
	for _, k := range keys {
		groups = append(groups, suffixGroup{suffix: []byte(k), toks: byKey[k]})
		size += len(k) + 4*len(byKey[k]) + 48
	}
	return groups, size
}

// buildRaw walks the short trie from local set start, one subtree of the
// root at a time: a subtree whose next set reads like one some grammar
// walked before is taken from the vocabulary's shared subtrees, and
// shared once walked.
func (g *Grammar) buildRaw(c *tokenCache, start int32) (*rawTable, error) {
	v, l := c.v, c.local
	acc := c.acc
	clear(acc)
	var exits []int32
	tr := &v.short
	for i := 0; i < len(tr.nodes); i = int(tr.nodes[i].end) {
		b := tr.nodes[i].b
		ns := l.next(g, start, b)
		if l.overflow {
			l.overflow = false
			return nil, g.errAmbiguous()
		}
		if ns < 0 {
			continue
		}
		// The subtree reads at most shortBytes-1 bytes past ns.
		key := c.key(g, ns, shortBytes-1)
		if key != "" {
			key = "s" + key + string(b)
			if sub, ok := v.shared.get(key).(*subtree); ok {
				setIDs(acc, sub.acc)
				exits = append(exits, sub.exits...)
				continue
			}
		}
		ids, subExits := g.walk(c, tr, i, ns)
		if l.overflow {
			l.overflow = false
			return nil, g.errAmbiguous()
		}
		setIDs(acc, ids)
		exits = append(exits, subExits...)
		if key != "" {
			sub := &subtree{acc: slices.Clone(ids), exits: slices.Clone(subExits)}
			v.shared.put(key, sub, sub.size())
		}
	}
	t := &rawTable{exits: slices.Clip(exits), exit0: l.sets[start].exit}
	nAcc, nText := 0, 0
	for i, w := range acc {
		nAcc += bits.OnesCount64(w)
		nText += bits.OnesCount64(v.text[i])
	}
	words := len(acc)
	switch {
	case nAcc*4 <= words*8 && nAcc <= nText-nAcc:
		t.mode = listAccept
		t.list = make([]int32, 0, nAcc)
		forBits(acc, func(id int32) { t.list = append(t.list, id) })
		t.size = 4 * nAcc
	case (nText-nAcc)*4 <= words*8:
		// The long tokens are rejected here; the position's own list
		// of them adds back those it accepts.
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
		t.size = 4 * (nText - nAcc)
	default:
		t.mode = bitsAccept
		t.bits = slices.Clone(acc)
		t.size = 8 * words
	}
	t.size += 4*len(t.exits) + 64
	return t, nil
}

// walk reads the subtree of tr's root child i, whose byte leads to local
// set first, and returns its accepted tokens and exit nodes (scratch,
// valid until the next walk).
func (g *Grammar) walk(c *tokenCache, tr *trie, i int, first int32) ([]int32, []int32) {
	l := c.local
	nodes, dup := tr.nodes, c.v.dupTok
	states := c.states
	ids, exits := c.ids[:0], c.exits[:0]
	for t := nodes[i].tok; t >= 0; t = dup[t] {
		ids = append(ids, t)
	}
	states[1] = first
	end := int(nodes[i].end)
	trans, exit := l.trans, l.exit
	for j := i + 1; j < end; {
		n := &nodes[j]
		d := int(n.depth)
		s := states[d-1]
		if exit[s] {
			exits = append(exits, int32(j))
		}
		ns := trans[int(s)<<8|int(n.b)]
		if ns <= 1 {
			if ns == 0 {
				ns = l.compute(g, s, n.b)
				l.trans[int(s)<<8|int(n.b)] = ns
				trans, exit = l.trans, l.exit // interning grows them
			}
			if ns == 1 {
				j = int(n.end)
				continue
			}
		}
		states[d] = ns - 2
		if t := n.tok; t >= 0 {
			ids = append(ids, t)
			if n.dup {
				for t = dup[t]; t >= 0; t = dup[t] {
					ids = append(ids, t)
				}
			}
		}
		j++
	}
	c.ids, c.exits = ids, exits
	return ids, exits
}

func setIDs(m []uint64, ids []int32) {
	for _, id := range ids {
		m[id>>6] |= 1 << (id & 63)
	}
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
