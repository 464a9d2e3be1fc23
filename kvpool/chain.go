package kvpool

import "fmt"

// Chain is the block-hash chain of one token sequence under one Keys and
// block size, computed once (SHA-256 per full block) so that repeated prefix
// lookups — a waiting request is looked up at every step it stays queued, a
// router peeks every rank — cost one index probe per block instead of one
// hash per block. Only this package computes a Chain's hashes, so a caller
// cannot hand the pool a forged hash; the pool checks that the chain's keys
// and block size are its own before using it.
//
// A Chain is not safe for concurrent mutation; the zero value is empty.
type Chain struct {
	keys   Keys
	bs     int
	tokens int // tokens hashed so far, including a trailing partial block
	hashes []Hash
	// partial holds the tokens of the trailing partial block, so Extend can
	// continue the chain as a sequence grows (turn after turn).
	partial []int32
	buf     [16 + 4*256]byte
	// root is rootHash(keys), kept while the keys stay the same: a Chain
	// reused for request after request hashes its root once.
	root     Hash
	rootKeys Keys
	hasRoot  bool
}

// Reset makes c the chain of tokens under keys at the given block size,
// reusing c's storage.
func (c *Chain) Reset(keys Keys, blockSize int, tokens []int32) error {
	if blockSize < 1 || blockSize > 256 || blockSize&(blockSize-1) != 0 {
		return fmt.Errorf("kvpool: chain block size %d is not a power of two in 1..256", blockSize)
	}
	c.keys, c.bs, c.tokens = keys, blockSize, 0
	if !c.hasRoot || c.rootKeys != keys {
		c.root, c.rootKeys, c.hasRoot = rootHash(keys), keys, true
	}
	c.hashes = c.hashes[:0]
	c.partial = c.partial[:0]
	c.Extend(tokens)
	return nil
}

// Extend appends tokens to the chain, hashing each block they complete.
func (c *Chain) Extend(tokens []int32) {
	if c.bs == 0 {
		return
	}
	c.tokens += len(tokens)
	for len(tokens) > 0 {
		if len(c.partial) == 0 && len(tokens) >= c.bs {
			c.push(tokens[:c.bs])
			tokens = tokens[c.bs:]
			continue
		}
		n := min(c.bs-len(c.partial), len(tokens))
		c.partial = append(c.partial, tokens[:n]...)
		tokens = tokens[n:]
		if len(c.partial) == c.bs {
			c.push(c.partial)
			c.partial = c.partial[:0]
		}
	}
}

func (c *Chain) push(block []int32) {
	// Only the first block's parent is the root, computed once in Reset
	// (hashing the root for every block doubled the chain's cost).
	parent := c.root
	if n := len(c.hashes); n > 0 {
		parent = c.hashes[n-1]
	}
	c.hashes = append(c.hashes, hashBlock(&c.buf, parent, block))
}

// Tokens is the number of tokens the chain covers; Blocks the number of full
// blocks hashed.
func (c *Chain) Tokens() int { return c.tokens }
func (c *Chain) Blocks() int { return len(c.hashes) }

// Hashes is a read-only view of the full blocks' hashes, valid until c changes.
func (c *Chain) Hashes() []Hash { return c.hashes }

// Keys returns the keys the chain was computed under.
func (c *Chain) Keys() Keys { return c.keys }

func (p *Pool) checkChain(c *Chain) error {
	if c.bs != p.bs {
		return fmt.Errorf("kvpool: chain of block size %d used with a pool of block size %d", c.bs, p.bs)
	}
	return nil
}

// walkChain counts the leading blocks of c present in the index, leaving the
// chain's last token uncomputed (as MatchPrefix does), and takes references
// into s when s is not nil.
func (p *Pool) walkChain(c *Chain, s *seq) (int, Hash) {
	parent := p.keyTab[s.key].root
	if c.tokens == 0 || p.index == nil {
		return 0, parent
	}
	maxBlocks := min((c.tokens-1)>>p.shift, len(c.hashes))
	hit := 0
	for ; hit < maxBlocks; hit++ {
		b, ok := p.index[c.hashes[hit]]
		if !ok {
			break
		}
		parent = c.hashes[hit]
		p.addRef(b)
		s.blocks = append(s.blocks, b)
	}
	return hit, parent
}

// PeekChain returns the hit tokens MatchChain would give for a new sequence
// under c's keys, taking nothing. O(hit blocks); it hashes nothing.
func (p *Pool) PeekChain(c *Chain) int {
	if p.checkChain(c) != nil || c.tokens == 0 || p.index == nil {
		return 0
	}
	if _, ok := p.keyIdx[c.keys]; !ok {
		return 0
	}
	maxBlocks := min((c.tokens-1)>>p.shift, len(c.hashes))
	hit := 0
	for hit < maxBlocks {
		if _, ok := p.index[c.hashes[hit]]; !ok {
			break
		}
		hit++
	}
	return hit << p.shift
}

// MatchChain is MatchPrefix with the hashes taken from c instead of computed
// again: s must be empty and have the same Keys as c. The caller then
// Appends the chain's tokens from the returned hit on.
func (p *Pool) MatchChain(s SeqID, c *Chain) (hitTokens int, err error) {
	q, err := p.get(s)
	if err != nil {
		return 0, err
	}
	if err := p.checkChain(c); err != nil {
		return 0, err
	}
	if q.tokens != 0 || q.reserved != 0 {
		return 0, fmt.Errorf("kvpool: MatchChain on sequence %d holding %d tokens and %d reserved slots; it must be empty", s, q.tokens, q.reserved)
	}
	if p.keyTab[q.key].keys != c.keys {
		return 0, fmt.Errorf("kvpool: MatchChain: chain keys %+v differ from sequence %d's keys %+v", c.keys, s, p.keyTab[q.key].keys)
	}
	hit, parent := p.walkChain(c, q)
	q.tokens = hit << p.shift
	q.parent = parent
	return q.tokens, nil
}
