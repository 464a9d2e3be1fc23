package kernels

import (
	"fmt"
	"math"
	"slices"
)

// KVMemoryPlan sizes the GPU KV cache: one allocation holding every layer's K and
// V blocks, from the memory left after weights and the worst-case activations
// of a dry run, within Fraction of the device.
type KVMemoryPlan struct {
	Total, Free   uint64  // device memory in bytes, as cuMemGetInfo reports before loading
	Fraction      float64 // --gpu-memory-fraction, in (0, 1]
	Weights       uint64  // bytes of uploaded weights
	PeakActivated uint64  // bytes the worst-case dry run needed beyond the weights (activations, workspaces, graphs)

	Layers, KVHeads, BlockSize, HeadDim int
	BF16                                bool // element type of the cache: bf16, else float32
}

// BlockBytes is the size of one KV block across all layers (K and V).
func (p KVMemoryPlan) BlockBytes() uint64 {
	elem := uint64(4)
	if p.BF16 {
		elem = 2
	}
	return 2 * uint64(p.Layers) * uint64(p.KVHeads) * uint64(p.BlockSize) * uint64(p.HeadDim) * elem
}

// Blocks is how many KV blocks fit: the budget Fraction·Total, less what other
// processes already use (Total−Free), the weights and the dry run's peak,
// divided by BlockBytes. Errors name the numbers that do not fit.
func (p KVMemoryPlan) Blocks() (int, error) {
	if p.Layers <= 0 || p.KVHeads <= 0 || p.BlockSize <= 0 || p.HeadDim <= 0 {
		return 0, fmt.Errorf("kernels: KV plan shape layers=%d kvHeads=%d blockSize=%d headDim=%d must be positive",
			p.Layers, p.KVHeads, p.BlockSize, p.HeadDim)
	}
	if !(p.Fraction > 0 && p.Fraction <= 1) {
		return 0, fmt.Errorf("kernels: --gpu-memory-fraction %v must be in (0, 1]", p.Fraction)
	}
	if p.Free > p.Total {
		return 0, fmt.Errorf("kernels: free device memory %d exceeds total %d", p.Free, p.Total)
	}
	budget := uint64(math.Floor(p.Fraction * float64(p.Total)))
	need := (p.Total - p.Free) + p.Weights + p.PeakActivated
	if need >= budget {
		return 0, fmt.Errorf("kernels: no room for the KV cache: %.0f%% of %d bytes is %d, but other processes use %d, weights %d and activations %d (together %d)",
			100*p.Fraction, p.Total, budget, p.Total-p.Free, p.Weights, p.PeakActivated, need)
	}
	blocks := (budget - need) / p.BlockBytes()
	if blocks == 0 {
		return 0, fmt.Errorf("kernels: %d bytes left for the KV cache hold no %d-byte block", budget-need, p.BlockBytes())
	}
	return int(min(blocks, uint64(math.MaxInt32))), nil
}

// GraphBatchSizes are the padded decode batch sizes captured as CUDA graphs:
// 1, 2, 4, … up to and including maxBatch (which need not be a power of two).
func GraphBatchSizes(maxBatch int) ([]int, error) {
	if maxBatch <= 0 {
		return nil, fmt.Errorf("kernels: graph batch sizes up to %d: must be positive", maxBatch)
	}
	var sizes []int
	for b := 1; b < maxBatch; b *= 2 {
		sizes = append(sizes, b)
	}
	return append(sizes, maxBatch), nil
}

// PadBatch returns the smallest captured size ≥ n from sizes (ascending).
func PadBatch(n int, sizes []int) (int, error) {
	i, _ := slices.BinarySearch(sizes, n)
	if n <= 0 || i == len(sizes) {
		return 0, fmt.Errorf("kernels: decode batch of %d has no captured graph (sizes %v)", n, sizes)
	}
	return sizes[i], nil
}
