package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// cascShape is one group of a cascade batch: members sharing their first
// shared blocks, or (loose) sequences listed in no group; window is every
// member's sliding window (0: none).
type cascShape struct {
	shared  int
	members []attnSeqShape
	loose   bool
	window  int
}

// cascCase is a batch of sequences, grouped, over a random paged layer.
type cascCase struct {
	name   string
	l      *KVLayer
	q      []float32
	seqs   []AttnSeq
	groups []AttnGroup
	heads  int
}

// cascTol bounds |PagedAttentionGroups − PagedAttention| per output: both
// are convex combinations of V rows with |V| ≤ 1 that differ only in the
// order of float32 sums and in the exp used (libm vs a ≤ 2 ulp polynomial),
// so 1e-5 of V's scale (≈ 80 ulp of 1) is ample; observed ≤ 1e-6.
const cascTol = 1e-5

// newCascCase lays out shapes over a shuffled block pool: each group's
// shared blocks once, then every member's own blocks. Sequences are listed
// in a random order (q rows follow that order) and so are group members.
func newCascCase(t testing.TB, rng *rand.Rand, bs, kvHeads, group, hd int, shapes []cascShape) cascCase {
	heads := kvHeads * group
	nb := 2 // spare blocks hold garbage no table reaches
	for _, sh := range shapes {
		nb += sh.shared
		for _, m := range sh.members {
			nb += ceilDiv(m.ctx, bs) - sh.shared
			require.LessOrEqual(t, sh.shared*bs, m.ctx-m.numQ, "shape: shared run past a member's first query")
		}
	}
	perm := rng.Perm(nb)
	next := 0
	take := func(n int) []int32 {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(perm[next])
			next++
		}
		return ids
	}
	type member struct {
		s      attnSeqShape
		table  []int32
		group  int
		window int
	}
	var all []member
	for gi, sh := range shapes {
		shared := take(sh.shared)
		for _, m := range sh.members {
			table := append(append([]int32{}, shared...), take(ceilDiv(m.ctx, bs)-sh.shared)...)
			g := gi
			if sh.loose {
				g = -1
			}
			all = append(all, member{m, table, g, sh.window})
		}
	}
	c := cascCase{
		name: fmt.Sprintf("block=%d/kvHeads=%d/group=%d/hd=%d", bs, kvHeads, group, hd),
		l:    &KVLayer{NumBlocks: nb, KVHeads: kvHeads, BlockSize: bs, HeadDim: hd}, heads: heads,
		seqs: make([]AttnSeq, len(all)),
	}
	n := nb * kvHeads * bs * hd
	c.l.K, c.l.V = randFloats(rng, n, 1), randFloats(rng, n, 1)
	members := make([][]int32, len(shapes))
	rows := 0
	for i, k := range rng.Perm(len(all)) {
		m := all[k]
		c.seqs[i] = AttnSeq{QStart: int32(rows), NumQ: int32(m.s.numQ), ContextLen: int32(m.s.ctx), BlockTable: m.table,
			Window: int32(m.window)}
		rows += m.s.numQ
		if m.group >= 0 {
			members[m.group] = append(members[m.group], int32(i))
		}
	}
	for gi, sh := range shapes {
		if sh.loose {
			continue
		}
		ms := members[gi]
		rng.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
		c.groups = append(c.groups, AttnGroup{SharedBlocks: int32(sh.shared), Members: ms})
	}
	c.q = randFloats(rng, rows*heads*hd, 1)
	return c
}

// check compares PagedAttentionGroups with PagedAttention on w's path;
// rows no sequence covers must be left untouched by both.
func (c cascCase) check(t testing.TB, w *Workers) {
	const scale = 0.3
	want, got := make([]float32, len(c.q)), make([]float32, len(c.q))
	for i := range want {
		want[i], got[i] = 7, 7
	}
	require.NoError(t, w.PagedAttention(want, c.q, c.l, c.seqs, c.heads, scale))
	require.NoError(t, w.PagedAttentionGroups(got, c.q, c.l, c.seqs, c.groups, c.heads, scale))
	row := c.heads * c.l.HeadDim
	for i := range got {
		if !(math.Abs(float64(got[i]-want[i])) <= cascTol) {
			require.InDelta(t, want[i], got[i], cascTol, "%s (%v cache) on %v: out[%d] (q row %d, head %d)",
				c.name, c.l.Type, w.Path(), i, i/row, i%row/c.l.HeadDim)
		}
	}
}

