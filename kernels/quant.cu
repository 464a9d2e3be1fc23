// quant.cu: device decoders of GGML's block types other than Q8_0 (which is in
// ops.cu): Q4_0, Q4_1, Q5_0, Q5_1 (blocks of 32) and Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K (super-blocks of 256). Each type has a per-element decoder
// ts_<type>_at(row, c), a bf16 weight dequantiser (so block-quantised
// matrices are uploaded as stored and widened on the device) and an
// embedding gather.
//
// Every value equals internal/quant's (ggml's dequantize_row_*) bit for bit:
// the products and sums are the same float32 operations in the same order,
// written with the _rn intrinsics because NVRTC contracts a*b+c into an FMA
// by default (--fmad=true), which would round once instead of twice. The
// element decoded by one thread is found by index arithmetic on c alone
// (kernels.CUDAQuantAt is its Go mirror, checked against internal/quant).
// Blocks are 18 to 210 bytes, so multi-byte fields are read bytewise.

__device__ __forceinline__ float ts_qf16(const unsigned char *p) {
	return ts_f16_to_f32((unsigned short)(p[0] | (p[1] << 8)));
}

__device__ __forceinline__ unsigned ts_qu32(const unsigned char *p) {
	return (unsigned)p[0] | ((unsigned)p[1] << 8) | ((unsigned)p[2] << 16) | ((unsigned)p[3] << 24);
}

// Legacy blocks of 32: element j < 16 is the low nibble of qs[j], j ≥ 16 the
// high nibble of qs[j-16]; the Q5 fifth bit of element j is bit j of qh.
__device__ __forceinline__ int ts_q4_nibble(const unsigned char *qs, int j) {
	return j < 16 ? (qs[j] & 0xf) : (qs[j - 16] >> 4);
}

// Q4_0 (18 bytes): f16 d, 16 nibble pairs; value (q-8)·d.
__device__ __forceinline__ float ts_q4_0_at(const unsigned char *row, int c) {
	const unsigned char *b = row + (c >> 5) * 18;
	const int j = c & 31;
	return __fmul_rn((float)(ts_q4_nibble(b + 2, j) - 8), ts_qf16(b));
}

// Q4_1 (20 bytes): f16 d, f16 m, nibbles; value q·d + m.
__device__ __forceinline__ float ts_q4_1_at(const unsigned char *row, int c) {
	const unsigned char *b = row + (c >> 5) * 20;
	const int j = c & 31;
	return __fadd_rn(__fmul_rn((float)ts_q4_nibble(b + 4, j), ts_qf16(b)), ts_qf16(b + 2));
}

// Q5_0 (22 bytes): f16 d, u32 qh, nibbles; value (q|h<<4 − 16)·d.
__device__ __forceinline__ float ts_q5_0_at(const unsigned char *row, int c) {
	const unsigned char *b = row + (c >> 5) * 22;
	const int j = c & 31;
	const int h = (int)((ts_qu32(b + 2) >> j) & 1u) << 4;
	return __fmul_rn((float)((ts_q4_nibble(b + 6, j) | h) - 16), ts_qf16(b));
}

// Q5_1 (24 bytes): f16 d, f16 m, u32 qh, nibbles; value (q|h<<4)·d + m.
__device__ __forceinline__ float ts_q5_1_at(const unsigned char *row, int c) {
	const unsigned char *b = row + (c >> 5) * 24;
	const int j = c & 31;
	const int h = (int)((ts_qu32(b + 4) >> j) & 1u) << 4;
	return __fadd_rn(__fmul_rn((float)(ts_q4_nibble(b + 8, j) | h), ts_qf16(b)), ts_qf16(b + 2));
}

// K-quants, super-blocks of 256. Q2_K and Q3_K split element j into half
// n = j/128, 2-bit plane p = j%128/32 (shift 2p) and byte r = j%32 of that
// half's 32 q bytes; sub-block j/16 (16 elements) has its own scale.

// Q2_K (84 bytes): 16 scale bytes (scale | min<<4), 64 q bytes, f16 d, dmin;
// value (d·scale)·q − dmin·min.
__device__ __forceinline__ float ts_q2_k_at(const unsigned char *row, int c) {
	const unsigned char *b = row + (c >> 8) * 84;
	const int j = c & 255, n = j >> 7, p = (j >> 5) & 3, r = j & 31;
	const int s = b[j >> 4];
	const float dl = __fmul_rn(ts_qf16(b + 80), (float)(s & 0xf));
	const float ml = __fmul_rn(ts_qf16(b + 82), (float)(s >> 4));
	const int q = (b[16 + n * 32 + r] >> (2 * p)) & 3;
	return __fsub_rn(__fmul_rn(dl, (float)q), ml);
}

