package kernels

import (
	"fmt"

	"github.com/turnstile-llm/turnstile/cuda"
)

// The runner's glue kernels: the few CUDA operations the CUDA runner needs
// between the kernel set's launches (FutureToken resolution from the device's
// per-seat last-token row, residual add fused into RMSNorm with the output
// written in the GEMM's input type, SiLU·mul with the same cast, row gather,
// greedy argmax that also updates the last-token row, and the scatter of
// host-sampled tokens into that row). They live in their own translation unit
// so the kernel set's source list stays as it is.
const cudaRunnerOpsSource = `
// runner_ops.cu: glue kernels of the CUDA runner.

struct ts_f16 {
	unsigned short bits;
};
__device__ __forceinline__ void ts_store(ts_f16 *p, float v) { p->bits = ts_f32_to_f16(v); }

// ts_rt_resolve replaces FutureToken (< 0) at tok[i] by last[seat[i]], the
// token the seat sampled in its previous step. Grid: ceil(n/256) blocks.
extern "C" __global__ void ts_rt_resolve(int *tok, const int *seat, const int *last, int n) {
	const int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n && tok[i] < 0)
		tok[i] = last[seat[i]];
}

// add_rmsnorm: when d is not null, x[r] += d[r] (the residual connection of
// the previous sublayer); then y[r] = x[r] / sqrt(mean(x[r]²) + eps) ⊙ w in
// the output type. x, d [rows][dim] float; w [dim]. Grid: rows blocks. Each
// thread re-reads only the x elements it wrote, so no barrier is needed
// between the add and the scaling.
template <typename O>
__device__ __forceinline__ void add_rmsnorm(O *y, float *x, const float *d, const float *w, int dim, float eps) {
	float *xr = x + (size_t)blockIdx.x * dim;
	O *yr = y + (size_t)blockIdx.x * dim;
	float ss = 0.0f;
	for (int i = threadIdx.x; i < dim; i += blockDim.x) {
		float v = xr[i];
		if (d != 0) {
			v += d[(size_t)blockIdx.x * dim + i];
			xr[i] = v;
		}
		ss += v * v;
	}
	ss = ts_block_sum(ss);
	const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		ts_store(yr + i, xr[i] * inv * w[i]);
}

extern "C" __global__ void ts_rt_add_rmsnorm_f32(float *y, float *x, const float *d, const float *w, int dim,
						 float eps) {
	add_rmsnorm(y, x, d, w, dim, eps);
}
extern "C" __global__ void ts_rt_add_rmsnorm_bf16(ts_bf16 *y, float *x, const float *d, const float *w, int dim,
						  float eps) {
	add_rmsnorm(y, x, d, w, dim, eps);
}
extern "C" __global__ void ts_rt_add_rmsnorm_f16(ts_f16 *y, float *x, const float *d, const float *w, int dim,
						 float eps) {
	add_rmsnorm(y, x, d, w, dim, eps);
}

// silu_mul: y = gate/(1+e^−gate) ⊙ up over n elements, stored in the output
// type (the down projection's input).
template <typename O>
__device__ __forceinline__ void silu_mul(O *y, const float *gate, const float *up, long long n) {
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (long long)gridDim.x * blockDim.x) {
		const float g = gate[i];
		ts_store(y + i, g / (1.0f + expf(-g)) * up[i]);
	}
}

extern "C" __global__ void ts_rt_silu_mul_f32(float *y, const float *gate, const float *up, long long n) {
	silu_mul(y, gate, up, n);
}
extern "C" __global__ void ts_rt_silu_mul_bf16(ts_bf16 *y, const float *gate, const float *up, long long n) {
	silu_mul(y, gate, up, n);
}
extern "C" __global__ void ts_rt_silu_mul_f16(ts_f16 *y, const float *gate, const float *up, long long n) {
	silu_mul(y, gate, up, n);
}

// ts_rt_gather copies row idx[j] of in to row j of out; rows are words
// 32-bit words. Grid: one block per output row.
extern "C" __global__ void ts_rt_gather(unsigned *out, const unsigned *in, const int *idx, int words) {
	const unsigned *src = in + (size_t)idx[blockIdx.x] * words;
	unsigned *dst = out + (size_t)blockIdx.x * words;
	for (int i = threadIdx.x; i < words; i += blockDim.x)
		dst[i] = src[i];
}

// ts_rt_argmax_last writes ts_row_argmax of row r of x [rows][n] (the host
// sampler's order: NaN never wins, +inf counts as FLT_MAX) to out[r] and,
// when seat[r] ≥ 0, also to last[seat[r]]: the device-side record
// FutureToken reads in the next step. Grid: rows blocks.
extern "C" __global__ void ts_rt_argmax_last(int *out, int *last, const int *seat, const float *x, int n) {
	const int tok = ts_row_argmax(x + (size_t)blockIdx.x * n, n);
	if (threadIdx.x == 0) {
		out[blockIdx.x] = tok;
		const int s = seat[blockIdx.x];
		if (s >= 0)
			last[s] = tok;
	}
}

// ts_rt_scatter_last sets last[pairs[2i]] = pairs[2i+1] for i < n: the
// tokens the host sampled. Grid: ceil(n/256) blocks.
extern "C" __global__ void ts_rt_scatter_last(int *last, const int *pairs, int n) {
	const int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		last[pairs[2 * i]] = pairs[2 * i + 1];
}
`