// decodes returns n decode members at context ctx.
func decodes(n, ctx int) []attnSeqShape {
	s := make([]attnSeqShape, n)
	for i := range s {
		s[i] = attnSeqShape{1, ctx}
	}
	return s
}

// randCascShapes draws up to maxGroups groups of 1..maxMembers members
// (mostly decodes, some prefill chunks) sharing 0..all their eligible
// blocks, and a few loose sequences.
func randCascShapes(rng *rand.Rand, bs, maxGroups, maxMembers, maxCtx int) []cascShape {
	seq := func(minFirst int) attnSeqShape {
		numQ := 1
		if rng.IntN(3) == 0 {
			numQ = 1 + rng.IntN(40)
		}
		first := minFirst + rng.IntN(max(1, maxCtx-minFirst))
		return attnSeqShape{numQ, first + numQ}
	}
	var shapes []cascShape
	for g := rng.IntN(maxGroups + 1); g > 0; g-- {
		lead := seq(0)
		eligible := (lead.ctx - lead.numQ) / bs
		sh := cascShape{shared: rng.IntN(eligible + 1), members: []attnSeqShape{lead}}
		if rng.IntN(3) == 0 {
			sh.shared = eligible
		}
		for n := rng.IntN(maxMembers); n > 0; n-- {
			sh.members = append(sh.members, seq(sh.shared*bs))
		}
		shapes = append(shapes, sh)
	}
	loose := cascShape{loose: true}
	for n := rng.IntN(3); n > 0; n-- {
		loose.members = append(loose.members, seq(0))
	}
	return append(shapes, loose)
}

func TestPagedAttentionGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	type row struct {
		bs, kvHeads, group, hd int
		shapes                 []cascShape
	}
	rows := map[string]row{
		"one member":        {16, 2, 1, 8, []cascShape{{shared: 2, members: decodes(1, 40)}}},
		"shared 0":          {16, 2, 2, 8, []cascShape{{shared: 0, members: decodes(4, 50)}}},
		"all eligible":      {16, 2, 1, 64, []cascShape{{shared: 3, members: decodes(2, 49)}}},
		"64 decodes":        {16, 2, 1, 64, []cascShape{{shared: 5, members: decodes(64, 97)}}},
		"gqa2 hd128":        {32, 2, 2, 128, []cascShape{{shared: 3, members: decodes(9, 120)}}},
		"gqa4 hd128":        {32, 2, 4, 128, []cascShape{{shared: 2, members: decodes(5, 70)}}},
		"gqa8 hd8":          {16, 1, 8, 8, []cascShape{{shared: 4, members: decodes(7, 80)}}},
		"gqa8 hd128":        {32, 1, 8, 128, []cascShape{{shared: 2, members: decodes(6, 75)}}},
		"long run, chunked": {16, 1, 1, 64, []cascShape{{shared: 40, members: decodes(3, 650)}}},
		"prefill members": {16, 2, 2, 64, []cascShape{{shared: 3, members: []attnSeqShape{
			{20, 68}, {1, 49}, {37, 100}, {16, 64}}}}},
		"no queries": {16, 2, 1, 8, []cascShape{{shared: 2, members: []attnSeqShape{{0, 40}, {1, 33}, {0, 32}}}}},
		// At the window's edge: a context the window covers takes the
		// shared pass; one position more and the shared run's first
		// position falls out of the last query's window.
		"window = context":   {16, 2, 2, 8, []cascShape{{shared: 2, window: 40, members: decodes(3, 40)}}},
		"window = context-1": {16, 2, 2, 8, []cascShape{{shared: 2, window: 39, members: decodes(3, 40)}}},
		"window at the edge, prefill members": {16, 2, 2, 64, []cascShape{{shared: 2, window: 64, members: []attnSeqShape{
			{16, 64}, {1, 64}, {1, 65}, {20, 65}}}}},
		"several groups and loose": {32, 2, 4, 64, []cascShape{
			{shared: 2, members: decodes(3, 90)},
			{shared: 1, members: []attnSeqShape{{5, 50}, {1, 33}}},
			{shared: 0, members: decodes(2, 20)},
			{shared: 3, members: decodes(1, 100)},
			{loose: true, members: []attnSeqShape{{1, 1}, {30, 30}, {1, 77}}},
		}},
	}
	var cases []cascCase
	for name, r := range rows {
		c := newCascCase(t, rng, r.bs, r.kvHeads, r.group, r.hd, r.shapes)
		c.name = name + "/" + c.name
		cases = append(cases, c)
	}
	// And a sweep of random batches over the shapes the model runs.
	for i := 0; i < 24; i++ {
		bs := []int{16, 32}[i%2]
		group := []int{1, 2, 4, 8}[i/2%4]
		hd := []int{8, 64, 128}[i%3]
		c := newCascCase(t, rng, bs, 1+i%2, group, hd, randCascShapes(rng, bs, 3, 12, 150))
		c.name = fmt.Sprintf("random %d/%s", i, c.name)
		cases = append(cases, c)
	}
	// Every case on every cache type: the 16-bit layers are the same
	// values rounded, and cascade must still equal plain attention.
	for _, kt := range KVTypes {
		typed := make([]cascCase, len(cases))
		for i, c := range cases {
			typed[i] = c
			typed[i].l = kvAs(c.l, kt)
		}
		t.Run(kt.String(), func(t *testing.T) {
			forEachPath(t, func(t *testing.T, w *Workers) {
				for _, c := range typed {
					c.check(t, w)
				}
			})
		})
	}
}

