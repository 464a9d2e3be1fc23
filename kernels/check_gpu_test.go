package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/cuda"
)

// The checks of scripts/gpu-check.sh beyond TestGPUAttention's small shapes:
// prefill at 1, 512 and 8,192 query tokens and with a cached prefix, decode at
// contexts from 16 to 32K over block tables sized for a 128K-token context,
// the argmax kernels on +Inf/NaN rows, and the figures of merit (device copy
// bandwidth, decode-attention bandwidth, prefill TFLOP/s). Like every GPU
// test here they skip without a driver or a device.
//
// Figures are logged as RESULT lines the script gathers into its summary
// table (see gpuResult). Goals are reported as met or missed, never
// asserted; only correctness is asserted.

// gpuResult logs one row of scripts/gpu-check.sh's summary table:
//
//	RESULT <figure> | <value> | <goal> | <met|missed|->
//
// goal and verdict are "-" for a figure without a goal. No field may
// contain " | ".
func gpuResult(tb testing.TB, figure, value, goal, verdict string) {
	tb.Helper()
	tb.Logf("RESULT %s | %s | %s | %s", figure, value, goal, verdict)
}

// gpuVerdict is the summary table's word for a goal.
func gpuVerdict(met bool) string {
	if met {
		return "met"
	}
	return "missed"
}

// Attention tolerances against the float64 references, as requireClose
// applies them (|got − want| ≤ tol·(1 + |want|)). The inputs of the tests
// are bf16-exact (K and V rounded to bf16 first), so a bf16 cache holds the
// reference's values exactly and the tolerance only covers the kernel's
// arithmetic.
const (
	// f32 cache: float32 arithmetic throughout (decode, and prefill on the
	// exact-comparison path the greedy stories260K test relies on).
	gpuAttnTolF32 = 2e-5
	// bf16 cache, prefill: 1e-2, about 1.3 bf16 ulps at 1. It leaves room
	// for a tensor-core kernel that rounds Q and the softmax weights to bf16
	// for its MMAs (each rounding ≤ 2⁻⁹ relative; outputs are convex
	// combinations of V values in [−1, 1]), while a wrong mask, a lost
	// rescale or a misplaced page is off by far more.
	gpuPrefillTolBF16 = 1e-2
)

// gpuPrefillTol is the prefill tolerance for a cache type.
func gpuPrefillTol(bf16 bool) float64 {
	if bf16 {
		return gpuPrefillTolBF16
	}
	return gpuAttnTolF32
}

// gpuMaxErr asserts got ≈ want within tol as requireClose does and returns
// the worst |got − want| / (1 + |want|). A NaN in got fails.
func gpuMaxErr(t testing.TB, want, got []float32, tol float64, what string) float64 {
	t.Helper()
	require.Len(t, got, len(want))
	worst := 0.0
	for i := range want {
		e := math.Abs(float64(want[i])-float64(got[i])) / (1 + math.Abs(float64(want[i])))
		if !(e <= tol) { // NaN fails too
			require.Failf(t, "attention mismatch", "%s[%d] of %d: want %v got %v (error %.3g > %.3g); slots never written hold NaN, so a NaN means the kernel used one",
				what, i, len(want), want[i], got[i], e, tol)
		}
		worst = max(worst, e)
	}
	return worst
}

// gpuRunnerSplits is the CUDA runner's decode split rule
// (model.cudaPlanDecodeSplits, which package model tests): enough
// (KV head, row, split) thread blocks to cover the SMs twice, at most 16:
// clamp(ceil(2·sms / (batch·kvHeads)), 1, 16).
func gpuRunnerSplits(batch, kvHeads, sms int) int {
	rows := max(batch, 1) * max(kvHeads, 1)
	return max(1, min((2*max(sms, 0)+rows-1)/rows, 16))
}

// gpuBF16Exact draws n values in [−1, 1) that bf16 represents exactly.
func gpuBF16Exact(r *rand.Rand, n int) []float32 {
	v := randF32(r, n, 1)
	for i := range v {
		v[i] = BF16ToF32(F32ToBF16(v[i]))
	}
	return v
}

// gpuRefAttention is RefAttention spread over the host's cores: chunks of
// query rows are independent (rows [i0, i1) of numQ over ctx positions are
// the last i1−i0 queries over the first ctx−numQ+i1 positions).
func gpuRefAttention(out, q, k, v []float32, numQ, ctx, heads, kvHeads, headDim int, scale float32) {
	const chunk = 32
	row, kvRow := heads*headDim, kvHeads*headDim
	n := ceilDiv(numQ, chunk)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c := int(next.Add(1)) - 1
				if c >= n {
					return
				}
				c = n - 1 - c // the longest rows first
				i0, i1 := c*chunk, min(numQ, (c+1)*chunk)
				cx := ctx - numQ + i1
				RefAttention(out[i0*row:i1*row], q[i0*row:i1*row], k[:cx*kvRow], v[:cx*kvRow], i1-i0, cx, heads, kvHeads, headDim, scale)
			}
		}()
	}
	wg.Wait()
}

// gpuAttnData is the host half of an attention check: sequences of the
// given contexts in a paged cache of bs positions per block, their block
// tables of maxBlocks columns over a shuffled pool (the columns past a
// row's blocks point at a poison block that is never written), bf16-exact
// K and V (so a bf16 cache holds the reference's values exactly), queries
// for the last numQ positions of each sequence, and the float64 reference
// output. The GPU tests upload it; TestAttentionCheckDataOnCPU runs the same
// data through the CPU kernel.
type gpuAttnData struct {
	heads, kvh, hd, bs           int
	maxBlocks, numBlocks, poison int
	scale                        float32
	ctx, numQ                    []int       // per sequence
	qStart                       []int32     // per sequence: its first q row
	tables                       []int32     // [seqs][maxBlocks]
	ks, vs                       [][]float32 // per sequence [ctx][kvh·hd]
	q, want                      []float32   // [rows][heads·hd]
}

