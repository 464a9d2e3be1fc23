package kernels

import (
	"fmt"
	"math"
)

// RMSNorm computes y[r] = x[r] / sqrt(mean(x[r]²) + eps) ⊙ weight for rows
// r < rows; x and y are [rows][dim] (y may alias x), weight is [dim].
func (w *Workers) RMSNorm(y, x, weight []float32, rows, dim int, eps float32) error {
	if rows <= 0 || dim <= 0 {
		return fmt.Errorf("kernels: RMSNorm shape %dx%d must be positive", rows, dim)
	}
	if len(x) != rows*dim || len(y) != rows*dim || len(weight) != dim {
		return fmt.Errorf("kernels: RMSNorm rows=%d dim=%d needs x,y of %d and weight of %d floats, got x=%d y=%d weight=%d",
			rows, dim, rows*dim, dim, len(x), len(y), len(weight))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	// Rows per tile: enough work (~16K floats) to pay for a wake-up.
	per := max(1, min(ceilDiv(rows, w.n), ceilDiv(16384, dim)))
	w.job = job{kind: jobRMSNorm, path: w.path, y: y, x: x, weight: weight, rows: rows, dim: dim, eps: eps, nc: per}
	w.run(ceilDiv(rows, per))
	return nil
}

// RoPE rotates, in place, the adjacent pairs (x[2i], x[2i+1]) of every head
// of every row by angle positions[r]·freqScale·theta^(−2i/headDim) (GGUF
// llama convention; freqScale = 1 means no linear scaling). x is
// [len(positions)][heads*headDim].
func RoPE(x []float32, positions []int32, heads, headDim int, theta, freqScale float32) error {
	if heads <= 0 || headDim <= 0 || headDim%2 != 0 {
		return fmt.Errorf("kernels: RoPE needs heads > 0 and an even headDim, got heads=%d headDim=%d", heads, headDim)
	}
	if len(x) != len(positions)*heads*headDim {
		return fmt.Errorf("kernels: RoPE x has %d floats, want %d rows × %d heads × %d = %d",
			len(x), len(positions), heads, headDim, len(positions)*heads*headDim)
	}
	if len(x) == 0 {
		return nil
	}
	cRoPE(x, positions, heads, headDim, theta, freqScale)
	return nil
}

// RoPEFreqs rotates, in place, pair i of every head of every row by
// positions[r]·freqs[i] radians. freqs is [headDim/2] radians per position
// (the model folds its base, linear scaling and per-dimension factors into
// it once). The pair is (x[2i], x[2i+1]) (GGUF llama layout) or, with neox,
// (x[i], x[i+headDim/2]) (GPT-NeoX / Hugging Face rotate_half layout).
// x is [len(positions)][heads*headDim]. It allocates the angle table; a
// caller rotating several tensors at the same positions (q and k of every
// layer) builds it once with RoPETable and calls RoPEApply.
func RoPEFreqs(x []float32, positions []int32, heads, headDim int, freqs []float64, neox bool) error {
	if heads <= 0 || headDim <= 0 || headDim%2 != 0 {
		return fmt.Errorf("kernels: RoPEFreqs needs heads > 0 and an even headDim, got heads=%d headDim=%d", heads, headDim)
	}
	if len(freqs) != headDim/2 {
		return fmt.Errorf("kernels: RoPEFreqs has %d frequencies, want headDim/2 = %d", len(freqs), headDim/2)
	}
	cs := make([]float32, len(positions)*headDim)
	if err := RoPETable(cs, positions, freqs); err != nil {
		return err
	}
	return RoPEApply(x, cs, len(positions), heads, headDim, neox)
}

// RoPETable fills cs, float32 [len(positions)][len(freqs)][2], with the
// (cos, sin) of positions[r]·freqs[i] radians, computed in float64 (positions
// reach 1e5, where float32 angles lose radians) and rounded to float32.
func RoPETable(cs []float32, positions []int32, freqs []float64) error {
	if len(cs) != 2*len(positions)*len(freqs) {
		return fmt.Errorf("kernels: RoPETable cs has %d floats, want 2 × %d positions × %d frequencies = %d",
			len(cs), len(positions), len(freqs), 2*len(positions)*len(freqs))
	}
	if len(cs) == 0 {
		return nil
	}
	cRoPETable(cs, positions, freqs)
	return nil
}

// RoPEApply rotates, in place, pair i of every head of row r of x
// [rows][heads*headDim] by the angle of cs[r][i] (a RoPETable of rows
// positions and headDim/2 frequencies), in RoPEFreqs' pair layouts.
func RoPEApply(x, cs []float32, rows, heads, headDim int, neox bool) error {
	if rows < 0 || heads <= 0 || headDim <= 0 || headDim%2 != 0 {
		return fmt.Errorf("kernels: RoPEApply needs rows ≥ 0, heads > 0 and an even headDim, got rows=%d heads=%d headDim=%d",
			rows, heads, headDim)
	}
	if len(cs) != rows*headDim {
		return fmt.Errorf("kernels: RoPEApply cs has %d floats, want %d rows × headDim %d = %d", len(cs), rows, headDim, rows*headDim)
	}
	if len(x) != rows*heads*headDim {
		return fmt.Errorf("kernels: RoPEApply x has %d floats, want %d rows × %d heads × %d = %d",
			len(x), rows, heads, headDim, rows*heads*headDim)
	}
	if len(x) == 0 {
		return nil
	}
	cRoPEApply(x, cs, rows, heads, headDim, neox)
	return nil
}

// RopeFreqs is the frequency table of plain RoPE for RoPEFreqs:
// freqScale·theta^(−2i/headDim) radians per position for i < headDim/2.
func RopeFreqs(headDim int, theta, freqScale float32) []float64 {
	f := make([]float64, headDim/2)
	for i := range f {
		f[i] = float64(freqScale) * math.Pow(float64(theta), -2*float64(i)/float64(headDim))
	}
	return f
}

// SiLUMul computes y = silu(gate) ⊙ up, silu(g) = g/(1+e^−g). y may alias
// gate or up. On the AVX2 path e^−g is a polynomial approximation (≤ 2
// ulp): the relative error is ≤ 8·2⁻²⁴, measured 4.8·2⁻²⁴ (TestSiLUMul).
func SiLUMul(y, gate, up []float32) error {
	return siluMulPath(BestPath(), y, gate, up)
}

// siluMulPath is SiLUMul on a given path (tests cover every path).
func siluMulPath(p Path, y, gate, up []float32) error {
	if len(gate) != len(y) || len(up) != len(y) {
		return fmt.Errorf("kernels: SiLUMul lengths differ: y=%d gate=%d up=%d", len(y), len(gate), len(up))
	}
	if len(y) == 0 {
		return nil
	}
	cSiLUMul(p, y, gate, up)
	return nil
}

// Softmax replaces x by softmax(x) in place (max-subtracted, sum in float64).
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	cSoftmax(x)
}