// TestPagedAttentionGroupsNil checks that no groups is PagedAttention to the
// bit.
func TestPagedAttentionGroupsNil(t *testing.T) {
	c := newCascCase(t, rand.New(rand.NewPCG(23, 24)), 16, 2, 2, 64, []cascShape{{loose: true, members: decodes(5, 70)}})
	forEachPath(t, func(t *testing.T, w *Workers) {
		want, got := make([]float32, len(c.q)), make([]float32, len(c.q))
		require.NoError(t, w.PagedAttention(want, c.q, c.l, c.seqs, c.heads, 0.3))
		for _, groups := range [][]AttnGroup{nil, {}} {
			require.NoError(t, w.PagedAttentionGroups(got, c.q, c.l, c.seqs, groups, c.heads, 0.3))
			require.Equal(t, want, got)
		}
	})
}

func TestPagedAttentionGroupsErrors(t *testing.T) {
	w := NewWorkers(1)
	defer w.Close()
	l := &KVLayer{NumBlocks: 6, KVHeads: 1, BlockSize: 4, HeadDim: 8, K: make([]float32, 192), V: make([]float32, 192)}
	q := make([]float32, 5*2*8)
	seqs := []AttnSeq{
		{QStart: 0, NumQ: 1, ContextLen: 9, BlockTable: []int32{0, 1, 2}},
		{QStart: 1, NumQ: 1, ContextLen: 9, BlockTable: []int32{0, 1, 3}},
		{QStart: 2, NumQ: 2, ContextLen: 9, BlockTable: []int32{0, 4, 5}},
		{QStart: 3, NumQ: 0, ContextLen: 1, BlockTable: []int32{0}},
		{QStart: 4, NumQ: 1, ContextLen: 9, BlockTable: []int32{0, 4, 5}},
	}
	cases := []struct {
		name   string
		groups []AttnGroup
		heads  int
		want   string
	}{
		{"negative shared", []AttnGroup{{SharedBlocks: -1, Members: []int32{0, 1}}}, 2,
			"group 0 has SharedBlocks -1, want ≥ 0"},
		{"member past the seqs", []AttnGroup{{SharedBlocks: 1, Members: []int32{0, 5}}}, 2,
			"group 0 member 1 is seq 5, outside the 5 seqs"},
		{"negative member", []AttnGroup{{SharedBlocks: 1, Members: []int32{-2}}}, 2,
			"group 0 member 0 is seq -2, outside the 5 seqs"},
		{"twice in a group", []AttnGroup{{SharedBlocks: 1, Members: []int32{0, 1, 0}}}, 2,
			"group 0 member 2 is seq 0, already member 0 of group 0"},
		{"in two groups", []AttnGroup{{SharedBlocks: 1, Members: []int32{0, 1}}, {SharedBlocks: 0, Members: []int32{2, 1}}}, 2,
			"group 1 member 1 is seq 1, already member 1 of group 0"},
		{"tables differ", []AttnGroup{{SharedBlocks: 2, Members: []int32{1, 0, 4}}}, 2,
			"group 0 member 2 (seq 4) has block 4 at table entry 1 where member 0 (seq 1) has block 1"},
		{"run past first query", []AttnGroup{{SharedBlocks: 2, Members: []int32{0, 3}}}, 2,
			"group 0 member 1 (seq 3): 2 shared blocks are 8 positions, past its first query at position 1"},
		{"run past a prefill's first query", []AttnGroup{{SharedBlocks: 2, Members: []int32{0, 1}}, {SharedBlocks: 2, Members: []int32{2}}}, 2,
			"group 1 member 0 (seq 2): 2 shared blocks are 8 positions, past its first query at position 7"},
		{"attention arguments", []AttnGroup{{SharedBlocks: 1, Members: []int32{0, 1}}}, 0,
			"heads=0 is not a positive multiple"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := make([]float32, len(q))
			require.ErrorContains(t, w.PagedAttentionGroups(out, q, l, seqs, c.groups, c.heads, 1), c.want)
		})
	}
	// A valid call after the errors: validation leaves no stale state.
	out := make([]float32, len(q))
	require.NoError(t, w.PagedAttentionGroups(out, q, l, seqs, []AttnGroup{{SharedBlocks: 2, Members: []int32{1, 0}}}, 2, 1))
	w.Close()
	require.ErrorIs(t, w.PagedAttentionGroups(out, q, l, seqs, []AttnGroup{{SharedBlocks: 2, Members: []int32{1, 0}}}, 2, 1), ErrClosed)
}

