package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// unitRoundoff is 2^-24, the float32 unit roundoff u.
const unitRoundoff = 1.0 / (1 << 24)

// allTypes is every weight type (Types), the block types included.
var allTypes = Types[:]

func randFloats(rng *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (rng.Float32()*2 - 1) * scale
	}
	return v
}

// forEachPath runs f on a fresh pool for every path this CPU supports and
// for one and three workers (three exceeds the cores, exercising hand-off),
// with float32 activations (SetExact): the low-precision kernels have their
// own tests (lowp_test.go).
func forEachPath(t *testing.T, f func(t *testing.T, w *Workers)) {
	for _, p := range SupportedPaths() {
		for _, n := range []int{1, 3} {
			t.Run(fmt.Sprintf("%v/workers=%d", p, n), func(t *testing.T) {
				w := NewWorkers(n)
				defer w.Close()
				w.SetExact(true)
				require.NoError(t, w.SetPath(p))
				require.Equal(t, p, w.Path())
				f(t, w)
			})
		}
	}
}

func TestPaths(t *testing.T) {
	ps := SupportedPaths()
	require.Equal(t, Portable, ps[0], "the portable path always runs")
	require.Equal(t, ps[len(ps)-1], BestPath())
	w := NewWorkers(2)
	defer w.Close()
	require.Equal(t, BestPath(), w.Path())
	require.Equal(t, 2, w.N())
	for _, p := range []Path{Portable, AVX2, AVX512, Path(9)} {
		if p.Supported() {
			require.NoError(t, w.SetPath(p))
		} else {
			require.Error(t, w.SetPath(p))
		}
	}
}

// mmCase is one MatMul problem with its reference result and, per output,
// the error tolerance.
type mmCase struct {
	W    Matrix
	x    []float32
	m    int
	want []float32
	tol  []float64
}

// newMMCase builds a problem and its tolerances. The dequantized weights
// are exact float32 values (F16, BF16 and d·q, an 11-bit by 8-bit product,
// all fit in 24 bits), so the only difference from the float64 reference is
// float32 rounding of the k-term accumulation, in any order: the classic
// bound is |ŷ − y| ≤ γ_k Σ|x·w| with γ_k ≈ k·u, plus one u per product where
// no FMA is used. We allow (k+2)·u·Σ|x·w|, plus 1e-30 for all-zero rows.
func newMMCase(t *testing.T, rng *rand.Rand, typ DType, m, k, n int) mmCase {
	W, err := Quantize(typ, n, k, randFloats(rng, n*k, 1))
	require.NoError(t, err)
	c := mmCase{W: W, x: randFloats(rng, m*k, 2), m: m, want: make([]float32, m*n), tol: make([]float64, m*n)}
	require.NoError(t, RefMatMul(c.want, c.x, m, W))
	wf := make([]float64, k)
	for j := 0; j < n; j++ {
		for col := range wf {
			wf[col] = math.Abs(float64(W.At(j, col)))
		}
		for i := 0; i < m; i++ {
			var mag float64
			for col, a := range wf {
				mag += math.Abs(float64(c.x[i*k+col])) * a
			}
			c.tol[i*n+j] = float64(k+2)*unitRoundoff*mag + 1e-30
		}
	}
	return c
}

func (c mmCase) check(t *testing.T, w *Workers) {
	t.Helper()
	y := make([]float32, len(c.want))
	for i := range y {
		y[i] = float32(math.NaN()) // every element must be written
	}
	require.NoError(t, w.MatMul(y, c.x, c.m, c.W))
	for i, got := range y {
		if !(math.Abs(float64(got-c.want[i])) <= c.tol[i]) {
			require.InDeltaf(t, c.want[i], got, c.tol[i], "y[%d][%d] (m=%d k=%d n=%d %v)",
				i/c.W.Rows, i%c.W.Rows, c.m, c.W.Cols, c.W.Rows, c.W.Type)
		}
	}
}

