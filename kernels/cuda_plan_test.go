package kernels

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKVMemoryPlan(t *testing.T) {
	const gib = 1 << 30
	base := KVMemoryPlan{Total: 80 * gib, Free: 79 * gib, Fraction: 0.9, Weights: 16 * gib, PeakActivated: 2 * gib,
		Layers: 32, KVHeads: 8, BlockSize: 16, HeadDim: 128, BF16: true}
	require.Equal(t, uint64(2*32*8*16*128*2), base.BlockBytes())
	cases := []struct {
		name    string
		mod     func(p *KVMemoryPlan)
		want    int
		wantErr string
	}{
		// 0.9·80 GiB = 72 GiB; 1 GiB used elsewhere, 16 weights, 2 activations: 53 GiB of 2 MiB blocks.
		{"llama-8b bf16", func(p *KVMemoryPlan) {}, 53 * 512, ""},
		{"f32 halves the blocks", func(p *KVMemoryPlan) { p.BF16 = false }, 53 * 256, ""},
		{"full device", func(p *KVMemoryPlan) { p.Fraction = 1 }, 61 * 512, ""},
		{"no room", func(p *KVMemoryPlan) { p.Weights = 70 * gib }, 0, "no room for the KV cache"},
		{"fraction zero", func(p *KVMemoryPlan) { p.Fraction = 0 }, 0, "--gpu-memory-fraction 0"},
		{"fraction above one", func(p *KVMemoryPlan) { p.Fraction = 1.5 }, 0, "--gpu-memory-fraction 1.5"},
		{"free above total", func(p *KVMemoryPlan) { p.Free = 81 * gib }, 0, "exceeds total"},
		{"bad shape", func(p *KVMemoryPlan) { p.HeadDim = 0 }, 0, "headDim=0"},
		{"less than a block", func(p *KVMemoryPlan) { p.Weights = 72*gib - 1*gib - 2*gib - 1024 }, 0, "hold no"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := base
			tc.mod(&p)
			got, err := p.Blocks()
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestGraphBatchSizes(t *testing.T) {
	cases := []struct {
		max  int
		want []int
	}{
		{1, []int{1}},
		{2, []int{1, 2}},
		{8, []int{1, 2, 4, 8}},
		{48, []int{1, 2, 4, 8, 16, 32, 48}},
	}
	for _, tc := range cases {
		got, err := GraphBatchSizes(tc.max)
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
	_, err := GraphBatchSizes(0)
	require.ErrorContains(t, err, "up to 0")

	sizes := []int{1, 2, 4, 8, 16, 32, 48}
	pads := []struct{ n, want int }{{1, 1}, {3, 4}, {4, 4}, {17, 32}, {33, 48}, {48, 48}}
	for _, p := range pads {
		got, err := PadBatch(p.n, sizes)
		require.NoError(t, err)
		require.Equal(t, p.want, got, "n=%d", p.n)
	}
	for _, n := range []int{0, 49, -1} {
		_, err := PadBatch(n, sizes)
		require.ErrorContains(t, err, "no captured graph")
	}
}

func FuzzPadBatch(f *testing.F) {
	f.Add(37, 5)
	f.Add(64, 64)
	f.Add(1, 1)
	f.Fuzz(func(t *testing.T, maxBatch, n int) {
		if maxBatch <= 0 || maxBatch > 1<<16 {
			return
		}
		sizes, err := GraphBatchSizes(maxBatch)
		require.NoError(t, err)
		require.Equal(t, maxBatch, sizes[len(sizes)-1])
		got, err := PadBatch(n, sizes)
		if n <= 0 || n > maxBatch {
			require.Error(t, err)
			return
		}
		require.NoError(t, err)
		require.GreaterOrEqual(t, got, n)
		require.Less(t, got, 2*n+1, "padding at most doubles the batch")
	})
}
