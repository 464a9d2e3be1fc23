package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// A thread-level Go emulation of the cascade decode path of attention.cu:
// ts_paged_decode_* with per-row start blocks, ts_cascade_shared_* and
// ts_decode_combine. Like prefill_emu_test.go it transliterates the CUDA
// code: each thread block in turn, its phases between __syncthreads as loops
// over thread ids (or warps and lanes, with the butterfly of ts_warp_sum),
// shared memory as slices with the kernel's strides, registers as per-thread
// arrays, and the partial slots written exactly where the kernels write
// them, so a slot written twice, never, or at the wrong index shows up here.
// The cache is float32 (_f32) or bf16 bits (_bf16) read through ts_load.
// Results are compared with the CPU reference RefPagedAttention, which
// shares nothing with it.

// at is ts_load of element off.
func (c emuCache) at(off int) float32 {
	if c.bf16 != nil {
		return BF16ToF32(c.bf16[off])
	}
	return c.f32[off]
}

// emuWarpSum is ts_warp_sum: the xor butterfly over 32 lanes.
func emuWarpSum(v [32]float32) [32]float32 {
	for o := 16; o > 0; o >>= 1 {
		v = emuAdd(v, emuShflXor(v, o))
	}
	return v
}

func emuExp(x float32) float32 { return float32(math.Exp(float64(x))) }

// emuDecodeArgs are the parameters of ts_paged_decode_*, ts_cascade_shared_*
// and ts_decode_combine.
type emuDecodeArgs struct {
	oPart, mlPart, q   []float32
	Kc, Vc             emuCache
	tables             []int32
	maxBlocks          int
	ctxLens            []int32
	startBlocks        []int32 // nil: the null pointer
	tiles, numTiles    []int32
	cascRows           []int32
	slots              int
	heads, kvh, bs, hd int
	scale              float32
	window             int // ts_paged_decode_*'s window (0: none)
}

// emuDecode runs the grid (kvh, batch, nsplit) of ts_paged_decode_*.
func emuDecode(a *emuDecodeArgs, batch, nsplit int) {
	for b := 0; b < batch; b++ {
		for kv := 0; kv < a.kvh; kv++ {
			for split := 0; split < nsplit; split++ {
				emuDecodeBlock(a, kv, b, split, nsplit)
			}
		}
	}
}