// newGPUAttnData draws the data; maxBlocks 0 is the widest row's blocks
// plus two poison columns.
func newGPUAttnData(r *rand.Rand, heads, kvh, hd, bs, maxBlocks int, ctx, numQ []int) *gpuAttnData {
	d := &gpuAttnData{heads: heads, kvh: kvh, hd: hd, bs: bs, maxBlocks: maxBlocks, ctx: ctx, numQ: numQ,
		scale: float32(1 / math.Sqrt(float64(hd)))}
	if d.maxBlocks == 0 {
		for _, c := range ctx {
			d.maxBlocks = max(d.maxBlocks, ceilDiv(c, bs)+2)
		}
	}
	for _, c := range ctx {
		d.numBlocks += ceilDiv(c, bs)
	}
	d.poison = d.numBlocks
	d.numBlocks++
	perm := r.Perm(d.numBlocks - 1)
	d.tables = make([]int32, len(ctx)*d.maxBlocks)
	next := 0
	for i, c := range ctx {
		tab := d.table(i)
		for j := range tab {
			tab[j] = int32(d.poison)
		}
		for j := 0; j < ceilDiv(c, bs); j++ {
			tab[j] = int32(perm[next])
			next++
		}
	}
	row, kvRow := heads*hd, kvh*hd
	rows := 0
	for i := range ctx {
		d.qStart = append(d.qStart, int32(rows))
		rows += numQ[i]
	}
	d.q = randF32(r, rows*row, 1)
	d.want = make([]float32, len(d.q))
	d.ks, d.vs = make([][]float32, len(ctx)), make([][]float32, len(ctx))
	for i, c := range ctx {
		d.ks[i], d.vs[i] = gpuBF16Exact(r, c*kvRow), gpuBF16Exact(r, c*kvRow)
		q0, q1 := int(d.qStart[i])*row, (int(d.qStart[i])+numQ[i])*row
		gpuRefAttention(d.want[q0:q1], d.q[q0:q1], d.ks[i], d.vs[i], numQ[i], c, heads, kvh, hd, d.scale)
	}
	return d
}

// table is sequence i's block table.
func (d *gpuAttnData) table(i int) []int32 { return d.tables[i*d.maxBlocks : (i+1)*d.maxBlocks] }

// slots are the cache slots of sequence i's positions 0..ctx−1.
func (d *gpuAttnData) slots(i int) []int32 {
	tab := d.table(i)
	s := make([]int32, d.ctx[i])
	for p := range s {
		s[p] = tab[p/d.bs]*int32(d.bs) + int32(p%d.bs)
	}
	return s
}

// upload allocates a device cache with every element NaN (f32 0x7fc00000,
// bf16 0x7fc0), so a kernel that lets a slot it should not read reach its
// output produces NaN, and writes every sequence's K and V through the
// KV-write kernel.
func (d *gpuAttnData) upload(t testing.TB, e *gpuEnv, c cuda.Ctx, b *devBuf, bf16 bool) CUDAKV {
	elem, pattern := 4, uint32(0x7fc00000)
	if bf16 {
		elem, pattern = 2, 0x7fc07fc0
	}
	n := d.numBlocks * d.kvh * d.bs * d.hd * elem
	kv := CUDAKV{K: b.alloc(t, n), V: b.alloc(t, n), BF16: bf16, NumBlocks: d.numBlocks, KVHeads: d.kvh, BlockSize: d.bs, HeadDim: d.hd}
	var s cuda.Stream
	require.NoError(t, c.MemsetD32Async(kv.K, pattern, uint64(n/4), s))
	require.NoError(t, c.MemsetD32Async(kv.V, pattern, uint64(n/4), s))
	for i, cl := range d.ctx {
		if cl > 0 {
			require.NoError(t, e.k.KVWrite(c, s, kv, b.f32(t, d.ks[i]), b.f32(t, d.vs[i]), b.i32(t, d.slots(i)), cl))
		}
	}
	return kv
}

// hostLayer is the same cache on the host (NaN where nothing was written).
func (d *gpuAttnData) hostLayer(t testing.TB) *KVLayer {
	n := d.numBlocks * d.kvh * d.bs * d.hd
	l := &KVLayer{K: make([]float32, n), V: make([]float32, n), NumBlocks: d.numBlocks, KVHeads: d.kvh, BlockSize: d.bs, HeadDim: d.hd}
	nan := float32(math.NaN())
	for i := range l.K {
		l.K[i], l.V[i] = nan, nan
	}
	for i, cl := range d.ctx {
		pos := make([]int32, cl)
		for p := range pos {
			pos[p] = int32(p)
		}
		require.NoError(t, KVWrite(l, d.ks[i], d.vs[i], pos, d.table(i)))
	}
	return l
}

// seqs describes every sequence for the CPU kernel.
func (d *gpuAttnData) seqs() []AttnSeq {
	s := make([]AttnSeq, len(d.ctx))
	for i := range s {
		s[i] = AttnSeq{QStart: d.qStart[i], NumQ: int32(d.numQ[i]), ContextLen: int32(d.ctx[i]), BlockTable: d.table(i)}
	}
	return s
}

// decodeBatch is a decode batch of the one-query sequences rows (−1: a
// padding row, context 0 over a table of poison, whose output is zeros): q,
// the expected output, tables [batch][maxBlocks] and contexts.
func (d *gpuAttnData) decodeBatch(r *rand.Rand, rows []int) (q, want []float32, tables, lens []int32) {
	row := d.heads * d.hd
	for _, i := range rows {
		if i < 0 {
			for range d.maxBlocks {
				tables = append(tables, int32(d.poison))
			}
			q, want, lens = append(q, randF32(r, row, 1)...), append(want, make([]float32, row)...), append(lens, 0)
			continue
		}
		q0 := int(d.qStart[i]) * row
		q, want = append(q, d.q[q0:q0+row]...), append(want, d.want[q0:q0+row]...)
		tables, lens = append(tables, d.table(i)...), append(lens, int32(d.ctx[i]))
	}
	return q, want, tables, lens
}

