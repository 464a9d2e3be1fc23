// cuda_common.cuh: helpers shared by every kernels/*.cu. It is prepended to each
// source before NVRTC compiles it (NVRTC gets no include path), so it holds only
// __device__ inline code and types, no kernels.
//
// Conventions for every kernel:
//   - activations are float32; weights for GEMMs go through cuBLASLt;
//   - bf16 and f16 values are raw 16-bit patterns (unsigned short), converted
//     here, so no CUDA header is needed;
//   - block-wide reductions need blockDim.x to be a multiple of 32 (≤ 1024).

#define TS_INF __int_as_float(0x7f800000)
#define TS_FLT_MAX 3.402823466e+38f

struct ts_bf16 {
	unsigned short bits;
};

__device__ __forceinline__ float ts_bf16_to_f32(unsigned short h) {
	return __uint_as_float(((unsigned)h) << 16);
}

// Round to nearest even, NaN stays a quiet NaN (as kernels.F32ToBF16).
__device__ __forceinline__ unsigned short ts_f32_to_bf16(float f) {
	unsigned b = __float_as_uint(f);
	if ((b & 0x7fffffffu) > 0x7f800000u)
		return (unsigned short)((b >> 16) | 0x40u);
	b += 0x7fffu + ((b >> 16) & 1u);
	return (unsigned short)(b >> 16);
}

__device__ __forceinline__ float ts_f16_to_f32(unsigned short h) {
	float f;
	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
	return f;
}

__device__ __forceinline__ unsigned short ts_f32_to_f16(float f) {
	unsigned short h;
	asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
	return h;
}

// KV cache element access: the cache is float or ts_bf16.
__device__ __forceinline__ float ts_load(const float *p) { return *p; }
__device__ __forceinline__ float ts_load(const ts_bf16 *p) { return ts_bf16_to_f32(p->bits); }
__device__ __forceinline__ void ts_store(float *p, float v) { *p = v; }
__device__ __forceinline__ void ts_store(ts_bf16 *p, float v) { p->bits = ts_f32_to_bf16(v); }

__device__ __forceinline__ float ts_warp_sum(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float ts_warp_max(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// ts_block_sum returns the sum of v over the block to every thread.
__device__ __forceinline__ float ts_block_sum(float v) {
	__shared__ float part[32];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int nwarps = (blockDim.x + 31) >> 5;
	v = ts_warp_sum(v);
	__syncthreads(); // part may still be read by a previous call
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	v = lane < nwarps ? part[lane] : 0.0f;
	return ts_warp_sum(v);
}

// ts_block_max returns the maximum of v over the block to every thread.
__device__ __forceinline__ float ts_block_max(float v) {
	__shared__ float part[32];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int nwarps = (blockDim.x + 31) >> 5;
	v = ts_warp_max(v);
	__syncthreads();
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	v = lane < nwarps ? part[lane] : -TS_INF;
	return ts_warp_max(v);
}

// (value, index) pairs for argmax: larger value wins, ties go to the lower
// index, index < 0 is "nothing yet" and loses to anything.
__device__ __forceinline__ bool ts_better(float va, int ia, float vb, int ib) {
	if (ib < 0)
		return ia >= 0;
	if (ia < 0)
		return false;
	return va > vb || (va == vb && ia < ib);
}

__device__ __forceinline__ void ts_warp_argmax(float &v, int &i) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		float ov = __shfl_xor_sync(0xffffffffu, v, o);
		int oi = __shfl_xor_sync(0xffffffffu, i, o);
		if (ts_better(ov, oi, v, i)) {
			v = ov;
			i = oi;
		}
	}
}

// ts_block_argmax reduces (v, i) over the block; every thread gets the winner.
__device__ __forceinline__ void ts_block_argmax(float &v, int &i) {
	__shared__ float pv[32];
	__shared__ int pi[32];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int nwarps = (blockDim.x + 31) >> 5;
	ts_warp_argmax(v, i);
	__syncthreads();
	if (lane == 0) {
		pv[warp] = v;
		pi[warp] = i;
	}
	__syncthreads();
	v = lane < nwarps ? pv[lane] : 0.0f;
	i = lane < nwarps ? pi[lane] : -1;
	ts_warp_argmax(v, i);
}

// ts_row_argmax is the index of the first largest element of xr[0:n], by the
// host sampler's rule (package sampling): NaN counts as −inf, +inf as FLT_MAX
// (so the lower index of the two wins), ties go to the lower index, and a row
// of only NaNs gives 0. Every thread of the block gets the answer.
__device__ __forceinline__ int ts_row_argmax(const float *xr, int n) {
	float best = 0.0f;
	int bi = -1;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		float v = xr[i];
		// NaN is −inf (not skipped: {NaN, −inf} gives 0, as on the host);
		// tested first because fminf(NaN, x) is x.
		v = v != v ? -TS_INF : fminf(v, TS_FLT_MAX);
		if (bi < 0 || v > best) {
			best = v;
			bi = i;
		}
	}
	ts_block_argmax(best, bi);
	return bi < 0 ? 0 : bi;
}

// The embedding gathers (ops.cu, quant.cu) start alike: out[t][cols] =
// table[tokens[t]][:] as float, one block per token (grid: ntok blocks). A
// token outside [0, vocab) writes zeros (the host validates tokens; this only
// keeps a bad one from reading out of bounds).
#define TS_EMBED_PROLOGUE                                                      \
	const int t = blockIdx.x;                                              \
	const int tok = tokens[t];                                             \
	float *o = out + (size_t)t * cols;                                     \
	if (tok < 0 || tok >= vocab) {                                         \
		for (int c = threadIdx.x; c < cols; c += blockDim.x)           \
			o[c] = 0.0f;                                           \
		return;                                                        \
	}
