package step

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/sampling"
)

// groupBatch builds a decode batch (one new token per sequence) whose
// sequences have the given block tables, each table full (context =
// len·bs) so that all but the last block lie before the new token.
func groupBatch(tables [][]int32, bs int32) *Batch {
	b := &Batch{}
	for i, t := range tables {
		ctx := int32(len(t)) * bs
		b.Tokens = append(b.Tokens, 3)
		b.Positions = append(b.Positions, ctx-1)
		b.Seqs = append(b.Seqs, SeqBatch{Seat: int32(i), TokenStart: int32(i), NumTokens: 1, ContextLen: ctx, BlockTable: t})
	}
	return b
}

type gotGroup struct {
	Shared  int32
	Members []int32
}

func groupsOf(b *Batch) []gotGroup {
	var out []gotGroup
	for _, g := range b.Groups {
		out = append(out, gotGroup{g.SharedBlocks, append([]int32(nil), b.Members(g)...)})
	}
	return out
}

func TestGrouperFindsSharedRuns(t *testing.T) {
	for _, tc := range []struct {
		name   string
		min    int32
		tables [][]int32
		want   []gotGroup
	}{
		{"off", 0, [][]int32{{1, 2, 3}, {1, 2, 4}}, nil},
		{"one family", 2, [][]int32{{1, 2, 3, 9}, {1, 2, 3, 8}, {1, 2, 3, 7}}, []gotGroup{{3, []int32{0, 1, 2}}}},
		// Rows 0 and 3 are left alone by the split between 1,2 (6 shared)
		// and share 2 with each other: they form a group of their own.
		{"rows left alone group at the minimum", 2, [][]int32{
			{1, 2, 80, 90}, {1, 2, 3, 4, 5, 6, 91}, {1, 2, 3, 4, 5, 6, 92}, {1, 2, 81, 93}},
			[]gotGroup{{6, []int32{1, 2}}, {2, []int32{0, 3}}}},
		{"below the threshold", 3, [][]int32{{1, 2, 5, 9}, {1, 2, 6, 8}}, nil},
		// The last block holds the new token, so it is never shared even
		// when the ids agree (they cannot, for writable blocks, but the
		// rule does not rely on it).
		{"new token's block is private", 1, [][]int32{{1, 5}, {1, 5}}, []gotGroup{{1, []int32{0, 1}}}},
		{"two families", 2, [][]int32{{1, 2, 3, 9}, {5, 6, 7, 8}, {1, 2, 3, 4}, {5, 6, 7, 0}, {11, 12, 13}},
			[]gotGroup{{3, []int32{0, 2}}, {3, []int32{1, 3}}}},
		// Four rows share 2 blocks; pairs of them share 6 and 3. One group
		// of 4 at 2 saves 3·2 = 6 reads; the pairs save 6 + 3 = 9 > 6, so
		// the span splits.
		{"nested splits when it saves more", 2, [][]int32{
			{1, 2, 3, 4, 5, 6, 90}, {1, 2, 3, 4, 5, 6, 91}, {1, 2, 30, 31, 92}, {1, 2, 30, 40, 93}},
			[]gotGroup{{6, []int32{0, 1}}, {3, []int32{2, 3}}}},
		// Eight rows share 4 blocks; two share 6: one group of 8 saves 7·4 =
		// 28; the pair at 6 and the other six at 4 save 6 + 5·4 = 26, so the
		// whole group wins.
		{"nested stays whole when that saves more", 2, [][]int32{
			{1, 2, 3, 4, 5, 6, 90}, {1, 2, 3, 4, 5, 6, 91}, {1, 2, 3, 4, 20, 92}, {1, 2, 3, 4, 21, 93},
			{1, 2, 3, 4, 22, 94}, {1, 2, 3, 4, 23, 95}, {1, 2, 3, 4, 24, 96}, {1, 2, 3, 4, 25, 97}},
			[]gotGroup{{4, []int32{0, 1, 2, 3, 4, 5, 6, 7}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := groupBatch(tc.tables, 16)
			g := Grouper{MinBlocks: tc.min}
			g.Group(b, 16)
			require.Equal(t, tc.want, groupsOf(b))
			require.NoError(t, validateGroups(b, 16, make([]bool, len(b.Seqs))))
		})
	}
}

// TestGrouperPrefillMember: a prefill chunk shares only the blocks wholly
// before its first new token.
func TestGrouperPrefillMember(t *testing.T) {
	b := groupBatch([][]int32{{1, 2, 3, 4}, {1, 2, 3, 4}}, 16)
	// Seq 1 is a 20-token chunk ending at position 63: positions 44..63, so
	// blocks 0 and 1 (positions < 32) are wholly before it, block 2 is not.
	b.Seqs[1].NumTokens = 20
	g := Grouper{MinBlocks: 1}
	g.Group(b, 16)
	require.Equal(t, []gotGroup{{2, []int32{0, 1}}}, groupsOf(b))
}

func TestCheckGroupsRefuses(t *testing.T) {
	tables := [][]int32{{1, 2, 3, 9}, {1, 2, 3, 8}, {1, 7, 3, 7}}
	for _, tc := range []struct {
		name   string
		groups []Group
		seqs   []int32
		want   string
	}{
		{"one member", []Group{{SharedBlocks: 1, First: 0, Count: 1}}, []int32{0}, "≥ 2 members"},
		{"no blocks", []Group{{SharedBlocks: 0, First: 0, Count: 2}}, []int32{0, 1}, "shares 0 blocks"},
		{"entries out of range", []Group{{SharedBlocks: 1, First: 1, Count: 2}}, []int32{0, 1}, "members [1, 3) of 2"},
		{"member outside the batch", []Group{{SharedBlocks: 1, First: 0, Count: 2}}, []int32{0, 5}, "member 5 outside"},
		{"member twice", []Group{{SharedBlocks: 1, First: 0, Count: 2}}, []int32{1, 1}, "seq 1 is in more than one group"},
		{"member in two groups", []Group{{SharedBlocks: 1, First: 0, Count: 2}, {SharedBlocks: 1, First: 2, Count: 2}},
			[]int32{0, 1, 1, 2}, "seq 1 is in more than one group"},
		{"tables differ", []Group{{SharedBlocks: 2, First: 0, Count: 2}}, []int32{0, 2}, "seq 2 (seat 2) has block 7 at table entry 1 where seq 0 has block 2"},
		{"run reaches the new token", []Group{{SharedBlocks: 4, First: 0, Count: 2}}, []int32{0, 1}, "has 3 blocks before its first new token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := groupBatch(tables, 16)
			b.Groups, b.GroupSeqs = tc.groups, tc.seqs
			k, err := NewChecker(Capacity{Seats: 4, KVBlocks: 16, BlockSize: 16, MaxContext: 256, MaxBatchTokens: 16, Vocab: 8})
			require.NoError(t, err)
			for i := range b.Seqs {
				b.Seqs[i].Start = true
				p := sampling.DefaultParams()
				b.Seqs[i].Params = &p
			}
			require.ErrorContains(t, k.Validate(b), tc.want)
			b.Groups, b.GroupSeqs = nil, nil
			require.NoError(t, k.Validate(b), "the batch itself is valid")
		})
	}
}