// gpuPrefillSeq is one sequence of a prefill check: cached positions, then
// new ones (the queries).
type gpuPrefillSeq struct{ cached, new int }

// gpuPrefillData draws the data of a prefill check.
func gpuPrefillData(r *rand.Rand, heads, kvh, hd, bs int, seqs []gpuPrefillSeq) *gpuAttnData {
	var ctx, numQ []int
	for _, s := range seqs {
		ctx, numQ = append(ctx, s.cached+s.new), append(numQ, s.new)
	}
	return newGPUAttnData(r, heads, kvh, hd, bs, 0, ctx, numQ)
}

// Prefill attention against the CPU reference at 1, 512 and 8,192 query
// tokens of one sequence, 512 new tokens after 1,000 cached, and that chunk
// beside a one-token chunk: head dim 128, 8 query heads on 2 KV heads
// (GQA group 4), block size 16, f32 and bf16 caches. Slots no query may see
// hold NaN.
func TestGPUPrefillVsRef(t *testing.T) {
	e := openGPU(t)
	const heads, kvh, hd, bs = 8, 2, 128, 16
	cases := []struct {
		name string
		seqs []gpuPrefillSeq
	}{
		{"1 token", []gpuPrefillSeq{{0, 1}}},
		{"512 tokens", []gpuPrefillSeq{{0, 512}}},
		{"8192 tokens", []gpuPrefillSeq{{0, 8192}}},
		{"512 after 1000 cached", []gpuPrefillSeq{{1000, 512}}},
		{"512 after 1000 cached beside 1 after 16", []gpuPrefillSeq{{1000, 512}, {16, 1}}},
	}
	worst := map[bool]float64{}
	for ci, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := gpuPrefillData(rand.New(rand.NewPCG(17, uint64(ci))), heads, kvh, hd, bs, tc.seqs)
			maxQ := slices.Max(d.numQ)
			numQ, ctxLens := make([]int32, len(d.ctx)), make([]int32, len(d.ctx))
			for i := range d.ctx {
				numQ[i], ctxLens[i] = int32(d.numQ[i]), int32(d.ctx[i])
			}
			for _, bf16 := range []bool{false, true} {
				e.with(t, func(c cuda.Ctx, b *devBuf) {
					kv := d.upload(t, e, c, b, bf16)
					out := b.alloc(t, 4*len(d.q))
					p := PrefillShape{Seqs: len(d.ctx), Heads: heads, MaxQ: maxQ, MaxBlocks: d.maxBlocks}
					require.NoError(t, e.k.PrefillAttention(c, cuda.Stream{}, out, b.f32(t, d.q), kv, b.i32(t, d.qStart), b.i32(t, numQ),
						b.i32(t, ctxLens), b.i32(t, d.tables), p, d.scale))
					err := gpuMaxErr(t, d.want, b.readF32(t, out, len(d.q)), gpuPrefillTol(bf16), fmt.Sprintf("prefill bf16=%v", bf16))
					t.Logf("bf16 cache %v: worst error %.3g (tolerance %.3g)", bf16, err, gpuPrefillTol(bf16))
					worst[bf16] = max(worst[bf16], err)
				})
			}
		})
	}
	if t.Failed() {
		return
	}
	for _, bf16 := range []bool{false, true} {
		cache := "f32"
		if bf16 {
			cache = "bf16"
		}
		gpuResult(t, "prefill = CPU ref, "+cache+" KV (1/512/8192 tok, 512 after 1000)",
			fmt.Sprintf("worst error %.2g", worst[bf16]), fmt.Sprintf("<= %.0e", gpuPrefillTol(bf16)), "met")
	}
}

// gpuDecodeContexts are the contexts of TestGPUDecodeLongContext: 5000 ends
// in a partial block.
var gpuDecodeContexts = []int{16, 1024, 4096, 5000, 32768}

