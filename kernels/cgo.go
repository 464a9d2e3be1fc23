package kernels

/*
#cgo CFLAGS: -O3 -std=c11
#cgo LDFLAGS: -lm
#include "tk.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Path is an instruction-set path of the C kernels.
type Path uint8

// The paths, slowest first.
const (
	Portable Path = C.TK_PORTABLE
	AVX2     Path = C.TK_AVX2   // AVX2 + FMA + F16C
	AVX512   Path = C.TK_AVX512 // AVX-512 F/BW/VL/DQ
)

func (p Path) String() string {
	switch p {
	case Portable:
		return "portable"
	case AVX2:
		return "avx2"
	case AVX512:
		return "avx512"
	}
	return fmt.Sprintf("Path(%d)", uint8(p))
}

// SupportedPaths returns every path this CPU can run, slowest first.
func SupportedPaths() []Path {
	var out []Path
	for p := Portable; p <= AVX512; p++ {
		if p.Supported() {
			out = append(out, p)
		}
	}
	return out
}

// BestPath returns the fastest path this CPU can run. It does not
// allocate: per-call kernels (Embedding, SiLUMul) call it every time.
func BestPath() Path {
	best := Portable
	for p := Portable; p <= AVX512; p++ {
		if p.Supported() {
			best = p
		}
	}
	return best
}

// Supported reports whether this CPU can run path p.
func (p Path) Supported() bool {
	return p <= AVX512 && int(C.tk_cpu_paths())&(1<<p) != 0
}

func f32p(s []float32) *C.float { return (*C.float)(unsafe.Pointer(unsafe.SliceData(s))) }
func i32p(s []int32) *C.int32_t { return (*C.int32_t)(unsafe.Pointer(unsafe.SliceData(s))) }
func u8p(s []byte) *C.uint8_t   { return (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(s))) }

// GEMM blocking constants shared with tk.h.
const (
	gemmKC = C.TK_KC
	gemmMR = C.TK_MR
)

func cPackA(p Path, x []float32, k, r0, r1 int, pa []float32) {
	C.tk_pack_a(C.int(p), f32p(x), C.int(k), C.int(r0), C.int(r1), f32p(pa))
}

func cGemmTile(p Path, w Matrix, pa []float32, m int, y []float32, n0, n1 int, pb, tmp []float32) {
	C.tk_gemm_tile(C.int(p), C.int(w.Type), u8p(w.Data), C.size_t(w.rowBytes()),
		f32p(pa), f32p(y), C.long(w.Rows), C.int(w.Cols), C.int(m), C.int(n0), C.int(n1),
		f32p(pb), f32p(tmp))
}

func cGemvTile(p Path, w Matrix, x []float32, m int, y []float32, n0, n1 int, tmp []float32) {
	C.tk_gemv_tile(C.int(p), C.int(w.Type), u8p(w.Data), C.size_t(w.rowBytes()),
		f32p(x), C.int(m), f32p(y), C.long(w.Rows), C.int(w.Cols), C.int(n0), C.int(n1), f32p(tmp))
}

func cStreamTile(p Path, w Matrix, x []float32, m int, y []float32, n0, n1 int, tmp []float32) {
	C.tk_stream_tile(C.int(p), C.int(w.Type), u8p(w.Data), C.size_t(w.rowBytes()),
		f32p(x), C.int(m), f32p(y), C.long(w.Rows), C.int(w.Cols), C.int(n0), C.int(n1), f32p(tmp))
}

func cDequantRows(p Path, w Matrix, rows []int32, out []float32) {
	C.tk_dequant_rows(C.int(p), C.int(w.Type), u8p(w.Data), C.size_t(w.rowBytes()),
		C.int(w.Cols), i32p(rows), C.int(len(rows)), f32p(out))
}

func cRMSNorm(p Path, y, x, weight []float32, r0, r1, dim int, eps float32) {
	C.tk_rmsnorm(C.int(p), f32p(y), f32p(x), f32p(weight), C.int(r0), C.int(r1), C.int(dim), C.float(eps))
}

func cRoPE(x []float32, positions []int32, heads, headDim int, theta, freqScale float32) {
	C.tk_rope(f32p(x), i32p(positions), C.int(len(positions)), C.int(heads), C.int(headDim),
		C.float(theta), C.float(freqScale))
}

func cRoPETable(cs []float32, positions []int32, freqs []float64) {
	C.tk_rope_table(f32p(cs), i32p(positions), C.int(len(positions)), C.int(len(freqs)),
		(*C.double)(unsafe.Pointer(unsafe.SliceData(freqs))))
}

func cRoPEApply(x, cs []float32, rows, heads, headDim int, neox bool) {
	n := 0
	if neox {
		n = 1
	}
	C.tk_rope_apply(f32p(x), f32p(cs), C.int(rows), C.int(heads), C.int(headDim), C.int(n))
}

func cSiLUMul(p Path, y, gate, up []float32) {
	C.tk_silu_mul(C.int(p), f32p(y), f32p(gate), f32p(up), C.long(len(y)))
}

func cSoftmax(x []float32) { C.tk_softmax(f32p(x), C.long(len(x))) }

func cArgmax(x []float32) int { return int(C.tk_argmax(f32p(x), C.long(len(x)))) }

func cAttnTask(p Path, out, q []float32, l *KVLayer, heads int, table []int32, s AttnSeq, kvh, i0, i1 int, scale float32, scratch []float32) {
	k, v := l.ptrs()
	C.tk_attn_task(C.int(p), C.int(l.Type), f32p(out), f32p(q), k, v, C.int(heads), C.int(l.KVHeads),
		C.int(l.BlockSize), C.int(l.HeadDim), i32p(table), C.int(s.QStart), C.int(s.NumQ),
		C.int(s.ContextLen), C.int(kvh), C.int(i0), C.int(i1), C.float(scale), f32p(scratch), C.int(s.Window))
}

func cAttnTail(p Path, out, q []float32, l *KVLayer, heads int, s AttnSeq, kvh, i0, i1 int, scale float32, scratch []float32,
	b0 int, state []float32) {
	k, v := l.ptrs()
	C.tk_attn_tail(C.int(p), C.int(l.Type), f32p(out), f32p(q), k, v, C.int(heads), C.int(l.KVHeads),
		C.int(l.BlockSize), C.int(l.HeadDim), i32p(s.BlockTable), C.int(s.QStart), C.int(s.NumQ),
		C.int(s.ContextLen), C.int(kvh), C.int(i0), C.int(i1), C.float(scale), f32p(scratch),
		C.int(b0), f32p(state), C.int(s.Window))
}

func cCascadeTask(p Path, q []float32, l *KVLayer, heads int, table []int32, b0, b1 int, qrows []int32, m0, m1, kvh int,
	scale float32, part, scratch []float32) {
	k, v := l.ptrs()
	C.tk_cascade_task(C.int(p), C.int(l.Type), f32p(q), k, v, C.int(heads), C.int(l.KVHeads),
		C.int(l.BlockSize), C.int(l.HeadDim), i32p(table), C.int(b0), C.int(b1), i32p(qrows),
		C.int(m0), C.int(m1), C.int(kvh), C.float(scale), f32p(part), f32p(scratch))
}

// cKVWrite16 rounds k and v (validated by kvWrite) into l's 16-bit cache.
func cKVWrite16(p Path, l *KVLayer, k, v []float32, positions, table []int32) {
	C.tk_kv_write16(C.int(p), C.int(l.Type), (*C.uint16_t)(unsafe.Pointer(unsafe.SliceData(l.K16))),
		(*C.uint16_t)(unsafe.Pointer(unsafe.SliceData(l.V16))), f32p(k), f32p(v), i32p(positions), C.int(len(positions)),
		i32p(table), C.int(l.KVHeads), C.int(l.BlockSize), C.int(l.HeadDim))
}

func cCascadeMerge(out, part []float32, chunk, nstates int, qrows []int32, s0, s1, heads, hd int) {
	C.tk_cascade_merge(f32p(out), f32p(part), C.long(chunk), C.int(nstates), i32p(qrows), C.int(s0), C.int(s1),
		C.int(heads), C.int(hd))
}

// cascRows is the most shared-pass rows (member query, query head) of one
// task on path p: two vectors of lanes.
func cascRows(p Path) int {
	if p == AVX512 {
		return C.TK_CASC_M512
	}
	return C.TK_CASC_M
}

// cascKeys is the number of positions the shared pass scores per softmax
// step for block size bs.
func cascKeys(bs int) int { return int(C.tk_casc_keys(C.int(bs))) }

func cPeakFMA(p Path, iters int) float64 {
	var sink C.float
	return float64(C.tk_peak_fma(C.int(p), C.long(iters), &sink))
}

func cReadSum(p Path, x []float32) float32 {
	return float32(C.tk_read_sum(C.int(p), f32p(x), C.long(len(x))))
}
