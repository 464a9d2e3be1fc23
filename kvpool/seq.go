package kvpool

import "fmt"

// get resolves a handle, refusing out-of-range and released ones.
func (p *Pool) get(s SeqID) (*seq, error) {
	if s < 0 {
		return nil, fmt.Errorf("%w: %d is negative", ErrInvalidSeq, s)
	}
	ent := int(s & seqEntryMask)
	if ent >= len(p.seqs) {
		return nil, fmt.Errorf("%w: %d (entry %d) is out of range (%d entries)", ErrInvalidSeq, s, ent, len(p.seqs))
	}
	q := &p.seqs[ent]
	if !q.live || uint16(s>>seqEntryBits) != q.gen {
		return nil, fmt.Errorf("%w: %d (entry %d) was released", ErrInvalidSeq, s, ent)
	}
	return q, nil
}

// Valid reports whether s is a live handle of this pool.
func (p *Pool) Valid(s SeqID) bool {
	_, err := p.get(s)
	return err == nil
}

// newEntry takes a free sequence entry with key entry k; -1 when none is
// left.
func (p *Pool) newEntry(k int32) (SeqID, *seq) {
	var ent int32
	if n := len(p.freeSeqs); n > 0 {
		ent = p.freeSeqs[n-1]
		p.freeSeqs = p.freeSeqs[:n-1]
	} else {
		if len(p.seqs) >= maxSeqEntries {
			return InvalidSeq, nil
		}
		ent = int32(len(p.seqs))
		p.seqs = append(p.seqs, seq{partial: make([]int32, 0, p.bs)})
	}
	q := &p.seqs[ent]
	q.live = true
	q.key = k
	q.tokens = 0
	q.parent = p.keyTab[k].root
	return SeqID(int32(q.gen)<<seqEntryBits | ent), q
}

// NewSeq returns an empty sequence under keys. O(1); it allocates nothing in
// steady state (entries and their slices are reused). It returns InvalidSeq
// when all 2^20 entries are live.
func (p *Pool) NewSeq(keys Keys) SeqID {
	if len(p.freeSeqs) == 0 && len(p.seqs) >= maxSeqEntries {
		return InvalidSeq
	}
	s, _ := p.newEntry(p.keyRef(keys))
	return s
}

// Release drops s's references and invalidates the handle. Blocks whose
// refcount reaches zero are freed tail first (see the package doc). Release
// of an invalid or already released handle is a no-op.
func (p *Pool) Release(s SeqID) {
	q, err := p.get(s)
	if err != nil {
		return
	}
	for i := len(q.blocks) - 1; i >= 0; i-- {
		p.unref(q.blocks[i])
	}
	p.keyUnref(q.key)
	q.blocks = q.blocks[:0]
	q.partial = q.partial[:0]
	q.tokens = 0
	q.reserved = 0
	q.parent = Hash{}
	q.key = -1
	q.live = false
	q.gen = (q.gen + 1) & seqGenMask
	p.freeSeqs = append(p.freeSeqs, int32(s&seqEntryMask))
}

// MatchPrefix takes references on the longest run of cached full blocks
// matching tokens' prefix under s's Keys and appends them to s, which must be
// empty. It always leaves at least the last token uncomputed, so the returned
// hitTokens is a multiple of BlockSize and <= len(tokens)-1 (0 for no
// tokens). The caller then Appends tokens[hitTokens:].
func (p *Pool) MatchPrefix(s SeqID, tokens []int32) (hitTokens int, err error) {
	q, err := p.get(s)
	if err != nil {
		return 0, err
	}
	if q.tokens != 0 || q.reserved != 0 {
		return 0, fmt.Errorf("kvpool: MatchPrefix on sequence %d holding %d tokens and %d reserved slots; it must be empty", s, q.tokens, q.reserved)
	}
	hit, parent := p.chain(q.key, tokens, true, q)
	q.tokens = hit << p.shift
	q.parent = parent
	return q.tokens, nil
}

// PeekPrefix returns the hitTokens MatchPrefix would give for a new sequence
// under keys, taking nothing.
func (p *Pool) PeekPrefix(keys Keys, tokens []int32) int {
	k, ok := p.keyIdx[keys]
	if !ok {
		// No live sequence and no published block has these keys.
		return 0
	}
	hit, _ := p.chain(k, tokens, false, nil)
	return hit << p.shift
}