// Q3_K (110 bytes): 32 high-bit mask bytes, 64 q bytes, 12 packed 6-bit
// scales, f16 d; value (d·(scale−32))·(q − 4 unless the mask bit is set).
__device__ __forceinline__ float ts_q3_k_at(const unsigned char *row, int c) {
	const unsigned char *b = row + (c >> 8) * 110;
	const int j = c & 255, n = j >> 7, p = (j >> 5) & 3, r = j & 31, sub = j >> 4;
	const unsigned char *sc = b + 96;
	// Sub-block scale code: low nibble from byte sub (sub < 8) or the high
	// nibble of byte sub-8, top two bits from byte 8+sub%4 at bit 2·(sub/4).
	const int lo = sub < 8 ? (sc[sub] & 0xf) : (sc[sub - 8] >> 4);
	const int hi = (sc[8 + (sub & 3)] >> (2 * (sub >> 2))) & 3;
	const float dl = __fmul_rn(ts_qf16(b + 108), (float)((lo | (hi << 4)) - 32));
	int q = (b[32 + n * 32 + r] >> (2 * p)) & 3;
	if ((b[r] & (1 << (n * 4 + p))) == 0)
		q -= 4;
	return __fmul_rn(dl, (float)q);
}

// The 6-bit scale and min of sub-block s (0..7) of a Q4_K or Q5_K block
// (ggml's get_scale_min_k4; see quant.ScaleMinK4).
__device__ __forceinline__ void ts_scale_min_k4(const unsigned char *q, int s, int *sc, int *m) {
	if (s < 4) {
		*sc = q[s] & 63;
		*m = q[s + 4] & 63;
	} else {
		*sc = (q[s + 4] & 0xf) | ((q[s - 4] >> 6) << 4);
		*m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
	}
}

// Q4_K and Q5_K: chunk k = j/64 of 32 q bytes holds sub-block 2k in the low
// nibbles and 2k+1 in the high ones (h = j%64/32); byte r = j%32. Q5_K's
// fifth bit of element j is bit j/32 of qh[r]. Value (d·scale)·q − dmin·min.
__device__ __forceinline__ float ts_q45_k(const unsigned char *b, const unsigned char *qs,
					  const unsigned char *qh, int j) {
	const int k = j >> 6, h = (j >> 5) & 1, r = j & 31;
	int s, mn;
	ts_scale_min_k4(b + 4, j >> 5, &s, &mn);
	const float d1 = __fmul_rn(ts_qf16(b), (float)s);
	const float m1 = __fmul_rn(ts_qf16(b + 2), (float)mn);
	int q = (qs[32 * k + r] >> (4 * h)) & 0xf;
	if (qh != 0 && ((qh[r] >> (j >> 5)) & 1))
		q += 16;
	return __fsub_rn(__fmul_rn(d1, (float)q), m1);
}

// Q4_K (144 bytes): f16 d, dmin, 12 scale bytes, 128 nibble bytes.
__device__ __forceinline__ float ts_q4_k_at(const unsigned char *row, int c) {
	const unsigned char *b = row + (c >> 8) * 144;
	return ts_q45_k(b, b + 16, 0, c & 255);
}

// Q5_K (176 bytes): f16 d, dmin, 12 scale bytes, 32 qh bytes, 128 nibble bytes.
__device__ __forceinline__ float ts_q5_k_at(const unsigned char *row, int c) {
	const unsigned char *b = row + (c >> 8) * 176;
	return ts_q45_k(b, b + 48, b + 16, c & 255);
}

// Q6_K (210 bytes): 128 low-nibble bytes, 64 high-2-bit bytes, 16 int8
// scales, f16 d. Element j = 128n + 32k + r (quarter k) sits in nibble k/2 of
// ql[64n + r + 32(k&1)] and bits 2k of qh[32n + r]; its scale is
// sc[8n + r/16 + 2k]. Value (d·scale)·(q − 32).
__device__ __forceinline__ float ts_q6_k_at(const unsigned char *row, int c) {
	const unsigned char *b = row + (c >> 8) * 210;
	const int j = c & 255, n = j >> 7, k = (j >> 5) & 3, r = j & 31;
	const int lo = (b[64 * n + r + 32 * (k & 1)] >> (4 * (k >> 1))) & 0xf;
	const int hi = (b[128 + 32 * n + r] >> (2 * k)) & 3;
	const float ds = __fmul_rn(ts_qf16(b + 208), (float)(signed char)b[192 + 8 * n + (r >> 4) + 2 * k]);
	return __fmul_rn(ds, (float)((lo | (hi << 4)) - 32));
}

// Everything above is plain C++ on purpose: cuda_quant_host_test.go builds
// it for the host (up to the next line) and checks it against internal/quant.

// The weight dequantisers convert a matrix [rows][cols] (cols a multiple of
// the block size, rows of cols/elems·bytes bytes) to bf16, one element per
// thread, grid-stride, rounded as ts_cast_f32_bf16 rounds.
#define TS_DEQUANT_BODY(AT, ELEMS, BYTES)                                                \
	const long long n = rows * cols;                                                 \
	const long long rb = (long long)(cols / (ELEMS)) * (BYTES);                      \
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;      \
	     i += (long long)gridDim.x * blockDim.x) {                                   \
		const long long r = i / cols;                                            \
		out[i] = ts_f32_to_bf16(AT(in + r * rb, (int)(i % cols)));               \
	}