func TestMatMul(t *testing.T) {
	shapes := []struct{ m, k, n int }{
		{1, 7, 5},      // k not a multiple of 8
		{1, 768, 40},   // GEMV, several KC blocks' worth of depth
		{2, 37, 19},    // GEMV, two rows
		{3, 64, 33},    // GEMV, three rows
		{4, 100, 17},   // GEMV, four rows
		{5, 33, 70},    // smallest streaming GEMM, one row past a 4-row group
		{6, 16, 16},    // streaming, two row groups
		{13, 300, 45},  // streaming, n a multiple of 3
		{32, 1000, 50}, // largest streaming m, two depth chunks
		{31, 2100, 7},  // streaming, three depth chunks, the last with a tail
		{33, 40, 30},   // smallest packed GEMM, partial MR panel
		{100, 264, 97}, // packed GEMM, two MC row blocks and two KC blocks
		{200, 520, 70}, // packed GEMM (F16 too), last row block an 8-row AVX-512 12x32 tile
		{9, 41, 300},   // several column tiles
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var cases []mmCase
	for _, typ := range allTypes {
		for _, s := range shapes {
			k := roundUp(s.k, typ.BlockElems()) // 256 for the K-quants
			cases = append(cases, newMMCase(t, rng, typ, s.m, k, s.n))
		}
	}
	forEachPath(t, func(t *testing.T, w *Workers) {
		for _, c := range cases {
			c.check(t, w)
		}
	})
}

func TestMatMulErrors(t *testing.T) {
	w := NewWorkers(2)
	W, err := Quantize(F32, 4, 8, make([]float32, 32))
	require.NoError(t, err)
	cases := []struct {
		name string
		y, x []float32
		m    int
		W    Matrix
		want string
	}{
		{"short x", make([]float32, 8), make([]float32, 15), 2, W, "x has 15 floats, want m*Cols = 2*8 = 16"},
		{"long y", make([]float32, 9), make([]float32, 16), 2, W, "y has 9 floats, want m*Rows = 2*4 = 8"},
		{"zero m", nil, nil, 0, W, "m=0"},
		{"data size", make([]float32, 8), make([]float32, 16), 2, Matrix{Type: F32, Rows: 4, Cols: 8, Data: make([]byte, 100)}, "needs 128 bytes, Data has 100"},
		{"q8 cols", make([]float32, 8), make([]float32, 16), 2, Matrix{Type: Q8_0, Rows: 4, Cols: 8, Data: nil}, "not a multiple of 32"},
		{"bad type", make([]float32, 8), make([]float32, 16), 2, Matrix{Type: DType(16), Rows: 4, Cols: 8}, "unsupported weight type DType(16)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.ErrorContains(t, w.MatMul(c.y, c.x, c.m, c.W), c.want)
		})
	}
	w.Close()
	w.Close() // idempotent
	require.ErrorIs(t, w.MatMul(make([]float32, 8), make([]float32, 16), 2, W), ErrClosed)
}

func TestRMSNorm(t *testing.T) {
	forEachPath(t, func(t *testing.T, w *Workers) {
		rng := rand.New(rand.NewPCG(3, 4))
		for _, s := range []struct{ rows, dim int }{{1, 7}, {3, 64}, {17, 288}, {40, 1000}} {
			x := randFloats(rng, s.rows*s.dim, 3)
			wt := randFloats(rng, s.dim, 1)
			y := make([]float32, len(x))
			ref := make([]float32, len(x))
			require.NoError(t, w.RMSNorm(y, x, wt, s.rows, s.dim, 1e-5))
			RefRMSNorm(ref, x, wt, s.rows, s.dim, 1e-5)
			// float32 sum of squares (dim terms) then a few roundings:
			// relative error ≤ (dim/2+4)·u of each output's magnitude.
			for i := range y {
				tol := float64(s.dim/2+4)*unitRoundoff*math.Abs(float64(ref[i])) + 1e-30
				if !(math.Abs(float64(y[i]-ref[i])) <= tol) {
					require.InDelta(t, ref[i], y[i], tol, "element %d dim %d", i, s.dim)
				}
			}
			// In place (y aliases x).
			require.NoError(t, w.RMSNorm(x, x, wt, s.rows, s.dim, 1e-5))
			require.Equal(t, y, x)
		}
		require.ErrorContains(t, w.RMSNorm(make([]float32, 4), make([]float32, 4), make([]float32, 3), 1, 4, 1e-5), "weight=3")
	})
}

