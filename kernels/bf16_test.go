package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMatMulBF16Depths covers the depth chunking of the BF16 kernels: the
// packed GEMM past one TK_BF16_GKC chunk (y accumulated across chunks, a
// partial last 32-column panel, rows not a multiple of MR), the streaming
// path past one 4096 chunk, and whole-row GEMV rows, against RefMatMul
// within lowpCase's bf16 bound.
func TestMatMulBF16Depths(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	shapes := []struct{ m, k, n int }{
		{40, 2100, 35}, {64, 1024, 64}, {37, 3000, 17}, // GEMM: 3, 1 and 3 chunks
		{8, 4200, 9}, {19, 4100, 6}, // streaming: two depth chunks
		{1, 8200, 7}, {3, 1030, 5}, // GEMV: one pass over k, masked last block
	}
	var cases []mmCase
	for _, s := range shapes {
		W, err := Quantize(BF16, s.n, s.k, randFloats(rng, s.n*s.k, 1))
		require.NoError(t, err)
		cases = append(cases, lowpCase(t, rng, W, s.m))
	}
	ran := false
	for _, cfg := range lowpConfigs() {
		if cfg.path != AVX512 || cfg.feat&FeatAVX512BF16 == 0 {
			continue // the bf16 kernels run on the AVX512 path only
		}
		ran = true
		for _, nw := range []int{1, 3} {
			t.Run(fmt.Sprintf("%v/%v/workers=%d", cfg.path, cfg.feat, nw), func(t *testing.T) {
				w := NewWorkers(nw)
				defer w.Close()
				require.NoError(t, w.SetPath(cfg.path))
				require.NoError(t, w.SetFeatures(cfg.feat))
				for _, c := range cases {
					require.Equal(t, "bf16", w.LowPrecision(c.W, c.m))
					c.check(t, w)
				}
			})
		}
	}
	if !ran {
		t.Skip("no AVX512-BF16 on this CPU")
	}
}