// Argmax returns the index of the first largest element of x, or -1 for an
// empty x, in the host sampler's order (package sampling), which the CUDA
// argmax kernel follows too: NaN is below every number, +Inf equals
// MaxFloat32 (so the lower index of the two wins), and a row of only NaNs
// gives 0.
func Argmax(x []float32) int32 {
	if len(x) == 0 {
		return -1
	}
	return int32(cArgmax(x))
}

// Embedding writes row tokens[i] of table, dequantized to float32, to
// out[i][table.Cols].
func Embedding(out []float32, table Matrix, tokens []int32) error {
	return embeddingPath(BestPath(), out, table, tokens)
}

// embeddingPath is Embedding on a given path (tests cover every path).
func embeddingPath(p Path, out []float32, table Matrix, tokens []int32) error {
	if err := table.Validate(); err != nil {
		return err
	}
	if len(out) != len(tokens)*table.Cols {
		return fmt.Errorf("kernels: Embedding out has %d floats, want %d tokens × %d = %d",
			len(out), len(tokens), table.Cols, len(tokens)*table.Cols)
	}
	for i, t := range tokens {
		if t < 0 || int(t) >= table.Rows {
			return fmt.Errorf("kernels: Embedding token %d (index %d) outside vocabulary of %d", t, i, table.Rows)
		}
	}
	if len(tokens) == 0 {
		return nil
	}
	cDequantRows(p, table, tokens, out)
	return nil
}