func emuDecodeBlock(a *emuDecodeArgs, kv, b, split, nsplit int) {
	const threads, nwarps = cudaDecodeThreads, cudaDecodeThreads / 32
	inf := float32(math.Inf(1))
	hd, bs := a.hd, a.bs
	group := a.heads / a.kvh
	ctx := max(int(a.ctxLens[b]), 0)
	rowBlocks := min(ceilDiv(ctx, bs), a.maxBlocks)
	member := 0
	if a.startBlocks != nil {
		member = min(max(int(a.startBlocks[b]), 0), rowBlocks)
	}
	lo := 0
	if a.window > 0 {
		lo = max(ctx-a.window, 0)
	}
	first := max(member, min(lo/bs, rowBlocks))
	tail := rowBlocks - first
	perSplit := ceilDiv(tail, nsplit)
	off0 := min(tail, split*perSplit)
	blk0 := first + off0
	nblk := min(tail, off0+perSplit) - off0
	start := blk0 * bs
	end := min(ctx, (blk0+nblk)*bs)

	qS := make([]float32, group*hd)
	sc := make([]float32, group*bs)
	mS, lS, aS := make([]float32, group), make([]float32, group), make([]float32, group)
	pages := make([]int32, nblk)
	for tid := 0; tid < threads; tid++ {
		for i := tid; i < group*hd; i += threads {
			qS[i] = a.q[b*a.heads*hd+kv*group*hd+i] * a.scale
		}
		for i := tid; i < nblk; i += threads {
			pages[i] = a.tables[b*a.maxBlocks+blk0+i]
		}
		if tid < group {
			mS[tid], lS[tid] = -inf, 0
		}
	}
	var acc [threads][cudaMaxGroup][2]float32
	for pi := 0; pi < nblk; pi++ {
		p0 := start + pi*bs
		base := (int(pages[pi])*a.kvh + kv) * bs * hd
		for warp := 0; warp < nwarps; warp++ {
			for t := warp; t < bs; t += nwarps {
				valid := p0+t < end && p0+t >= lo
				var kr [32][cudaMaxHeadDim / 32]float32
				for lane := 0; lane < 32; lane++ {
					for j := 0; j < cudaMaxHeadDim/32; j++ {
						if d := lane + 32*j; valid && d < hd {
							kr[lane][j] = a.Kc.at(base + t*hd + d)
						}
					}
				}
				for g := 0; g < group; g++ {
					var part [32]float32
					for lane := 0; lane < 32; lane++ {
						for j := 0; j < cudaMaxHeadDim/32; j++ {
							if d := lane + 32*j; d < hd {
								part[lane] += kr[lane][j] * qS[g*hd+d]
							}
						}
					}
					s := emuWarpSum(part)[0]
					if !valid {
						s = -inf
					}
					sc[g*bs+t] = s
				}
			}
		}
		for tid := 0; tid < group; tid++ {
			s := sc[tid*bs : (tid+1)*bs]
			mp := -inf
			for _, x := range s {
				mp = max32(mp, x)
			}
			mo := mS[tid]
			mn := max32(mo, mp)
			var al float32
			if mo != -inf {
				al = emuExp(mo - mn)
			}
			var sum float32
			for t := range s {
				p := float32(0)
				if s[t] != -inf {
					p = emuExp(s[t] - mn)
				}
				s[t] = p
				sum += p
			}
			mS[tid], lS[tid], aS[tid] = mn, lS[tid]*al+sum, al
		}
		ntok := min(bs, end-p0)
		for tid := 0; tid < threads; tid++ {
			for g := 0; g < group; g++ {
				acc[tid][g][0] *= aS[g]
				acc[tid][g][1] *= aS[g]
			}
			for t := 0; t < ntok; t++ {
				vr := base + t*hd
				var v0, v1 float32
				if tid < hd {
					v0 = a.Vc.at(vr + tid)
				}
				if tid+threads < hd {
					v1 = a.Vc.at(vr + tid + threads)
				}
				for g := 0; g < group; g++ {
					p := sc[g*bs+t]
					acc[tid][g][0] += p * v0
					acc[tid][g][1] += p * v1
				}
			}
		}
	}
	for tid := 0; tid < threads; tid++ {
		for g := 0; g < group; g++ {
			h := kv*group + g
			row := (b*a.heads+h)*a.slots + split
			if tid < hd {
				a.oPart[row*hd+tid] = acc[tid][g][0]
			}
			if tid+threads < hd {
				a.oPart[row*hd+tid+threads] = acc[tid][g][1]
			}
			if tid == 0 {
				a.mlPart[row*2], a.mlPart[row*2+1] = mS[g], lS[g]
			}
		}
		if split == 0 && member == 0 {
			for g := 0; g < group; g++ {
				row0 := (b*a.heads + kv*group + g) * a.slots
				for sl := nsplit; sl < a.slots; sl++ {
					for d := tid; d < hd; d += threads {
						a.oPart[(row0+sl)*hd+d] = 0
					}
					if tid == 0 {
						a.mlPart[(row0+sl)*2], a.mlPart[(row0+sl)*2+1] = -inf, 0
					}
				}
			}
		}
	}
}

// emuCascade runs the grid (maxTiles, kvh, nshared) of ts_cascade_shared_*.
func emuCascade(a *emuDecodeArgs, maxTiles, nshared int) {
	for tile := 0; tile < maxTiles; tile++ {
		for kv := 0; kv < a.kvh; kv++ {
			for split := 0; split < nshared; split++ {
				emuCascadeBlock(a, tile, kv, split, nshared)
			}
		}
	}
}

