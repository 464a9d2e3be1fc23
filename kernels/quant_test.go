package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// blockTypes are the block-quantised weight types.
var blockTypes = []DType{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K}

// f16Fields are the byte offsets of each block type's F16 scale fields.
var f16Fields = map[DType][]int{Q4_0: {0}, Q4_1: {0, 2}, Q5_0: {0}, Q5_1: {0, 2}, Q8_0: {0},
	Q2_K: {80, 82}, Q3_K: {108}, Q4_K: {0, 2}, Q5_K: {0, 2}, Q6_K: {208}}

// randomBitsMatrix is a rows x cols matrix of type t whose bytes are random
// (every bit pattern of quants and packed scales), except that each F16
// scale has its top exponent bit cleared so every weight is finite
// (|scale| < 2, subnormals included).
func randomBitsMatrix(rng *rand.Rand, t DType, rows, cols int) Matrix {
	rb, _ := t.RowBytes(cols)
	data := make([]byte, rows*rb)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	bb := rb / (cols / t.BlockElems())
	for b := 0; b < len(data)/bb; b++ {
		for _, off := range f16Fields[t] {
			data[b*bb+off+1] &= 0xbf
		}
	}
	return Matrix{Type: t, Rows: rows, Cols: cols, Data: data}
}

// TestBlockDecodeExact checks that every path's C block decoders produce
// exactly the Go reference's floats (which model/gguf's tests check
// against ggml's) on random blocks.
func TestBlockDecodeExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, typ := range blockTypes {
		const rows, cols = 7, 512
		W := randomBitsMatrix(rng, typ, rows, cols)
		toks := []int32{0, 1, 2, 3, 4, 5, 6, 3}
		ref := make([]float32, len(toks)*cols)
		RefEmbedding(ref, W, toks)
		for c := 0; c < cols; c += 37 {
			require.Equal(t, math.Float32bits(ref[c]), math.Float32bits(W.At(0, c)), "%v At(0, %d)", typ, c)
		}
		for _, p := range SupportedPaths() {
			out := make([]float32, len(ref))
			require.NoError(t, embeddingPath(p, out, W, toks))
			for i := range out {
				if math.Float32bits(out[i]) != math.Float32bits(ref[i]) {
					require.Equal(t, ref[i], out[i], "%v %v: row %d col %d", typ, p, toks[i/cols], i%cols)
				}
			}
		}
	}
}

// TestMatMulBlockRandomBits runs every block type, with random-bit blocks,
// through the GEMV (m ≤ 4), streaming (5..32) and packed GEMM (> 32) paths
// of every ISA, against RefMatMul. The C kernels see exactly the reference's
// weights (TestBlockDecodeExact), so the tolerance is newMMCase's
// float32-accumulation bound, (k+2)·u·Σ|x·w|.
func TestMatMulBlockRandomBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	shapes := []struct{ m, k, n int }{{1, 512, 9}, {3, 256, 20}, {4, 768, 5}, {7, 1024, 31}, {32, 2304, 6}, {40, 512, 37}}
	var cases []mmCase
	for _, typ := range blockTypes {
		for _, s := range shapes {
			W := randomBitsMatrix(rng, typ, s.n, s.k)
			cases = append(cases, mmCaseFor(t, rng, W, s.m))
		}
	}
	forEachPath(t, func(t *testing.T, w *Workers) {
		for _, c := range cases {
			c.check(t, w)
		}
	})
}

// mmCaseFor is newMMCase for a given matrix.
func mmCaseFor(t *testing.T, rng *rand.Rand, W Matrix, m int) mmCase {
	k, n := W.Cols, W.Rows
	c := mmCase{W: W, x: randFloats(rng, m*k, 2), m: m, want: make([]float32, m*n), tol: make([]float64, m*n)}
	require.NoError(t, RefMatMul(c.want, c.x, m, W))
	wf := make([]float32, k)
	for j := 0; j < n; j++ {
		W.Row(j, wf)
		for i := 0; i < m; i++ {
			var mag float64
			for col, a := range wf {
				mag += math.Abs(float64(c.x[i*k+col]) * float64(a))
			}
			c.tol[i*n+j] = float64(k+2)*unitRoundoff*mag + 1e-30
		}
	}
	return c
}

func TestBlockTypeErrors(t *testing.T) {
	for _, tc := range []struct {
		typ  DType
		cols int
		want string
	}{
		{Q4_0, 48, "Q4_0 row of 48 columns is not a multiple of 32"},
		{Q4_K, 288, "Q4_K row of 288 columns is not a multiple of 256"},
		{Q6_K, 32, "Q6_K row of 32 columns is not a multiple of 256"},
		{DType(15), 256, "unsupported weight type DType(15)"},
	} {
		_, err := tc.typ.RowBytes(tc.cols)
		require.ErrorContains(t, err, tc.want)
	}
	W := Matrix{Type: Q5_K, Rows: 2, Cols: 256, Data: make([]byte, 176)}
	require.ErrorContains(t, W.Validate(), "Q5_K matrix 2x256 needs 352 bytes, Data has 176")
}

// BenchmarkGEMVQuant is decode (m=1) over about 256 MiB of weights of each
// type (8× the LLC): bytes/s of weights streamed, and that as a fraction
// of the read bandwidth measured in the same run on a 256 MiB buffer
// (frac_bw), with float32 activations (exact) and, where the type has
// them, the low-precision ones (lowp: bf16 or int8), side by side.
func BenchmarkGEMVQuant(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 5))
	const k, target = 8192, 256 << 20
	bw := make([]float32, target/4)
	for i := range bw {
		bw[i] = 1
	}
	for _, typ := range append([]DType{F32, BF16}, blockTypes...) {
		rb, _ := typ.RowBytes(k)
		n := target / rb
		var W Matrix
		if typ == F32 || typ == BF16 {
			W = streamMatrix(typ, n, k)
		} else {
			W = randomBitsMatrix(rng, typ, n, k)
		}
		x, y := randFloats(rng, k, 1), make([]float32, n)
		for _, cores := range benchCores() {
			for _, exact := range []bool{true, false} {
				w := NewWorkers(cores)
				w.SetExact(exact)
				mode := w.LowPrecision(W, 1)
				if !exact && mode == "f32" {
					w.Close()
					continue
				}
				b.Run(fmt.Sprintf("%v/k=%d,n=%d/cores=%d/%s", typ, k, n, cores, mode), func(b *testing.B) {
					roof := measureBandwidth(b, w, bw, cores)
					b.SetBytes(int64(len(W.Data)))
					best, _ := loop(b, func() error { return w.MatMul(y, x, 1, W) })
					b.ReportMetric(float64(len(W.Data))/best.Seconds()/1e9, "best_GB/s")
					b.ReportMetric(float64(n*k)/best.Seconds()/1e9, "best_Gweights/s")
					b.ReportMetric(roof, "roof_GB/s")
					b.ReportMetric(float64(len(W.Data))/best.Seconds()/1e9/roof, "frac_bw")
				})
				w.Close()
			}
		}
	}
}