func TestRoPE(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	cases := []struct {
		heads, hd   int
		theta, scal float32
		positions   []int32
	}{
		{1, 2, 10000, 1, []int32{0, 1, 2}},
		{4, 64, 10000, 1, []int32{5, 0, 77, 4095}},
		{3, 6, 500000, 0.25, []int32{100000, 3}},
	}
	for _, c := range cases {
		x := randFloats(rng, len(c.positions)*c.heads*c.hd, 1)
		ref := append([]float32(nil), x...)
		require.NoError(t, RoPE(x, c.positions, c.heads, c.hd, c.theta, c.scal))
		RefRoPE(ref, c.positions, c.heads, c.hd, c.theta, c.scal)
		// Both compute the angle in float64; cos/sin come from different
		// libraries (≤ 1 ulp each) and the rotation rounds in float32, so
		// each output is within 4 ulps of |pair|.
		for i := range x {
			require.InDelta(t, ref[i], x[i], 4*2*unitRoundoff*1.5, "element %d", i)
		}
	}
	// Position 0 is the identity.
	x := randFloats(rng, 8, 1)
	y := append([]float32(nil), x...)
	require.NoError(t, RoPE(y, []int32{0}, 2, 4, 10000, 1))
	require.Equal(t, x, y)
	require.ErrorContains(t, RoPE(make([]float32, 5), []int32{0}, 1, 5, 10000, 1), "even headDim")
	require.ErrorContains(t, RoPE(make([]float32, 7), []int32{0}, 1, 6, 10000, 1), "x has 7 floats")
}

// A RoPETable built once and applied to tensors of different head counts
// (the runner's q and k of every layer) gives RoPEFreqs' results bit for
// bit in both layouts.
func TestRoPETableApply(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	cases := []struct {
		name      string
		heads, hd int
		neox      bool
		positions []int32
	}{
		{"pair", 1, 2, false, []int32{0, 1, 2}},
		{"llama", 4, 64, false, []int32{5, 0, 77, 4095}},
		{"neox", 3, 6, true, []int32{100000, 3}},
		{"neox wide", 2, 128, true, []int32{7, 8, 9, 10, 11}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			freqs := RopeFreqs(c.hd, 500000, 0.5)
			freqs[0] *= 1.25 // a per-dimension factor, as llama3 scaling has
			cs := make([]float32, len(c.positions)*c.hd)
			require.NoError(t, RoPETable(cs, c.positions, freqs))
			for _, heads := range []int{c.heads, 1} {
				a := randFloats(rng, len(c.positions)*heads*c.hd, 1)
				b := append([]float32(nil), a...)
				require.NoError(t, RoPEApply(a, cs, len(c.positions), heads, c.hd, c.neox))
				require.NoError(t, RoPEFreqs(b, c.positions, heads, c.hd, freqs, c.neox))
				require.Equal(t, b, a)
			}
		})
	}
	require.ErrorContains(t, RoPETable(make([]float32, 5), []int32{0, 1}, make([]float64, 2)), "cs has 5 floats")
	require.ErrorContains(t, RoPEApply(make([]float32, 8), make([]float32, 3), 1, 2, 4, false), "cs has 3 floats")
	require.ErrorContains(t, RoPEApply(make([]float32, 8), make([]float32, 4), 1, 2, 3, false), "headDim=3")
	require.ErrorContains(t, RoPEApply(make([]float32, 7), make([]float32, 4), 1, 2, 4, false), "x has 7 floats")
}