func emuCascadeBlock(a *emuDecodeArgs, tile, kv, split, nshared int) {
	const threads, rows, keys, nacc = cudaCascadeThreads, cudaCascadeRows, cudaCascadeKeys, cudaCascadeRows * cudaMaxHeadDim / cudaCascadeThreads
	inf := float32(math.Inf(1))
	if tile >= int(a.numTiles[0]) {
		return
	}
	hd, bs := a.hd, a.bs
	first, count, shared := int(a.tiles[tile*3]), int(a.tiles[tile*3+1]), int(a.tiles[tile*3+2])
	qpk := a.heads / a.kvh
	nrows := min(count*qpk, rows)
	per := ceilDiv(shared, nshared)
	start := min(shared, split*per) * bs
	end := min(shared, split*per+per) * bs
	table := a.tables[int(a.cascRows[first])*a.maxBlocks:]
	qs := hd + 1

	smem := make([]float32, cascadeSmem(hd)/4)
	qS := smem[:rows*qs]
	kS := smem[rows*qs : rows*qs+keys*qs]
	vS := smem[rows*qs+keys*qs : rows*qs+keys*qs+keys*hd]
	sc := smem[rows*qs+keys*qs+keys*hd : rows*qs+keys*qs+keys*hd+rows*keys]
	mlS := smem[rows*qs+keys*qs+keys*hd+rows*keys:]
	mS, lS, aS := mlS[:rows], mlS[rows:2*rows], mlS[2*rows:3*rows]

	for tid := 0; tid < threads; tid++ {
		for i := tid; i < rows*hd; i += threads {
			r, d := i/hd, i%hd
			var v float32
			if r < nrows {
				b := int(a.cascRows[first+r/qpk])
				v = a.q[b*a.heads*hd+(kv*qpk+r%qpk)*hd+d] * a.scale
			}
			qS[r*qs+d] = v
		}
		if tid < rows {
			mS[tid], lS[tid] = -inf, 0
		}
	}
	var acc [threads][nacc]float32
	for p0 := start; p0 < end; p0 += keys {
		n := min(keys, end-p0)
		for tid := 0; tid < threads; tid++ {
			for i := tid; i < keys*hd; i += threads {
				t, d := i/hd, i%hd
				var kx, vx float32
				if t < n {
					p := p0 + t
					off := ((int(table[p/bs])*a.kvh+kv)*bs+p%bs)*hd + d
					kx, vx = a.Kc.at(off), a.Vc.at(off)
				}
				kS[t*qs+d], vS[t*hd+d] = kx, vx
			}
		}
		for tid := 0; tid < threads; tid++ {
			for i := tid; i < rows*keys; i += threads {
				r, t := i/keys, i%keys
				s := -inf
				if t < n {
					s = 0
					for d := 0; d < hd; d++ {
						s += qS[r*qs+d] * kS[t*qs+d]
					}
				}
				sc[i] = s
			}
		}
		for tid := 0; tid < rows; tid++ {
			s := sc[tid*keys : (tid+1)*keys]
			mp := -inf
			for t := 0; t < n; t++ {
				mp = max32(mp, s[t])
			}
			mo := mS[tid]
			mn := max32(mo, mp)
			var al float32
			if mo != -inf {
				al = emuExp(mo - mn)
			}
			var sum float32
			for t := 0; t < n; t++ {
				p := emuExp(s[t] - mn)
				s[t] = p
				sum += p
			}
			mS[tid], lS[tid], aS[tid] = mn, lS[tid]*al+sum, al
		}
		for tid := 0; tid < threads; tid++ {
			for i := 0; i < nacc; i++ {
				if j := tid + threads*i; j < rows*hd {
					r, d := j/hd, j%hd
					x := acc[tid][i] * aS[r]
					for t := 0; t < n; t++ {
						x += sc[r*keys+t] * vS[t*hd+d]
					}
					acc[tid][i] = x
				}
			}
		}
	}
	slot := a.slots - nshared + split
	for tid := 0; tid < threads; tid++ {
		for i := 0; i < nacc; i++ {
			j := tid + threads*i
			r, d := j/hd, j%hd
			if j < rows*hd && r < nrows {
				b := int(a.cascRows[first+r/qpk])
				row := (b*a.heads+kv*qpk+r%qpk)*a.slots + slot
				a.oPart[row*hd+d] = acc[tid][i]
			}
		}
		if tid < nrows {
			b := int(a.cascRows[first+tid/qpk])
			row := (b*a.heads+kv*qpk+tid%qpk)*a.slots + slot
			a.mlPart[row*2], a.mlPart[row*2+1] = mS[tid], lS[tid]
		}
	}
}