// cudaRunnerOpsEntries are the kernels cudaRunnerOpsSource defines.
func cudaRunnerOpsEntries() []string {
	return []string{
		"ts_rt_resolve",
		"ts_rt_add_rmsnorm_f32", "ts_rt_add_rmsnorm_bf16", "ts_rt_add_rmsnorm_f16",
		"ts_rt_silu_mul_f32", "ts_rt_silu_mul_bf16", "ts_rt_silu_mul_f16",
		"ts_rt_gather", "ts_rt_argmax_last", "ts_rt_scatter_last",
	}
}

// CUDARunnerOpsSource is the runner's glue kernels as one NVRTC translation
// unit (the common prelude included).
func CUDARunnerOpsSource() CUDASource {
	return CUDASource{
		Name:    "runner_ops.cu",
		Source:  cudaCommon + "\n#line 1 \"runner_ops.cu\"\n" + cudaRunnerOpsSource,
		Entries: cudaRunnerOpsEntries(),
	}
}

// CompileCUDARunnerOps returns the cubin of the runner's glue kernels for arch,
// through cc (cached on disk like the kernel set).
func CompileCUDARunnerOps(cc *cuda.CubinCache, arch string) (CUDAModule, error) {
	s := CUDARunnerOpsSource()
	cubin, err := cc.Get(s.Source, s.Name, arch, CUDAOptions())
	if err != nil {
		return CUDAModule{}, fmt.Errorf("kernels: %s for %s: %w", s.Name, arch, err)
	}
	return CUDAModule{Name: s.Name, Cubin: cubin, Entries: s.Entries}, nil
}

// CUDARunnerOps launches the runner's glue kernels on one device. Like
// CUDAKernels it reuses one argument buffer and is used from the device
// thread only.
type CUDARunnerOps struct {
	mod  cuda.Module
	fns  map[string]cuda.Function
	args cuda.Args
}

// LoadCUDARunnerOps loads the module from CompileCUDARunnerOps.
func LoadCUDARunnerOps(c cuda.Ctx, m CUDAModule) (*CUDARunnerOps, error) {
	mod, err := c.LoadModule(m.Cubin)
	if err != nil {
		return nil, fmt.Errorf("kernels: load %s: %w", m.Name, err)
	}
	o := &CUDARunnerOps{mod: mod, fns: map[string]cuda.Function{}}
	for _, e := range m.Entries {
		f, err := c.Function(mod, e)
		if err != nil {
			_ = c.UnloadModule(mod)
			return nil, fmt.Errorf("kernels: %s: %w", m.Name, err)
		}
		o.fns[e] = f
	}
	return o, nil
}

// Unload unloads the module; o is unusable afterwards.
func (o *CUDARunnerOps) Unload(c cuda.Ctx) error {
	if o.fns == nil {
		return nil
	}
	o.fns = nil
	return c.UnloadModule(o.mod)
}

func (o *CUDARunnerOps) launch(c cuda.Ctx, name string, grid, block cuda.Dim3, s cuda.Stream) error {
	f, ok := o.fns[name]
	if !ok {
		return fmt.Errorf("kernels: CUDA runner kernel %s not loaded", name)
	}
	return c.Launch(f, grid, block, 0, s, &o.args)
}