func TestSiLUMulSoftmaxArgmax(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{1, 5, 64, 1001} {
		g, u := randFloats(rng, n, 8), randFloats(rng, n, 2)
		y, ref := make([]float32, n), make([]float32, n)
		require.NoError(t, SiLUMul(y, g, u))
		RefSiLUMul(ref, g, u)
		for i := range y {
			// See siluMaxRelErr (TestSiLUMul sweeps every path).
			require.InDelta(t, ref[i], y[i], siluMaxRelErr*unitRoundoff*math.Abs(float64(ref[i]))+1e-30, "silu %d", i)
		}

		x := randFloats(rng, n, 20)
		sm := append([]float32(nil), x...)
		Softmax(sm)
		orig := append([]float32(nil), x...)
		mx := x[RefArgmax(x)]
		RefSoftmax(x)
		for i := range x {
			// The float32 x−max rounds by u·|x−max|, which exp turns into a
			// relative error of that size; expf adds ≤ 1 ulp and the sum and
			// normalising multiply a few u: (|x−max| + 4)·u relative.
			d := math.Abs(float64(orig[i] - mx))
			require.InDelta(t, x[i], sm[i], (d+4)*unitRoundoff*float64(x[i])+1e-30, "softmax %d", i)
		}

		a := randFloats(rng, n, 1)
		require.Equal(t, RefArgmax(a), Argmax(a))
	}
	require.Equal(t, int32(1), Argmax([]float32{1, 3, 2, 3}), "first of equal maxima")
	require.Equal(t, int32(-1), Argmax(nil))
	require.ErrorContains(t, SiLUMul(make([]float32, 2), make([]float32, 3), make([]float32, 2)), "gate=3")
}

func TestEmbedding(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, p := range SupportedPaths() {
		for _, typ := range allTypes {
			t.Run(fmt.Sprintf("%v/%v", p, typ), func(t *testing.T) {
				cols := 96 // a multiple of every legacy block
				if typ.BlockElems() > cols {
					cols = 2 * typ.BlockElems() // K-quants: two super-blocks
				}
				tab, err := Quantize(typ, 11, cols, randFloats(rng, 11*cols, 1))
				require.NoError(t, err)
				toks := []int32{3, 0, 10, 3}
				out, ref := make([]float32, len(toks)*cols), make([]float32, len(toks)*cols)
				require.NoError(t, embeddingPath(p, out, tab, toks))
				RefEmbedding(ref, tab, toks)
				require.Equal(t, ref, out, "dequantisation is exact")
				require.ErrorContains(t, embeddingPath(p, out[:cols], tab, []int32{11}), "token 11 (index 0) outside vocabulary of 11")
			})
		}
	}
}

// TestHalfExhaustive checks all 65536 halves and bfloat16s: the Go
// conversions against the C ones on every path, and the round trip.
func TestHalfExhaustive(t *testing.T) {
	for _, typ := range []DType{F16, BF16} {
		data := make([]byte, 2*65536)
		for i := 0; i < 65536; i++ {
			data[2*i], data[2*i+1] = byte(i), byte(i>>8)
		}
		tab := Matrix{Type: typ, Rows: 1, Cols: 65536, Data: data}
		for _, p := range SupportedPaths() {
			out := make([]float32, 65536)
			require.NoError(t, embeddingPath(p, out, tab, []int32{0}))
			// Plain comparisons, require only on a mismatch: 131072
			// require calls would dominate the test under -race.
			for i := range out {
				want := tab.At(0, i)
				if math.IsNaN(float64(want)) {
					if !math.IsNaN(float64(out[i])) {
						require.Failf(t, "NaN lost", "%v %v: %#04x gave %v", typ, p, i, out[i])
					}
					continue
				}
				if math.Float32bits(want) != math.Float32bits(out[i]) {
					require.Equal(t, math.Float32bits(want), math.Float32bits(out[i]), "%v %v: %#04x", typ, p, i)
				}
				back := F32ToBF16(want)
				if typ == F16 {
					back = F32ToF16(want)
				}
				if back != uint16(i) {
					require.Equal(t, uint16(i), back, "%v round trip %#04x", typ, i)
				}
			}
		}
	}
	require.Equal(t, uint16(0x3c00), F32ToF16(1))
	require.Equal(t, uint16(0x7c00), F32ToF16(70000), "overflow to +Inf")
	require.Equal(t, uint16(0x0001), F32ToF16(6e-8), "rounds to the smallest subnormal")
	require.Equal(t, uint16(0x3f80), F32ToBF16(1))
}

