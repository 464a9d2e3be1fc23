// attention.cu: KV cache writes and paged attention (decode and prefill).
//
// KV cache, per layer: K and V each [numBlocks][kvHeads][blockSize][headDim],
// of float (entry points *_f32, the CPU layout exactly) or bf16 (*_bf16, half
// the memory and bandwidth; the GPU default). Position p of a sequence is in
// block table[p/blockSize], slot p%blockSize. Q/K/V activations are float
// [tokens][heads*headDim], head h at columns h*headDim. Query head h reads KV
// head h/(heads/kvHeads) (GQA). headDim ≤ 256.

// ---- KV write ----

// kv_write stores token t's k and v rows ([kvh*hd] each) at cache slot
// slots[t] = block*bs + offset (vLLM's slot mapping); slots[t] < 0 (a padding
// token of a captured batch) writes nothing. Grid: ntok blocks.
template <typename T>
__device__ __forceinline__ void kv_write(T *Kc, T *Vc, const float *k, const float *v, const int *slots, int kvh,
					 int bs, int hd) {
	const int t = blockIdx.x;
	const int slot = slots[t];
	if (slot < 0)
		return;
	const int blk = slot / bs, off = slot % bs;
	const int row = kvh * hd;
	for (int j = threadIdx.x; j < row; j += blockDim.x) {
		const int h = j / hd, d = j % hd;
		const size_t dst = (((size_t)blk * kvh + h) * bs + off) * hd + d;
		ts_store(Kc + dst, k[(size_t)t * row + j]);
		ts_store(Vc + dst, v[(size_t)t * row + j]);
	}
}

extern "C" __global__ void ts_kv_write_f32(float *Kc, float *Vc, const float *k, const float *v, const int *slots,
					   int kvh, int bs, int hd) {
	kv_write(Kc, Vc, k, v, slots, kvh, bs, hd);
}

extern "C" __global__ void ts_kv_write_bf16(ts_bf16 *Kc, ts_bf16 *Vc, const float *k, const float *v,
					    const int *slots, int kvh, int bs, int hd) {
	kv_write(Kc, Vc, k, v, slots, kvh, bs, hd);
}

// ---- paged decode attention ----

#define TS_DECODE_THREADS 128 // the block size decode attention must be launched with
#define TS_MAX_GROUP 16	      // most query heads per KV head
#define TS_MAX_HD 256