// TestPagedAttentionGroupsNoAllocs checks steady-state calls reuse the
// pool's plan and state buffers.
func TestPagedAttentionGroupsNoAllocs(t *testing.T) {
	c := newCascCase(t, rand.New(rand.NewPCG(25, 26)), 16, 2, 2, 64, []cascShape{
		{shared: 3, members: append(decodes(4, 70), attnSeqShape{20, 90})},
		{loose: true, members: decodes(2, 30)},
	})
	out := make([]float32, len(c.q))
	for _, n := range []int{1, 2} {
		w := NewWorkers(n)
		op := func() { _ = w.PagedAttentionGroups(out, c.q, c.l, c.seqs, c.groups, c.heads, 0.3) }
		op() // grow the plan and the scratch
		require.Zero(t, testing.AllocsPerRun(20, op), "workers=%d", n)
		w.Close()
	}
}

// TestPagedAttentionGroupsConcurrent runs grouped calls from several
// goroutines on one pool (run with -race).
func TestPagedAttentionGroupsConcurrent(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	cs := []cascCase{
		newCascCase(t, rng, 16, 1, 1, 64, []cascShape{{shared: 8, members: decodes(3, 140)}}),
		newCascCase(t, rng, 32, 2, 4, 8, []cascShape{{shared: 2, members: []attnSeqShape{{3, 70}, {1, 65}}}}),
	}
	w := NewWorkers(3)
	defer w.Close()
	done := make(chan struct{})
	for g := 0; g < 4; g++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 3; i++ {
				cs[(g+i)%2].check(t, w)
			}
		}()
	}
	for g := 0; g < 4; g++ {
		<-done
	}
}

// FuzzPagedAttentionGroups checks PagedAttentionGroups against
// PagedAttention for batches derived from the input: block size, kv heads,
// GQA group, head size, worker count and (from the seed) the groups.
func FuzzPagedAttentionGroups(f *testing.F) {
	f.Add(uint64(1), uint8(15), uint8(0), uint8(0), uint8(63), uint8(1))
	f.Add(uint64(2), uint8(31), uint8(1), uint8(3), uint8(127), uint8(2))
	f.Add(uint64(3), uint8(0), uint8(2), uint8(7), uint8(0), uint8(0))
	f.Add(uint64(4), uint8(6), uint8(0), uint8(2), uint8(19), uint8(3))
	f.Fuzz(func(t *testing.T, seed uint64, bs, kvHeads, group, hd, workers uint8) {
		rng := rand.New(rand.NewPCG(seed, 11))
		b := int(bs)%64 + 1
		c := newCascCase(t, rng, b, int(kvHeads)%3+1, int(group)%8+1, int(hd)%130+1,
			randCascShapes(rng, b, 3, 10, 200))
		w := NewWorkers(int(workers)%4 + 1)
		defer w.Close()
		for _, p := range SupportedPaths() {
			require.NoError(t, w.SetPath(p))
			c.check(t, w)
		}
	})
}