func TestKVWrite(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	l := &KVLayer{NumBlocks: 5, KVHeads: 2, BlockSize: 4, HeadDim: 3}
	l.K, l.V = make([]float32, 5*2*4*3), make([]float32, 5*2*4*3)
	table := []int32{4, 1, 3}
	pos := []int32{0, 1, 5, 11}
	k, v := randFloats(rng, 4*6, 1), randFloats(rng, 4*6, 1)
	require.NoError(t, KVWrite(l, k, v, pos, table))
	for i, p := range pos {
		blk, slot := int(table[p/4]), int(p)%4
		for h := 0; h < 2; h++ {
			off := ((blk*2+h)*4 + slot) * 3
			require.Equal(t, k[i*6+h*3:i*6+h*3+3], l.K[off:off+3])
			require.Equal(t, v[i*6+h*3:i*6+h*3+3], l.V[off:off+3])
		}
	}
	require.ErrorContains(t, KVWrite(l, k[:6], v[:6], []int32{12}, table), "position 12 needs block table entry 3")
	require.ErrorContains(t, KVWrite(l, k[:6], v[:6], []int32{0}, []int32{5}), "layer 5 blocks")
	require.ErrorContains(t, KVWrite(l, k[:5], v[:6], []int32{0}, table), "k=5")
	require.ErrorContains(t, KVWrite(&KVLayer{NumBlocks: 1, KVHeads: 1, BlockSize: 1, HeadDim: 1}, nil, nil, nil, nil), "K=0")
}

// attnSeqShape is one sequence of a batch: numQ new queries at the end of
// a context of ctx positions.
type attnSeqShape struct{ numQ, ctx int }

// attnCase is a paged-attention batch with its dense reference result.
type attnCase struct {
	name  string
	l     *KVLayer
	q     []float32
	seqs  []AttnSeq
	heads int
	want  []float32
	tol   float64
}