// emuCombine is ts_decode_combine over the grid (heads, batch).
func emuCombine(out, oPart, mlPart []float32, batch, heads, hd, nsplit int) {
	inf := float32(math.Inf(1))
	for b := 0; b < batch; b++ {
		for h := 0; h < heads; h++ {
			row0 := (b*heads + h) * nsplit
			M := -inf
			for s := 0; s < nsplit; s++ {
				M = max32(M, mlPart[(row0+s)*2])
			}
			var L float32
			for s := 0; s < nsplit; s++ {
				if m := mlPart[(row0+s)*2]; m != -inf {
					L += emuExp(m-M) * mlPart[(row0+s)*2+1]
				}
			}
			o := out[(b*heads+h)*hd : (b*heads+h+1)*hd]
			for d := range o {
				var acc float32
				for s := 0; s < nsplit; s++ {
					if m := mlPart[(row0+s)*2]; m != -inf {
						acc += emuExp(m-M) * oPart[(row0+s)*hd+d]
					}
				}
				o[d] = 0
				if L > 0 {
					o[d] = acc / L
				}
			}
		}
	}
}

// ---- the tests ----

// emuCascadeGroup is one group of a test batch: size members sharing shared
// blocks; shared 0 gives plain rows with nothing in common.
type emuCascadeGroup struct{ size, shared int }

type emuCascadeCase struct {
	groups          []emuCascadeGroup
	loose, padding  int // rows outside every group; padding rows (context 0)
	hd, qpk, kvh    int
	bs              int
	splits, cSplits int
	bf16            bool
	window          int // sliding window (0: none)
}

func (c emuCascadeCase) String() string {
	kv := "f32"
	if c.bf16 {
		kv = "bf16"
	}
	return fmt.Sprintf("groups=%v/loose=%d/pad=%d/hd=%d/qpk=%d/kvh=%d/bs=%d/splits=%d+%d/%s/window=%d",
		c.groups, c.loose, c.padding, c.hd, c.qpk, c.kvh, c.bs, c.splits, c.cSplits, kv, c.window)
}

// emuCascadeBatch is a random decode batch for a case: rows in shuffled
// order, every group's members with the same first `shared` table entries
// and private tails of 1 to 40 positions after them, loose rows of 1 to 200
// positions, padding rows; block ids shuffled over the cache.
type emuCascadeBatch struct {
	ctx, start       []int32 // per row
	tables           []int32 // [rows][maxBlocks]
	maxBlocks        int
	members          [][]int32 // per group, batch rows (in the order tiles take them)
	shared           []int32
	layer            *KVLayer
	kc, vc           emuCache
	q                []float32
	heads, numBlocks int
	window           int
}