// Decode attention against the CPU reference at contexts 16, 1K, 4K, 5000
// and 32K, over block tables of 131072/16 = 8192 columns (a 128K-token
// MaxContext), 32 query heads on 8 KV heads, head dim 128, with the
// runner's split rule for the device: each row alone (16 splits at batch 1
// on a 132-SM device), then all of them and a padding row in one batch. The
// kernel cuts each row by its own context (DecodeSplitRange); slots past a
// row's context hold NaN.
func TestGPUDecodeLongContext(t *testing.T) {
	e := openGPU(t)
	const heads, kvh, hd, bs, maxContext = 32, 8, 128, 16, 131072
	const maxBlocks = maxContext / bs
	ctx := gpuDecodeContexts
	r := rand.New(rand.NewPCG(19, 20))
	ones := make([]int, len(ctx))
	for i := range ones {
		ones[i] = 1
	}
	d := newGPUAttnData(r, heads, kvh, hd, bs, maxBlocks, ctx, ones)
	sms := e.dev.Props().SMs
	worst := map[bool]float64{}
	for _, bf16 := range []bool{false, true} {
		t.Run(fmt.Sprintf("bf16=%v", bf16), func(t *testing.T) {
			e.with(t, func(c cuda.Ctx, b *devBuf) {
				var s cuda.Stream
				kv := d.upload(t, e, c, b, bf16)
				run := func(what string, rows []int) {
					q, want, tables, lens := d.decodeBatch(r, rows)
					batch := len(rows)
					sh := DecodeShape{Batch: batch, Heads: heads, MaxBlocks: maxBlocks, Splits: gpuRunnerSplits(batch, kvh, sms)}
					ob, mb := DecodeScratchBytes(sh, hd)
					out := b.alloc(t, 4*len(q))
					require.NoError(t, e.k.DecodeAttention(c, s, out, b.f32(t, q), kv, b.i32(t, tables), b.i32(t, lens), sh, d.scale,
						b.alloc(t, int(ob)), b.alloc(t, int(mb))))
					err := gpuMaxErr(t, want, b.readF32(t, out, len(q)), gpuAttnTolF32, what)
					busy := 0
					for sp := 0; sp < sh.Splits; sp++ {
						if f, l := DecodeSplitRange(int(lens[batch-1]), bs, maxBlocks, sh.Splits, sp); l > f {
							busy++
						}
					}
					t.Logf("%s: batch %d, %d splits (%d busy in the last row), worst error %.3g", what, batch, sh.Splits, busy, err)
					worst[bf16] = max(worst[bf16], err)
				}
				for i, cl := range ctx {
					run(fmt.Sprintf("context %d alone", cl), []int{i})
				}
				all := []int{-1}
				for i := range ctx {
					all = append(all, i)
				}
				run("every context and a padding row", all)
			})
		})
	}
	if t.Failed() {
		return
	}
	for _, bf16 := range []bool{false, true} {
		cache := "f32"
		if bf16 {
			cache = "bf16"
		}
		gpuResult(t, "decode = CPU ref, "+cache+" KV (ctx 16..32K, MaxContext 128K)",
			fmt.Sprintf("worst error %.2g", worst[bf16]), fmt.Sprintf("<= %.0e", gpuAttnTolF32), "met")
	}
}

// The host half of the attention checks, on any machine: the same kind of
// data (smaller) through the CPU kernel, NaN poison and 8192-column tables
// included, meets the tolerances, so a GPU failure is the kernel's.
func TestAttentionCheckDataOnCPU(t *testing.T) {
	w := NewWorkers(2)
	defer w.Close()
	check := func(d *gpuAttnData, what string) {
		out := make([]float32, len(d.q))
		require.NoError(t, w.PagedAttention(out, d.q, d.hostLayer(t), d.seqs(), d.heads, d.scale))
		gpuMaxErr(t, d.want, out, gpuAttnTolF32, what)
	}
	r := rand.New(rand.NewPCG(23, 24))
	check(gpuPrefillData(r, 8, 2, 128, 16, []gpuPrefillSeq{{0, 1}}), "1 token")
	check(gpuPrefillData(r, 8, 2, 128, 16, []gpuPrefillSeq{{0, 200}}), "200 tokens")
	check(gpuPrefillData(r, 8, 2, 128, 16, []gpuPrefillSeq{{100, 77}, {16, 1}}), "77 after 100 beside 1 after 16")
	d := newGPUAttnData(r, 32, 8, 128, 16, 131072/16, []int{16, 1000, 5000}, []int{1, 1, 1})
	check(d, "decode")
	// A decode batch with a padding row: the padding row wants zeros, the
	// others their sequence's reference.
	q, want, tables, lens := d.decodeBatch(r, []int{2, -1, 0})
	row := d.heads * d.hd
	require.Len(t, q, 3*row)
	require.Equal(t, d.want[2*row:3*row], want[:row])
	require.Equal(t, make([]float32, row), want[row:2*row])
	require.Equal(t, d.want[:row], want[2*row:])
	require.Equal(t, []int32{5000, 0, 16}, lens)
	require.Equal(t, d.table(2), tables[:d.maxBlocks])
	for _, b := range tables[d.maxBlocks : 2*d.maxBlocks] {
		require.Equal(t, int32(d.poison), b)
	}
	for i := range d.ctx { // every row's unused columns are poison, its blocks distinct
		tab := d.table(i)
		nb := ceilDiv(d.ctx[i], d.bs)
		for j, b := range tab {
			require.Equal(t, j >= nb, b == int32(d.poison), "seq %d column %d", i, j)
		}
	}
	// The argmax rows' expectations are the host's.
	for i, x := range gpuArgmaxRows() {
		require.Equal(t, RefArgmax(x), Argmax(x), "row %d", i)
	}
}