// newAttnCase writes every sequence's dense K/V into a paged layer through a
// shuffled block table, and computes the expected output with RefAttention
// on the dense arrays.
func newAttnCase(t *testing.T, rng *rand.Rand, blockSize, kvHeads, group, hd int, shapes []attnSeqShape) attnCase {
	heads := kvHeads * group
	totalBlocks, totalQ, maxCtx := 0, 0, 0
	for _, s := range shapes {
		totalBlocks += ceilDiv(s.ctx, blockSize)
		totalQ += s.numQ
		maxCtx = max(maxCtx, s.ctx)
	}
	numBlocks := totalBlocks + 3 // spare blocks hold garbage and stay unused
	l := &KVLayer{NumBlocks: numBlocks, KVHeads: kvHeads, BlockSize: blockSize, HeadDim: hd}
	l.K = randFloats(rng, numBlocks*kvHeads*blockSize*hd, 1)
	l.V = randFloats(rng, numBlocks*kvHeads*blockSize*hd, 1)
	perm := rng.Perm(numBlocks)
	row, kvRow := heads*hd, kvHeads*hd
	c := attnCase{
		name: fmt.Sprintf("block=%d/group=%d/hd=%d", blockSize, group, hd),
		l:    l, q: randFloats(rng, totalQ*row, 1), seqs: make([]AttnSeq, len(shapes)),
		heads: heads, want: make([]float32, totalQ*row),
		// Outputs are convex combinations of V rows (|V| ≤ 1): float32 dot
		// products (hd terms), expf (≤ 1 ulp) and a ctx-term weighted sum
		// give an absolute error ≤ (hd + ctx + 8)·2u.
		tol: float64(hd+maxCtx+8) * 2 * unitRoundoff,
	}
	next, qRow := 0, 0
	for i, s := range shapes {
		table := make([]int32, ceilDiv(s.ctx, blockSize))
		for b := range table {
			table[b] = int32(perm[next])
			next++
		}
		k, v := randFloats(rng, s.ctx*kvRow, 1), randFloats(rng, s.ctx*kvRow, 1)
		pos := make([]int32, s.ctx)
		for p := range pos {
			pos[p] = int32(p)
		}
		require.NoError(t, KVWrite(l, k, v, pos, table))
		c.seqs[i] = AttnSeq{QStart: int32(qRow), NumQ: int32(s.numQ), ContextLen: int32(s.ctx), BlockTable: table}
		lo, hi := qRow*row, (qRow+s.numQ)*row
		RefAttention(c.want[lo:hi], c.q[lo:hi], k, v, s.numQ, s.ctx, heads, kvHeads, hd, 0.3)
		qRow += s.numQ
	}
	ref := make([]float32, len(c.q))
	require.NoError(t, RefPagedAttention(ref, c.q, l, c.seqs, heads, 0.3))
	require.InDeltaSlice(t, c.want, ref, 1e-6, "RefPagedAttention equals dense attention")
	return c
}

func (c attnCase) check(t *testing.T, w *Workers) {
	t.Helper()
	out := make([]float32, len(c.q))
	require.NoError(t, w.PagedAttention(out, c.q, c.l, c.seqs, c.heads, 0.3))
	row := c.heads * c.l.HeadDim
	for i := range out {
		if !(math.Abs(float64(out[i]-c.want[i])) <= c.tol) {
			require.InDelta(t, c.want[i], out[i], c.tol, "%s: out[%d] (row %d)", c.name, i, i/row)
		}
	}
}

func TestPagedAttention(t *testing.T) {
	// Decode (1 query), a whole prefill, a chunk of a prefill, a prefill
	// longer than one query tile, and contexts spanning many blocks; 11
	// queries are an AVX-512 lane tile with lanes to spare.
	mixed := []attnSeqShape{{1, 1}, {1, 37}, {20, 20}, {5, 70}, {1, 130}, {11, 50}}
	rng := rand.New(rand.NewPCG(13, 14))
	var cases []attnCase
	for _, bs := range []int{1, 16, 64} {
		for _, group := range []int{1, 2, 4, 8} {
			for _, hd := range []int{8, 20, 40, 64} { // 8 and 64: model sizes; 20, 40: tails
				cases = append(cases, newAttnCase(t, rng, bs, 2, group, hd, mixed))
			}
		}
	}
	forEachPath(t, func(t *testing.T, w *Workers) {
		for _, c := range cases {
			c.check(t, w)
		}
	})
}