func newEmuCascadeBatch(r *rand.Rand, tc emuCascadeCase) *emuCascadeBatch {
	bs := tc.bs
	rows := tc.loose + tc.padding
	for _, g := range tc.groups {
		rows += g.size
	}
	order := r.Perm(rows)
	type rowSpec struct{ group, ctx int }
	specs := make([]rowSpec, rows)
	eb := &emuCascadeBatch{ctx: make([]int32, rows), start: make([]int32, rows), heads: tc.qpk * tc.kvh, window: tc.window}
	next := 0
	for gi, g := range tc.groups {
		var m []int32
		for i := 0; i < g.size; i++ {
			row := order[next]
			next++
			specs[row] = rowSpec{group: gi, ctx: g.shared*bs + 1 + r.IntN(40)}
			m = append(m, int32(row))
		}
		eb.members = append(eb.members, m)
		eb.shared = append(eb.shared, int32(g.shared))
	}
	for i := 0; i < tc.loose+tc.padding; i++ {
		row := order[next]
		next++
		specs[row] = rowSpec{group: -1}
		if i < tc.loose {
			specs[row].ctx = 1 + r.IntN(200)
		}
	}
	eb.maxBlocks = 1
	for _, s := range specs {
		eb.maxBlocks = max(eb.maxBlocks, ceilDiv(s.ctx, bs))
	}
	// Blocks: each group's run once, then every row's own blocks.
	need := 1
	for _, g := range tc.groups {
		need += g.shared
	}
	for _, s := range specs {
		need += ceilDiv(s.ctx, bs)
		if s.group >= 0 {
			need -= tc.groups[s.group].shared
		}
	}
	eb.numBlocks = need
	perm := r.Perm(need)
	nextBlk := 0
	take := func() int32 { b := perm[nextBlk]; nextBlk++; return int32(b) }
	runs := make([][]int32, len(tc.groups))
	for gi, g := range tc.groups {
		for i := 0; i < g.shared; i++ {
			runs[gi] = append(runs[gi], take())
		}
	}
	eb.tables = make([]int32, rows*eb.maxBlocks)
	for row, s := range specs {
		eb.ctx[row] = int32(s.ctx)
		tab := eb.tables[row*eb.maxBlocks : (row+1)*eb.maxBlocks]
		col := 0
		if s.group >= 0 {
			col = copy(tab, runs[s.group])
			eb.start[row] = int32(tc.groups[s.group].shared)
		}
		for ; col < ceilDiv(s.ctx, bs); col++ {
			tab[col] = take()
		}
		for ; col < eb.maxBlocks; col++ {
			tab[col] = int32(need) // past the cache: a read would be caught
		}
	}
	n := need * tc.kvh * bs * tc.hd
	eb.layer = &KVLayer{K: make([]float32, n), V: make([]float32, n), NumBlocks: need, KVHeads: tc.kvh, BlockSize: bs, HeadDim: tc.hd}
	for i := range eb.layer.K {
		eb.layer.K[i], eb.layer.V[i] = 2*r.Float32()-1, 2*r.Float32()-1
	}
	if tc.bf16 { // the cache holds bf16; the reference sees those values
		eb.kc.bf16, eb.vc.bf16 = make([]uint16, n), make([]uint16, n)
		for i := range eb.layer.K {
			eb.kc.bf16[i], eb.vc.bf16[i] = F32ToBF16(eb.layer.K[i]), F32ToBF16(eb.layer.V[i])
			eb.layer.K[i], eb.layer.V[i] = BF16ToF32(eb.kc.bf16[i]), BF16ToF32(eb.vc.bf16[i])
		}
	} else {
		eb.kc.f32, eb.vc.f32 = eb.layer.K, eb.layer.V
	}
	eb.q = make([]float32, rows*eb.heads*tc.hd)
	for i := range eb.q {
		eb.q[i] = 2*r.Float32() - 1
	}
	return eb
}

// want is the CPU reference of every row (zeros for padding rows).
func (eb *emuCascadeBatch) want(t *testing.T, scale float32) []float32 {
	var seqs []AttnSeq
	for row, c := range eb.ctx {
		if c > 0 {
			seqs = append(seqs, AttnSeq{QStart: int32(row), NumQ: 1, ContextLen: c, BlockTable: eb.tables[row*eb.maxBlocks : (row+1)*eb.maxBlocks],
				Window: int32(eb.window)})
		}
	}
	out := make([]float32, len(eb.q))
	require.NoError(t, RefPagedAttention(out, eb.q, eb.layer, seqs, eb.heads, scale))
	return out
}

// emuCascadeTol: |got − want| ≤ tol·(1 + |want|). Everything is float32 (a
// bf16 cache only changes what is loaded, which the reference sees too).
const emuCascadeTol = 1e-5