// The embedding gathers read row tokens[t] of a table of the type into
// out[t] as float32.
#define TS_EMBED_QUANT_BODY(AT, ELEMS, BYTES)                                            \
	TS_EMBED_PROLOGUE                                                                \
	const unsigned char *row = table + (size_t)tok * (size_t)(cols / (ELEMS)) * (BYTES); \
	for (int c = threadIdx.x; c < cols; c += blockDim.x)                             \
		o[c] = AT(row, c);

extern "C" __global__ void ts_dequant_q4_0_bf16(unsigned short *out, const unsigned char *in, long long rows,
						int cols) {
	TS_DEQUANT_BODY(ts_q4_0_at, 32, 18)
}
extern "C" __global__ void ts_dequant_q4_1_bf16(unsigned short *out, const unsigned char *in, long long rows,
						int cols) {
	TS_DEQUANT_BODY(ts_q4_1_at, 32, 20)
}
extern "C" __global__ void ts_dequant_q5_0_bf16(unsigned short *out, const unsigned char *in, long long rows,
						int cols) {
	TS_DEQUANT_BODY(ts_q5_0_at, 32, 22)
}
extern "C" __global__ void ts_dequant_q5_1_bf16(unsigned short *out, const unsigned char *in, long long rows,
						int cols) {
	TS_DEQUANT_BODY(ts_q5_1_at, 32, 24)
}
extern "C" __global__ void ts_dequant_q2_k_bf16(unsigned short *out, const unsigned char *in, long long rows,
						int cols) {
	TS_DEQUANT_BODY(ts_q2_k_at, 256, 84)
}
extern "C" __global__ void ts_dequant_q3_k_bf16(unsigned short *out, const unsigned char *in, long long rows,
						int cols) {
	TS_DEQUANT_BODY(ts_q3_k_at, 256, 110)
}
extern "C" __global__ void ts_dequant_q4_k_bf16(unsigned short *out, const unsigned char *in, long long rows,
						int cols) {
	TS_DEQUANT_BODY(ts_q4_k_at, 256, 144)
}
extern "C" __global__ void ts_dequant_q5_k_bf16(unsigned short *out, const unsigned char *in, long long rows,
						int cols) {
	TS_DEQUANT_BODY(ts_q5_k_at, 256, 176)
}
extern "C" __global__ void ts_dequant_q6_k_bf16(unsigned short *out, const unsigned char *in, long long rows,
						int cols) {
	TS_DEQUANT_BODY(ts_q6_k_at, 256, 210)
}

extern "C" __global__ void ts_embedding_q4_0(float *out, const unsigned char *table, const int *tokens, int vocab,
					     int cols) {
	TS_EMBED_QUANT_BODY(ts_q4_0_at, 32, 18)
}
extern "C" __global__ void ts_embedding_q4_1(float *out, const unsigned char *table, const int *tokens, int vocab,
					     int cols) {
	TS_EMBED_QUANT_BODY(ts_q4_1_at, 32, 20)
}
extern "C" __global__ void ts_embedding_q5_0(float *out, const unsigned char *table, const int *tokens, int vocab,
					     int cols) {
	TS_EMBED_QUANT_BODY(ts_q5_0_at, 32, 22)
}
extern "C" __global__ void ts_embedding_q5_1(float *out, const unsigned char *table, const int *tokens, int vocab,
					     int cols) {
	TS_EMBED_QUANT_BODY(ts_q5_1_at, 32, 24)
}
extern "C" __global__ void ts_embedding_q2_k(float *out, const unsigned char *table, const int *tokens, int vocab,
					     int cols) {
	TS_EMBED_QUANT_BODY(ts_q2_k_at, 256, 84)
}
extern "C" __global__ void ts_embedding_q3_k(float *out, const unsigned char *table, const int *tokens, int vocab,
					     int cols) {
	TS_EMBED_QUANT_BODY(ts_q3_k_at, 256, 110)
}
extern "C" __global__ void ts_embedding_q4_k(float *out, const unsigned char *table, const int *tokens, int vocab,
					     int cols) {
	TS_EMBED_QUANT_BODY(ts_q4_k_at, 256, 144)
}
extern "C" __global__ void ts_embedding_q5_k(float *out, const unsigned char *table, const int *tokens, int vocab,
					     int cols) {
	TS_EMBED_QUANT_BODY(ts_q5_k_at, 256, 176)
}
extern "C" __global__ void ts_embedding_q6_k(float *out, const unsigned char *table, const int *tokens, int vocab,
					     int cols) {
	TS_EMBED_QUANT_BODY(ts_q6_k_at, 256, 210)
}