// blocksNeeded is how many new blocks n more tokens take after cur tokens.
func (p *Pool) blocksNeeded(cur, n int) int {
	if n <= 0 {
		return 0
	}
	have := (cur + p.bs - 1) >> p.shift
	return (cur+n+p.bs-1)>>p.shift - have
}

// BlocksNeeded is how many new blocks Append(s, n tokens) or Reserve(s, n)
// would allocate (0 for an invalid handle or n <= 0).
func (p *Pool) BlocksNeeded(s SeqID, n int) int {
	q, err := p.get(s)
	if err != nil {
		return 0
	}
	return p.blocksNeeded(q.tokens+q.reserved, n)
}

// Append grows s by len(tokens) tokens, allocating blocks as needed. It is
// all-or-nothing: on error nothing changed. It returns a *TooLargeError when
// s would outgrow the whole pool, and wraps ErrOutOfBlocks when too few
// blocks are available now. Each block that becomes full is hashed and
// published (see the package doc for an already published identical block).
func (p *Pool) Append(s SeqID, tokens []int32) error {
	q, err := p.get(s)
	if err != nil {
		return err
	}
	if len(tokens) == 0 {
		return nil
	}
	if q.reserved != 0 {
		return fmt.Errorf("kvpool: Append of %d tokens to sequence %d with %d reserved slots: Fill them first", len(tokens), s, q.reserved)
	}
	if total := q.tokens + len(tokens); total > p.poolTokens {
		return &TooLargeError{Tokens: total, PoolTokens: p.poolTokens}
	}
	if need := p.blocksNeeded(q.tokens, len(tokens)); need > p.Available() {
		return fmt.Errorf("%w: appending %d tokens to sequence %d needs %d blocks, %d available", ErrOutOfBlocks, len(tokens), s, need, p.Available())
	}
	bs := p.bs
	for len(tokens) > 0 {
		if q.tokens&(bs-1) == 0 {
			b := p.allocate()
			q.blocks = append(q.blocks, b)
			if len(tokens) >= bs {
				// A whole block straight from the caller's slice.
				p.fill(q, b, tokens[:bs])
				q.tokens += bs
				tokens = tokens[bs:]
				continue
			}
		}
		n := min(bs-len(q.partial), len(tokens))
		q.partial = append(q.partial, tokens[:n]...)
		q.tokens += n
		tokens = tokens[n:]
		if len(q.partial) == bs {
			p.fill(q, q.blocks[len(q.blocks)-1], q.partial)
			q.partial = q.partial[:0]
		}
	}
	return nil
}

// Reserve grows s by n slots whose token values are not known yet: the
// blocks they need are allocated now (so a step may write their KV at once),
// and Fill supplies the values later, in order. A block holding a reserved
// slot is private and unhashed; it is hashed and published only when Fill
// makes all its values known, so a prefix lookup never finds a block whose
// tokens are not known. While slots are reserved, Append and the
// Match methods refuse s. Errors as for Append; on error nothing changed.
func (p *Pool) Reserve(s SeqID, n int) error {
	q, err := p.get(s)
	if err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("kvpool: Reserve of %d slots in sequence %d: negative count", n, s)
	}
	if n == 0 {
		return nil
	}
	cur := q.tokens + q.reserved
	if total := cur + n; total > p.poolTokens {
		return &TooLargeError{Tokens: total, PoolTokens: p.poolTokens}
	}
	need := p.blocksNeeded(cur, n)
	if need > p.Available() {
		return fmt.Errorf("%w: reserving %d slots in sequence %d needs %d blocks, %d available", ErrOutOfBlocks, n, s, need, p.Available())
	}
	for range need {
		q.blocks = append(q.blocks, p.allocate())
	}
	q.reserved += n
	return nil
}

// Reserved is the number of s's reserved slots awaiting Fill (0 for an
// invalid handle).
func (p *Pool) Reserved(s SeqID) int {
	q, err := p.get(s)
	if err != nil {
		return 0
	}
	return q.reserved
}