// runEmuCascade runs the plain path (null start blocks) and the cascade
// path on the case's batch, both from NaN-poisoned scratch, and checks both
// against the reference, and the partial slots: a member's shared slots
// hold its group's run, everyone else's are neutral.
func runEmuCascade(t *testing.T, tc emuCascadeCase, seed uint64) {
	r := rand.New(rand.NewPCG(seed, uint64(tc.hd*tc.bs)))
	eb := newEmuCascadeBatch(r, tc)
	scale := float32(1 / math.Sqrt(float64(tc.hd)))
	want := eb.want(t, scale)
	batch, hd, heads := len(eb.ctx), tc.hd, eb.heads
	nan := float32(math.NaN())
	poison := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = nan
		}
		return v
	}
	check := func(what string, got []float32) {
		for i := range got {
			w := float64(want[i])
			if d := math.Abs(float64(got[i]) - w); !(d <= emuCascadeTol*(1+math.Abs(w))) {
				t.Fatalf("%s: row %d (context %d, start %d) head %d dim %d: want %v got %v",
					what, i/(heads*hd), eb.ctx[i/(heads*hd)], eb.start[i/(heads*hd)], (i/hd)%heads, i%hd, want[i], got[i])
			}
		}
	}
	base := emuDecodeArgs{q: eb.q, Kc: eb.kc, Vc: eb.vc, tables: eb.tables, maxBlocks: eb.maxBlocks, ctxLens: eb.ctx,
		heads: heads, kvh: tc.kvh, bs: tc.bs, hd: hd, scale: scale, window: tc.window}

	// Plain: today's launches.
	plain := base
	plain.slots = tc.splits
	d := DecodeShape{Batch: batch, Heads: heads, MaxBlocks: eb.maxBlocks, Splits: tc.splits, Window: tc.window}
	ob, mb := DecodeScratchBytes(d, hd)
	plain.oPart, plain.mlPart = poison(int(ob/4)), poison(int(mb/4))
	emuDecode(&plain, batch, tc.splits)
	got := poison(len(want))
	emuCombine(got, plain.oPart, plain.mlPart, batch, heads, hd, plain.slots)
	check("plain", got)
	for row := 0; row < batch; row++ {
		for s := 0; s < tc.splits; s++ {
			sl := row*heads*plain.slots + s // head 0
			f, e := DecodeWindowSplitRange(int(eb.ctx[row]), 0, tc.window, tc.bs, eb.maxBlocks, tc.splits, s)
			require.Equal(t, f < e, !math.IsInf(float64(plain.mlPart[2*sl]), -1), "row %d split %d", row, s)
			if tc.window > 0 && f < e {
				require.Greater(t, (f+1)*tc.bs, int(eb.ctx[row])-tc.window, "row %d split %d starts at a block the window sees", row, s)
			}
		}
	}

	// Cascade: the host's tile list, the grid sized for the worst case.
	perTile := CascadeTileMembers(heads, tc.kvh)
	require.Positive(t, perTile)
	var tiles, rows []int32
	start := make([]int32, batch)
	for gi, all := range eb.members {
		// The host's rule (cascade.go's seesAll): a member whose window
		// leaves out part of its context stays a plain row.
		var m []int32
		for _, row := range all {
			if tc.window == 0 || int(eb.ctx[row]) <= tc.window {
				m = append(m, row)
			}
		}
		tiles, rows = AppendCascadeTiles(tiles, rows, m, eb.shared[gi], perTile)
		if eb.shared[gi] > 0 {
			for _, row := range m {
				start[row] = eb.shared[gi]
			}
		}
	}
	if tc.window == 0 {
		require.Equal(t, eb.start, start)
	}
	maxTiles := max(1, CascadeMaxTiles(batch, perTile))
	require.LessOrEqual(t, len(tiles)/3, maxTiles, "tiles within the grid's bound")
	c := base
	c.startBlocks, c.tiles, c.numTiles, c.cascRows = start, append(tiles, -1, -1, -1), []int32{int32(len(tiles) / 3)}, rows
	d.CascadeSplits, d.CascadeTiles = tc.cSplits, maxTiles
	c.slots = d.Splits + d.CascadeSplits
	ob, mb = DecodeScratchBytes(d, hd)
	c.oPart, c.mlPart = poison(int(ob/4)), poison(int(mb/4))
	emuDecode(&c, batch, tc.splits)
	emuCascade(&c, maxTiles, tc.cSplits)
	for i, v := range c.mlPart {
		require.False(t, math.IsNaN(float64(v)), "partial (m, l) %d of row %d never written", i, i/2/c.slots/heads)
	}
	for i, v := range c.oPart {
		require.False(t, math.IsNaN(float64(v)), "partial o %d of row %d never written", i, i/hd/c.slots/heads)
	}
	for row := 0; row < batch; row++ {
		for h := 0; h < heads; h++ {
			for cs := 0; cs < tc.cSplits; cs++ {
				sl := (row*heads+h)*c.slots + tc.splits + cs
				f, e := CascadeSplitRange(int(start[row]), tc.cSplits, cs)
				busy := f < e
				require.Equal(t, busy, !math.IsInf(float64(c.mlPart[2*sl]), -1),
					"row %d head %d shared split %d (run %d blocks): busy %v", row, h, cs, start[row], busy)
			}
			for s := 0; s < tc.splits; s++ {
				sl := (row*heads+h)*c.slots + s
				f, e := DecodeWindowSplitRange(int(eb.ctx[row]), int(start[row]), tc.window, tc.bs, eb.maxBlocks, tc.splits, s)
				require.Equal(t, f < e, !math.IsInf(float64(c.mlPart[2*sl]), -1), "row %d head %d tail split %d", row, h, s)
			}
		}
	}
	got = poison(len(want))
	emuCombine(got, c.oPart, c.mlPart, batch, heads, hd, c.slots)
	check("cascade", got)
}