// decode_attn: one query per sequence. Block (kv head, sequence, split) reads
// its split's KV blocks once for all `group` query heads that share the KV
// head, with the split's page indices staged in shared memory, and writes
// unnormalised partial results:
//   o_part  [B][heads][nsplit][hd]  Σ_p e^(s_p − m)·V_p
//   ml_part [B][heads][nsplit][2]   (m, l = Σ_p e^(s_p − m)); m = −inf if empty
// which ts_decode_combine merges. The split ranges come from the row's own
// context (read from device memory, so a captured graph stays valid): with
// row_blocks = ceil(ctx/bs) (at most max_blocks) and per = ceil(row_blocks /
// nsplit), split s covers blocks [s·per, min(row_blocks, (s+1)·per)); an empty
// range (a short row, a padding row) writes the neutral partial m = −inf,
// l = 0, o = 0 (kernels.DecodeSplitRange is the same rule in Go).
// q [B][heads*hd]; block_tables [B][max_blocks]; ctx_lens [B] (0 for a
// padding row). Grid (kvh, B, nsplit); block 128 threads; dynamic shared
// memory ts_decode_smem bytes, for the most pages one split can have:
//   4·(group·hd + group·bs + 3·group + ceil(max_blocks/nsplit)).
template <typename T>
__device__ __forceinline__ void decode_attn(float *o_part, float *ml_part, const float *q, const T *Kc, const T *Vc,
					    const int *block_tables, int max_blocks, const int *ctx_lens, int heads,
					    int kvh, int bs, int hd, float scale) {
	extern __shared__ float smem[];
	const int kv = blockIdx.x, b = blockIdx.y, split = blockIdx.z, nsplit = gridDim.z;
	const int group = heads / kvh;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
	const int ctx = max(ctx_lens[b], 0);
	const int row_blocks = min((ctx + bs - 1) / bs, max_blocks);
	const int per_split = (row_blocks + nsplit - 1) / nsplit;
	const int blk0 = min(row_blocks, split * per_split);
	const int nblk = min(row_blocks, blk0 + per_split) - blk0;
	const int start = blk0 * bs;
	const int end = min(ctx, (blk0 + nblk) * bs);

	float *q_s = smem;		   // [group][hd], pre-scaled
	float *sc = q_s + group * hd;	   // [group][bs] scores, then weights
	float *m_s = sc + group * bs;	   // [group] running max
	float *l_s = m_s + group;	   // [group] running sum
	float *a_s = l_s + group;	   // [group] rescale of this page
	int *pages = (int *)(a_s + group); // [ceil(max_blocks/nsplit)] ≥ nblk

	for (int i = tid; i < group * hd; i += blockDim.x)
		q_s[i] = q[(size_t)b * heads * hd + (size_t)kv * group * hd + i] * scale;
	for (int i = tid; i < nblk; i += blockDim.x)
		pages[i] = block_tables[(size_t)b * max_blocks + blk0 + i];
	if (tid < group) {
		m_s[tid] = -TS_INF;
		l_s[tid] = 0.0f;
	}
	float acc[TS_MAX_GROUP][2];
#pragma unroll
	for (int g = 0; g < TS_MAX_GROUP; g++)
		acc[g][0] = acc[g][1] = 0.0f;
	__syncthreads();

	for (int pi = 0; pi < nblk; pi++) {
		const int p0 = start + pi * bs;
		const size_t base = ((size_t)pages[pi] * kvh + kv) * bs * hd;
		// Scores: a warp per token; the K row is read once into registers and
		// dotted with every query head of the group.
		for (int t = warp; t < bs; t += nwarps) {
			const bool valid = p0 + t < end;
			float kr[TS_MAX_HD / 32];
#pragma unroll
			for (int j = 0; j < TS_MAX_HD / 32; j++) {
				const int d = lane + 32 * j;
				kr[j] = (valid && d < hd) ? ts_load(Kc + base + (size_t)t * hd + d) : 0.0f;
			}
			for (int g = 0; g < group; g++) {
				float s = 0.0f;
#pragma unroll
				for (int j = 0; j < TS_MAX_HD / 32; j++) {
					const int d = lane + 32 * j;
					if (d < hd)
						s += kr[j] * q_s[g * hd + d];
				}
				s = ts_warp_sum(s);
				if (lane == 0)
					sc[g * bs + t] = valid ? s : -TS_INF;
			}
		}
		__syncthreads();
		// Online softmax update, one thread per query head.
		if (tid < group) {
			float *s = sc + tid * bs;
			float mp = -TS_INF;
			for (int t = 0; t < bs; t++)
				mp = fmaxf(mp, s[t]);
			const float mo = m_s[tid], mn = fmaxf(mo, mp);
			const float a = mo == -TS_INF ? 0.0f : expf(mo - mn);
			float sum = 0.0f;
			for (int t = 0; t < bs; t++) {
				const float p = s[t] == -TS_INF ? 0.0f : expf(s[t] - mn);
				s[t] = p;
				sum += p;
			}
			m_s[tid] = mn;
			l_s[tid] = l_s[tid] * a + sum;
			a_s[tid] = a;
		}
		__syncthreads();
		// Accumulate V: each thread owns dims tid and tid+128 for every head.
#pragma unroll
		for (int g = 0; g < TS_MAX_GROUP; g++) {
			if (g < group) {
				acc[g][0] *= a_s[g];
				acc[g][1] *= a_s[g];
			}
		}
		const int ntok = min(bs, end - p0);
		for (int t = 0; t < ntok; t++) {
			const T *vr = Vc + base + (size_t)t * hd;
			const float v0 = tid < hd ? ts_load(vr + tid) : 0.0f;
			const float v1 = tid + TS_DECODE_THREADS < hd ? ts_load(vr + tid + TS_DECODE_THREADS) : 0.0f;
#pragma unroll
			for (int g = 0; g < TS_MAX_GROUP; g++) {
				if (g < group) {
					const float p = sc[g * bs + t];
					acc[g][0] += p * v0;
					acc[g][1] += p * v1;
				}
			}
		}
		__syncthreads(); // sc and a_s are rewritten by the next page
	}

#pragma unroll
	for (int g = 0; g < TS_MAX_GROUP; g++) {
		if (g < group) {
			const int h = kv * group + g;
			const size_t row = ((size_t)b * heads + h) * nsplit + split;
			if (tid < hd)
				o_part[row * hd + tid] = acc[g][0];
			if (tid + TS_DECODE_THREADS < hd)
				o_part[row * hd + tid + TS_DECODE_THREADS] = acc[g][1];
			if (tid == 0) {
				ml_part[row * 2] = m_s[g];
				ml_part[row * 2 + 1] = l_s[g];
			}
		}
	}
}

