package kernels

import "fmt"

// gemvMaxRows is the largest m that takes the GEMV path: up to four rows of
// x are dotted with each weight row as it streams past, so decode reads the
// weights exactly once.
const gemvMaxRows = 4

// streamMaxRows is the largest m that takes the streaming path (no packed
// copy of the weights or of x): up to here packing costs more than its
// better register tile saves (measured on Zen 3, one core, k=768: at m=8
// 73 vs 28 GFLOP/s, m=32 77 vs 62, m=48 59 vs 71).
const streamMaxRows = 32

// tinyMatMulMACs is the most multiply-adds a MatMul runs as a single tile:
// below it a helper's wake-up costs more than it saves.
const tinyMatMulMACs = 32 * 1024

// MatMul computes y = x·Wᵀ: y [m][W.Rows], x [m][W.Cols], both row-major
// float32, y[i][n] = Σ_k x[i][k]·W[n][k]. F16/BF16/Q8_0 weights are converted
// to float32 as they are packed or streamed. 1..4 rows take the GEMV path,
// 5..32 (batched decode; F16 on AVX-512 up to 64) the streaming path, which
// reads each weight from memory once with no packed copy; more rows the
// packed GEMM. y must not overlap x. Unless SetExact(true), activations are
// rounded where that is faster (Workers.LowPrecision): to bf16 for BF16
// weights on AVX512-BF16 (vdpbf16ps; every row count), to int8 blocks for
// every block type at up to 32 rows and for Q4_K/Q5_K at every row count
// (integer dot products); the result then differs from RefMatMul by that
// rounding too. Errors name the mismatched
// sizes; nothing is written then.
func (w *Workers) MatMul(y, x []float32, m int, W Matrix) error {
	if err := W.Validate(); err != nil {
		return err
	}
	if m <= 0 {
		return fmt.Errorf("kernels: MatMul with m=%d rows", m)
	}
	if len(x) != m*W.Cols {
		return fmt.Errorf("kernels: MatMul x has %d floats, want m*Cols = %d*%d = %d", len(x), m, W.Cols, m*W.Cols)
	}
	if len(y) != m*W.Rows {
		return fmt.Errorf("kernels: MatMul y has %d floats, want m*Rows = %d*%d = %d", len(y), m, W.Rows, m*W.Rows)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if kind := w.lowpKind(W, m); kind != lowpNone {
		w.matmulLowp(kind, y, x, m, W)
		return nil
	}
	n := W.Rows
	if w.streams(W, m) {
		kind := jobGemv
		if m > gemvMaxRows {
			kind = jobStream
		}
		w.ensureScratch(streamScratch(W.Cols))
		// About four tiles per worker for balance; a multiple of 24 rows
		// (the streaming kernel takes weight rows three at a time). One
		// worker, or a matrix too small to pay for a wake-up, is one tile.
		nc := roundUp(ceilDiv(n, 4*w.n), 24)
		if w.n == 1 || m*n*W.Cols <= tinyMatMulMACs {
			nc = n
		}
		w.job = job{kind: kind, path: w.path, w: W, x: x, y: y, m: m, nc: nc}
		w.run(ceilDiv(n, nc))
		return nil
	}
	// First x is packed once into MR-row panels (contiguous for the
	// microkernel, and free of the cache-set conflicts that rows a power of
	// two apart cause), split over the workers by groups of panels.
	panels := ceilDiv(m, gemmMR)
	if need := panels * gemmMR * W.Cols; len(w.packA) < need {
		w.packA = make([]float32, need)
	}
	per := ceilDiv(panels, 2*w.n)
	w.job = job{kind: jobPackA, path: w.path, w: W, x: x, m: m, nc: per}
	w.run(ceilDiv(panels, per))
	// Then each tile owns weight rows [n0, n0+nc) for all of x, so every
	// weight is converted and packed exactly once. nc ≤ 256 keeps the packed
	// block in L2 next to a 96-row block of x; ≥ 3 tiles per worker keeps
	// the cores busy.
	nc := min(256, max(32, roundUp(ceilDiv(n, 3*w.n), 32)))
	w.ensureScratch((nc+32)*gemmKC + gemmKC + 64)
	w.job = job{kind: jobGemm, path: w.path, w: W, y: y, m: m, nc: nc}
	w.run(ceilDiv(n, nc))
	return nil
}

// MaxMatMuls is the most matrices one MatMuls call takes (q, k and v).
const MaxMatMuls = 3

// MatMuls computes ys[i] = x·Ws[i]ᵀ for every i, as MatMul does, for up to
// MaxMatMuls matrices that share x (q/k/v, or gate/up). Where every matrix
// takes the float GEMV or streaming path (m ≤ 32, no low-precision
// activations), or the matrices are of one type whose int8 or bf16 (m ≤ 32)
// kernels they all take, their weight rows are split into tiles of one job,
// so the helpers are handed work once instead of once per matrix (and x is
// rounded once); the results are bit-identical to separate MatMul calls.
// Otherwise it is MatMul on each in turn. Errors name the matrix and the mismatched sizes; nothing is written
// then.
func (w *Workers) MatMuls(ys [][]float32, x []float32, m int, Ws []Matrix) error {
	if len(Ws) == 0 || len(Ws) > MaxMatMuls || len(ys) != len(Ws) {
		return fmt.Errorf("kernels: MatMuls with %d outputs and %d matrices, want equal counts in 1..%d", len(ys), len(Ws), MaxMatMuls)
	}
	if m <= 0 {
		return fmt.Errorf("kernels: MatMuls with m=%d rows", m)
	}
	total := 0
	for i, W := range Ws {
		if err := W.Validate(); err != nil {
			return fmt.Errorf("kernels: MatMuls matrix %d: %w", i, err)
		}
		if len(x) != m*W.Cols {
			return fmt.Errorf("kernels: MatMuls x has %d floats, want m*Cols = %d*%d = %d for matrix %d", len(x), m, W.Cols, m*W.Cols, i)
		}
		if len(ys[i]) != m*W.Rows {
			return fmt.Errorf("kernels: MatMuls y %d has %d floats, want m*Rows = %d*%d = %d", i, len(ys[i]), m, W.Rows, m*W.Rows)
		}
		total += W.Rows
	}
	w.mu.Lock()
	if kind, ok := w.lowpShared(Ws, m); ok && !w.closed {
		defer w.mu.Unlock()
		w.matmulsLowp(kind, ys, x, m, Ws)
		return nil
	}
	fused := !w.closed
	for _, W := range Ws {
		fused = fused && w.streams(W, m) && w.lowpKind(W, m) == lowpNone
	}
	if !fused {
		w.mu.Unlock()
		for i, W := range Ws {
			if err := w.MatMul(ys[i], x, m, W); err != nil {
				return err
			}
		}
		return nil
	}
	defer w.mu.Unlock()
	kind := jobGemv
	if m > gemvMaxRows {
		kind = jobStream
	}
	k := Ws[0].Cols
	w.ensureScratch(streamScratch(k))
	// Tiles as in MatMul, counted over all the matrices' rows; a tile never
	// spans two matrices.
	nc := roundUp(ceilDiv(total, 4*w.n), 24)
	if w.n == 1 || m*total*k <= tinyMatMulMACs {
		nc = total
	}
	j := job{kind: kind, path: w.path, x: x, m: m, nc: nc}
	tiles := j.setMats(ys, Ws)
	w.job = j
	w.run(tiles)
	return nil
}

// f16StreamMaxRows is streamMaxRows for F16 weights on the AVX-512 path:
// their streaming kernel (16-lane conversion once per weight row chunk,
// 4x4 register tiles) outran the packed GEMM up to here (one core, k=768,
// n=2048: m=48 ~160 vs ~130 GFLOP/s, m=128 even); at m=512 the GEMM won
// (model prefill 0.8x when streamed).
const f16StreamMaxRows = 64

// streams reports whether a float MatMul of m rows takes the GEMV or
// streaming path rather than the packed GEMM.
func (w *Workers) streams(W Matrix, m int) bool {
	if W.Type == F16 && w.path == AVX512 {
		return m <= f16StreamMaxRows
	}
	return m <= streamMaxRows
}

// streamScratch is the per-worker scratch (floats) of a GEMV or streaming
// tile at depth k: the AVX-512 F16 kernel converts four weight rows' depth
// chunks (at most k floats each) into it.
func streamScratch(k int) int { return 4*k + 64 }

func ceilDiv(a, b int) int { return (a + b - 1) / b }
func roundUp(a, b int) int { return ceilDiv(a, b) * b }
