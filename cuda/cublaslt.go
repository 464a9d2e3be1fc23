package cuda

/*
#include <stdlib.h>
#include "calls.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// cublasLtSonames are the cuBLASLt library names tried, newest first.
func cublasLtSonames() []string {
	return []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"}
}

// CublasLtCandidates lists the library names LoadCublasLt tries for cudaHome.
func CublasLtCandidates(cudaHome string) []string {
	return cudaHomeCandidates(cudaHome, cublasLtSonames())
}

// CublasLt is the loaded cuBLASLt library.
type CublasLt struct {
	lib library
	t   *C.tsc_cublaslt // C memory
	// created: cublasLtCreate was called, so the library's static CUDA
	// runtime may have started, and the library stays mapped (see Close).
	created bool
}

// LoadCublasLt loads cuBLASLt from the first loadable of names, or by default
// from CublasLtCandidates(CUDAHome()).
func LoadCublasLt(names ...string) (*CublasLt, error) {
	if len(names) == 0 {
		names = CublasLtCandidates(CUDAHome())
	}
	lib, err := openLibrary("cuBLASLt", names)
	if err != nil {
		return nil, err
	}
	t := (*C.tsc_cublaslt)(C.calloc(1, C.size_t(unsafe.Sizeof(C.tsc_cublaslt{}))))
	var missing *C.char
	if C.tsc_load_cublaslt(lib.h, t, &missing) != 0 {
		err := missingSymbolError("cuBLASLt", lib, missing)
		C.free(unsafe.Pointer(t))
		lib.close()
		return nil, err
	}
	return &CublasLt{lib: lib, t: t}, nil
}

// Path is the library name that was loaded.
func (l *CublasLt) Path() string { return l.lib.name }

// Version is cublasLtGetVersion (e.g. 120402 for 12.4.2).
func (l *CublasLt) Version() int { return int(C.tsc_lt_version(l.t)) }

// Close releases the table; Gemms made from it must be destroyed first.
// Once a handle has been created the library stays mapped: dlclose would run
// its static CUDA runtime's teardown, which calls into the driver, after the
// device's primary context is released (as Driver keeps libcuda mapped once
// cuInit has run).
func (l *CublasLt) Close() {
	if l.t != nil {
		C.free(unsafe.Pointer(l.t))
		l.t = nil
		if !l.created {
			l.lib.close()
		}
	}
}

func (l *CublasLt) check(op string, r C.tsc_result) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("cuda: %s: %s", op, cublasStatusString(int(r)))
}

// cublasStatusString names a cublasStatus_t (cublas_api.h's values).
func cublasStatusString(r int) string {
	names := map[int]string{
		0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
		7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
		13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED",
		16: "CUBLAS_STATUS_LICENSE_ERROR",
	}
	if n, ok := names[r]; ok {
		return fmt.Sprintf("%s (cublasStatus %d)", n, r)
	}
	return fmt.Sprintf("cublasStatus %d", r)
}

// DType is the element type of a GEMM input.
type DType int

// Element types, valued as cudaDataType.
const (
	F32  DType = 0  // CUDA_R_32F
	F16  DType = 2  // CUDA_R_16F
	BF16 DType = 14 // CUDA_R_16BF
)

func (t DType) String() string {
	switch t {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("DType(%d)", int(t))
}

// Size is the element size in bytes.
func (t DType) Size() int {
	if t == F32 {
		return 4
	}
	return 2
}

const (
	computeF32 = 68 // CUBLAS_COMPUTE_32F
	descTransA = 3  // CUBLASLT_MATMUL_DESC_TRANSA
	descTransB = 4  // CUBLASLT_MATMUL_DESC_TRANSB
	opT        = 1  // CUBLAS_OP_T
)

type gemmShape struct {
	dt      DType
	m, n, k int
}

// gemmPlan is one shape's descriptors and the algorithm cuBLASLt's
// heuristic chose for them, asked once when the plan is made.
type gemmPlan struct {
	desc, la, lb, lc C.tsc_handle
	algo             C.tsc_algo
}

// maxGemmPlans bounds the plans a Gemm keeps: eager steps have a new token
// count (a new shape) almost every step, so an unbounded cache would grow
// with every prompt length ever seen.
const maxGemmPlans = 256

// Gemm runs weight GEMMs y = x·Wᵀ through cuBLASLt on one device. It is made
// and used through a Ctx, on the device thread; it caches one descriptor set
// and algorithm per shape (at most maxGemmPlans, the least recently used
// dropped first), so steady-state calls neither allocate nor search.
type Gemm struct {
	lib    *CublasLt
	handle C.tsc_handle
	ws     DevicePtr
	wsSize uint64
	plans  *lru[gemmShape, gemmPlan]
}

// NewGemm creates a cuBLASLt handle and a workspace of wsBytes device bytes
// (cuBLASLt suggests 4 MiB before Hopper and 32 MiB on Hopper).
func (c Ctx) NewGemm(lib *CublasLt, wsBytes uint64) (*Gemm, error) {
	g := &Gemm{lib: lib, wsSize: wsBytes}
	g.plans = newLRU(maxGemmPlans, func(_ gemmShape, p gemmPlan) { g.destroyPlan(p) })
	lib.created = true // even a failed create may have started its runtime
	if err := lib.check("cublasLtCreate", C.tsc_lt_create(lib.t, &g.handle)); err != nil {
		return nil, err
	}
	if wsBytes > 0 {
		ws, err := c.Alloc(wsBytes)
		if err != nil {
			C.tsc_lt_destroy(lib.t, g.handle)
			return nil, fmt.Errorf("cuda: cuBLASLt workspace: %w", err)
		}
		g.ws = ws
	}
	return g, nil
}

// destroyPlan releases p's descriptors (those it has).
func (g *Gemm) destroyPlan(p gemmPlan) {
	t := g.lib.t
	for _, h := range []C.tsc_handle{p.la, p.lb, p.lc} {
		if h != nil {
			C.tsc_lt_layout_destroy(t, h)
		}
	}
	if p.desc != nil {
		C.tsc_lt_desc_destroy(t, p.desc)
	}
}

// DestroyGemm releases g's descriptors, workspace and handle.
func (c Ctx) DestroyGemm(g *Gemm) error {
	t := g.lib.t
	g.plans.clear()
	var err error
	if g.ws != 0 {
		err = c.Free(g.ws)
	}
	if lerr := g.lib.check("cublasLtDestroy", C.tsc_lt_destroy(t, g.handle)); err == nil {
		err = lerr
	}
	return err
}

// plan builds (once per shape) the descriptors for row-major y[m][n] =
// x[m][k]·W[n][k]ᵀ and asks the heuristic for their algorithm. cuBLASLt is
// column-major: row-major y is column-major yᵀ (n×m) = W·xᵀ, where row-major
// W is column-major k×n (used transposed) and row-major x is column-major
// k×m.
func (g *Gemm) plan(s gemmShape) (gemmPlan, error) {
	if p, ok := g.plans.get(s); ok {
		return p, nil
	}
	t := g.lib.t
	var p gemmPlan
	fail := func(op string, r C.tsc_result) error {
		g.destroyPlan(p)
		return fmt.Errorf("gemm %s m=%d n=%d k=%d: %w", s.dt, s.m, s.n, s.k, g.lib.check(op, r))
	}
	if r := C.tsc_lt_desc_create(t, &p.desc, computeF32, C.int(F32)); r != 0 {
		return p, fail("cublasLtMatmulDescCreate", r)
	}
	if r := C.tsc_lt_desc_set_i32(t, p.desc, descTransA, opT); r != 0 {
		return p, fail("cublasLtMatmulDescSetAttribute", r)
	}
	if r := C.tsc_lt_layout_create(t, &p.la, C.int(s.dt), C.uint64_t(s.k), C.uint64_t(s.n), C.int64_t(s.k)); r != 0 {
		return p, fail("cublasLtMatrixLayoutCreate", r)
	}
	if r := C.tsc_lt_layout_create(t, &p.lb, C.int(s.dt), C.uint64_t(s.k), C.uint64_t(s.m), C.int64_t(s.k)); r != 0 {
		return p, fail("cublasLtMatrixLayoutCreate", r)
	}
	if r := C.tsc_lt_layout_create(t, &p.lc, C.int(F32), C.uint64_t(s.n), C.uint64_t(s.m), C.int64_t(s.n)); r != 0 {
		return p, fail("cublasLtMatrixLayoutCreate", r)
	}
	var found C.int
	if r := C.tsc_lt_heuristic(t, g.handle, p.desc, p.la, p.lb, p.lc, C.size_t(g.wsSize), &p.algo, &found); r != 0 {
		return p, fail("cublasLtMatmulAlgoGetHeuristic", r)
	}
	if found == 0 {
		g.destroyPlan(p)
		return p, fmt.Errorf("cuda: gemm %s m=%d n=%d k=%d: cuBLASLt found no algorithm within %d workspace bytes", s.dt, s.m, s.n, s.k, g.wsSize)
	}
	g.plans.put(s, p)
	return p, nil
}

// MatmulWT computes y[m][n] = x[m][k] · w[n][k]ᵀ on s, with x and w of type dt
// (row-major, as the CPU kernels lay them out), y in f32 and f32 accumulation.
func (c Ctx) MatmulWT(g *Gemm, dt DType, m, n, k int, x, w, y DevicePtr, s Stream) error {
	if m <= 0 || n <= 0 || k <= 0 {
		return fmt.Errorf("cuda: gemm shape m=%d n=%d k=%d: every dimension must be positive", m, n, k)
	}
	if dt != F32 && dt != F16 && dt != BF16 {
		return fmt.Errorf("cuda: gemm element type %v: want f32, f16 or bf16", dt)
	}
	p, err := g.plan(gemmShape{dt, m, n, k})
	if err != nil {
		return err
	}
	alpha, beta := C.float(1), C.float(0)
	r := C.tsc_matmul(g.lib.t, g.handle, p.desc, &alpha,
		C.tsc_deviceptr(w), p.la, C.tsc_deviceptr(x), p.lb,
		&beta, C.tsc_deviceptr(y), p.lc, &p.algo,
		C.tsc_deviceptr(g.ws), C.size_t(g.wsSize), s.h)
	if err := g.lib.check("cublasLtMatmul", r); err != nil {
		return fmt.Errorf("gemm %s m=%d n=%d k=%d: %w", dt, m, n, k, err)
	}
	return nil
}
