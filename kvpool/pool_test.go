package kvpool

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// seqTokens returns n token ids start, start+1, ...
func seqTokens(start, n int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(start + i)
	}
	return t
}

func newPool(t testing.TB, cfg Config) *Pool {
	t.Helper()
	p, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, p.Check())
	return p
}

// add makes a sequence holding tokens (matching its cached prefix first) and checks the pool.
func add(t testing.TB, p *Pool, k Keys, tokens []int32) (SeqID, int) {
	t.Helper()
	s := p.NewSeq(k)
	hit, err := p.MatchPrefix(s, tokens)
	require.NoError(t, err)
	require.NoError(t, p.Append(s, tokens[hit:]))
	require.NoError(t, p.Check())
	require.Equal(t, len(tokens), p.Tokens(s))
	return s, hit
}

func release(t testing.TB, p *Pool, seqs ...SeqID) {
	t.Helper()
	for _, s := range seqs {
		p.Release(s)
		require.NoError(t, p.Check())
	}
}

func TestNewConfig(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		wantBS    int
		wantN     int
		wantInErr string
	}{
		{"default block size", Config{NumBlocks: 8}, 16, 8, ""},
		{"block size 1", Config{NumBlocks: 8, BlockSize: 1}, 1, 8, ""},
		{"block size 256", Config{NumBlocks: 8, BlockSize: 256}, 256, 8, ""},
		{"null block", Config{NumBlocks: 8, NullBlock: true}, 16, 7, ""},
		{"block size 3", Config{NumBlocks: 8, BlockSize: 3}, 0, 0, "block size 3"},
		{"block size 512", Config{NumBlocks: 8, BlockSize: 512}, 0, 0, "block size 512"},
		{"block size -16", Config{NumBlocks: 8, BlockSize: -16}, 0, 0, "block size -16"},
		{"zero blocks", Config{NumBlocks: 0}, 0, 0, "NumBlocks 0"},
		{"negative blocks", Config{NumBlocks: -4}, 0, 0, "NumBlocks -4"},
		{"null block only", Config{NumBlocks: 1, NullBlock: true}, 0, 0, "NumBlocks 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.cfg)
			if tc.wantInErr != "" {
				require.ErrorContains(t, err, tc.wantInErr)
				require.Nil(t, p)
				return
			}
			require.NoError(t, err)
			require.NoError(t, p.Check())
			require.Equal(t, tc.wantBS, p.BlockSize())
			require.Equal(t, tc.wantN, p.NumBlocks())
			require.Equal(t, tc.wantN, p.FreeUncached())
			require.Equal(t, tc.wantN, p.Available())
			require.Zero(t, p.Referenced())
			require.Zero(t, p.CachedFree())
		})
	}
}

func TestFits(t *testing.T) {
	p := newPool(t, Config{NumBlocks: 10, BlockSize: 16, NullBlock: true}) // 9 × 16 = 144 tokens
	tests := []struct {
		tokens  int
		wantErr string
	}{
		{0, ""},
		{144, ""},
		{145, "request of 145 tokens exceeds the whole pool of 144 tokens"},
		{-1, "negative token count -1"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.tokens), func(t *testing.T) {
			err := p.Fits(tc.tokens)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, "kvpool: "+tc.wantErr)
		})
	}
	var tl *TooLargeError
	require.ErrorAs(t, p.Fits(1000), &tl)
	require.Equal(t, TooLargeError{Tokens: 1000, PoolTokens: 144}, *tl)
}

func TestAppend(t *testing.T) {
	tests := []struct {
		name       string
		bs         int
		chunks     []int // Append calls of these many tokens
		wantBlocks int
		wantStored int // blocks published
	}{
		{"empty", 16, []int{0}, 0, 0},
		{"one token", 16, []int{1}, 1, 0},
		{"exactly one block", 16, []int{16}, 1, 1},
		{"one block plus one", 16, []int{17}, 2, 1},
		{"token by token", 4, []int{1, 1, 1, 1, 1, 1, 1, 1, 1}, 3, 2},
		{"straddling chunks", 4, []int{3, 6, 3}, 3, 3},
		{"block size 1", 1, []int{5, 2}, 7, 7},
		{"block size 256", 256, []int{300}, 2, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var events []Event
			p := newPool(t, Config{NumBlocks: 32, BlockSize: tc.bs, OnEvent: func(e Event) { events = append(events, e) }})
			s := p.NewSeq(Keys{Model: "m"})
			total := 0
			for _, n := range tc.chunks {
				require.Equal(t, p.blocksNeeded(total, n), p.BlocksNeeded(s, n))
				before := len(p.Blocks(s))
				want := p.BlocksNeeded(s, n)
				require.NoError(t, p.Append(s, seqTokens(total, n)))
				require.NoError(t, p.Check())
				require.Equal(t, before+want, len(p.Blocks(s)))
				total += n
			}
			require.Equal(t, total, p.Tokens(s))
			require.Len(t, p.Blocks(s), tc.wantBlocks)
			require.Equal(t, tc.wantBlocks, p.Referenced())
			require.Len(t, events, tc.wantStored)
			for i, e := range events {
				require.Equal(t, EventStored, e.Kind)
				require.Equal(t, p.Blocks(s)[i], e.Block)
			}
			release(t, p, s)
			require.Zero(t, p.Referenced())
			require.Equal(t, tc.wantStored, p.CachedFree())
			require.Equal(t, 32, p.Available())
		})
	}
}