// Fill supplies the values of s's first len(tokens) reserved slots, in
// order; each block that becomes full of known tokens is hashed and
// published as by Append. It allocates nothing. On error nothing changed.
func (p *Pool) Fill(s SeqID, tokens []int32) error {
	q, err := p.get(s)
	if err != nil {
		return err
	}
	if len(tokens) > q.reserved {
		return fmt.Errorf("kvpool: Fill of %d tokens in sequence %d with %d reserved slots", len(tokens), s, q.reserved)
	}
	for len(tokens) > 0 {
		n := min(p.bs-len(q.partial), len(tokens))
		q.partial = append(q.partial, tokens[:n]...)
		q.tokens += n
		q.reserved -= n
		tokens = tokens[n:]
		if len(q.partial) == p.bs {
			// The block of the last known token; reserved blocks may follow it.
			p.fill(q, q.blocks[(q.tokens-1)>>p.shift], q.partial)
			q.partial = q.partial[:0]
		}
	}
	return nil
}

// fill hashes the now-full block b of q and publishes it.
func (p *Pool) fill(q *seq, b BlockID, tokens []int32) {
	h := p.blockHash(q.parent, tokens)
	q.parent = h
	p.publish(b, h, q.key)
}

// Pin returns a new handle holding references to s's full blocks, so they
// survive s's Release (agentic programs between turns). Unpin is
// Release(pin). The pin is an ordinary sequence: it may be appended to.
func (p *Pool) Pin(s SeqID) (SeqID, error) {
	q, err := p.get(s)
	if err != nil {
		return InvalidSeq, err
	}
	pin, _, err := p.dup(s, q, q.tokens>>p.shift)
	return pin, err
}

// dup makes a new sequence with q's keys referencing q's first full blocks.
func (p *Pool) dup(s SeqID, q *seq, full int) (SeqID, *seq, error) {
	if len(p.freeSeqs) == 0 && len(p.seqs) >= maxSeqEntries {
		return InvalidSeq, nil, fmt.Errorf("kvpool: copying sequence %d: all %d sequence entries are live", s, maxSeqEntries)
	}
	p.keyTab[q.key].refs++
	parent, key := q.parent, q.key
	child, c := p.newEntry(key)
	q = &p.seqs[int32(s&seqEntryMask)] // p.seqs may have grown
	for _, b := range q.blocks[:full] {
		p.addRef(b)
	}
	c.blocks = append(c.blocks, q.blocks[:full]...)
	c.tokens = full << p.shift
	c.parent = parent
	return child, c, nil
}

// Blocks is s's block table: a read-only view valid until s changes (nil for
// an invalid handle).
func (p *Pool) Blocks(s SeqID) []BlockID {
	q, err := p.get(s)
	if err != nil {
		return nil
	}
	return q.blocks[:len(q.blocks):len(q.blocks)]
}

// Tokens is the number of tokens in s with known values, excluding reserved
// slots (0 for an invalid handle).
func (p *Pool) Tokens(s SeqID) int {
	q, err := p.get(s)
	if err != nil {
		return 0
	}
	return q.tokens
}

// Keys returns s's keys (zero Keys for an invalid handle).
func (p *Pool) Keys(s SeqID) Keys {
	q, err := p.get(s)
	if err != nil {
		return Keys{}
	}
	return p.keyTab[q.key].keys
}

// SumBlocks is Σ len(Blocks(s)) over seqs, counting a shared block once per
// sequence. O(len(seqs)); invalid handles count 0.
func (p *Pool) SumBlocks(seqs []SeqID) int {
	sum := 0
	for _, s := range seqs {
		if q, err := p.get(s); err == nil {
			sum += len(q.blocks)
		}
	}
	return sum
}

// DistinctBlocks is the number of distinct blocks referenced by seqs (a
// handle listed twice counts once). O(blocks involved), no allocation.
func (p *Pool) DistinctBlocks(seqs []SeqID) int {
	p.epoch++
	if p.epoch == 0 {
		// Stamp wrapped: clear once every 2^32 calls.
		clear(p.mark)
		p.epoch = 1
	}
	n := 0
	for _, s := range seqs {
		q, err := p.get(s)
		if err != nil {
			continue
		}
		for _, b := range q.blocks {
			if p.mark[b] != p.epoch {
				p.mark[b] = p.epoch
				n++
			}
		}
	}
	return n
}