// gpuArgmaxRows are the rows of TestGPUArgmaxSpecialRows: +Inf against
// FLT_MAX, NaN among numbers, rows with nothing above −Inf, ties, long rows
// where the winner crosses the block reduction, and random rows of
// specials.
func gpuArgmaxRows() [][]float32 {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	rows := [][]float32{
		{math.MaxFloat32, inf, 1},
		{1, inf, math.MaxFloat32},
		{nan, 1, nan, 2},
		{nan, nan},
		{nan, -inf},
		{-inf, nan, -inf},
		{-inf, -inf, 3},
		{inf, inf},
		{2, 5, 5, -1},
	}
	r := rand.New(rand.NewPCG(21, 22))
	long := randF32(r, 32000, 8)
	long[0], long[257], long[31000] = nan, inf, math.MaxFloat32
	rows = append(rows, long)
	for range 30 {
		row := make([]float32, 300+r.IntN(5000))
		for i := range row {
			switch r.IntN(20) {
			case 0:
				row[i] = inf
			case 1:
				row[i] = nan
			case 2:
				row[i] = math.MaxFloat32
			case 3:
				row[i] = -inf
			default:
				row[i] = float32(r.NormFloat64())
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// The device argmax kernels (Argmax; the runner's ArgmaxLast; Sample at
// temperature 0) pick what RefArgmax picks, which is the host sampler's
// greedy choice: +Inf counts as FLT_MAX (the lower index of a tie wins),
// NaN never wins over a number, a row with nothing above −Inf gives 0.
func TestGPUArgmaxSpecialRows(t *testing.T) {
	e := openGPU(t)
	rows := gpuArgmaxRows()
	nv, err := cuda.LoadNVRTC()
	require.NoError(t, err)
	defer nv.Close()
	cc, err := cuda.NewCubinCache(nv, "")
	require.NoError(t, err)
	mod, err := CompileCUDARunnerOps(cc, e.dev.Props().Arch())
	require.NoError(t, err)
	e.with(t, func(c cuda.Ctx, b *devBuf) {
		o, err := LoadCUDARunnerOps(c, mod)
		require.NoError(t, err)
		defer func() { require.NoError(t, o.Unload(c)) }()
		var s cuda.Stream
		// One launch per row: rows differ in length.
		zero, one := b.f32(t, []float32{0}), b.f32(t, []float32{1})
		topK, u := b.i32(t, []int32{0}), b.f32(t, []float32{0.5})
		for i, x := range rows {
			want := RefArgmax(x)
			dx, out := b.f32(t, x), b.alloc(t, 4)
			require.NoError(t, e.k.Argmax(c, s, out, dx, 1, len(x)))
			got := b.readI32(t, out, 1)[0]
			last := b.i32(t, []int32{-7})
			require.NoError(t, o.ArgmaxLast(c, s, out, last, b.i32(t, []int32{0}), dx, 1, len(x)))
			gotLast, gotSeat := b.readI32(t, out, 1)[0], b.readI32(t, last, 1)[0]
			require.NoError(t, e.k.Sample(c, s, out, dx, 1, len(x), SampleParams{Temperature: zero, TopK: topK, TopP: one, MinP: zero, U: u}))
			gotSample := b.readI32(t, out, 1)[0]
			show := fmt.Sprint(x)
			if len(x) > 8 {
				show = fmt.Sprintf("[%d values]", len(x))
			}
			// Every row is checked (assert, not require), so one report
			// names every disagreement.
			assert.Equal(t, []int32{want, want, want, want}, []int32{got, gotLast, gotSeat, gotSample},
				"row %d %s: RefArgmax %d; device Argmax, ArgmaxLast (out, last) and Sample at temperature 0 gave %d, %d, %d, %d",
				i, show, want, got, gotLast, gotSeat, gotSample)
		}
	})
	if !t.Failed() {
		gpuResult(t, "argmax +Inf/NaN rows (Argmax, ArgmaxLast, Sample t=0)",
			fmt.Sprintf("%d rows", len(rows)), "= RefArgmax", "met")
	}
}

// gpuTime runs f iters times on s between two events and returns the
// seconds per iteration.
func gpuTime(t testing.TB, c cuda.Ctx, s cuda.Stream, iters int, f func() error) float64 {
	t.Helper()
	start, err := c.NewEvent(true)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.DestroyEvent(start)) }()
	end, err := c.NewEvent(true)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.DestroyEvent(end)) }()
	require.NoError(t, c.Record(start, s))
	for range iters {
		require.NoError(t, f())
	}
	require.NoError(t, c.Record(end, s))
	require.NoError(t, c.EventSync(end))
	ms, err := c.Elapsed(start, end)
	require.NoError(t, err)
	return float64(ms) / 1e3 / float64(iters)
}

// gpuCopyBandwidth is the device's memory bandwidth as a copy sees it:
// bytes read plus bytes written per second by cuMemcpyDtoDAsync of 1 GiB,
// best of five.
func gpuCopyBandwidth(t testing.TB, c cuda.Ctx, b *devBuf, s cuda.Stream) float64 {
	const n = 1 << 30
	src, dst := b.alloc(t, n), b.alloc(t, n)
	require.NoError(t, c.MemsetD8Async(src, 1, n, s))
	best := math.Inf(1)
	for range 5 {
		best = min(best, gpuTime(t, c, s, 1, func() error { return c.CopyDtoDAsync(dst, src, n, s) }))
	}
	return 2 * n / best
}

// gpuDecodeRig is the decode-attention bandwidth shape: bf16 KV, 32 heads on
// 8 KV heads, head dim 128, block size 16, every row at the same context
// over its own contiguous blocks, splits by the runner's rule.
type gpuDecodeRig struct {
	kv                                 CUDAKV
	d                                  DecodeShape
	out, q, tables, ctxLens, op, mp    cuda.DevicePtr
	kvBytes                            int // bytes of K plus V the step reads
	batch, ctx, heads, kvh, hd, blocks int
}

func newGPUDecodeRig(t testing.TB, c cuda.Ctx, buf *devBuf, batch, ctx int) *gpuDecodeRig {
	g := &gpuDecodeRig{batch: batch, ctx: ctx, heads: 32, kvh: 8, hd: 128, blocks: 16}
	maxBlocks := ceilDiv(ctx, g.blocks)
	numBlocks := batch * maxBlocks
	tables := make([]int32, batch*maxBlocks)
	for i := range tables {
		tables[i] = int32(i)
	}
	lens := make([]int32, batch)
	for i := range lens {
		lens[i] = int32(ctx)
	}
	half := numBlocks * g.kvh * g.blocks * g.hd * 2
	g.kvBytes = 2 * batch * ctx * g.kvh * g.hd * 2
	var s cuda.Stream
	g.kv = CUDAKV{K: buf.alloc(t, half), V: buf.alloc(t, half), BF16: true, NumBlocks: numBlocks, KVHeads: g.kvh, BlockSize: g.blocks, HeadDim: g.hd}
	require.NoError(t, c.MemsetD8Async(g.kv.K, 0x3c, uint64(half), s))
	require.NoError(t, c.MemsetD8Async(g.kv.V, 0x3c, uint64(half), s))
	g.d = DecodeShape{Batch: batch, Heads: g.heads, MaxBlocks: maxBlocks, Splits: gpuRunnerSplits(batch, g.kvh, c.Props().SMs)}
	ob, mb := DecodeScratchBytes(g.d, g.hd)
	qn := 4 * batch * g.heads * g.hd
	g.q, g.out = buf.alloc(t, qn), buf.alloc(t, qn)
	require.NoError(t, c.MemsetD8Async(g.q, 0, uint64(qn), s))
	g.tables, g.ctxLens, g.op, g.mp = buf.i32(t, tables), buf.i32(t, lens), buf.alloc(t, int(ob)), buf.alloc(t, int(mb))
	// The fills ran on the legacy stream, which a non-blocking stream does
	// not wait for.
	require.NoError(t, c.Synchronize())
	return g
}