// A chunked append and a one-shot append of the same tokens give the same hashes.
func TestAppendChunkingSameHashes(t *testing.T) {
	p := newPool(t, Config{NumBlocks: 16, BlockSize: 4})
	toks := seqTokens(100, 19)
	a := p.NewSeq(Keys{})
	for i := range toks {
		require.NoError(t, p.Append(a, toks[i:i+1]))
	}
	require.NoError(t, p.Check())
	b, hit := add(t, p, Keys{}, toks)
	require.Equal(t, 16, hit)
	require.Equal(t, p.Blocks(a)[:4], p.Blocks(b)[:4])
	release(t, p, a, b)
}

func TestMatchPrefix(t *testing.T) {
	const bs = 16
	cached := seqTokens(0, 4*bs) // 4 full blocks published
	altered := append([]int32(nil), cached...)
	altered[20] = -7 // differs inside block 1
	tests := []struct {
		name    string
		query   []int32
		wantHit int
	}{
		{"no tokens", nil, 0},
		{"less than a block", cached[:10], 0},
		{"exactly one block leaves its last token", cached[:16], 0},
		{"one block plus one", cached[:17], 16},
		{"full hit leaves the last token", cached, 48},
		{"longer than cached", append(append([]int32(nil), cached...), 1, 2, 3), 64},
		{"mismatch in block 1", altered, 16},
		{"mismatch in block 0", seqTokens(1, 64), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPool(t, Config{NumBlocks: 16, BlockSize: bs})
			k := Keys{Model: "m", Salt: "s"}
			owner, _ := add(t, p, k, cached)
			ownerBlocks := append([]BlockID(nil), p.Blocks(owner)...)
			release(t, p, owner)
			require.Equal(t, 4, p.CachedFree())

			require.Equal(t, tc.wantHit, p.PeekPrefix(k, tc.query))
			require.Equal(t, 4, p.CachedFree(), "PeekPrefix takes nothing")
			s := p.NewSeq(k)
			hit, err := p.MatchPrefix(s, tc.query)
			require.NoError(t, err)
			require.NoError(t, p.Check())
			require.Equal(t, tc.wantHit, hit)
			require.Equal(t, hit, p.Tokens(s))
			require.Equal(t, ownerBlocks[:hit/bs], p.Blocks(s))
			require.Equal(t, hit/bs, p.Referenced())
			require.Equal(t, 4-hit/bs, p.CachedFree())
			require.NoError(t, p.Append(s, tc.query[hit:]))
			require.NoError(t, p.Check())
			release(t, p, s)
			require.Zero(t, p.Referenced())
		})
	}
}

func TestMatchPrefixNonEmpty(t *testing.T) {
	p := newPool(t, Config{NumBlocks: 4, BlockSize: 4})
	s := p.NewSeq(Keys{})
	require.NoError(t, p.Append(s, seqTokens(0, 3)))
	_, err := p.MatchPrefix(s, seqTokens(0, 8))
	require.ErrorContains(t, err, "holding 3 tokens")
	require.NoError(t, p.Check())
}