func TestPagedAttentionErrors(t *testing.T) {
	w := NewWorkers(1)
	defer w.Close()
	l := &KVLayer{NumBlocks: 2, KVHeads: 2, BlockSize: 4, HeadDim: 8, K: make([]float32, 128), V: make([]float32, 128)}
	q := make([]float32, 2*4*8)
	cases := []struct {
		name  string
		seqs  []AttnSeq
		heads int
		q     []float32
		want  string
	}{
		{"heads", nil, 3, make([]float32, 24), "heads=3 is not a positive multiple of kvHeads=2"},
		{"rows", []AttnSeq{{QStart: 1, NumQ: 2, ContextLen: 2, BlockTable: []int32{0}}}, 4, q, "queries [1, 3) outside the 2 q rows"},
		{"ctx", []AttnSeq{{NumQ: 2, ContextLen: 1, BlockTable: []int32{0}}}, 4, q, "context 1 shorter than its 2 queries"},
		{"table", []AttnSeq{{NumQ: 1, ContextLen: 5, BlockTable: []int32{0}}}, 4, q, "block table has 1 blocks, 5 positions need 2"},
		{"block id", []AttnSeq{{NumQ: 1, ContextLen: 1, BlockTable: []int32{2}}}, 4, q, "entry 0 is block 2, layer has 2"},
		{"q size", nil, 4, make([]float32, 33), "q has 33 floats"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := make([]float32, len(c.q))
			require.ErrorContains(t, w.PagedAttention(out, c.q, l, c.seqs, c.heads, 1), c.want)
		})
	}
}

// TestNoAllocs checks the hot paths reuse the pool's scratch.
func TestNoAllocs(t *testing.T) {
	w := NewWorkers(2)
	defer w.Close()
	rng := rand.New(rand.NewPCG(15, 16))
	W, err := Quantize(BF16, 64, 96, randFloats(rng, 64*96, 1))
	require.NoError(t, err)
	x, y := randFloats(rng, 8*256, 1), make([]float32, 8*64)
	Wq, err := Quantize(Q4_K, 64, 256, randFloats(rng, 64*256, 1))
	require.NoError(t, err)
	xl, yl := randFloats(rng, 40*96, 1), make([]float32, 40*64)
	l := &KVLayer{NumBlocks: 4, KVHeads: 2, BlockSize: 16, HeadDim: 16}
	l.K, l.V = randFloats(rng, 4*2*16*16, 1), randFloats(rng, 4*2*16*16, 1)
	q, out := randFloats(rng, 3*4*16, 1), make([]float32, 3*4*16)
	seqs := []AttnSeq{{QStart: 0, NumQ: 2, ContextLen: 40, BlockTable: []int32{3, 1, 0}}, {QStart: 2, NumQ: 1, ContextLen: 5, BlockTable: []int32{2}}}
	ops := map[string]func(){
		"gemm":      func() { _ = w.MatMul(y, x[:8*96], 8, W) },
		"gemv":      func() { _ = w.MatMul(y[:64], x[:96], 1, W) },
		"int8":      func() { _ = w.MatMul(y, x[:8*256], 8, Wq) },
		"gemm-bf16": func() { _ = w.MatMul(yl, xl, 40, W) },
		"attn":      func() { _ = w.PagedAttention(out, q, l, seqs, 4, 0.25) },
		"norm":      func() { _ = w.RMSNorm(x[:8*96], x[:8*96], x[:96], 8, 96, 1e-5) },
	}
	l16 := kvAs(l, F16)
	ops["attn f16"] = func() { _ = w.PagedAttention(out, q, l16, seqs, 4, 0.25) }
	pos, table := []int32{3, 4}, []int32{2}
	ops["kv write f16"] = func() { _ = KVWrite(l16, x[:2*32], x[:2*32], pos, table) }
	for name, op := range ops {
		op() // warm the scratch
		require.Zero(t, testing.AllocsPerRun(20, op), name)
	}
}

func TestProbes(t *testing.T) {
	w := NewWorkers(2)
	defer w.Close()
	flopsPerIter := map[Path]float64{Portable: 32, AVX2: 192, AVX512: 512}
	for _, p := range SupportedPaths() {
		for _, cores := range []int{1, 2} {
			f, err := w.FMAProbe(p, cores, 1000)
			require.NoError(t, err)
			require.Equal(t, float64(cores)*1000*flopsPerIter[p], f, "%v on %d cores", p, cores)
		}
	}
	_, err := w.FMAProbe(Portable, 3, 10)
	require.ErrorContains(t, err, "FMAProbe on 3 cores, pool has 2")
	buf := make([]float32, 1001)
	for i := range buf {
		buf[i] = 1
	}
	for _, p := range SupportedPaths() {
		require.NoError(t, w.SetPath(p))
		for _, cores := range []int{1, 2} {
			s, err := w.ReadProbe(buf, cores)
			require.NoError(t, err)
			require.Equal(t, float32(1001), s, "%v on %d cores", p, cores)
		}
	}
}