func (g *gpuDecodeRig) launch(e *gpuEnv, c cuda.Ctx, s cuda.Stream) error {
	return e.k.DecodeAttention(c, s, g.out, g.q, g.kv, g.tables, g.ctxLens, g.d, 0.088, g.op, g.mp)
}

// TestGPUDecodeBandwidth reports the device copy bandwidth and the KV
// bandwidth of bf16 decode attention at batch 64 × 4,096 context against it
// (goal ≥ 0.80 of the copy's).
func TestGPUDecodeBandwidth(t *testing.T) {
	e := openGPU(t)
	const batch, ctx, goal = 64, 4096, 0.80
	e.with(t, func(c cuda.Ctx, b *devBuf) {
		s, err := c.NewStream()
		require.NoError(t, err)
		defer func() { require.NoError(t, c.DestroyStream(s)) }()
		bw := gpuCopyBandwidth(t, c, b, s)
		gpuResult(t, "device copy bandwidth (DtoD 1 GiB, read+write)", fmt.Sprintf("%.0f GB/s", bw/1e9), "-", "-")
		g := newGPUDecodeRig(t, c, b, batch, ctx)
		launch := func() error { return g.launch(e, c, s) }
		gpuTime(t, c, s, 10, launch) // warm-up
		sec := gpuTime(t, c, s, 200, launch)
		attn := float64(g.kvBytes) / sec
		t.Logf("decode attention: bf16 KV, batch %d x %d context, 32 heads on 8 KV heads, hd 128, %d splits: %.1f us/step, %.0f MB of KV",
			batch, ctx, g.d.Splits, sec*1e6, float64(g.kvBytes)/1e6)
		gpuResult(t, fmt.Sprintf("decode attention bandwidth (bf16, %d x %d ctx)", batch, ctx),
			fmt.Sprintf("%.0f GB/s = %.2f x copy", attn/1e9, attn/bw), fmt.Sprintf(">= %.2f x copy", goal), gpuVerdict(attn/bw >= goal))
	})
}

// BenchmarkGPUDecodeAttention reports the KV bandwidth of bf16 decode
// attention at batch 64 × 4,096 context (the shape TestGPUDecodeBandwidth
// reports against the copy bandwidth).
func BenchmarkGPUDecodeAttention(b *testing.B) {
	e := openGPU(b)
	e.with(b, func(c cuda.Ctx, buf *devBuf) {
		var s cuda.Stream
		g := newGPUDecodeRig(b, c, buf, 64, 4096)
		require.NoError(b, g.launch(e, c, s))
		require.NoError(b, c.Sync(s))
		b.ResetTimer()
		sec := gpuTime(b, c, s, b.N, func() error { return g.launch(e, c, s) })
		b.StopTimer()
		b.ReportMetric(float64(g.kvBytes)/sec/1e9, "GB/s")
		b.ReportMetric(sec*1e6, "us/step")
	})
}

// gpuBF16Peak is the dense (no sparsity) BF16 tensor-core peak of a device.
type gpuBF16Peak struct {
	name   string // a substring of the device name, matched case-insensitively
	major  int    // compute capability major version the name must come with
	tflops float64
}

// gpuBF16Peaks are NVIDIA's published dense BF16 peaks; the first match
// wins, so variants come before their family.
var gpuBF16Peaks = []gpuBF16Peak{
	{"H200 NVL", 9, 835},
	{"H200", 9, 989},
	{"GH200", 9, 989},
	{"H100 PCIe", 9, 756},
	{"H100 NVL", 9, 835},
	{"H100", 9, 989}, // SXM ("NVIDIA H100 80GB HBM3")
	{"A100", 8, 312},
}

// gpuDenseBF16Peak returns the dense BF16 peak in TFLOP/s of the device
// named name with compute capability major, and whether it is known.
func gpuDenseBF16Peak(name string, major int) (float64, bool) {
	n := strings.ToLower(name)
	for _, p := range gpuBF16Peaks {
		if p.major == major && strings.Contains(n, strings.ToLower(p.name)) {
			return p.tflops, true
		}
	}
	return 0, false
}

func TestDenseBF16PeakTable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		major int
		want  float64
	}{
		{"NVIDIA H200", 9, 989},
		{"NVIDIA H200 NVL", 9, 835},
		{"NVIDIA H100 80GB HBM3", 9, 989},
		{"NVIDIA H100 PCIe", 9, 756},
		{"NVIDIA GH200 480GB", 9, 989},
		{"NVIDIA A100-SXM4-80GB", 8, 312},
		{"NVIDIA A100 80GB PCIe", 8, 312},
		{"NVIDIA L4", 8, 0},
		{"NVIDIA H100 80GB HBM3", 8, 0}, // a name that contradicts its compute capability
	} {
		got, ok := gpuDenseBF16Peak(tc.name, tc.major)
		require.Equal(t, tc.want, got, tc.name)
		require.Equal(t, tc.want != 0, ok, tc.name)
	}
}

