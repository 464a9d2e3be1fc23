package kvpool

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReserveFill: slots reserved ahead of their values take their blocks at
// once, publish nothing until Fill makes a block fully known, and then hash
// exactly as appending the same tokens would.
func TestReserveFill(t *testing.T) {
	type op struct {
		append  int // Append this many tokens
		reserve int // then Reserve this many slots
		fill    int // then Fill this many of the reserved slots
	}
	tests := []struct {
		name         string
		bs           int
		ops          []op
		wantBlocks   int
		wantReserved int
		wantStored   int // blocks published
	}{
		{"reserve opens a block", 4, []op{{append: 4, reserve: 1}}, 2, 1, 1},
		{"reserve in the partial block", 4, []op{{append: 2, reserve: 1}}, 1, 1, 0},
		{"fill completes a block", 4, []op{{append: 3, reserve: 1, fill: 1}}, 1, 0, 1},
		{"token by token", 4, []op{{reserve: 1, fill: 1}, {reserve: 1, fill: 1}, {reserve: 1, fill: 1}, {reserve: 1, fill: 1}, {reserve: 1}}, 2, 1, 1},
		{"reserve spanning blocks", 4, []op{{append: 1, reserve: 9, fill: 5}}, 3, 4, 1},
		{"fill in two parts", 4, []op{{append: 1, reserve: 9, fill: 3}, {fill: 6}}, 3, 0, 2},
		{"block size 1", 1, []op{{append: 2, reserve: 3, fill: 2}}, 5, 1, 4},
		{"empty sequence", 16, []op{{reserve: 16, fill: 16}}, 1, 0, 1},
		{"zero reserve", 16, []op{{append: 3}}, 1, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var events []Event
			p := newPool(t, Config{NumBlocks: 32, BlockSize: tc.bs, OnEvent: func(e Event) { events = append(events, e) }})
			s := p.NewSeq(Keys{Model: "m"})
			known, reserved := 0, 0
			for _, o := range tc.ops {
				require.NoError(t, p.Append(s, seqTokens(known, o.append)))
				known += o.append
				before, need := len(p.Blocks(s)), p.BlocksNeeded(s, o.reserve)
				require.NoError(t, p.Reserve(s, o.reserve))
				require.NoError(t, p.Check())
				require.Equal(t, before+need, len(p.Blocks(s)), "Reserve allocates what BlocksNeeded said")
				reserved += o.reserve
				avail := p.Available()
				require.NoError(t, p.Fill(s, seqTokens(known, o.fill)))
				require.NoError(t, p.Check())
				require.Equal(t, avail, p.Available(), "Fill allocates nothing")
				known += o.fill
				reserved -= o.fill
				require.Equal(t, known, p.Tokens(s))
				require.Equal(t, reserved, p.Reserved(s))
			}
			require.Len(t, p.Blocks(s), tc.wantBlocks)
			require.Equal(t, tc.wantReserved, p.Reserved(s))
			require.Len(t, events, tc.wantStored)

			// The published hashes are those of appending the known tokens.
			want, err := ChainHashes(Keys{Model: "m"}, tc.bs, seqTokens(0, known), nil)
			require.NoError(t, err)
			require.Len(t, want, tc.wantStored)
			for i, e := range events {
				require.Equal(t, EventStored, e.Kind)
				require.Equal(t, want[i], e.Hash)
				require.Equal(t, p.Blocks(s)[i], e.Block)
			}
			// A lookup finds the published blocks only.
			q := p.NewSeq(Keys{Model: "m"})
			hit, err := p.MatchPrefix(q, seqTokens(0, known+tc.bs+1))
			require.NoError(t, err)
			require.Equal(t, tc.wantStored*tc.bs, hit)
			require.Len(t, p.Blocks(q), tc.wantStored)
			for i, b := range p.Blocks(q) {
				require.Equal(t, p.Blocks(s)[i], b)
			}
			require.NoError(t, p.Check())
			release(t, p, q, s)
			require.Zero(t, p.Referenced())
			require.Equal(t, 32, p.Available())
		})
	}
}

// TestReserveRefusals: what a sequence with reserved slots refuses, and
// Reserve's all-or-nothing errors.
func TestReserveRefusals(t *testing.T) {
	p := newPool(t, Config{NumBlocks: 3, BlockSize: 4})
	s := p.NewSeq(Keys{Model: "m"})
	require.NoError(t, p.Append(s, seqTokens(0, 3)))
	require.NoError(t, p.Reserve(s, 2)) // opens the second block
	require.Equal(t, 2, len(p.Blocks(s)))

	require.ErrorContains(t, p.Append(s, seqTokens(5, 1)), "reserved slots: Fill them first")
	require.ErrorContains(t, p.Fill(s, seqTokens(3, 3)), "Fill of 3 tokens in sequence")
	require.ErrorContains(t, p.Reserve(s, -1), "negative count")
	require.NoError(t, p.Reserve(s, 0))

	// Out of blocks and too large: nothing changes.
	var tl *TooLargeError
	require.ErrorAs(t, p.Reserve(s, 8), &tl)
	require.Equal(t, TooLargeError{Tokens: 13, PoolTokens: 12}, *tl)
	other := p.NewSeq(Keys{Model: "m"})
	require.NoError(t, p.Append(other, seqTokens(50, 1)))
	require.ErrorIs(t, p.Reserve(s, 4), ErrOutOfBlocks)
	require.Equal(t, 2, p.Reserved(s))
	require.Equal(t, 2, len(p.Blocks(s)))
	require.NoError(t, p.Check())

	// A pin takes only the full known blocks.
	pin, err := p.Pin(s)
	require.NoError(t, err)
	require.Empty(t, p.Blocks(pin))
	require.NoError(t, p.Fill(s, seqTokens(3, 2)))
	require.NoError(t, p.Check())
	require.NoError(t, p.Append(s, seqTokens(5, 1)), "Append works again once all are filled")

	// Match refuses a sequence that holds only reserved slots.
	r := p.NewSeq(Keys{Model: "m"})
	release(t, p, other)
	require.NoError(t, p.Reserve(r, 1))
	_, err = p.MatchPrefix(r, seqTokens(0, 9))
	require.ErrorContains(t, err, "1 reserved slots; it must be empty")
	var c Chain
	require.NoError(t, c.Reset(Keys{Model: "m"}, 4, seqTokens(0, 9)))
	_, err = p.MatchChain(r, &c)
	require.ErrorContains(t, err, "1 reserved slots; it must be empty")

	// Invalid handles.
	release(t, p, r)
	require.ErrorIs(t, p.Reserve(r, 1), ErrInvalidSeq)
	require.ErrorIs(t, p.Fill(r, nil), ErrInvalidSeq)
	require.Zero(t, p.Reserved(r))
	release(t, p, s, pin)
	require.Zero(t, p.Referenced())
}

// TestCheckDetectsPublishedReservedBlock: Check refuses a reserved block
// that carries a hash (its values are not known).
func TestCheckDetectsPublishedReservedBlock(t *testing.T) {
	p := newPool(t, Config{NumBlocks: 4, BlockSize: 2})
	s := p.NewSeq(Keys{Model: "m"})
	require.NoError(t, p.Append(s, seqTokens(0, 2)))
	require.NoError(t, p.Reserve(s, 2))
	b := p.Blocks(s)[1]
	q := &p.seqs[int32(s&seqEntryMask)]
	p.publish(b, Hash{1}, q.key)
	require.ErrorContains(t, p.Check(), "reserved block")
}