// TestGrouperRandom: on random tables built from shared families, every
// found group passes the checker (members disjoint, tables agree) and no two
// ungrouped rows share MinBlocks or more blocks.
func TestGrouperRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	var g Grouper
	for iter := 0; iter < 500; iter++ {
		g.MinBlocks = int32(1 + rng.IntN(3))
		n := 1 + rng.IntN(40)
		roots := 1 + rng.IntN(4)
		next := int32(1000)
		prefixes := make([][]int32, roots)
		for r := range prefixes {
			for j := 0; j < rng.IntN(12); j++ {
				prefixes[r] = append(prefixes[r], int32(r*100+j))
			}
		}
		tables := make([][]int32, n)
		for i := range tables {
			p := prefixes[rng.IntN(roots)]
			k := rng.IntN(len(p) + 1)
			tables[i] = append(append([]int32(nil), p[:k]...), next, next+1)
			next += 2
		}
		b := groupBatch(tables, 16)
		g.Group(b, 16)
		require.NoError(t, validateGroups(b, 16, make([]bool, n)))
		in := make([]bool, n)
		for _, gr := range b.Groups {
			for _, m := range b.Members(gr) {
				in[m] = true
			}
		}
		for i := 0; i < n; i++ {
			for j := i + 1; j < n; j++ {
				if commonRun(sharable(&b.Seqs[i], 16), sharable(&b.Seqs[j], 16)) >= g.MinBlocks {
					require.True(t, in[i] || in[j], "iter %d: rows %d and %d share a run and are both left alone", iter, i, j)
				}
			}
		}
	}
}

func BenchmarkGrouper(b *testing.B) {
	// Seed 000's shape: 32 programs, 1,024 blocks each, 90% shared.
	tables := make([][]int32, 32)
	for i := range tables {
		for j := 0; j < 1024; j++ {
			id := int32(j)
			if j >= 922 {
				id = int32(10000 + i*1024 + j)
			}
			tables[i] = append(tables[i], id)
		}
	}
	batch := groupBatch(tables, 16)
	g := Grouper{MinBlocks: 2}
	b.ReportAllocs()
	for b.Loop() {
		g.Group(batch, 16)
	}
	require.Len(b, batch.Groups, 1)
}
