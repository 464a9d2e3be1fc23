package kvpool

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// fuzzModel mirrors what a runner would store: the tokens whose KV each block
// holds, written through the block tables the pool hands out. A prefix hit
// must hand back blocks holding exactly the query's tokens under the same keys.
type fuzzModel struct {
	p     *Pool
	bs    int
	kv    [][]int32 // per block: token at each slot (-1: unwritten)
	kvKey []int     // per block: keys index the KV was computed under
	toks  map[SeqID][]int32
	// future holds the values of a sequence's reserved slots: the runner
	// writes their KV at Reserve (it has the value on the device); the pool
	// learns them at Fill.
	future map[SeqID][]int32
	keysOf map[SeqID]int
	live   []SeqID
}

var fuzzKeys = []Keys{{Model: "a"}, {Model: "a", Salt: "t1"}, {Model: "b", Salt: "t1"}}

// write records the KV of s's tokens from position from onwards.
func (m *fuzzModel) write(s SeqID, from int) {
	blocks := m.p.Blocks(s)
	for pos := from; pos < len(m.toks[s]); pos++ {
		b := blocks[pos/m.bs]
		m.kv[b][pos%m.bs] = m.toks[s][pos]
		m.kvKey[b] = m.keysOf[s]
	}
}

// verify asserts s's full blocks hold s's tokens (the KV a hit would serve).
func (m *fuzzModel) verify(t *testing.T, s SeqID) {
	blocks := m.p.Blocks(s)
	toks := m.toks[s]
	require.Len(t, blocks, (len(toks)+len(m.future[s])+m.bs-1)/m.bs)
	require.Equal(t, len(toks), m.p.Tokens(s))
	require.Equal(t, len(m.future[s]), m.p.Reserved(s))
	for pos, tok := range toks {
		b := blocks[pos/m.bs]
		require.Equal(t, tok, m.kv[b][pos%m.bs], "seq %d pos %d block %d", s, pos, b)
		require.Equal(t, m.keysOf[s], m.kvKey[b], "block %d keys", b)
	}
}

func (m *fuzzModel) pick(x byte) (SeqID, int) {
	i := int(x) % len(m.live)
	return m.live[i], i
}