// gemmSuffix names the variant writing elements of t.
func gemmSuffix(t cuda.DType) (string, error) {
	switch t {
	case cuda.F32:
		return "_f32", nil
	case cuda.BF16:
		return "_bf16", nil
	case cuda.F16:
		return "_f16", nil
	}
	return "", fmt.Errorf("kernels: CUDA runner output type %v: want f32, bf16 or f16", t)
}

// Resolve replaces every negative token of tok (int32 [n]) by last[seat[i]]
// (last int32 [seats], seat int32 [n]).
func (o *CUDARunnerOps) Resolve(c cuda.Ctx, s cuda.Stream, tok, seat, last cuda.DevicePtr, n int) error {
	if err := positive("Resolve n", n); err != nil {
		return err
	}
	o.args.Reset().Ptr(tok).Ptr(seat).Ptr(last).I32(int32(n))
	return o.launch(c, "ts_rt_resolve", dim1(ceilDiv(n, cudaElemThreads)), dim1(cudaElemThreads), s)
}

// AddRMSNorm adds d to x when d is not zero (x, d float32 [rows][dim]), then
// writes RMSNorm(x) ⊙ w to y [rows][dim] as elements of out.
func (o *CUDARunnerOps) AddRMSNorm(c cuda.Ctx, s cuda.Stream, y, x, d, w cuda.DevicePtr, rows, dim int, eps float32, out cuda.DType) error {
	if err := positive("AddRMSNorm rows, dim", rows, dim); err != nil {
		return err
	}
	suf, err := gemmSuffix(out)
	if err != nil {
		return err
	}
	o.args.Reset().Ptr(y).Ptr(x).Ptr(d).Ptr(w).I32(int32(dim)).F32(eps)
	return o.launch(c, "ts_rt_add_rmsnorm"+suf, dim1(rows), dim1(cudaRowThreads), s)
}

// SiLUMul writes silu(gate) ⊙ up over n floats to y as elements of out.
func (o *CUDARunnerOps) SiLUMul(c cuda.Ctx, s cuda.Stream, y, gate, up cuda.DevicePtr, n int, out cuda.DType) error {
	if err := positive("SiLUMul n", n); err != nil {
		return err
	}
	suf, err := gemmSuffix(out)
	if err != nil {
		return err
	}
	o.args.Reset().Ptr(y).Ptr(gate).Ptr(up).U64(uint64(n))
	return o.launch(c, "ts_rt_silu_mul"+suf, elemGrid(n), dim1(cudaElemThreads), s)
}

// Gather copies rows idx[j] (int32 [rows]) of in to rows j of out; a row is
// rowBytes bytes, a multiple of 4.
func (o *CUDARunnerOps) Gather(c cuda.Ctx, s cuda.Stream, out, in, idx cuda.DevicePtr, rows, rowBytes int) error {
	if err := positive("Gather rows, rowBytes", rows, rowBytes); err != nil {
		return err
	}
	if rowBytes%4 != 0 {
		return fmt.Errorf("kernels: CUDA Gather row of %d bytes is not a multiple of 4", rowBytes)
	}
	o.args.Reset().Ptr(out).Ptr(in).Ptr(idx).I32(int32(rowBytes / 4))
	return o.launch(c, "ts_rt_gather", dim1(rows), dim1(cudaRowThreads), s)
}

// ArgmaxLast writes each row's argmax of x [rows][n] to out (int32 [rows])
// and, where seat[r] ≥ 0, to last[seat[r]].
func (o *CUDARunnerOps) ArgmaxLast(c cuda.Ctx, s cuda.Stream, out, last, seat, x cuda.DevicePtr, rows, n int) error {
	if err := positive("ArgmaxLast rows, n", rows, n); err != nil {
		return err
	}
	o.args.Reset().Ptr(out).Ptr(last).Ptr(seat).Ptr(x).I32(int32(n))
	return o.launch(c, "ts_rt_argmax_last", dim1(rows), dim1(cudaRowThreads), s)
}

// ScatterLast sets last[pairs[2i]] = pairs[2i+1] for the n (seat, token)
// pairs (int32 [n][2]).
func (o *CUDARunnerOps) ScatterLast(c cuda.Ctx, s cuda.Stream, last, pairs cuda.DevicePtr, n int) error {
	if err := positive("ScatterLast n", n); err != nil {
		return err
	}
	o.args.Reset().Ptr(last).Ptr(pairs).I32(int32(n))
	return o.launch(c, "ts_rt_scatter_last", dim1(ceilDiv(n, cudaElemThreads)), dim1(cudaElemThreads), s)
}