func emuCascadeCases() []emuCascadeCase {
	shapes := []struct {
		groups         []emuCascadeGroup
		loose, padding int
	}{
		{[]emuCascadeGroup{{2, 1}}, 0, 0},                           // the smallest group
		{[]emuCascadeGroup{{1, 3}}, 1, 1},                           // a group of one (the kernel does not care)
		{[]emuCascadeGroup{{3, 0}, {2, 2}}, 2, 1},                   // shared 0: plain rows
		{[]emuCascadeGroup{{5, 7}, {9, 1}, {2, 12}}, 3, 2},          // several groups, runs past one key tile
		{[]emuCascadeGroup{{17, 4}}, 0, 0},                          // a group over several tiles
		{[]emuCascadeGroup{{64, 3}}, 2, 1},                          // the largest group
		{[]emuCascadeGroup{{4, 20}, {33, 5}, {1, 0}, {2, 9}}, 5, 3}, // a mix
	}
	configs := []struct {
		hd, qpk, kvh, bs, splits, cSplits int
		bf16                              bool
	}{
		{64, 4, 2, 16, 1, 1, false},
		{64, 4, 2, 16, 3, 2, true},
		{128, 8, 1, 16, 2, 5, true},
		{32, 1, 2, 8, 4, 16, false},
		{48, 2, 2, 32, 1, 3, true},
		{256, 16, 1, 16, 2, 2, false},
	}
	var out []emuCascadeCase
	for i, s := range shapes {
		for j, c := range configs {
			if (i+j)%2 == 1 && len(s.groups) > 0 && s.groups[0].size >= 17 {
				continue // the large groups on half the configs keep the test short
			}
			out = append(out, emuCascadeCase{groups: s.groups, loose: s.loose, padding: s.padding,
				hd: c.hd, qpk: c.qpk, kvh: c.kvh, bs: c.bs, splits: c.splits, cSplits: c.cSplits, bf16: c.bf16})
		}
	}
	// Every group size 1..64 once (one group, shared runs cycling 0..16).
	for n := 1; n <= 64; n++ {
		out = append(out, emuCascadeCase{groups: []emuCascadeGroup{{n, n % 17}}, loose: 1, hd: 32, qpk: 2, kvh: 1, bs: 4,
			splits: 1 + n%3, cSplits: 1 + n%4, bf16: n%2 == 0})
	}
	// Sliding windows: smaller than most contexts (1, under a block, a few
	// blocks), about the contexts' size (some members see their whole
	// context and keep their group, the rest decode alone), and larger
	// than every context; f32 and bf16 caches.
	for i, w := range []int{1, 5, 16, 37, 64, 100, 200, 1000} {
		c := configs[i%len(configs)]
		out = append(out, emuCascadeCase{groups: []emuCascadeGroup{{5, 2}, {9, 1}, {3, 0}}, loose: 6, padding: 1,
			hd: c.hd, qpk: c.qpk, kvh: c.kvh, bs: c.bs, splits: c.splits + 1, cSplits: c.cSplits, bf16: i%2 == 1, window: w})
	}
	return out
}