func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 0, 0, 40, 0, 1, 0, 40, 1, 0, 9, 2, 0, 0, 3, 1, 0})
	f.Add([]byte{2, 0, 1, 200, 4, 0, 0, 5, 0, 2, 30, 6, 0, 1, 3, 0, 0, 0, 77})
	f.Add([]byte{3, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255, 5, 1, 2, 7, 2})
	// Reserve and fill across block boundaries, then look the prefix up again.
	f.Add([]byte{1, 0, 0, 1, 6, 7, 0, 2, 5, 8, 0, 3, 0, 7, 0, 4, 3, 1, 0, 1, 1, 8, 0, 3, 0, 8, 0, 3, 0, 0, 0, 1, 12, 2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		bs := []int{1, 2, 4, 16}[data[0]%4]
		nb := 24
		p, err := New(Config{NumBlocks: nb, BlockSize: bs, NullBlock: data[0]&4 != 0})
		require.NoError(t, err)
		m := &fuzzModel{p: p, bs: bs, kv: make([][]int32, nb), kvKey: make([]int, nb),
			toks: map[SeqID][]int32{}, future: map[SeqID][]int32{}, keysOf: map[SeqID]int{}}
		for i := range m.kv {
			m.kv[i] = make([]int32, bs)
		}
		// Token streams from a small alphabet so prefixes repeat.
		stream := func(seed byte, n int) []int32 {
			out := make([]int32, n)
			for i := range out {
				out[i] = int32((int(seed)%3)*7 + (i*int(seed%5+1))%5)
			}
			return out
		}
		data = data[1:]
		if len(data) > 4*256 {
			data = data[:4*256] // bound one input's work
		}
		for len(data) >= 4 {
			op, a, b, c := data[0]%9, data[1], data[2], data[3]
			data = data[4:]
			switch {
			case op == 0 || len(m.live) == 0: // new sequence: match prefix then append
				ki := int(a) % len(fuzzKeys)
				toks := stream(b, int(c)%(3*nb))
				peek := p.PeekPrefix(fuzzKeys[ki], toks)
				s := p.NewSeq(fuzzKeys[ki])
				hit, err := p.MatchPrefix(s, toks)
				require.NoError(t, err)
				require.Equal(t, peek, hit)
				require.Zero(t, hit%bs)
				require.True(t, hit == 0 || hit <= len(toks)-1)
				m.live = append(m.live, s)
				m.toks[s] = append([]int32(nil), toks[:hit]...)
				m.keysOf[s] = ki
				m.verify(t, s) // the hit serves exactly these tokens' KV
				if err := p.Append(s, toks[hit:]); err == nil {
					m.toks[s] = toks
					m.write(s, hit)
				} else {
					require.Equal(t, hit, p.Tokens(s), "all or nothing")
				}
			case op == 1: // append
				s, _ := m.pick(a)
				toks := stream(b, int(c)%20)
				need, avail := p.BlocksNeeded(s, len(toks)), p.Available()
				err := p.Append(s, toks)
				if err == nil {
					from := len(m.toks[s])
					m.toks[s] = append(m.toks[s], toks...)
					m.write(s, from)
				} else {
					require.True(t, need > avail || p.Fits(len(m.toks[s])+len(toks)) != nil || len(m.future[s]) > 0, "spurious %v", err)
				}
			case op == 2: // release
				s, i := m.pick(a)
				p.Release(s)
				m.live = append(m.live[:i], m.live[i+1:]...)
				delete(m.toks, s)
				delete(m.future, s)
				p.Release(s) // double release: no-op
			case op == 3 || op == 4: // pin
				s, _ := m.pick(a)
				pin, err := p.Pin(s)
				require.NoError(t, err)
				full := len(m.toks[s]) / bs * bs
				m.live = append(m.live, pin)
				m.toks[pin] = append([]int32(nil), m.toks[s][:full]...)
				m.keysOf[pin] = m.keysOf[s]
			case op == 5: // accounting
				s1, _ := m.pick(a)
				s2, _ := m.pick(b)
				set := []SeqID{s1, s2}
				require.Equal(t, len(p.Blocks(s1))+len(p.Blocks(s2)), p.SumBlocks(set))
				d := p.DistinctBlocks(set)
				require.LessOrEqual(t, d, p.SumBlocks(set))
				require.LessOrEqual(t, d, p.Referenced())
			case op == 6: // all live: distinct blocks are exactly the referenced ones
				require.Equal(t, p.Referenced(), p.DistinctBlocks(m.live))
			case op == 7: // reserve: the runner writes the future tokens' KV now
				s, _ := m.pick(a)
				toks := stream(b, int(c)%6)
				cur := len(m.toks[s]) + len(m.future[s])
				need, avail := p.BlocksNeeded(s, len(toks)), p.Available()
				before := len(p.Blocks(s))
				if err := p.Reserve(s, len(toks)); err != nil {
					require.True(t, need > avail || p.Fits(cur+len(toks)) != nil, "spurious %v", err)
					require.Len(t, p.Blocks(s), before, "all or nothing")
					break
				}
				require.Len(t, p.Blocks(s), before+need)
				blocks := p.Blocks(s)
				for i, tok := range toks {
					blk := blocks[(cur+i)/bs]
					m.kv[blk][(cur+i)%bs] = tok
					m.kvKey[blk] = m.keysOf[s]
				}
				m.future[s] = append(m.future[s], toks...)
			case op == 8: // fill: the values become known, in order
				s, _ := m.pick(a)
				n := min(int(b)%4, len(m.future[s]))
				avail := p.Available()
				require.NoError(t, p.Fill(s, m.future[s][:n]))
				require.Equal(t, avail, p.Available())
				m.toks[s] = append(m.toks[s], m.future[s][:n]...)
				m.future[s] = m.future[s][n:]
			}
			require.NoError(t, p.Check())
			for _, s := range m.live {
				m.verify(t, s)
			}
		}
		for _, s := range m.live {
			p.Release(s)
			require.NoError(t, p.Check())
		}
		require.Zero(t, p.Referenced())
		require.Equal(t, p.NumBlocks(), p.Available())
	})
}