extern "C" __global__ void ts_paged_decode_f32(float *o_part, float *ml_part, const float *q, const float *Kc,
					       const float *Vc, const int *block_tables, int max_blocks,
					       const int *ctx_lens, int heads, int kvh, int bs, int hd, float scale) {
	decode_attn(o_part, ml_part, q, Kc, Vc, block_tables, max_blocks, ctx_lens, heads, kvh, bs, hd, scale);
}

extern "C" __global__ void ts_paged_decode_bf16(float *o_part, float *ml_part, const float *q, const ts_bf16 *Kc,
						const ts_bf16 *Vc, const int *block_tables, int max_blocks,
						const int *ctx_lens, int heads, int kvh, int bs, int hd, float scale) {
	decode_attn(o_part, ml_part, q, Kc, Vc, block_tables, max_blocks, ctx_lens, heads, kvh, bs, hd, scale);
}

// ts_decode_combine merges the nsplit partial results of ts_paged_decode_* into
// out [B][heads*hd]. Empty splits (m = −inf) are skipped, never evaluated as
// e^(−inf − M), so a row with no positions (padding) gets zeros, not NaN.
// Grid (heads, B); any block size.
extern "C" __global__ void ts_decode_combine(float *out, const float *o_part, const float *ml_part, int heads,
					     int hd, int nsplit) {
	const int h = blockIdx.x, b = blockIdx.y;
	const size_t row0 = ((size_t)b * heads + h) * nsplit;
	float M = -TS_INF;
	for (int s = 0; s < nsplit; s++)
		M = fmaxf(M, ml_part[(row0 + s) * 2]);
	float L = 0.0f;
	for (int s = 0; s < nsplit; s++) {
		const float m = ml_part[(row0 + s) * 2];
		if (m != -TS_INF)
			L += expf(m - M) * ml_part[(row0 + s) * 2 + 1];
	}
	float *o = out + (size_t)b * heads * hd + (size_t)h * hd;
	for (int d = threadIdx.x; d < hd; d += blockDim.x) {
		float acc = 0.0f;
		for (int s = 0; s < nsplit; s++) {
			const float m = ml_part[(row0 + s) * 2];
			if (m != -TS_INF)
				acc += expf(m - M) * o_part[(row0 + s) * hd + d];
		}
		o[d] = L > 0.0f ? acc / L : 0.0f;
	}
}

// ---- paged prefill attention ----

#define TS_PREFILL_WARPS 4

