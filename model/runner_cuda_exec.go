package model

import (
	"github.com/turnstile-llm/turnstile/cuda"
	"github.com/turnstile-llm/turnstile/kernels"
)

// cudaExec is every operation the CUDA runner's forward pass launches, on
// device addresses. The device implementation launches kernels on the
// runner's stream; the tests implement it over host memory with the CPU
// kernels, so the forward pass's data flow (buffer plan, step layout,
// fused residuals, gathers, padding rows, last-token row) is checked on
// machines without a GPU.
type cudaExec interface {
	Resolve(tok, seat, last cuda.DevicePtr, n int) error
	Embedding(out, table cuda.DevicePtr, t kernels.DType, tokens cuda.DevicePtr, ntok, vocab, cols int) error
	AddRMSNorm(y, x, d, w cuda.DevicePtr, rows, dim int, eps float32, out cuda.DType) error
	Matmul(dt cuda.DType, m, n, k int, x, w, y cuda.DevicePtr) error
	RoPEFreqs(x, pos, freqs cuda.DevicePtr, rows, heads, headDim int, neox bool) error
	AddBias(x, b cuda.DevicePtr, rows, n int) error
	KVWrite(kv kernels.CUDAKV, kp, vp, slots cuda.DevicePtr, ntok int) error
	DecodeAttention(out, q cuda.DevicePtr, kv kernels.CUDAKV, tables, ctxLens cuda.DevicePtr, d kernels.DecodeShape, scale float32, oPart, mlPart cuda.DevicePtr) error
	CascadeDecodeAttention(out, q cuda.DevicePtr, kv kernels.CUDAKV, tables, ctxLens cuda.DevicePtr, ci kernels.CascadeInputs, d kernels.DecodeShape, scale float32, oPart, mlPart cuda.DevicePtr) error
	PrefillAttention(out, q cuda.DevicePtr, kv kernels.CUDAKV, qStart, numQ, ctxLens, tables cuda.DevicePtr, p kernels.PrefillShape, scale float32) error
	CastF32(out, in cuda.DevicePtr, n int, to cuda.DType) error
	SiLUMul(y, gate, up cuda.DevicePtr, n int, out cuda.DType) error
	Gather(out, in, idx cuda.DevicePtr, rows, rowBytes int) error
	ArgmaxLast(out, last, seat, x cuda.DevicePtr, rows, n int) error
}

// cudaDeviceExec launches on the device. Its Ctx is set for the duration of
// one Device.Do call and must not be used outside it.
type cudaDeviceExec struct {
	c    cuda.Ctx
	s    cuda.Stream
	k    *kernels.CUDAKernels
	o    *kernels.CUDARunnerOps
	gemm *cuda.Gemm
}

func (e *cudaDeviceExec) Resolve(tok, seat, last cuda.DevicePtr, n int) error {
	return e.o.Resolve(e.c, e.s, tok, seat, last, n)
}

func (e *cudaDeviceExec) Embedding(out, table cuda.DevicePtr, t kernels.DType, tokens cuda.DevicePtr, ntok, vocab, cols int) error {
	return e.k.Embedding(e.c, e.s, out, table, t, tokens, ntok, vocab, cols)
}

func (e *cudaDeviceExec) AddRMSNorm(y, x, d, w cuda.DevicePtr, rows, dim int, eps float32, out cuda.DType) error {
	return e.o.AddRMSNorm(e.c, e.s, y, x, d, w, rows, dim, eps, out)
}

func (e *cudaDeviceExec) Matmul(dt cuda.DType, m, n, k int, x, w, y cuda.DevicePtr) error {
	return e.c.MatmulWT(e.gemm, dt, m, n, k, x, w, y, e.s)
}

func (e *cudaDeviceExec) RoPEFreqs(x, pos, freqs cuda.DevicePtr, rows, heads, headDim int, neox bool) error {
	return e.k.RoPEFreqs(e.c, e.s, x, pos, freqs, rows, heads, headDim, neox)
}

func (e *cudaDeviceExec) AddBias(x, b cuda.DevicePtr, rows, n int) error {
	return e.k.AddBias(e.c, e.s, x, b, rows, n)
}

func (e *cudaDeviceExec) KVWrite(kv kernels.CUDAKV, kp, vp, slots cuda.DevicePtr, ntok int) error {
	return e.k.KVWrite(e.c, e.s, kv, kp, vp, slots, ntok)
}

func (e *cudaDeviceExec) DecodeAttention(out, q cuda.DevicePtr, kv kernels.CUDAKV, tables, ctxLens cuda.DevicePtr, d kernels.DecodeShape, scale float32, oPart, mlPart cuda.DevicePtr) error {
	return e.k.DecodeAttention(e.c, e.s, out, q, kv, tables, ctxLens, d, scale, oPart, mlPart)
}

func (e *cudaDeviceExec) CascadeDecodeAttention(out, q cuda.DevicePtr, kv kernels.CUDAKV, tables, ctxLens cuda.DevicePtr, ci kernels.CascadeInputs, d kernels.DecodeShape, scale float32, oPart, mlPart cuda.DevicePtr) error {
	return e.k.CascadeDecodeAttention(e.c, e.s, out, q, kv, tables, ctxLens, ci, d, scale, oPart, mlPart)
}

func (e *cudaDeviceExec) PrefillAttention(out, q cuda.DevicePtr, kv kernels.CUDAKV, qStart, numQ, ctxLens, tables cuda.DevicePtr, p kernels.PrefillShape, scale float32) error {
	return e.k.PrefillAttention(e.c, e.s, out, q, kv, qStart, numQ, ctxLens, tables, p, scale)
}

func (e *cudaDeviceExec) CastF32(out, in cuda.DevicePtr, n int, to cuda.DType) error {
	return e.k.CastF32(e.c, e.s, out, in, n, to)
}

func (e *cudaDeviceExec) SiLUMul(y, gate, up cuda.DevicePtr, n int, out cuda.DType) error {
	return e.o.SiLUMul(e.c, e.s, y, gate, up, n, out)
}

func (e *cudaDeviceExec) Gather(out, in, idx cuda.DevicePtr, rows, rowBytes int) error {
	return e.o.Gather(e.c, e.s, out, in, idx, rows, rowBytes)
}

func (e *cudaDeviceExec) ArgmaxLast(out, last, seat, x cuda.DevicePtr, rows, n int) error {
	return e.o.ArgmaxLast(e.c, e.s, out, last, seat, x, rows, n)
}
