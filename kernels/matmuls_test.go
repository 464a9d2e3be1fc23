package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMatMuls checks that MatMuls writes exactly what separate MatMul calls
// write, fused (float paths and bf16 activations at m ≤ 32, int8
// activations) or not (packed GEMM), for one to three matrices of
// different heights, in one tile or many.
func TestMatMuls(t *testing.T) {
	cases := []struct {
		name  string
		typ   DType
		exact bool
		m, k  int
		rows  []int
	}{
		{"f32 gemv q/k/v", F32, true, 1, 96, []int{96, 48, 48}},
		{"f16 gemv gate/up", F16, true, 3, 64, []int{200, 200}},
		{"bf16 gemv one", BF16, true, 4, 40, []int{70}},
		{"f32 stream three", F32, true, 5, 64, []int{30, 71, 25}},
		{"f16 stream largest m", F16, true, 32, 128, []int{50, 50, 50}},
		{"f32 packed gemm (not fused)", F32, true, 33, 40, []int{30, 31}},
		{"q8_0 exact (fused)", Q8_0, true, 2, 64, []int{40, 72}},
		{"q8_0 int8 activations one tile", Q8_0, false, 2, 64, []int{40, 72}},
		{"q8_0 int8 q/k/v", Q8_0, false, 1, 256, []int{300, 100, 100}},
		{"q4_k int8 tile kernel", Q4_K, false, 8, 256, []int{200, 130}},
		{"q6_k int8 gemv", Q6_K, false, 3, 512, []int{97, 160}},
		{"bf16 activations gate/up", BF16, false, 2, 320, []int{250, 250}},
		{"bf16 packed gemm (not fused)", BF16, false, 40, 64, []int{60, 60}},
	}
	rng := rand.New(rand.NewPCG(21, 22))
	for _, n := range []int{1, 3} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/workers=%d", c.name, n), func(t *testing.T) {
				w := NewWorkers(n)
				defer w.Close()
				w.SetExact(c.exact)
				x := randFloats(rng, c.m*c.k, 1)
				var Ws []Matrix
				var ys, want [][]float32
				for _, r := range c.rows {
					W, err := Quantize(c.typ, r, c.k, randFloats(rng, r*c.k, 1))
					require.NoError(t, err)
					y := make([]float32, c.m*r)
					require.NoError(t, w.MatMul(y, x, c.m, W))
					got := make([]float32, c.m*r)
					for i := range got {
						got[i] = float32(math.NaN()) // every element must be written
					}
					Ws, ys, want = append(Ws, W), append(ys, got), append(want, y)
				}
				require.NoError(t, w.MatMuls(ys, x, c.m, Ws))
				for i := range ys {
					require.Equal(t, want[i], ys[i], "matrix %d", i)
				}
			})
		}
	}
}

func TestMatMulsErrors(t *testing.T) {
	w := NewWorkers(2)
	defer w.Close()
	W := Matrix{Type: F32, Rows: 2, Cols: 3, Data: make([]byte, 24)}
	y, x := make([]float32, 2), make([]float32, 3)
	cases := []struct {
		name string
		ys   [][]float32
		x    []float32
		m    int
		Ws   []Matrix
		msg  string
	}{
		{"none", nil, x, 1, nil, "MatMuls with 0 outputs and 0 matrices"},
		{"too many", [][]float32{y, y, y, y}, x, 1, []Matrix{W, W, W, W}, "MatMuls with 4 outputs and 4 matrices"},
		{"counts differ", [][]float32{y}, x, 1, []Matrix{W, W}, "MatMuls with 1 outputs and 2 matrices"},
		{"no rows", [][]float32{y}, x, 0, []Matrix{W}, "MatMuls with m=0 rows"},
		{"bad matrix", [][]float32{y, y}, x, 1, []Matrix{W, {Type: F32, Rows: 2, Cols: 3}}, "MatMuls matrix 1"},
		{"short x", [][]float32{y}, x[:2], 1, []Matrix{W}, "x has 2 floats, want m*Cols = 1*3 = 3 for matrix 0"},
		{"short y", [][]float32{y, y[:1]}, x, 1, []Matrix{W, W}, "y 1 has 1 floats, want m*Rows = 1*2 = 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.ErrorContains(t, w.MatMuls(c.ys, c.x, c.m, c.Ws), c.msg)
		})
	}
	w.Close()
	require.ErrorIs(t, w.MatMuls([][]float32{y}, x, 1, []Matrix{W}), ErrClosed)
}

// TestMatMulsNoAllocs checks that a fused call, with its arguments in
// arrays as the runner passes them, does not allocate.
func TestMatMulsNoAllocs(t *testing.T) {
	w := NewWorkers(2)
	defer w.Close()
	rng := rand.New(rand.NewPCG(23, 24))
	x := randFloats(rng, 2*64, 1)
	a, b := make([]float32, 2*300), make([]float32, 2*300)
	// The float path, and the int8 kernels, whose activations are
	// quantised once.
	for _, typ := range []DType{F16, Q8_0} {
		W, err := Quantize(typ, 300, 64, randFloats(rng, 300*64, 1))
		require.NoError(t, err)
		op := func() {
			ys := [...][]float32{a, b}
			Ws := [...]Matrix{W, W}
			_ = w.MatMuls(ys[:], x, 2, Ws[:])
		}
		op()
		require.Zero(t, testing.AllocsPerRun(20, op), "%v", typ)
	}
}

// TestMatMulsMixedTypes: matrices of different types (or depths) cannot
// share one low-precision job and go one by one, with the same results.
func TestMatMulsMixedTypes(t *testing.T) {
	w := NewWorkers(2)
	defer w.Close()
	rng := rand.New(rand.NewPCG(25, 26))
	x := randFloats(rng, 2*256, 1)
	var Ws []Matrix
	for _, typ := range []DType{Q8_0, Q4_K, BF16} {
		W, err := Quantize(typ, 90, 256, randFloats(rng, 90*256, 1))
		require.NoError(t, err)
		Ws = append(Ws, W)
	}
	ys, want := make([][]float32, 3), make([][]float32, 3)
	for i, W := range Ws {
		want[i], ys[i] = make([]float32, 2*90), make([]float32, 2*90)
		require.NoError(t, w.MatMul(want[i], x, 2, W))
	}
	require.NoError(t, w.MatMuls(ys, x, 2, Ws))
	require.Equal(t, want, ys)
}