func TestSaltIsolation(t *testing.T) {
	tests := []struct {
		name    string
		a, b    Keys
		wantHit int
	}{
		{"same keys share", Keys{"m", "t1"}, Keys{"m", "t1"}, 32},
		{"different salt", Keys{"m", "t1"}, Keys{"m", "t2"}, 0},
		{"salt vs none", Keys{"m", "t1"}, Keys{"m", ""}, 0},
		{"different model", Keys{"m1", ""}, Keys{"m2", ""}, 0},
		{"length-prefixed fields", Keys{"ab", "c"}, Keys{"a", "bc"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPool(t, Config{NumBlocks: 16, BlockSize: 16})
			toks := seqTokens(0, 40)
			a, _ := add(t, p, tc.a, toks)
			require.Equal(t, tc.wantHit, p.PeekPrefix(tc.b, toks))
			b, hit := add(t, p, tc.b, toks)
			require.Equal(t, tc.wantHit, hit)
			shared := 0
			for i, blk := range p.Blocks(b) {
				if blk == p.Blocks(a)[i] {
					shared++
				}
			}
			require.Equal(t, tc.wantHit/16, shared)
			require.Equal(t, 6-shared, p.DistinctBlocks([]SeqID{a, b}))
			release(t, p, a, b)
		})
	}
}

// An identical block published earlier is not published again: the second
// sequence keeps a private block, and its chain continues from the shared hash.
func TestDuplicateBlockStaysPrivate(t *testing.T) {
	var events []Event
	p := newPool(t, Config{NumBlocks: 16, BlockSize: 4, OnEvent: func(e Event) { events = append(events, e) }})
	toks := seqTokens(0, 12)
	a := p.NewSeq(Keys{})
	b := p.NewSeq(Keys{})
	require.NoError(t, p.Append(a, toks[:8]))
	require.NoError(t, p.Append(b, toks)) // blocks 0,1 duplicate a's; block 2 is new
	require.NoError(t, p.Check())
	require.Len(t, events, 3, "a's two blocks and b's third")
	require.Equal(t, p.Blocks(b)[2], events[2].Block)
	require.Equal(t, 5, p.DistinctBlocks([]SeqID{a, b}), "no block shared")
	release(t, p, b)
	require.Equal(t, 1, p.CachedFree())
	require.Equal(t, 16-2-1, p.FreeUncached(), "b's duplicates return uncached")
	release(t, p, a)
	c, hit := add(t, p, Keys{}, append(toks, 99))
	require.Equal(t, 12, hit, "chain a0, a1, b2 is findable")
	release(t, p, c)
}

func TestEvictionOrder(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, p *Pool) (evictOrder []BlockID)
	}{
		{"uncached before cached", func(t *testing.T, p *Pool) []BlockID {
			s, _ := add(t, p, Keys{}, seqTokens(0, 8)) // 2 blocks, published
			cached := append([]BlockID(nil), p.Blocks(s)...)
			u := p.NewSeq(Keys{})
			require.NoError(t, p.Append(u, seqTokens(500, 3))) // 1 partial block
			release(t, p, s, u)
			require.Equal(t, 2, p.CachedFree())
			// The 6 uncached blocks go first, then the cached in LRU order.
			return append(p.uncachedOrder(), cached[1], cached[0])
		}},
		{"least recently freed first", func(t *testing.T, p *Pool) []BlockID {
			a, _ := add(t, p, Keys{}, seqTokens(0, 4))
			b, _ := add(t, p, Keys{}, seqTokens(100, 4))
			c, _ := add(t, p, Keys{}, seqTokens(200, 4))
			ba, bb, bc := p.Blocks(a)[0], p.Blocks(b)[0], p.Blocks(c)[0]
			rest := p.NewSeq(Keys{})
			require.NoError(t, p.Append(rest, seqTokens(300, 5*4))) // fill the pool
			restBlocks := append([]BlockID(nil), p.Blocks(rest)...)
			release(t, p, b, c, a, rest)
			require.Zero(t, p.FreeUncached())
			// A hit on b takes it out of the LRU; freeing it makes it most recent.
			h := p.NewSeq(Keys{})
			hit, err := p.MatchPrefix(h, seqTokens(100, 5))
			require.NoError(t, err)
			require.Equal(t, 4, hit)
			release(t, p, h)
			order := []BlockID{bc, ba}
			for i := len(restBlocks) - 1; i >= 0; i-- {
				order = append(order, restBlocks[i])
			}
			return append(order, bb)
		}},
		{"tail before prefix within one sequence", func(t *testing.T, p *Pool) []BlockID {
			s, _ := add(t, p, Keys{}, seqTokens(0, 8*4))
			blocks := append([]BlockID(nil), p.Blocks(s)...)
			release(t, p, s)
			order := []BlockID{}
			for i := len(blocks) - 1; i >= 0; i-- {
				order = append(order, blocks[i])
			}
			return order
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var removed []BlockID
			p := newPool(t, Config{NumBlocks: 8, BlockSize: 4, OnEvent: func(e Event) {
				if e.Kind == EventRemoved {
					removed = append(removed, e.Block)
				}
			}})
			want := tc.run(t, p)
			cachedBefore := p.CachedFree()
			// Allocate the whole pool one block at a time and record the order.
			var got []BlockID
			for i := 0; i < p.NumBlocks(); i++ {
				s := p.NewSeq(Keys{Model: "filler"})
				require.NoError(t, p.Append(s, []int32{int32(i)}))
				require.NoError(t, p.Check())
				got = append(got, p.Blocks(s)[0])
			}
			require.Equal(t, want, got[:len(want)])
			require.Len(t, removed, cachedBefore)
			require.Equal(t, got[len(got)-cachedBefore:], removed, "evictions are the cached blocks, last")
			require.Zero(t, p.Available())
		})
	}
}

