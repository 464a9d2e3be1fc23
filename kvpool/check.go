package kvpool

import "fmt"

// Check verifies every invariant of the pool and returns the first violation.
// It is O(pool) and allocates; tests call it after every operation.
//
//   - each allocatable block is in exactly one state: free uncached (in the
//     uncached list, no hash), free cached (in the LRU list, hashed) or
//     referenced (refcount > 0, in no list); the null block is in none;
//   - the O(1) counters match;
//   - each refcount equals the number of live sequences whose table holds it;
//   - the hash index and the per-block hashes agree one to one;
//   - no block is reachable under two keys (salts): each published block
//     belongs to one live key entry, every sequence holding it has that
//     entry, and distinct key entries have distinct roots;
//   - both lists are well formed (links agree, no cycles besides the
//     sentinel, no block twice);
//   - sequence tables are consistent with their token and reserved-slot
//     counts, blocks not full of known tokens (the partial last block,
//     blocks of reserved slots) are private (refcount 1, unpublished), and
//     free sequence entries are free.
func (p *Pool) Check() error {
	n := int(p.n)
	inList := make([]uint8, n) // 0: none, 1: uncached, 2: cached
	walk := func(head int32, tag uint8, name string) (int, error) {
		count := 0
		prev := head
		for b := p.next[head]; b != head; b = p.next[b] {
			if b < p.first || b >= p.n {
				return 0, fmt.Errorf("kvpool: %s list holds id %d outside %d..%d", name, b, p.first, p.n-1)
			}
			if inList[b] != 0 {
				return 0, fmt.Errorf("kvpool: block %d is in the %s list twice or in both lists", b, name)
			}
			if p.prev[b] != prev {
				return 0, fmt.Errorf("kvpool: %s list: block %d has prev %d, want %d", name, b, p.prev[b], prev)
			}
			inList[b] = tag
			prev = b
			count++
		}
		if p.prev[head] != prev {
			return 0, fmt.Errorf("kvpool: %s list: sentinel prev %d, want %d", name, p.prev[head], prev)
		}
		return count, nil
	}
	nu, err := walk(p.uncachedHead(), 1, "uncached")
	if err != nil {
		return err
	}
	nc, err := walk(p.cachedHead(), 2, "cached")
	if err != nil {
		return err
	}
	if nu != p.freeUncached {
		return fmt.Errorf("kvpool: uncached list holds %d blocks, counter says %d", nu, p.freeUncached)
	}
	if nc != p.cachedFree {
		return fmt.Errorf("kvpool: cached list holds %d blocks, counter says %d", nc, p.cachedFree)
	}

	// References from live sequences.
	refs := make([]uint32, n)
	keyRefs := make([]int32, len(p.keyTab))
	live := 0
	for ent := range p.seqs {
		q := &p.seqs[ent]
		if !q.live {
			if len(q.blocks) != 0 || len(q.partial) != 0 || q.tokens != 0 || q.reserved != 0 {
				return fmt.Errorf("kvpool: free sequence entry %d still holds %d blocks, %d tokens", ent, len(q.blocks), q.tokens)
			}
			continue
		}
		live++
		if q.key < 0 || int(q.key) >= len(p.keyTab) || p.keyTab[q.key].refs <= 0 {
			return fmt.Errorf("kvpool: sequence entry %d has dead key entry %d", ent, q.key)
		}
		keyRefs[q.key]++
		if q.reserved < 0 {
			return fmt.Errorf("kvpool: sequence entry %d has %d reserved slots", ent, q.reserved)
		}
		if want := (q.tokens + q.reserved + p.bs - 1) >> p.shift; len(q.blocks) != want {
			return fmt.Errorf("kvpool: sequence entry %d holds %d tokens + %d reserved in %d blocks, want %d blocks", ent, q.tokens, q.reserved, len(q.blocks), want)
		}
		if len(q.partial) != q.tokens&(p.bs-1) {
			return fmt.Errorf("kvpool: sequence entry %d has %d partial tokens, want %d", ent, len(q.partial), q.tokens&(p.bs-1))
		}
		for i, b := range q.blocks {
			if b < p.first || b >= p.n {
				return fmt.Errorf("kvpool: sequence entry %d block %d is id %d outside %d..%d", ent, i, b, p.first, p.n-1)
			}
			refs[b]++
			if k := p.keyOf[b]; k >= 0 && k != q.key {
				return fmt.Errorf("kvpool: block %d published under key entry %d is held by sequence entry %d under key entry %d", b, k, ent, q.key)
			}
		}
		// Blocks past the full known ones (a partial block, reserved slots)
		// are not all known: never published.
		for _, b := range q.blocks[q.tokens>>p.shift:] {
			if p.keyOf[b] >= 0 {
				return fmt.Errorf("kvpool: partial or reserved block %d of sequence entry %d is published", b, ent)
			}
		}
	}
	// ... and private; checked after all references are counted.
	for ent := range p.seqs {
		q := &p.seqs[ent]
		if !q.live {
			continue
		}
		for _, b := range q.blocks[q.tokens>>p.shift:] {
			if refs[b] != 1 {
				return fmt.Errorf("kvpool: partial or reserved block %d of sequence entry %d is shared by %d sequences", b, ent, refs[b])
			}
		}
	}
	if free := len(p.freeSeqs); live+free != len(p.seqs) {
		return fmt.Errorf("kvpool: %d live + %d free sequence entries != %d entries", live, free, len(p.seqs))
	}
	seenEnt := make(map[int32]bool, len(p.freeSeqs))
	for _, ent := range p.freeSeqs {
		if ent < 0 || int(ent) >= len(p.seqs) || p.seqs[ent].live || seenEnt[ent] {
			return fmt.Errorf("kvpool: free sequence list entry %d is live, out of range or repeated", ent)
		}
		seenEnt[ent] = true
	}

	// Per-block state.
	referenced, hashed := 0, 0
	for b := 0; b < n; b++ {
		if b < int(p.first) {
			if p.ref[b] != 0 || p.keyOf[b] >= 0 || inList[b] != 0 || refs[b] != 0 {
				return fmt.Errorf("kvpool: null block %d is in use (ref %d)", b, p.ref[b])
			}
			continue
		}
		if p.ref[b] != refs[b] {
			return fmt.Errorf("kvpool: block %d has refcount %d but %d sequence references", b, p.ref[b], refs[b])
		}
		pub := p.keyOf[b] >= 0
		switch {
		case p.ref[b] > 0:
			referenced++
			if inList[b] != 0 {
				return fmt.Errorf("kvpool: referenced block %d (ref %d) is on a free list", b, p.ref[b])
			}
		case pub && inList[b] != 2:
			return fmt.Errorf("kvpool: free published block %d is not on the cached list", b)
		case !pub && inList[b] != 1:
			return fmt.Errorf("kvpool: free unpublished block %d is not on the uncached list", b)
		}
		if pub {
			hashed++
			k := p.keyOf[b]
			if int(k) >= len(p.keyTab) || p.keyTab[k].refs <= 0 {
				return fmt.Errorf("kvpool: block %d published under dead key entry %d", b, k)
			}
			keyRefs[k]++
			if got, ok := p.index[p.hash[b]]; !ok || got != BlockID(b) {
				return fmt.Errorf("kvpool: block %d hash %v maps to block %d (present %v)", b, p.hash[b], got, ok)
			}
		} else if p.hash[b] != (Hash{}) {
			return fmt.Errorf("kvpool: unpublished block %d keeps hash %v", b, p.hash[b])
		}
	}
	if referenced != p.referenced {
		return fmt.Errorf("kvpool: %d blocks referenced, counter says %d", referenced, p.referenced)
	}
	if total := p.referenced + p.cachedFree + p.freeUncached; total != p.NumBlocks() {
		return fmt.Errorf("kvpool: %d referenced + %d cached + %d uncached != %d blocks", p.referenced, p.cachedFree, p.freeUncached, p.NumBlocks())
	}
	if len(p.index) != hashed {
		return fmt.Errorf("kvpool: hash index holds %d entries, %d blocks are published", len(p.index), hashed)
	}
	for h, b := range p.index {
		if b < p.first || b >= p.n || p.keyOf[b] < 0 || p.hash[b] != h {
			return fmt.Errorf("kvpool: hash index entry %v points at block %d which does not carry it", h, b)
		}
	}

	// Key entries.
	liveKeys := 0
	roots := make(map[Hash]int32, len(p.keyIdx))
	for i := range p.keyTab {
		e := &p.keyTab[i]
		if e.refs != keyRefs[i] {
			return fmt.Errorf("kvpool: key entry %d (%q/%q) has %d references, counted %d", i, e.keys.Model, e.keys.Salt, e.refs, keyRefs[i])
		}
		if e.refs == 0 {
			continue
		}
		liveKeys++
		if got, ok := p.keyIdx[e.keys]; !ok || got != int32(i) {
			return fmt.Errorf("kvpool: key entry %d (%q/%q) is not indexed", i, e.keys.Model, e.keys.Salt)
		}
		if e.root != rootHash(e.keys) {
			return fmt.Errorf("kvpool: key entry %d (%q/%q) has a wrong root", i, e.keys.Model, e.keys.Salt)
		}
		if j, dup := roots[e.root]; dup {
			return fmt.Errorf("kvpool: key entries %d and %d share root %v: their blocks would be reachable under both", j, i, e.root)
		}
		roots[e.root] = int32(i)
	}
	if liveKeys != len(p.keyIdx) || liveKeys+len(p.freeKeys) != len(p.keyTab) {
		return fmt.Errorf("kvpool: %d live key entries, %d indexed, %d free, %d total", liveKeys, len(p.keyIdx), len(p.freeKeys), len(p.keyTab))
	}
	return nil
}
