package kernels

/*
#include "tk.h"
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"
)

// Features are instruction-set extensions, beyond a Path, that the
// low-precision-activation kernels use.
type Features uint8

// The extensions.
const (
	FeatAVX512BF16 Features = C.TK_FEAT_BF16    // vdpbf16ps (on the AVX512 path)
	FeatAVX512VNNI Features = C.TK_FEAT_VNNI512 // EVEX vpdpbusd/vpdpwssd (on the AVX512 path)
	FeatAVXVNNI    Features = C.TK_FEAT_AVXVNNI // VEX vpdpbusd/vpdpwssd (AVX2 and AVX512 paths)
	allFeatures             = FeatAVX512BF16 | FeatAVX512VNNI | FeatAVXVNNI
)

func (f Features) String() string {
	var s []string
	for _, c := range []struct {
		f    Features
		name string
	}{{FeatAVX512BF16, "avx512bf16"}, {FeatAVX512VNNI, "avx512vnni"}, {FeatAVXVNNI, "avxvnni"}} {
		if f&c.f != 0 {
			s = append(s, c.name)
		}
	}
	if rest := f &^ allFeatures; rest != 0 {
		s = append(s, fmt.Sprintf("0x%x", uint8(rest)))
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "+")
}

// SupportedFeatures returns the extensions this CPU has (cpuid).
func SupportedFeatures() Features { return Features(C.tk_cpu_features()) }

// SetFeatures restricts the extensions the kernels use to f, a subset of
// SupportedFeatures (tests run every fallback). NewWorkers uses all.
func (w *Workers) SetFeatures(f Features) error {
	if sup := SupportedFeatures(); f&^sup != 0 {
		return fmt.Errorf("kernels: features %v are not all supported by this CPU (supported: %v)", f, sup)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.feat = f
	return nil
}

// Features returns the extensions the kernels of this pool may use.
func (w *Workers) Features() Features {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.feat
}

// SetExact selects whether MatMul keeps activations in float32 for every
// weight type (exact: the result differs from RefMatMul by float32
// summation only) or, the default, rounds them where that is faster:
// to bf16 for BF16 weights on AVX512-BF16, and to int8 blocks for every
// block type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K) at up to 32 rows,
// and for Q4_K/Q5_K at every row count off the portable path (see
// LowPrecision).
func (w *Workers) SetExact(exact bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.exact = exact
}

// Exact reports whether SetExact(true) is in force.
func (w *Workers) Exact() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.exact
}

// LowPrecision is how a MatMul of m rows of x by W rounds x on this pool:
// "f32" (exact), "bf16" or "int8". w.mu is not taken; for tests and
// benchmarks.
func (w *Workers) LowPrecision(W Matrix, m int) string {
	switch w.lowpKind(W, m) {
	case lowpBF16:
		return "bf16"
	case lowpInt8:
		return "int8"
	}
	return "f32"
}

type lowpKind uint8

const (
	lowpNone lowpKind = iota
	lowpBF16
	lowpInt8
)

// lowpKind picks the activation rounding for a MatMul. BF16 needs the
// AVX512 path with AVX512-BF16 (and even k for the packed GEMM). Int8 runs
// at up to streamMaxRows rows: past that the packed float32 GEMM (whose
// weight decoding is amortised over the rows) is as fast, except for
// Q4_K and Q5_K off the portable path, whose int8 tile kernel (8 weight
// rows, 16 on AVX512-VNNI, decoded once per depth chunk for every row of
// x) outruns it.
func (w *Workers) lowpKind(W Matrix, m int) lowpKind {
	if w.exact {
		return lowpNone
	}
	if W.Type == BF16 && w.path == AVX512 && w.feat&FeatAVX512BF16 != 0 && (m <= streamMaxRows || W.Cols%2 == 0) {
		return lowpBF16
	}
	if C.tk_act_block(C.int(W.Type)) != 0 && (m <= streamMaxRows || int8Tiled(W.Type) && w.path != Portable) {
		return lowpInt8
	}
	return lowpNone
}

// int8Tiled reports a type whose int8 kernel at m > 1 is the tile GEMM
// (mmkt in tk_lowp_body.h).
func int8Tiled(t DType) bool { return t == Q4_K || t == Q5_K }

// dotLevel is the integer-dot level of the int8 kernels for this pool.
func (w *Workers) dotLevel() int {
	switch {
	case w.path == Portable:
		return C.TK_LP_PORTABLE
	case w.path == AVX512 && w.feat&FeatAVX512VNNI != 0:
		return C.TK_LP_VNNI512
	case w.feat&FeatAVXVNNI != 0:
		return C.TK_LP_AVXVNNI
	}
	return C.TK_LP_AVX2
}

// lowpShared reports whether the matrices of a MatMuls call can share one
// low-precision job, and its kind: one weight type and depth whose int8
// kernels (any m) or bf16 GEMV kernels (m ≤ streamMaxRows) every matrix
// takes. w.mu is held.
func (w *Workers) lowpShared(Ws []Matrix, m int) (lowpKind, bool) {
	kind := w.lowpKind(Ws[0], m)
	if kind == lowpNone || kind == lowpBF16 && m > streamMaxRows {
		return lowpNone, false
	}
	for _, W := range Ws[1:] {
		if W.Type != Ws[0].Type || W.Cols != Ws[0].Cols || w.lowpKind(W, m) != kind {
			return lowpNone, false
		}
	}
	return kind, true
}

// matmulLowp is MatMul on the kind's kernels; w.mu is held and the
// arguments are validated.
func (w *Workers) matmulLowp(kind lowpKind, y, x []float32, m int, W Matrix) {
	if kind == lowpBF16 && m > streamMaxRows {
		w.gemmBF16(y, x, m, W)
		return
	}
	ys, Ws := [1][]float32{y}, [1]Matrix{W}
	w.matmulsLowp(kind, ys[:], x, m, Ws[:])
}

// matmulsLowp is MatMuls on the int8 kernels, or the bf16 ones at m ≤
// streamMaxRows, for matrices of one type and depth (lowpShared): x is
// rounded once, then one job's tiles cover every matrix's rows, a tile
// never spanning two. w.mu is held and the arguments are validated.
func (w *Workers) matmulsLowp(kind lowpKind, ys [][]float32, x []float32, m int, Ws []Matrix) {
	W, k, total := Ws[0], Ws[0].Cols, 0
	for _, M := range Ws {
		total += M.Rows
	}
	// Tiles as the float path's, a multiple of 48 rows for int8: the
	// 512-bit K-quant tile takes 16 weight rows at a time and a tile ending
	// in 8 spare rows would run them at half width.
	align := 24
	if kind == lowpInt8 {
		align = 48
	}
	nc := roundUp(ceilDiv(total, 4*w.n), align)
	if w.n == 1 || m*total*k <= tinyMatMulMACs {
		nc = max(total, 1)
	}
	j := job{m: m, nc: nc}
	tiles := j.setMats(ys, Ws)
	if kind == lowpInt8 {
		lp := w.dotLevel()
		bytes := int(C.tk_act_bytes(C.int(W.Type), C.int(m), C.int(k)))
		if need := ceilDiv(bytes, 4); len(w.act) < need {
			w.act = make([]float32, need)
		}
		if m <= streamMaxRows || w.n == 1 {
			C.tk_quant_act(C.int(lp), C.int(W.Type), f32p(x), C.int(m), C.int(k), 0, C.int(m), unsafe.Pointer(f32p(w.act)))
		} else { // prefill: a few % of the matmul on one core
			per := ceilDiv(m, 2*w.n)
			w.job = job{kind: jobQuantAct, lp: lp, w: W, x: x, m: m, nc: per}
			w.run(ceilDiv(m, per))
		}
		j.kind, j.lp = jobQmm, lp
		w.job = j
		w.run(tiles)
		return
	}
	kp := roundUp(k, 32)
	if need := ceilDiv(m*kp, 2); len(w.act) < need {
		w.act = make([]float32, need)
	}
	C.tk_x_bf16(f32p(x), C.int(m), C.int(k), C.int(kp), (*C.uint16_t)(unsafe.Pointer(f32p(w.act))))
	j.kind, j.kp = jobMMBF16, kp
	w.job = j
	w.run(tiles)
}

// gemmBF16 is MatMul on the packed bf16 GEMM (m > streamMaxRows): x into
// MR-row panels of bf16 pairs, then weight tiles as the float32 GEMM's.
func (w *Workers) gemmBF16(y, x []float32, m int, W Matrix) {
	n, k := W.Rows, W.Cols
	panels := ceilDiv(m, gemmMR)
	if need := panels * gemmMR * k / 2; len(w.packA) < need {
		w.packA = make([]float32, need)
	}
	per := ceilDiv(panels, 2*w.n)
	w.job = job{kind: jobPackABF16, w: W, x: x, m: m, nc: per}
	w.run(ceilDiv(panels, per))
	nc := min(256, max(32, roundUp(ceilDiv(n, 3*w.n), 32)))
	w.ensureScratch((nc+32)*C.TK_BF16_GKC/2 + 64)
	w.job = job{kind: jobGemmBF16, w: W, y: y, m: m, nc: nc}
	w.run(ceilDiv(n, nc))
}

// lowpTile runs tile t of a low-precision job (see runTile).
func (w *Workers) lowpTile(j *job, t int, s []float32) {
	switch j.kind {
	case jobQmm:
		W, y, n0, n1 := j.matTile(t)
		C.tk_qmm_tile(C.int(j.lp), C.int(W.Type), u8p(W.Data), C.size_t(W.rowBytes()), unsafe.Pointer(f32p(w.act)),
			C.int(j.m), f32p(y), C.long(W.Rows), C.int(W.Cols), C.int(n0), C.int(n1))
	case jobMMBF16:
		W, y, n0, n1 := j.matTile(t)
		C.tk_mm_bf16_tile(u8p(W.Data), C.size_t(W.rowBytes()), (*C.uint16_t)(unsafe.Pointer(f32p(w.act))), C.int(j.kp),
			C.int(j.m), f32p(y), C.long(W.Rows), C.int(W.Cols), C.int(n0), C.int(n1))
	case jobQuantAct:
		r0 := t * j.nc
		C.tk_quant_act(C.int(j.lp), C.int(j.w.Type), f32p(j.x), C.int(j.m), C.int(j.w.Cols), C.int(r0), C.int(min(r0+j.nc, j.m)),
			unsafe.Pointer(f32p(w.act)))
	case jobPackABF16:
		r0 := t * j.nc * gemmMR
		C.tk_pack_a_bf16(f32p(j.x), C.int(j.w.Cols), C.int(r0), C.int(min(r0+j.nc*gemmMR, j.m)),
			(*C.uint32_t)(unsafe.Pointer(f32p(w.packA))))
	case jobGemmBF16:
		n0 := t * j.nc
		n1 := min(n0+j.nc, j.w.Rows)
		C.tk_gemm_tile_bf16(u8p(j.w.Data), C.size_t(j.w.rowBytes()), (*C.uint32_t)(unsafe.Pointer(f32p(w.packA))),
			f32p(j.y), C.long(j.w.Rows), C.int(j.w.Cols), C.int(j.m), C.int(n0), C.int(n1), f32p(s))
	}
}