// TestConcurrentCallers checks that calls from several goroutines on one
// pool are serialised (run with -race).
func TestConcurrentCallers(t *testing.T) {
	w := NewWorkers(2)
	defer w.Close()
	c := newMMCase(t, rand.New(rand.NewPCG(17, 18)), F16, 7, 40, 50)
	done := make(chan struct{})
	for g := 0; g < 4; g++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 5; i++ {
				c.check(t, w)
			}
		}()
	}
	for g := 0; g < 4; g++ {
		<-done
	}
}

// RoPEFreqs matches its reference in both pair layouts, equals RoPE with
// the plain table, and NEOX is the adjacent layout under the permutation
// that interleaves the two halves of each head.
func TestRoPEFreqs(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	cases := []struct {
		name      string
		heads, hd int
		neox      bool
		positions []int32
	}{
		{"adjacent", 3, 8, false, []int32{0, 7, 4095}},
		{"neox", 2, 16, true, []int32{1, 100000}},
		{"neox hd2", 1, 2, true, []int32{3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			freqs := RopeFreqs(c.hd, 10000, 0.5)
			for i := range freqs {
				freqs[i] /= 1 + float64(i) // per-dimension factors
			}
			x := randFloats(rng, len(c.positions)*c.heads*c.hd, 1)
			ref := append([]float32(nil), x...)
			require.NoError(t, RoPEFreqs(x, c.positions, c.heads, c.hd, freqs, c.neox))
			RefRoPEFreqs(ref, c.positions, c.heads, c.hd, freqs, c.neox)
			for i := range x {
				require.InDelta(t, ref[i], x[i], 4*2*unitRoundoff*1.5, "element %d", i)
			}
		})
	}
	pos := []int32{0, 5, 77}
	const heads, hd = 2, 8
	x := randFloats(rng, len(pos)*heads*hd, 1)
	plain := append([]float32(nil), x...)
	require.NoError(t, RoPE(plain, pos, heads, hd, 10000, 1))
	viaFreqs := append([]float32(nil), x...)
	require.NoError(t, RoPEFreqs(viaFreqs, pos, heads, hd, RopeFreqs(hd, 10000, 1), false))
	require.Equal(t, plain, viaFreqs)
	// perm[j] is where adjacent-layout element j sits in the NEOX layout.
	perm := func(j int) int {
		if j%2 == 0 {
			return j / 2
		}
		return hd/2 + j/2
	}
	neox := make([]float32, len(x))
	for r := 0; r < len(pos)*heads; r++ {
		for j := 0; j < hd; j++ {
			neox[r*hd+perm(j)] = x[r*hd+j]
		}
	}
	require.NoError(t, RoPEFreqs(neox, pos, heads, hd, RopeFreqs(hd, 10000, 1), true))
	for r := 0; r < len(pos)*heads; r++ {
		for j := 0; j < hd; j++ {
			require.Equal(t, plain[r*hd+j], neox[r*hd+perm(j)])
		}
	}
	require.ErrorContains(t, RoPEFreqs(make([]float32, 8), []int32{0}, 1, 8, make([]float64, 3), false), "3 frequencies, want headDim/2 = 4")
	require.ErrorContains(t, RoPEFreqs(make([]float32, 5), []int32{0}, 1, 5, nil, false), "even headDim")
	require.ErrorContains(t, RoPEFreqs(make([]float32, 7), []int32{0}, 1, 6, make([]float64, 3), true), "x has 7 floats")
}