// uncachedOrder and cachedOrder list the free lists front to back (test helpers).
func (p *Pool) uncachedOrder() []BlockID { return p.listOrder(p.uncachedHead()) }
func (p *Pool) cachedOrder() []BlockID   { return p.listOrder(p.cachedHead()) }
func (p *Pool) listOrder(h int32) []BlockID {
	var out []BlockID
	for b := p.next[h]; b != h; b = p.next[b] {
		out = append(out, b)
	}
	return out
}

func TestOutOfBlocks(t *testing.T) {
	p := newPool(t, Config{NumBlocks: 4, BlockSize: 4})
	a := p.NewSeq(Keys{})
	require.NoError(t, p.Append(a, seqTokens(0, 10))) // 3 blocks
	b := p.NewSeq(Keys{})
	require.NoError(t, p.Append(b, seqTokens(50, 2))) // 1 block, pool full
	tests := []struct {
		name    string
		seq     SeqID
		tokens  int
		wantErr string
	}{
		{"a fits its partial block", a, 2, ""},
		{"a needs one more", a, 1, "appending 1 tokens to sequence 0 needs 1 blocks, 0 available"},
		{"b needs two more", b, 8, "needs 2 blocks, 0 available"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tokens, blocks := p.Tokens(tc.seq), len(p.Blocks(tc.seq))
			err := p.Append(tc.seq, seqTokens(1000, tc.tokens))
			require.NoError(t, p.Check())
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrOutOfBlocks)
			require.ErrorContains(t, err, tc.wantErr)
			require.Equal(t, tokens, p.Tokens(tc.seq), "all or nothing")
			require.Len(t, p.Blocks(tc.seq), blocks)
		})
	}
	require.NoError(t, p.Check())
	err := p.Append(b, seqTokens(0, 17))
	var tl *TooLargeError
	require.ErrorAs(t, err, &tl)
	require.EqualError(t, err, "kvpool: request of 19 tokens exceeds the whole pool of 16 tokens")
	release(t, p, a, b)
	require.Zero(t, p.Referenced())
}

func TestPin(t *testing.T) {
	p := newPool(t, Config{NumBlocks: 6, BlockSize: 4})
	k := Keys{Model: "agent"}
	turn1, _ := add(t, p, k, seqTokens(0, 14)) // 3 full + 1 partial
	pin, err := p.Pin(turn1)
	require.NoError(t, err)
	require.NoError(t, p.Check())
	require.Equal(t, p.Blocks(turn1)[:3], p.Blocks(pin))
	require.Equal(t, 12, p.Tokens(pin))
	release(t, p, turn1)
	require.Equal(t, 3, p.Referenced(), "pinned blocks survive the release")
	// Another program fills the pool: pinned blocks are never evicted.
	other, _ := add(t, p, Keys{Model: "other"}, seqTokens(1000, 12))
	require.Zero(t, p.Available())
	require.NotContains(t, p.Blocks(other), p.Blocks(pin)[0])
	release(t, p, other)
	// Next turn hits the pinned prefix, then unpins.
	turn2, hit := add(t, p, k, seqTokens(0, 20))
	require.Equal(t, 12, hit)
	release(t, p, pin, turn2)
	require.Zero(t, p.Referenced())
}