// prefill_attn: causal attention for variable-length chunks of queries.
// Sequence s has queries at q/out rows q_start[s]..q_start[s]+num_q[s]-1, at
// positions ctx_lens[s]-num_q[s]+i, and attends to positions 0..its own (all
// already written to the cache). One warp per (query, head): scores for 32 keys
// at a time, online softmax, V accumulated with lanes across head dims.
// Grid (ceil(max_q/4), heads, nseq); block 128 threads.
template <typename T>
__device__ __forceinline__ void prefill_attn(float *out, const float *q, const T *Kc, const T *Vc,
					     const int *q_start, const int *num_q, const int *ctx_lens,
					     const int *block_tables, int max_blocks, int heads, int kvh, int bs,
					     int hd, float scale) {
	const int s = blockIdx.z, h = blockIdx.y;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int i = blockIdx.x * TS_PREFILL_WARPS + warp;
	const int nq = num_q[s];
	if (i >= nq)
		return; // whole warp: no block-wide synchronisation below
	const int row = q_start[s] + i;
	const int pos = ctx_lens[s] - nq + i;
	const int kvi = h / (heads / kvh);
	const int *table = block_tables + (size_t)s * max_blocks;

	float qr[TS_MAX_HD / 32], acc[TS_MAX_HD / 32];
#pragma unroll
	for (int j = 0; j < TS_MAX_HD / 32; j++) {
		const int d = lane + 32 * j;
		qr[j] = d < hd ? q[(size_t)row * heads * hd + (size_t)h * hd + d] * scale : 0.0f;
		acc[j] = 0.0f;
	}
	float m = -TS_INF, l = 0.0f;
	for (int t0 = 0; t0 <= pos; t0 += 32) {
		const int n = min(32, pos + 1 - t0);
		float my = -TS_INF;
		for (int jj = 0; jj < n; jj++) {
			const int t = t0 + jj;
			const T *kr = Kc + (((size_t)table[t / bs] * kvh + kvi) * bs + t % bs) * hd;
			float part = 0.0f;
#pragma unroll
			for (int j = 0; j < TS_MAX_HD / 32; j++) {
				const int d = lane + 32 * j;
				if (d < hd)
					part += qr[j] * ts_load(kr + d);
			}
			part = ts_warp_sum(part);
			if (lane == jj)
				my = part;
		}
		const float mn = fmaxf(m, ts_warp_max(my));
		const float a = m == -TS_INF ? 0.0f : expf(m - mn);
		const float p = my == -TS_INF ? 0.0f : expf(my - mn);
		l = l * a + ts_warp_sum(p);
#pragma unroll
		for (int j = 0; j < TS_MAX_HD / 32; j++)
			acc[j] *= a;
		for (int jj = 0; jj < n; jj++) {
			const int t = t0 + jj;
			const float pj = __shfl_sync(0xffffffffu, p, jj);
			const T *vr = Vc + (((size_t)table[t / bs] * kvh + kvi) * bs + t % bs) * hd;
#pragma unroll
			for (int j = 0; j < TS_MAX_HD / 32; j++) {
				const int d = lane + 32 * j;
				if (d < hd)
					acc[j] += pj * ts_load(vr + d);
			}
		}
		m = mn;
	}
	float *o = out + (size_t)row * heads * hd + (size_t)h * hd;
#pragma unroll
	for (int j = 0; j < TS_MAX_HD / 32; j++) {
		const int d = lane + 32 * j;
		if (d < hd)
			o[d] = l > 0.0f ? acc[j] / l : 0.0f;
	}
}

extern "C" __global__ void ts_paged_prefill_f32(float *out, const float *q, const float *Kc, const float *Vc,
						const int *q_start, const int *num_q, const int *ctx_lens,
						const int *block_tables, int max_blocks, int heads, int kvh, int bs,
						int hd, float scale) {
	prefill_attn(out, q, Kc, Vc, q_start, num_q, ctx_lens, block_tables, max_blocks, heads, kvh, bs, hd, scale);
}

extern "C" __global__ void ts_paged_prefill_bf16(float *out, const float *q, const ts_bf16 *Kc, const ts_bf16 *Vc,
						 const int *q_start, const int *num_q, const int *ctx_lens,
						 const int *block_tables, int max_blocks, int heads, int kvh, int bs,
						 int hd, float scale) {
	prefill_attn(out, q, Kc, Vc, q_start, num_q, ctx_lens, block_tables, max_blocks, heads, kvh, bs, hd, scale);
}