// TestGPUPrefillThroughput reports prefill attention TFLOP/s at 8,192
// tokens of one sequence (bf16 KV, head dim 128, 32 query heads on 8 KV
// heads, block size 16) against the device's dense BF16 peak (goal ≥ 0.40).
// FLOPs count the causal half of the two matrix products:
// 4·T²·d·heads / 2.
func TestGPUPrefillThroughput(t *testing.T) {
	e := openGPU(t)
	const T, heads, kvh, hd, bs, goal = 8192, 32, 8, 128, 16, 0.40
	props := e.dev.Props()
	e.with(t, func(c cuda.Ctx, b *devBuf) {
		s, err := c.NewStream()
		require.NoError(t, err)
		defer func() { require.NoError(t, c.DestroyStream(s)) }()
		blocks := T / bs
		half := blocks * kvh * bs * hd * 2
		kv := CUDAKV{K: b.alloc(t, half), V: b.alloc(t, half), BF16: true, NumBlocks: blocks, KVHeads: kvh, BlockSize: bs, HeadDim: hd}
		require.NoError(t, c.MemsetD32Async(kv.K, 0x3c003c00, uint64(half/4), s)) // bf16 0.0078
		require.NoError(t, c.MemsetD32Async(kv.V, 0x3f803f80, uint64(half/4), s)) // bf16 1
		qn := 4 * T * heads * hd
		q, out := b.alloc(t, qn), b.alloc(t, qn)
		require.NoError(t, c.MemsetD32Async(q, 0x3c000000, uint64(qn/4), s)) // 0.0078
		tables := make([]int32, blocks)
		for i := range tables {
			tables[i] = int32(i)
		}
		qStart, numQ, ctxLens, dt := b.i32(t, []int32{0}), b.i32(t, []int32{T}), b.i32(t, []int32{T}), b.i32(t, tables)
		p := PrefillShape{Seqs: 1, Heads: heads, MaxQ: T, MaxBlocks: blocks}
		require.NoError(t, c.Synchronize()) // the uploads ran on the legacy stream
		launch := func() error {
			return e.k.PrefillAttention(c, s, out, q, kv, qStart, numQ, ctxLens, dt, p, float32(1/math.Sqrt(hd)))
		}
		first := gpuTime(t, c, s, 1, launch) // warm-up, and the size of one run
		iters := max(3, min(50, int(1/first)))
		sec := gpuTime(t, c, s, iters, launch)
		// V is all ones: every output is 1, whatever the weights.
		got := b.readF32(t, out, T*heads*hd)
		for i := 0; i < len(got); i += 4099 {
			require.InDelta(t, 1, got[i], 1e-2, "prefill output %d (V is all ones)", i)
		}
		flops := 4 * float64(T) * float64(T) * hd * heads / 2
		tf := flops / sec / 1e12
		t.Logf("prefill attention: bf16 KV, %d tokens of one sequence, 32 heads on 8 KV heads, hd 128: %.2f ms per run (%d runs), %.3g FLOP",
			T, sec*1e3, iters, flops)
		figure := fmt.Sprintf("prefill attention TFLOP/s (bf16, %d tokens)", T)
		value := fmt.Sprintf("%.1f TFLOP/s", tf)
		if peak, ok := gpuDenseBF16Peak(props.Name, props.Major); ok {
			gpuResult(t, figure, fmt.Sprintf("%s = %.3f x %.0f peak", value, tf/peak, peak),
				fmt.Sprintf(">= %.2f x peak", goal), gpuVerdict(tf/peak >= goal))
		} else {
			gpuResult(t, figure, fmt.Sprintf("%s (no peak known for %s)", value, props.Arch()),
				fmt.Sprintf(">= %.2f x peak", goal), "-")
			t.Logf("no dense BF16 peak in gpuBF16Peaks for %q (%s)", props.Name, props.Arch())
		}
	})
}

// gpuU16Bytes is v as little-endian bytes (a bf16 cache's image).
func gpuU16Bytes(v []uint16) []byte {
	out := make([]byte, 2*len(v))
	for i, x := range v {
		out[2*i], out[2*i+1] = byte(x), byte(x>>8)
	}
	return out
}