func TestSharing(t *testing.T) {
	const (
		bs      = 16
		seqs    = 32
		tokens  = 2048
		prefix  = tokens * 90 / 100 // 1843 tokens
		shared  = prefix / bs       // 115 full blocks
		perSeq  = (tokens + bs - 1) / bs
		private = perSeq - shared // 13 blocks, including the one holding the prefix's tail
	)
	require.Equal(t, 1843, prefix)
	require.Equal(t, 115, shared)
	require.Equal(t, 128, perSeq)
	p := newPool(t, Config{NumBlocks: 8192, BlockSize: bs})
	k := Keys{Model: "m"}
	var ids []SeqID
	for i := 0; i < seqs; i++ {
		toks := seqTokens(0, tokens)
		for j := prefix; j < tokens; j++ {
			toks[j] = int32(1_000_000 + i*tokens + j) // private suffix
		}
		s, hit := add(t, p, k, toks)
		if i == 0 {
			require.Zero(t, hit)
		} else {
			require.Equal(t, shared*bs, hit)
		}
		ids = append(ids, s)
	}
	require.Equal(t, shared+seqs*private, p.Referenced())
	require.Equal(t, seqs*perSeq, p.SumBlocks(ids))
	require.Equal(t, shared+seqs*private, p.DistinctBlocks(ids))
	require.Equal(t, (seqs-1)*shared, p.SumBlocks(ids)-p.DistinctBlocks(ids), "sharing saves shared blocks per extra sequence")
	require.Equal(t, 2*perSeq, p.SumBlocks([]SeqID{ids[0], ids[0], InvalidSeq, ids[1]})-perSeq)
	require.Equal(t, shared+2*private, p.DistinctBlocks([]SeqID{ids[0], ids[0], ids[1]}))
	release(t, p, ids...)
	require.Zero(t, p.Referenced())
	require.Equal(t, 8192, p.Available())
}

func TestInvalidHandles(t *testing.T) {
	p := newPool(t, Config{NumBlocks: 8, BlockSize: 4})
	dead := p.NewSeq(Keys{})
	require.NoError(t, p.Append(dead, seqTokens(0, 5)))
	p.Release(dead)
	reused := p.NewSeq(Keys{}) // takes dead's entry with a new generation
	require.NotEqual(t, dead, reused)
	require.Equal(t, int32(dead)&seqEntryMask, int32(reused)&seqEntryMask)
	require.NoError(t, p.Check())
	handles := []struct {
		name    string
		s       SeqID
		wantErr string
	}{
		{"released", dead, "was released"},
		{"out of range", SeqID(1000), "out of range"},
		{"negative", InvalidSeq, "negative"},
	}
	for _, h := range handles {
		t.Run(h.name, func(t *testing.T) {
			ops := map[string]error{
				"Append": p.Append(h.s, seqTokens(0, 3)),
			}
			_, ops["MatchPrefix"] = p.MatchPrefix(h.s, seqTokens(0, 9))
			_, ops["Pin"] = p.Pin(h.s)
			for op, err := range ops {
				require.ErrorIs(t, err, ErrInvalidSeq, op)
				require.ErrorContains(t, err, h.wantErr, op)
				require.ErrorContains(t, err, fmt.Sprint(int32(h.s)), op)
			}
			require.False(t, p.Valid(h.s))
			require.Nil(t, p.Blocks(h.s))
			require.Zero(t, p.Tokens(h.s))
			require.Zero(t, p.BlocksNeeded(h.s, 10))
			require.Zero(t, p.SumBlocks([]SeqID{h.s}))
			require.Zero(t, p.DistinctBlocks([]SeqID{h.s}))
			p.Release(h.s) // no-op
			require.NoError(t, p.Check())
			require.True(t, p.Valid(reused), "the entry's new owner is untouched")
		})
	}
	release(t, p, reused, reused) // double release is a no-op
	require.Zero(t, p.Referenced())
}

func TestNullBlockNeverAllocated(t *testing.T) {
	p := newPool(t, Config{NumBlocks: 5, BlockSize: 2, NullBlock: true})
	s, _ := add(t, p, Keys{}, seqTokens(0, 7))
	require.NotContains(t, p.Blocks(s), BlockID(0))
	require.Zero(t, p.Available())
	o := p.NewSeq(Keys{})
	require.ErrorIs(t, p.Append(o, []int32{1}), ErrOutOfBlocks)
	release(t, p, s, o)
}

