package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// withWindow returns seqs with every Window set to win.
func withWindow(seqs []AttnSeq, win int32) []AttnSeq {
	out := append([]AttnSeq(nil), seqs...)
	for i := range out {
		out[i].Window = win
	}
	return out
}

// TestRefAttentionWindow pins the window's meaning on a tiny case: with
// V row p = p (one head, one dim) and equal scores, the query at position
// pos averages the positions it sees, max(0, pos-win+1)..pos.
func TestRefAttentionWindow(t *testing.T) {
	const ctx = 6
	q := make([]float32, ctx)
	k, v := make([]float32, ctx), make([]float32, ctx)
	for p := range v {
		v[p] = float32(p)
	}
	for _, win := range []int{0, 1, 2, 3, 6, 9} {
		out := make([]float32, ctx)
		RefAttentionWindow(out, q, k, v, ctx, ctx, 1, 1, 1, win, 1)
		for pos := 0; pos < ctx; pos++ {
			lo := 0
			if win > 0 {
				lo = max(0, pos-win+1)
			}
			require.InDelta(t, float64(lo+pos)/2, out[pos], 1e-6, "win=%d pos=%d", win, pos)
		}
	}
}

// TestPagedAttentionWindow compares the kernels with RefPagedAttention on
// every path and KV type at windows smaller than, equal to and larger
// than the contexts: decodes, whole prefills and prefill chunks whose
// queries straddle the window's edge, over one- and multi-position blocks.
// A window shorter than a context must change the result (else the test
// could not see the mask missing).
func TestPagedAttentionWindow(t *testing.T) {
	shapes := []attnSeqShape{{1, 1}, {1, 37}, {20, 20}, {5, 70}, {1, 130}, {40, 100}, {17, 17}}
	rng := rand.New(rand.NewPCG(51, 52))
	var cases []attnCase
	for _, bs := range []int{1, 16} {
		for _, group := range []int{1, 4} {
			for _, hd := range []int{8, 64} {
				cases = append(cases, newAttnCase(t, rng, bs, 2, group, hd, shapes))
			}
		}
	}
	wins := []int32{1, 5, 16, 17, 37, 64, 130, 500}
	for _, kt := range KVTypes {
		for ci, c := range cases {
			l := kvAs(c.l, kt)
			full := make([]float32, len(c.q))
			require.NoError(t, RefPagedAttention(full, c.q, l, c.seqs, c.heads, 0.3))
			for _, win := range wins {
				seqs := withWindow(c.seqs, win)
				want := make([]float32, len(c.q))
				require.NoError(t, RefPagedAttention(want, c.q, l, seqs, c.heads, 0.3))
				if win < 130 {
					require.NotEqual(t, full, want, "window %d must change the reference", win)
				}
				tol := c.tol
				if kt != F32 {
					tol = kvTol16
				}
				t.Run(fmt.Sprintf("%v/case=%d/win=%d", kt, ci, win), func(t *testing.T) {
					forEachPath(t, func(t *testing.T, w *Workers) {
						out := make([]float32, len(c.q))
						require.NoError(t, w.PagedAttention(out, c.q, l, seqs, c.heads, 0.3))
						row := c.heads * c.l.HeadDim
						for i := range out {
							if !(math.Abs(float64(out[i]-want[i])) <= tol) {
								require.InDelta(t, want[i], out[i], tol, "%s: out[%d] (row %d)", c.name, i, i/row)
							}
						}
					})
				})
			}
		}
	}
}

// TestPagedAttentionWindowErrors checks that a negative window is refused
// with its value.
func TestPagedAttentionWindowErrors(t *testing.T) {
	w := NewWorkers(1)
	defer w.Close()
	l := newKVLayer(F32, 2, 1, 4, 8)
	seqs := []AttnSeq{{QStart: 0, NumQ: 1, ContextLen: 3, Window: -2, BlockTable: []int32{0}}}
	q, out := make([]float32, 8), make([]float32, 8)
	require.ErrorContains(t, w.PagedAttention(out, q, l, seqs, 1, 1), "seq 0 has window -2")
	require.ErrorContains(t, w.PagedAttentionGroups(out, q, l, seqs, []AttnGroup{{SharedBlocks: 0, Members: []int32{0}}}, 1, 1), "window -2")
	require.ErrorContains(t, RefPagedAttention(out, q, l, seqs, 1, 1), "window -2")
}

