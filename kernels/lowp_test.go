package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// lowpTypes are the weight types with low-precision-activation kernels.
var lowpTypes = []DType{BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K}

// lowpConfig is one kernel variant: a path and the extensions it may use.
type lowpConfig struct {
	path Path
	feat Features
}

// lowpConfigs lists every distinct low-precision variant this CPU runs:
// each path with all its extensions, then with the AVX512-VNNI and then
// every extension withheld (the AVX-VNNI and AVX2 maddubs fallbacks, and
// BF16 weights back on the float32 path).
func lowpConfigs() []lowpConfig {
	var out []lowpConfig
	sup := SupportedFeatures()
	for _, p := range SupportedPaths() {
		seen := map[Features]bool{}
		for _, f := range []Features{sup, sup &^ FeatAVX512VNNI, 0} {
			if p == Portable && f != 0 || seen[f] {
				continue
			}
			seen[f] = true
			out = append(out, lowpConfig{p, f})
		}
	}
	return out
}

// lowpCase is mmCase with the bound of the activation rounding added to
// the float32 one.
func lowpCase(t *testing.T, rng *rand.Rand, W Matrix, m int) mmCase {
	k, n := W.Cols, W.Rows
	c := mmCase{W: W, x: randFloats(rng, m*k, 2), m: m, want: make([]float32, m*n), tol: make([]float64, m*n)}
	require.NoError(t, RefMatMul(c.want, c.x, m, W))
	be := 32
	switch W.Type {
	case BF16, F32, F16: // bf16, or no rounding: act unused
		be = 1
	case Q2_K, Q3_K, Q4_K, Q5_K, Q6_K:
		be = 256
	}
	rb := W.rowBytes()
	wf := make([]float32, k)
	for j := 0; j < n; j++ {
		W.Row(j, wf)
		for i := 0; i < m; i++ {
			xr := c.x[i*k : (i+1)*k]
			var mag, act, dec float64
			for b0 := 0; b0 < k; b0 += be {
				var amax, wsum float64
				for col := b0; col < b0+be; col++ {
					amax = max(amax, math.Abs(float64(xr[col])))
					wsum += math.Abs(float64(wf[col]))
					mag += math.Abs(float64(xr[col]) * float64(wf[col]))
				}
				// int8: |x − q·d| ≤ d/2, d = max|x|/127, per block.
				act += amax / 254 * wsum
				// Types with mins: the integer dot takes d·sc·q − dmin·m (K)
				// or d·q + m (Q4_1, Q5_1) unrounded; the reference rounds
				// both terms: 2u of the min term per element (min ≤ 63·dmin
				// for Q4_K/Q5_K, 15·dmin for Q2_K, |m| for Q4_1/Q5_1).
				var minMax float64
				blk := W.Data[j*rb+b0/be*tkBlockBytes(W.Type):]
				switch W.Type {
				case Q4_K, Q5_K:
					minMax = 63 * math.Abs(float64(F16ToF32(binary.LittleEndian.Uint16(blk[2:]))))
				case Q2_K:
					minMax = 15 * math.Abs(float64(F16ToF32(binary.LittleEndian.Uint16(blk[82:]))))
				case Q4_1, Q5_1:
					minMax = math.Abs(float64(F16ToF32(binary.LittleEndian.Uint16(blk[2:]))))
				}
				for col := b0; col < b0+be; col++ {
					dec += 2 * unitRoundoff * math.Abs(float64(xr[col])) * minMax
				}
			}
			switch W.Type {
			case BF16:
				act = mag / 256 // bf16 rounding: relative 2^-8 per x
			case F32, F16:
				act = 0
			}
			c.tol[i*n+j] = 1.01*act + dec + float64(k+16)*unitRoundoff*mag + 1e-30
		}
	}
	return c
}

// tkBlockBytes is the bytes of one block of t.
func tkBlockBytes(t DType) int {
	rb, _ := t.RowBytes(t.BlockElems())
	return rb
}