func TestEvents(t *testing.T) {
	var events []Event
	p := newPool(t, Config{NumBlocks: 2, BlockSize: 2, OnEvent: func(e Event) { events = append(events, e) }})
	a, _ := add(t, p, Keys{}, []int32{1, 2, 3, 4})
	require.Len(t, events, 2)
	stored := events
	release(t, p, a)
	events = nil
	b, _ := add(t, p, Keys{}, []int32{9, 9, 9}) // evicts both, tail (stored[1]) first
	require.Len(t, events, 3)
	require.Equal(t, []Event{
		{Kind: EventRemoved, Block: stored[1].Block, Hash: stored[1].Hash},
		{Kind: EventStored, Block: p.Blocks(b)[0], Hash: events[1].Hash},
		{Kind: EventRemoved, Block: stored[0].Block, Hash: stored[0].Hash},
	}, events)
	require.NotEqual(t, stored[0].Hash, events[1].Hash)
	require.Equal(t, "stored", EventStored.String())
	require.Equal(t, "removed", EventRemoved.String())
	release(t, p, b)
}

// Check must notice each kind of corruption.
func TestCheckDetectsCorruption(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(p *Pool, s SeqID)
		wantErr string
	}{
		{"refcount", func(p *Pool, s SeqID) { p.ref[p.Blocks(s)[0]]++ }, "refcount"},
		{"counter", func(p *Pool, s SeqID) { p.cachedFree++ }, "counter says"},
		{"list link", func(p *Pool, s SeqID) { p.prev[p.next[p.uncachedHead()]] = 3 }, "prev"},
		{"index", func(p *Pool, s SeqID) { delete(p.index, p.hash[p.Blocks(s)[0]]) }, "maps to block"},
		{"hash", func(p *Pool, s SeqID) { p.hash[p.Blocks(s)[0]][0] ^= 1 }, "maps to block"},
		{"salt", func(p *Pool, s SeqID) {
			o := p.NewSeq(Keys{Salt: "other"})
			q, _ := p.get(o)
			b := p.Blocks(s)[0]
			p.addRef(b)
			q.blocks = append(q.blocks, b)
			q.tokens = p.bs
		}, "under key entry"},
		{"partial shared", func(p *Pool, s SeqID) {
			o := p.NewSeq(Keys{})
			q, _ := p.get(o)
			b := p.Blocks(s)[1]
			p.addRef(b)
			q.blocks = append(q.blocks, b)
			q.tokens = 1
			q.partial = append(q.partial, 5)
		}, "shared by 2 sequences"},
		{"free entry", func(p *Pool, s SeqID) { p.freeSeqs = append(p.freeSeqs, int32(s)) }, "free"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPool(t, Config{NumBlocks: 6, BlockSize: 4})
			s, _ := add(t, p, Keys{}, seqTokens(0, 6))
			tc.corrupt(p, s)
			require.ErrorContains(t, p.Check(), tc.wantErr)
		})
	}
}

// The steady state (new sequence, prefix hit, append, release) allocates nothing.
func TestSteadyStateAllocs(t *testing.T) {
	p := newPool(t, Config{NumBlocks: 512, BlockSize: 16})
	toks := seqTokens(0, 2048)
	k := Keys{Model: "m"}
	cycle := func() {
		s := p.NewSeq(k)
		hit, err := p.MatchPrefix(s, toks)
		if err == nil {
			err = p.Append(s, toks[hit:])
		}
		if err != nil {
			panic(err)
		}
		p.Release(s)
	}
	cycle()
	require.Zero(t, testing.AllocsPerRun(20, cycle))
	require.NoError(t, p.Check())
	require.Equal(t, 2048/16, p.CachedFree())
	require.False(t, errors.Is(p.Check(), ErrOutOfBlocks))
}

func TestChainHashes(t *testing.T) {
	tests := []struct {
		name    string
		bs      int
		tokens  int
		wantLen int
		wantErr string
	}{
		{"partial tail has no hash", 4, 10, 2, ""},
		{"exact blocks", 16, 64, 4, ""},
		{"too short", 16, 15, 0, ""},
		{"bad block size", 12, 24, 0, "block size 12"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := Keys{Model: "m", Salt: "s"}
			toks := seqTokens(7, tc.tokens)
			got, err := ChainHashes(k, tc.bs, toks, nil)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Len(t, got, tc.wantLen)
			var stored []Hash
			p := newPool(t, Config{NumBlocks: 8, BlockSize: tc.bs, OnEvent: func(e Event) { stored = append(stored, e.Hash) }})
			s, _ := add(t, p, k, toks)
			require.Equal(t, stored, got, "events carry the same hashes")
			other, err := ChainHashes(Keys{Model: "m", Salt: "t"}, tc.bs, toks, nil)
			require.NoError(t, err)
			for i := range other {
				require.NotEqual(t, got[i], other[i], "salt changes every hash")
			}
			release(t, p, s)
		})
	}
}