// The emulated cascade path (decode tails, shared-prefix pass, combine)
// matches the CPU reference on every case, and so does the plain path.
func TestEmuCascadeDecodeMatchesRef(t *testing.T) {
	for i, tc := range emuCascadeCases() {
		t.Run(tc.String(), func(t *testing.T) { runEmuCascade(t, tc, uint64(i)) })
	}
}

// The split rules: a row's tail splits cover [start, rowBlocks) once, in
// order; the shared splits cover [0, shared) once; start 0 is
// DecodeSplitRange.
func TestCascadeSplitRanges(t *testing.T) {
	for _, tc := range []struct{ ctx, start, bs, maxBlocks, splits int }{
		{1, 0, 16, 4, 1}, {17, 1, 16, 4, 3}, {300, 5, 16, 19, 16}, {300, 18, 16, 19, 4},
		{300, 19, 16, 19, 2}, {300, 40, 16, 19, 2}, {0, 0, 16, 4, 2}, {64, -3, 16, 4, 5},
	} {
		t.Run(fmt.Sprintf("%+v", tc), func(t *testing.T) {
			rowBlocks := min(ceilDiv(tc.ctx, tc.bs), tc.maxBlocks)
			want := min(max(tc.start, 0), rowBlocks)
			at := want
			for s := 0; s < tc.splits; s++ {
				f, e := DecodeTailSplitRange(tc.ctx, tc.start, tc.bs, tc.maxBlocks, tc.splits, s)
				require.Equal(t, at, f, "split %d starts where the previous ended", s)
				require.LessOrEqual(t, f, e)
				at = e
				if tc.start == 0 {
					f0, e0 := DecodeSplitRange(tc.ctx, tc.bs, tc.maxBlocks, tc.splits, s)
					require.Equal(t, [2]int{f, e}, [2]int{f0, e0})
				}
			}
			require.Equal(t, rowBlocks, at)
			at = 0
			shared := max(tc.start, 0)
			for s := 0; s < tc.splits; s++ {
				f, e := CascadeSplitRange(shared, tc.splits, s)
				require.Equal(t, at, f)
				at = e
			}
			require.Equal(t, shared, at)
		})
	}
}

// The tile list: every member in exactly one tile of its group, at most
// perTile per tile, and never more tiles than CascadeMaxTiles for any
// grouping of a batch (groups of ≥ 2 rows, each row in at most one).
func TestCascadeTilesBound(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, perTile := range []int{1, 2, 3, 8, 32} {
		for _, batch := range []int{2, 3, 7, 64, 256} {
			for trial := 0; trial < 50; trial++ {
				order := r.Perm(batch)
				var tiles, rows []int32
				for i := 0; i+1 < len(order); {
					n := 2 + r.IntN(min(batch-i-1, 9))
					if trial%3 == 0 {
						n = 2 // the most groups
					}
					if i+n > len(order) {
						break
					}
					m := make([]int32, n)
					for j := range m {
						m[j] = int32(order[i+j])
					}
					tiles, rows = AppendCascadeTiles(tiles, rows, m, int32(1+r.IntN(5)), perTile)
					i += n
				}
				require.LessOrEqual(t, len(tiles)/3, CascadeMaxTiles(batch, perTile), "batch %d, %d per tile", batch, perTile)
				seen := map[int32]bool{}
				for k := 0; k < len(tiles); k += 3 {
					require.LessOrEqual(t, int(tiles[k+1]), perTile)
					require.Positive(t, tiles[k+1])
					for _, row := range rows[tiles[k] : tiles[k]+tiles[k+1]] {
						require.False(t, seen[row], "row %d in two tiles", row)
						seen[row] = true
					}
				}
				require.Len(t, seen, len(rows))
			}
		}
	}
	tiles, rows := AppendCascadeTiles(nil, nil, []int32{1, 2}, 0, 4)
	require.Empty(t, tiles, "no shared block: no tile")
	require.Empty(t, rows)
}