// TestMatMulLowPrecision runs the bf16 and int8 activation kernels of every
// variant this CPU has on quantised Gaussian-ish weights and on random-bit
// blocks, at every row count from GEMV to the packed GEMM, against
// RefMatMul within the rounding bound (lowpCase): per output, bf16:
// 2^-8·Σ|x·w|; int8: Σ_blocks (max|x|/254)·Σ|w|; plus (k+16)·u·Σ|x·w|
// for float32 summation.
func TestMatMulLowPrecision(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	shapes := []struct{ m, k, n int }{
		{1, 256, 9}, {1, 768, 40}, {1, 512, 33}, {2, 512, 13}, {3, 256, 7}, {4, 768, 11},
		{5, 256, 30}, {13, 512, 25}, {9, 1280, 20}, {32, 1024, 50}, {40, 512, 37},
	}
	var cases []mmCase
	for _, typ := range lowpTypes {
		for _, s := range shapes {
			W, err := Quantize(typ, s.n, s.k, randFloats(rng, s.n*s.k, 1))
			require.NoError(t, err)
			cases = append(cases, lowpCase(t, rng, W, s.m))
			if typ != BF16 {
				cases = append(cases, lowpCase(t, rng, randomBitsMatrix(rng, typ, s.n, s.k), s.m))
			}
		}
	}
	// Legacy types at depths of an odd block count (the 512-bit kernels'
	// 256-bit tail) and of 2 mod 4 blocks (past the small tiles' pairs of
	// block pairs).
	for _, typ := range []DType{Q8_0, Q4_0, Q4_1, Q5_0, Q5_1} {
		for _, s := range []struct{ m, k, n int }{{1, 800, 7}, {2, 96, 5}, {1, 64, 3}, {3, 32, 4}, {6, 416, 9}} {
			cases = append(cases, lowpCase(t, rng, randomBitsMatrix(rng, typ, s.n, s.k), s.m))
		}
	}
	// BF16 at odd depths and a depth past one 4096 chunk.
	for _, s := range []struct{ m, k, n int }{{1, 37, 5}, {6, 101, 9}, {33, 37, 40}, {2, 4200, 5}, {100, 264, 97}} {
		W, err := Quantize(BF16, s.n, s.k, randFloats(rng, s.n*s.k, 1))
		require.NoError(t, err)
		cases = append(cases, lowpCase(t, rng, W, s.m))
	}
	for _, cfg := range lowpConfigs() {
		for _, nw := range []int{1, 3} {
			t.Run(fmt.Sprintf("%v/%v/workers=%d", cfg.path, cfg.feat, nw), func(t *testing.T) {
				w := NewWorkers(nw)
				defer w.Close()
				require.NoError(t, w.SetPath(cfg.path))
				require.NoError(t, w.SetFeatures(cfg.feat))
				for _, c := range cases {
					c.check(t, w)
				}
			})
		}
	}
}

// TestLowPrecisionChoice: which rounding MatMul picks, and SetExact.
func TestLowPrecisionChoice(t *testing.T) {
	w := NewWorkers(1)
	defer w.Close()
	bf := Matrix{Type: BF16, Rows: 4, Cols: 33}
	q := Matrix{Type: Q4_K, Rows: 4, Cols: 256}
	want := func(m int, W Matrix) string {
		if W.Type == BF16 {
			if w.Path() == AVX512 && SupportedFeatures()&FeatAVX512BF16 != 0 && (m <= 32 || W.Cols%2 == 0) {
				return "bf16"
			}
			return "f32"
		}
		if W.Type != F32 && (m <= 32 || (W.Type == Q4_K || W.Type == Q5_K) && w.Path() != Portable) {
			return "int8"
		}
		return "f32"
	}
	for _, c := range []struct {
		W Matrix
		m int
	}{{bf, 1}, {bf, 32}, {bf, 33}, {Matrix{Type: BF16, Rows: 4, Cols: 34}, 33}, {q, 1}, {q, 32}, {q, 33}, {Matrix{Type: Q6_K, Rows: 4, Cols: 256}, 33},
		{Matrix{Type: Q4_1, Rows: 4, Cols: 32}, 1}, {Matrix{Type: F32, Rows: 4, Cols: 32}, 1}} {
		require.Equal(t, want(c.m, c.W), w.LowPrecision(c.W, c.m), "%v m=%d k=%d", c.W.Type, c.m, c.W.Cols)
	}
	w.SetExact(true)
	require.True(t, w.Exact())
	require.Equal(t, "f32", w.LowPrecision(q, 1))
	require.ErrorContains(t, w.SetFeatures(Features(0x80)), "features 0x80 are not all supported")
}

// TestLowPrecisionError measures the activation rounding's effect on
// MatMul outputs at the 110M model's shapes (x Gaussian-like, as RMSNorm
// output: mean 0, unit variance), per type: max and mean |y − y_ref| over
// the RMS of y_ref (y_ref: RefMatMul, float32 activations), and checks
// them against loose ceilings (bf16: 2^-8 relative per product, int8:
// about 1/254 of a block's max).
func TestLowPrecisionError(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	w := NewWorkers(2)
	defer w.Close()
	const m = 8
	for _, typ := range lowpTypes {
		for _, s := range []struct{ k, n int }{{768, 768}, {2048, 768}} {
			vals := make([]float32, s.n*s.k)
			for i := range vals {
				vals[i] = float32(rng.NormFloat64()) * 0.02
			}
			W, err := Quantize(typ, s.n, s.k, vals)
			require.NoError(t, err)
			x := make([]float32, m*s.k)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			ref, got := make([]float32, m*s.n), make([]float32, m*s.n)
			require.NoError(t, RefMatMul(ref, x, m, W))
			require.NoError(t, w.MatMul(got, x, m, W))
			var ss, maxd, sumd float64
			for i := range ref {
				ss += float64(ref[i]) * float64(ref[i])
				d := math.Abs(float64(got[i] - ref[i]))
				maxd = max(maxd, d)
				sumd += d
			}
			rms := math.Sqrt(ss / float64(len(ref)))
			t.Logf("%v k=%d n=%d (%s activations): max %.3g, mean %.3g of rms(y)", typ, s.k, s.n, w.LowPrecision(W, m), maxd/rms, sumd/float64(len(ref))/rms)
			require.Less(t, maxd/rms, 0.05, "%v k=%d", typ, s.k)
			require.Less(t, sumd/float64(len(ref))/rms, 0.01, "%v k=%d", typ, s.k)
		}
	}
}