// Cascade decode on the device against the CPU reference and the plain
// decode kernel, on the emulation test's random batches (cascade_emu_test.go:
// shuffled tables, groups of 2..64 members over runs of 1..200 blocks beside
// loose and padding rows, unused table columns past the cache) in the
// Llama-3-8B attention shape and an MHA one, f32 and bf16 caches, with the
// runner's decode split rule and 1 or 16 shared-run splits. Then one
// captured graph of CascadeDecodeAttention is replayed with three groupings
// of the same batch written into its inputs (the batch's groups, the same
// groups on one block less, no group): each replay is the reference, so the
// group layout is data the graph reads, not something it baked in.
func TestGPUCascadeDecode(t *testing.T) {
	e := openGPU(t)
	sms := e.dev.Props().SMs
	cases := []emuCascadeCase{
		{groups: []emuCascadeGroup{{64, 40}, {2, 1}, {5, 200}}, loose: 10, padding: 1, hd: 128, qpk: 4, kvh: 8, bs: 16},
		{groups: []emuCascadeGroup{{3, 7}, {33, 12}, {2, 2}}, loose: 3, padding: 2, hd: 64, qpk: 1, kvh: 4, bs: 16},
		{groups: []emuCascadeGroup{{17, 64}}, loose: 0, hd: 128, qpk: 8, kvh: 2, bs: 32},
	}
	worst := map[bool]float64{}
	// Each batch and its reference once for both shared-split counts.
	type batchKey struct {
		ci   int
		bf16 bool
	}
	type batchData struct {
		eb   *emuCascadeBatch
		want []float32
	}
	batches := map[batchKey]batchData{}
	for ci, tc := range cases {
		for _, bf16 := range []bool{false, true} {
			for _, cs := range []int{1, 16} {
				tc := tc
				tc.bf16, tc.cSplits = bf16, cs
				t.Run(tc.String(), func(t *testing.T) {
					scale := float32(1 / math.Sqrt(float64(tc.hd)))
					bd, ok := batches[batchKey{ci, bf16}]
					if !ok {
						bd.eb = newEmuCascadeBatch(rand.New(rand.NewPCG(uint64(ci), 77)), tc)
						bd.want = bd.eb.want(t, scale)
						batches[batchKey{ci, bf16}] = bd
					}
					eb, want := bd.eb, bd.want
					batch, heads := len(eb.ctx), eb.heads
					e.with(t, func(c cuda.Ctx, b *devBuf) {
						var s cuda.Stream
						kv := CUDAKV{BF16: bf16, NumBlocks: eb.numBlocks, KVHeads: tc.kvh, BlockSize: tc.bs, HeadDim: tc.hd}
						if bf16 {
							kv.K, kv.V = b.bytes(t, gpuU16Bytes(eb.kc.bf16)), b.bytes(t, gpuU16Bytes(eb.vc.bf16))
						} else {
							kv.K, kv.V = b.f32(t, eb.kc.f32), b.f32(t, eb.vc.f32)
						}
						q, tables, lens := b.f32(t, eb.q), b.i32(t, eb.tables), b.i32(t, eb.ctx)
						d := DecodeShape{Batch: batch, Heads: heads, MaxBlocks: eb.maxBlocks, Splits: gpuRunnerSplits(batch, tc.kvh, sms)}
						ob, mb := DecodeScratchBytes(d, tc.hd)
						out := b.alloc(t, 4*len(want))
						require.NoError(t, e.k.DecodeAttention(c, s, out, q, kv, tables, lens, d, scale, b.alloc(t, int(ob)), b.alloc(t, int(mb))))
						plain := b.readF32(t, out, len(want))
						gpuMaxErr(t, want, plain, gpuAttnTolF32, "plain decode")

						perTile := CascadeTileMembers(heads, tc.kvh)
						d.CascadeSplits, d.CascadeTiles = cs, CascadeMaxTiles(batch, perTile)
						ob, mb = DecodeScratchBytes(d, tc.hd)
						oPart, mlPart := b.alloc(t, int(ob)), b.alloc(t, int(mb))
						ci := CascadeInputs{StartBlocks: b.alloc(t, 4*batch), Tiles: b.alloc(t, 12*d.CascadeTiles),
							NumTiles: b.alloc(t, 4), Rows: b.alloc(t, 4*batch)}
						// layout writes a grouping (each group's run less cut
						// blocks; nil: none) into ci.
						layout := func(cut int32, none bool) {
							start := make([]int32, batch)
							var tiles, rows []int32
							for gi, m := range eb.members {
								sh := eb.shared[gi] - cut
								if none || sh <= 0 {
									continue
								}
								tiles, rows = AppendCascadeTiles(tiles, rows, m, sh, perTile)
								for _, row := range m {
									start[row] = sh
								}
							}
							require.LessOrEqual(t, len(tiles)/3, d.CascadeTiles)
							require.NoError(t, c.CopyHtoD(ci.StartBlocks, i32Bytes(start)))
							require.NoError(t, c.CopyHtoD(ci.NumTiles, i32Bytes([]int32{int32(len(tiles) / 3)})))
							if len(tiles) > 0 {
								require.NoError(t, c.CopyHtoD(ci.Tiles, i32Bytes(tiles)))
								require.NoError(t, c.CopyHtoD(ci.Rows, i32Bytes(rows)))
							}
							require.NoError(t, c.Synchronize())
						}
						layout(0, false)
						require.NoError(t, c.MemsetD32Async(out, 0x7fc00000, uint64(len(want)), s))
						require.NoError(t, e.k.CascadeDecodeAttention(c, s, out, q, kv, tables, lens, ci, d, scale, oPart, mlPart))
						got := b.readF32(t, out, len(want))
						err := gpuMaxErr(t, want, got, gpuAttnTolF32, "cascade decode")
						gpuMaxErr(t, plain, got, gpuAttnTolF32, "cascade vs plain decode")
						worst[bf16] = max(worst[bf16], err)

						gs, err2 := c.NewStream()
						require.NoError(t, err2)
						defer func() { require.NoError(t, c.DestroyStream(gs)) }()
						require.NoError(t, c.BeginCapture(gs))
						require.NoError(t, e.k.CascadeDecodeAttention(c, gs, out, q, kv, tables, lens, ci, d, scale, oPart, mlPart))
						g, err2 := c.EndCapture(gs)
						require.NoError(t, err2)
						ge, err2 := c.Instantiate(g)
						require.NoError(t, err2)
						defer func() {
							require.NoError(t, c.DestroyGraphExec(ge))
							require.NoError(t, c.DestroyGraph(g))
						}()
						for _, lay := range []struct {
							what string
							cut  int32
							none bool
						}{{"graph, the batch's groups", 0, false}, {"graph, runs one block shorter", 1, false}, {"graph, no group", 0, true}} {
							layout(lay.cut, lay.none)
							require.NoError(t, c.MemsetD32Async(out, 0x7fc00000, uint64(len(want)), gs))
							require.NoError(t, c.LaunchGraph(ge, gs))
							require.NoError(t, c.Sync(gs))
							worst[bf16] = max(worst[bf16], gpuMaxErr(t, want, b.readF32(t, out, len(want)), gpuAttnTolF32, lay.what))
						}
					})
				})
			}
		}
	}
	if t.Failed() {
		return
	}
	for _, bf16 := range []bool{false, true} {
		cache := "f32"
		if bf16 {
			cache = "bf16"
		}
		gpuResult(t, "cascade decode = CPU ref = plain decode, "+cache+" KV (groups 2..64, runs 1..200 blocks, graph replays)",
			fmt.Sprintf("worst error %.2g", worst[bf16]), fmt.Sprintf("<= %.0e", gpuAttnTolF32), "met")
	}
}
