// ops.cu: row and element-wise kernels — RMSNorm, RoPE, SiLU·mul, embedding
// gather, activation casts for the GEMMs, Q8_0 weight dequantisation, argmax.
// Shapes and semantics match the CPU kernels of package kernels.

// ts_rmsnorm: y[r] = x[r] / sqrt(mean(x[r]²) + eps) ⊙ w. x, y [rows][dim]
// (y may alias x), w [dim]. Grid: rows blocks; block: a multiple of 32 threads.
extern "C" __global__ void ts_rmsnorm(float *y, const float *x, const float *w, int dim, float eps) {
	const float *xr = x + (size_t)blockIdx.x * dim;
	float *yr = y + (size_t)blockIdx.x * dim;
	float ss = 0.0f;
	for (int i = threadIdx.x; i < dim; i += blockDim.x) {
		float v = xr[i];
		ss += v * v;
	}
	ss = ts_block_sum(ss);
	const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		yr[i] = xr[i] * inv * w[i];
}

// ts_rope rotates in place the adjacent pairs (x[2i], x[2i+1]) of every head of
// every row by pos[r]·freq_scale·theta^(−2i/hd). x [rows][heads*hd]. One thread
// per (row, pair) computes the angle once and rotates that pair in every head.
// Grid: ceil(rows*hd/2 / blockDim) blocks.
extern "C" __global__ void ts_rope(float *x, const int *pos, int rows, int heads, int hd, float theta,
				   float freq_scale) {
	const int half = hd / 2;
	const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (idx >= (long long)rows * half)
		return;
	const int r = (int)(idx / half), i = (int)(idx % half);
	// The angle in double (positions reach 1e5 radians and more), reduced to
	// one turn before the float sine and cosine.
	const double ang = (double)pos[r] * (double)freq_scale * pow((double)theta, -2.0 * i / (double)hd);
	double turns = ang * 0.15915494309189535; // 1/(2π)
	turns -= rint(turns);
	float s, c;
	sincosf((float)(turns * 6.283185307179586), &s, &c);
	float *xr = x + (size_t)r * heads * hd + 2 * i;
	for (int h = 0; h < heads; h++) {
		float *v = xr + (size_t)h * hd;
		const float a = v[0], b = v[1];
		v[0] = a * c - b * s;
		v[1] = a * s + b * c;
	}
}

// ts_rope_freqs rotates in place pair i of every head of every row by
// pos[r]·freqs[i] radians (freqs [hd/2], double). The pair is (2i, 2i+1), or
// with neox (i, i+hd/2). x [rows][heads*hd]. One thread per (row, pair), as
// ts_rope. Grid: ceil(rows*hd/2 / blockDim) blocks.
extern "C" __global__ void ts_rope_freqs(float *x, const int *pos, int rows, int heads, int hd,
					 const double *freqs, int neox) {
	const int half = hd / 2;
	const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (idx >= (long long)rows * half)
		return;
	const int r = (int)(idx / half), i = (int)(idx % half);
	const double ang = (double)pos[r] * freqs[i];
	double turns = ang * 0.15915494309189535; // 1/(2π)
	turns -= rint(turns);
	float s, c;
	sincosf((float)(turns * 6.283185307179586), &s, &c);
	const int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
	float *xr = x + (size_t)r * heads * hd;
	for (int h = 0; h < heads; h++) {
		float *v = xr + (size_t)h * hd;
		const float a = v[ia], b = v[ib];
		v[ia] = a * c - b * s;
		v[ib] = a * s + b * c;
	}
}

// ts_add_bias: x[r][j] += b[j] for x [rows][n]. Grid-stride over rows*n.
extern "C" __global__ void ts_add_bias(float *x, const float *b, int n, long long total) {
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
	     i += (long long)gridDim.x * blockDim.x)
		x[i] += b[i % n];
}

// ts_silu_mul: y = gate/(1+e^−gate) ⊙ up over n elements (y may alias either).
extern "C" __global__ void ts_silu_mul(float *y, const float *gate, const float *up, long long n) {
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (long long)gridDim.x * blockDim.x) {
		const float g = gate[i];
		y[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

// Embedding gather: out[t][cols] = table[tokens[t]][:] as float (the
// prologue TS_EMBED_PROLOGUE is in cuda_common.cuh, shared with quant.cu).
extern "C" __global__ void ts_embedding_f32(float *out, const float *table, const int *tokens, int vocab,
					    int cols) {
	TS_EMBED_PROLOGUE
	const float *row = table + (size_t)tok * cols;
	for (int c = threadIdx.x; c < cols; c += blockDim.x)
		o[c] = row[c];
}

extern "C" __global__ void ts_embedding_f16(float *out, const unsigned short *table, const int *tokens,
					    int vocab, int cols) {
	TS_EMBED_PROLOGUE
	const unsigned short *row = table + (size_t)tok * cols;
	for (int c = threadIdx.x; c < cols; c += blockDim.x)
		o[c] = ts_f16_to_f32(row[c]);
}

extern "C" __global__ void ts_embedding_bf16(float *out, const unsigned short *table, const int *tokens,
					     int vocab, int cols) {
	TS_EMBED_PROLOGUE
	const unsigned short *row = table + (size_t)tok * cols;
	for (int c = threadIdx.x; c < cols; c += blockDim.x)
		o[c] = ts_bf16_to_f32(row[c]);
}

// Q8_0: blocks of 32 along a row, each an f16 scale d then 32 int8 q; value d·q.
__device__ __forceinline__ float ts_q8_0_at(const unsigned char *row, int c) {
	const unsigned char *blk = row + (c >> 5) * 34;
	const unsigned short d = (unsigned short)(blk[0] | (blk[1] << 8));
	return ts_f16_to_f32(d) * (float)(signed char)blk[2 + (c & 31)];
}

extern "C" __global__ void ts_embedding_q8_0(float *out, const unsigned char *table, const int *tokens,
					     int vocab, int cols) {
	TS_EMBED_PROLOGUE
	const unsigned char *row = table + (size_t)tok * (cols / 32) * 34;
	for (int c = threadIdx.x; c < cols; c += blockDim.x)
		o[c] = ts_q8_0_at(row, c);
}

// ts_dequant_q8_0_bf16 converts a Q8_0 matrix [rows][cols] (cols a multiple of
// 32) to bf16, for uploading Q8_0 weights to the cuBLASLt GEMMs.
extern "C" __global__ void ts_dequant_q8_0_bf16(unsigned short *out, const unsigned char *in, long long rows,
						int cols) {
	const long long n = rows * cols;
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (long long)gridDim.x * blockDim.x) {
		const long long r = i / cols;
		const int c = (int)(i % cols);
		out[i] = ts_f32_to_bf16(ts_q8_0_at(in + r * (cols / 32) * 34, c));
	}
}

// Activation casts before a bf16 or f16 GEMM (round to nearest even).
extern "C" __global__ void ts_cast_f32_bf16(unsigned short *out, const float *in, long long n) {
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (long long)gridDim.x * blockDim.x)
		out[i] = ts_f32_to_bf16(in[i]);
}

extern "C" __global__ void ts_cast_f32_f16(unsigned short *out, const float *in, long long n) {
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (long long)gridDim.x * blockDim.x)
		out[i] = ts_f32_to_f16(in[i]);
}

// ts_argmax: out[r] = ts_row_argmax of x[r][0:n]. Grid: rows blocks.
extern "C" __global__ void ts_argmax(int *out, const float *x, int n) {
	const int tok = ts_row_argmax(x + (size_t)blockIdx.x * n, n);
	if (threadIdx.x == 0)
		out[blockIdx.x] = tok;
}