// TestPagedAttentionGroupsWindow checks the cascade with windows: members
// whose window covers their whole context share the run, the others take
// the plain path, and the result is RefPagedAttention's for every path and
// KV type.
func TestPagedAttentionGroupsWindow(t *testing.T) {
	const scale = 0.3
	rng := rand.New(rand.NewPCG(61, 62))
	// bs 4, 8 shared blocks (32 positions); members at contexts 33..80.
	shapes := []cascShape{
		{shared: 8, members: []attnSeqShape{{1, 40}, {1, 48}, {1, 60}, {3, 70}, {1, 41}}},
		{shared: 4, members: []attnSeqShape{{1, 20}, {2, 24}, {1, 33}}},
		{loose: true, members: []attnSeqShape{{1, 50}, {12, 30}}},
	}
	base := newCascCase(t, rng, 4, 2, 2, 16, shapes)
	// 0: none; 48: some members share, others fall back; 24: only the
	// second group's shortest shares; 80: all within.
	for _, win := range []int32{0, 24, 48, 80} {
		for _, kt := range KVTypes {
			c := base
			c.l = kvAs(base.l, kt)
			c.seqs = withWindow(base.seqs, win)
			want := make([]float32, len(c.q))
			require.NoError(t, RefPagedAttention(want, c.q, c.l, c.seqs, c.heads, scale))
			t.Run(fmt.Sprintf("win=%d/%v", win, kt), func(t *testing.T) {
				forEachPath(t, func(t *testing.T, w *Workers) {
					got := make([]float32, len(c.q))
					require.NoError(t, w.PagedAttentionGroups(got, c.q, c.l, c.seqs, c.groups, c.heads, scale))
					for i := range got {
						if !(math.Abs(float64(got[i]-want[i])) <= cascTol) {
							require.InDelta(t, want[i], got[i], cascTol, "out[%d]", i)
						}
					}
					c.check(t, w)
				})
			})
		}
	}
}

// BenchmarkPagedAttentionWindow: 8 sequences decoding at context 4096 and
// one 256-token prefill chunk ending at 4096, without a window and with
// one of 512 (blocks wholly before a task's windows are skipped, so the
// windowed cost follows the window, not the context); 12 heads (4 kv
// heads), head dim 64, blocks of 16.
func BenchmarkPagedAttentionWindow(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 5))
	const kvHeads, heads, hd, bs, ctx, nseq, chunk = 4, 12, 64, 16, 4096, 8, 256
	nb := nseq * ctx / bs
	l := &KVLayer{NumBlocks: nb, KVHeads: kvHeads, BlockSize: bs, HeadDim: hd,
		K: randFloats(rng, nb*kvHeads*bs*hd, 1), V: randFloats(rng, nb*kvHeads*bs*hd, 1)}
	perm := rng.Perm(nb)
	table := func(s int) []int32 {
		t := make([]int32, ctx/bs)
		for i := range t {
			t[i] = int32(perm[s*ctx/bs+i])
		}
		return t
	}
	decode := make([]AttnSeq, nseq)
	for s := range decode {
		decode[s] = AttnSeq{QStart: int32(s), NumQ: 1, ContextLen: ctx, BlockTable: table(s)}
	}
	prefill := []AttnSeq{{QStart: 0, NumQ: chunk, ContextLen: ctx, BlockTable: table(0)}}
	for _, c := range []struct {
		name string
		seqs []AttnSeq
		rows int
	}{{"decode8x4096", decode, nseq}, {"prefill256at4096", prefill, chunk}} {
		q, out := randFloats(rng, c.rows*heads*hd, 1), make([]float32, c.rows*heads*hd)
		for _, win := range []int32{0, 512} {
			seqs := withWindow(c.seqs, win)
			b.Run(fmt.Sprintf("%s/window=%d", c.name, win), func(b *testing.B) {
				w := NewWorkers(1)
				defer w.Close()
				best, _ := loop(b, func() error { return w.PagedAttention(out, q, l, seqs, heads, 0.125) })
				b.ReportMetric(float64(best.Nanoseconds()), "best_ns")
			})
		}
	}
}

// FuzzPagedAttentionWindow checks windowed paged attention against the
// windowed reference for arbitrary block sizes, GQA groups, head sizes,
// sequence shapes and windows (0 included), on every path.
func FuzzPagedAttentionWindow(f *testing.F) {
	f.Add(uint64(1), uint8(1), uint8(1), uint8(1), uint8(2), uint8(1), uint8(1), uint8(1))
	f.Add(uint64(2), uint8(16), uint8(2), uint8(4), uint8(64), uint8(20), uint8(40), uint8(7))
	f.Add(uint64(3), uint8(7), uint8(1), uint8(3), uint8(20), uint8(60), uint8(130), uint8(33))
	f.Fuzz(func(t *testing.T, seed uint64, bs, kvHeads, group, hd, numQ, ctx, win uint8) {
		b := int(bs)%64 + 1
		kvh := int(kvHeads)%3 + 1
		g := int(group)%8 + 1
		d := int(hd)%64 + 1
		c := int(ctx)%150 + 1
		q := int(numQ)%c + 1
		rng := rand.New(rand.NewPCG(seed, 10))
		ac := newAttnCase(t, rng, b, kvh, g, d, []attnSeqShape{{q, c}, {1, c}})
		ac.seqs = withWindow(ac.seqs, int32(win)%160)
		require.NoError(t, RefPagedAttention(ac.want, ac.q, ac.l, ac.seqs, ac.heads, 0.3))
		w := NewWorkers(2)
		defer w.Close()
		for _, p := range SupportedPaths() {
			require.NoError(t, w.SetPath(p))
			ac.check(t, w)
		}
	})
}
