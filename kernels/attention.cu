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
// context and start block (read from device memory, so a captured graph
// stays valid): with row_blocks = ceil(ctx/bs) (at most max_blocks), start =
// start_blocks[b] (0 when start_blocks is null; clamped to [0, row_blocks]),
// n = row_blocks − start and per = ceil(n / nsplit), split s covers blocks
// start + [s·per, min(n, (s+1)·per)); an empty range (a short row, a padding
// row) writes the neutral partial m = −inf, l = 0, o = 0
// (kernels.DecodeTailSplitRange is the same rule in Go). A row with start > 0
// is a cascade member: blocks [0, start) are its group's shared run, whose
// partials ts_cascade_shared_* writes into slots [nsplit, slots) of the row;
// for a row with start == 0 split 0 writes those slots neutral, so the
// combine over all slots is that row's plain attention.
// window > 0 (a sliding window; 0 = none): the row's query at position
// ctx−1 sees only positions ≥ lo = ctx − window, so the range starts at
// block lo/bs when that lies past start (the splits cover only live
// blocks) and the positions of that block before lo are masked. A cascade
// member's window must cover its whole context (the host leaves any other
// out of its group): the shared run is unmasked.
// q [B][heads*hd]; block_tables [B][max_blocks]; ctx_lens [B] (0 for a
// padding row); partial rows have slots ≥ nsplit entries (slots == nsplit
// without cascade). Grid (kvh, B, nsplit); block 128 threads; dynamic shared
// memory ts_decode_smem bytes, for the most pages one split can have:
//   4·(group·hd + group·bs + 3·group + ceil(max_blocks/nsplit)).
template <typename T>
__device__ __forceinline__ void decode_attn(float *o_part, float *ml_part, const float *q, const T *Kc, const T *Vc,
					    const int *block_tables, int max_blocks, const int *ctx_lens,
					    const int *start_blocks, int slots, int heads, int kvh, int bs, int hd,
					    float scale, int window) {
	extern __shared__ float smem[];
	const int kv = blockIdx.x, b = blockIdx.y, split = blockIdx.z, nsplit = gridDim.z;
	const int group = heads / kvh;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
	const int ctx = max(ctx_lens[b], 0);
	const int row_blocks = min((ctx + bs - 1) / bs, max_blocks);
	const int member = start_blocks ? min(max(start_blocks[b], 0), row_blocks) : 0;
	const int lo = window > 0 ? max(ctx - window, 0) : 0; // first position the window sees
	const int first = max(member, min(lo / bs, row_blocks));
	const int tail = row_blocks - first;
	const int per_split = (tail + nsplit - 1) / nsplit;
	const int off0 = min(tail, split * per_split);
	const int blk0 = first + off0;
	const int nblk = min(tail, off0 + per_split) - off0;
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
			const bool valid = p0 + t < end && p0 + t >= lo;
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
			const size_t row = ((size_t)b * heads + h) * slots + split;
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
	// A row outside every group: its shared-run slots are neutral (a
	// member's are written by ts_cascade_shared_*, never here).
	if (split == 0 && member == 0) {
		for (int g = 0; g < group; g++) {
			const size_t row0 = ((size_t)b * heads + kv * group + g) * slots;
			for (int sl = nsplit; sl < slots; sl++) {
				for (int d = tid; d < hd; d += blockDim.x)
					o_part[(row0 + sl) * hd + d] = 0.0f;
				if (tid == 0) {
					ml_part[(row0 + sl) * 2] = -TS_INF;
					ml_part[(row0 + sl) * 2 + 1] = 0.0f;
				}
			}
		}
	}
}

extern "C" __global__ void ts_paged_decode_f32(float *o_part, float *ml_part, const float *q, const float *Kc,
					       const float *Vc, const int *block_tables, int max_blocks,
					       const int *ctx_lens, const int *start_blocks, int slots, int heads, int kvh,
					       int bs, int hd, float scale, int window) {
	decode_attn(o_part, ml_part, q, Kc, Vc, block_tables, max_blocks, ctx_lens, start_blocks, slots, heads, kvh,
		    bs, hd, scale, window);
}

extern "C" __global__ void ts_paged_decode_bf16(float *o_part, float *ml_part, const float *q, const ts_bf16 *Kc,
						const ts_bf16 *Vc, const int *block_tables, int max_blocks,
						const int *ctx_lens, const int *start_blocks, int slots, int heads,
						int kvh, int bs, int hd, float scale, int window) {
	decode_attn(o_part, ml_part, q, Kc, Vc, block_tables, max_blocks, ctx_lens, start_blocks, slots, heads, kvh,
		    bs, hd, scale, window);
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

// ---- shared-prefix (cascade) decode attention ----

#define TS_CASC_THREADS 128 // the block size ts_cascade_shared_* must be launched with
#define TS_CASC_ROWS 32	    // query rows (member, query head) per block
#define TS_CASC_KEYS 32	    // key positions per shared-memory tile
#define TS_CASC_ACC (TS_CASC_ROWS * TS_MAX_HD / TS_CASC_THREADS)

// cascade_shared: the shared run of a group of decode rows whose block tables
// begin with the same `shared` blocks (step.Group), attended once for all
// members. Block (tile, kv head, shared split) takes the tile's members'
// query heads of the KV head, rows r = member·qpk + head (qpk = heads/kvh,
// TS_CASC_ROWS/qpk members per tile), and walks its split's part of the run
// in tiles of TS_CASC_KEYS positions: each K/V tile is staged once in shared
// memory (as float, rows padded by one float so the score loop is free of
// bank conflicts) and used by every row. It writes, per member row and head,
// the unnormalised partial of a decode split (m, l = Σ e^(s−m), o = Σ e^(s−m)·V;
// m = −inf for an empty split) into partial slot slots − nshared + split,
// where ts_decode_combine merges it with the member's own tail.
//   tiles     [max_tiles][3] (first, count, shared): members
//             casc_rows[first .. first+count) (batch rows, count ≤
//             TS_CASC_ROWS/qpk) share their first `shared` table entries;
//   num_tiles [1] the tiles in use (blocks past it return at once, so a
//             captured graph sized for the most tiles serves every layout);
//   split s of nshared covers blocks [s·per, min(shared, (s+1)·per)), per =
//             ceil(shared/nshared) (kernels.CascadeSplitRange).
// Every member's new token lies after the run, so no mask is needed. The
// first member's table is read for the run (all members' are the same
// there). Grid (max_tiles, kvh, nshared); block TS_CASC_THREADS threads;
// dynamic shared memory (kernels.cascadeSmem)
//   4·(TS_CASC_ROWS·(hd+1) + TS_CASC_KEYS·(2·hd+1) + TS_CASC_ROWS·TS_CASC_KEYS + 3·TS_CASC_ROWS).
template <typename T>
__device__ __forceinline__ void cascade_shared(float *o_part, float *ml_part, const float *q, const T *Kc,
					       const T *Vc, const int *block_tables, int max_blocks, const int *tiles,
					       const int *num_tiles, const int *casc_rows, int slots, int heads, int kvh,
					       int bs, int hd, float scale) {
	extern __shared__ float smem[];
	const int tile = blockIdx.x, kv = blockIdx.y, split = blockIdx.z, nshared = gridDim.z;
	if (tile >= num_tiles[0])
		return; // the whole block: before any synchronisation
	const int tid = threadIdx.x;
	const int first = tiles[tile * 3], count = tiles[tile * 3 + 1], shared = tiles[tile * 3 + 2];
	const int qpk = heads / kvh;
	const int nrows = min(count * qpk, TS_CASC_ROWS);
	const int per = (shared + nshared - 1) / nshared;
	const int start = min(shared, split * per) * bs;
	const int end = min(shared, split * per + per) * bs;
	const int *table = block_tables + (size_t)casc_rows[first] * max_blocks;
	const int qs = hd + 1; // padded row stride of q_s and k_s

	float *q_s = smem;			// [ROWS][hd+1], pre-scaled
	float *k_s = q_s + TS_CASC_ROWS * qs;	// [KEYS][hd+1]
	float *v_s = k_s + TS_CASC_KEYS * qs;	// [KEYS][hd]
	float *sc = v_s + TS_CASC_KEYS * hd;	// [ROWS][KEYS] scores, then weights
	float *m_s = sc + TS_CASC_ROWS * TS_CASC_KEYS; // [ROWS] running max
	float *l_s = m_s + TS_CASC_ROWS;	// [ROWS] running sum
	float *a_s = l_s + TS_CASC_ROWS;	// [ROWS] rescale of this tile

	for (int i = tid; i < TS_CASC_ROWS * hd; i += TS_CASC_THREADS) {
		const int r = i / hd, d = i % hd;
		float v = 0.0f; // rows past the tile's members: zero queries, never written
		if (r < nrows) {
			const int b = casc_rows[first + r / qpk];
			v = q[(size_t)b * heads * hd + (size_t)(kv * qpk + r % qpk) * hd + d] * scale;
		}
		q_s[r * qs + d] = v;
	}
	if (tid < TS_CASC_ROWS) {
		m_s[tid] = -TS_INF;
		l_s[tid] = 0.0f;
	}
	// Output (row, dim) j = tid + TS_CASC_THREADS·i is acc[i].
	float acc[TS_CASC_ACC];
#pragma unroll
	for (int i = 0; i < TS_CASC_ACC; i++)
		acc[i] = 0.0f;

	for (int p0 = start; p0 < end; p0 += TS_CASC_KEYS) {
		const int n = min(TS_CASC_KEYS, end - p0);
		__syncthreads(); // q_s written; the previous tile is no longer read
		for (int i = tid; i < TS_CASC_KEYS * hd; i += TS_CASC_THREADS) {
			const int t = i / hd, d = i % hd;
			float kx = 0.0f, vx = 0.0f;
			if (t < n) {
				const int p = p0 + t;
				const size_t off = (((size_t)table[p / bs] * kvh + kv) * bs + p % bs) * hd + d;
				kx = ts_load(Kc + off);
				vx = ts_load(Vc + off);
			}
			k_s[t * qs + d] = kx;
			v_s[t * hd + d] = vx;
		}
		__syncthreads();
		// Scores: a warp's lanes take consecutive keys of one row.
		for (int i = tid; i < TS_CASC_ROWS * TS_CASC_KEYS; i += TS_CASC_THREADS) {
			const int r = i / TS_CASC_KEYS, t = i % TS_CASC_KEYS;
			float s = -TS_INF;
			if (t < n) {
				s = 0.0f;
				for (int d = 0; d < hd; d++)
					s += q_s[r * qs + d] * k_s[t * qs + d];
			}
			sc[i] = s;
		}
		__syncthreads();
		// Online softmax update, one thread per row.
		if (tid < TS_CASC_ROWS) {
			float *s = sc + tid * TS_CASC_KEYS;
			float mp = -TS_INF;
			for (int t = 0; t < n; t++)
				mp = fmaxf(mp, s[t]);
			const float mo = m_s[tid], mn = fmaxf(mo, mp);
			const float a = mo == -TS_INF ? 0.0f : expf(mo - mn);
			float sum = 0.0f;
			for (int t = 0; t < n; t++) {
				const float p = expf(s[t] - mn);
				s[t] = p;
				sum += p;
			}
			m_s[tid] = mn;
			l_s[tid] = l_s[tid] * a + sum;
			a_s[tid] = a;
		}
		__syncthreads();
#pragma unroll
		for (int i = 0; i < TS_CASC_ACC; i++) {
			const int j = tid + TS_CASC_THREADS * i;
			if (j < TS_CASC_ROWS * hd) {
				const int r = j / hd, d = j % hd;
				float x = acc[i] * a_s[r];
				for (int t = 0; t < n; t++)
					x += sc[r * TS_CASC_KEYS + t] * v_s[t * hd + d];
				acc[i] = x;
			}
		}
	}
	__syncthreads(); // m_s and l_s final (also when the split is empty)

	const int slot = slots - nshared + split;
#pragma unroll
	for (int i = 0; i < TS_CASC_ACC; i++) {
		const int j = tid + TS_CASC_THREADS * i;
		const int r = j / hd, d = j % hd;
		if (j < TS_CASC_ROWS * hd && r < nrows) {
			const int b = casc_rows[first + r / qpk];
			const size_t row = ((size_t)b * heads + kv * qpk + r % qpk) * slots + slot;
			o_part[row * hd + d] = acc[i];
		}
	}
	if (tid < nrows) {
		const int b = casc_rows[first + tid / qpk];
		const size_t row = ((size_t)b * heads + kv * qpk + tid % qpk) * slots + slot;
		ml_part[row * 2] = m_s[tid];
		ml_part[row * 2 + 1] = l_s[tid];
	}
}

extern "C" __global__ void ts_cascade_shared_f32(float *o_part, float *ml_part, const float *q, const float *Kc,
						 const float *Vc, const int *block_tables, int max_blocks,
						 const int *tiles, const int *num_tiles, const int *casc_rows, int slots,
						 int heads, int kvh, int bs, int hd, float scale) {
	cascade_shared(o_part, ml_part, q, Kc, Vc, block_tables, max_blocks, tiles, num_tiles, casc_rows, slots, heads,
		       kvh, bs, hd, scale);
}

extern "C" __global__ void ts_cascade_shared_bf16(float *o_part, float *ml_part, const float *q, const ts_bf16 *Kc,
						  const ts_bf16 *Vc, const int *block_tables, int max_blocks,
						  const int *tiles, const int *num_tiles, const int *casc_rows, int slots,
						  int heads, int kvh, int bs, int hd, float scale) {
	cascade_shared(o_part, ml_part, q, Kc, Vc, block_tables, max_blocks, tiles, num_tiles, casc_rows, slots, heads,
		       kvh, bs, hd, scale);
}

// ---- paged prefill attention ----

#define TS_PREFILL_WARPS 4

// prefill_attn: causal attention for variable-length chunks of queries.
// Sequence s has queries at q/out rows q_start[s]..q_start[s]+num_q[s]-1, at
// positions ctx_lens[s]-num_q[s]+i, and attends to positions 0..its own (all
// already written to the cache); with a sliding window (window > 0; 0 =
// none) only to positions > its own − window, its walk starting there. One
// warp per (query, head): scores for 32 keys at a time, online softmax, V
// accumulated with lanes across head dims.
// Grid (ceil(max_q/4), heads, nseq); block 128 threads.
template <typename T>
__device__ __forceinline__ void prefill_attn(float *out, const float *q, const T *Kc, const T *Vc,
					     const int *q_start, const int *num_q, const int *ctx_lens,
					     const int *block_tables, int max_blocks, int heads, int kvh, int bs,
					     int hd, float scale, int window) {
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
	// A sliding window (window > 0) starts the walk at the first position it sees.
	for (int t0 = window > 0 ? max(pos - window + 1, 0) : 0; t0 <= pos; t0 += 32) {
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
						int hd, float scale, int window) {
	prefill_attn(out, q, Kc, Vc, q_start, num_q, ctx_lens, block_tables, max_blocks, heads, kvh, bs, hd, scale,
		     window);
}

extern "C" __global__ void ts_paged_prefill_bf16(float *out, const float *q, const ts_bf16 *Kc, const ts_bf16 *Vc,
						 const int *q_start, const int *num_q, const int *ctx_lens,
						 const int *block_tables, int max_blocks, int heads, int kvh, int bs,
						 int hd, float scale, int window) {
	prefill_attn(out, q, Kc, Vc, q_start, num_q, ctx_lens, block_tables, max_blocks, heads, kvh, bs, hd, scale,
		     window);
}

// ---- tensor-core prefill attention (FlashAttention-2 style) ----
//
// prefill_attn_tc has the semantics of prefill_attn for head dims that are a
// multiple of 16 and at most TS_PFT_MAX_HD. Block (query tile, head, sequence)
// computes TS_PFT_ROWS query rows of one head: warp w owns rows 16w..16w+15.
// The key positions 0..last (last: the position of the tile's last query;
// with a sliding window, from the first key the tile's first query sees) are
// walked in tiles of TS_PFT_KEYS; each tile's K and V are gathered from the
// paged cache into shared memory as bf16, K as Ks[key][dim] and V transposed
// as Vt[dim][key], rows padded by TS_PFT_PAD elements so that the fragment
// loads below are free of bank conflicts. Per warp and tile:
//   S = Q·Kᵀ     mma.m16n8k16 bf16→f32; Q (pre-scaled by scale·log2 e,
//                rounded to bf16) is held in registers as A fragments for the
//                whole kernel, K read as col-major B fragments from Ks;
//   mask         key > min(row position, last) is −inf (causal, and keys
//                past the tile's last query were not loaded), and with a
//                sliding window (window > 0) key ≤ row position − window;
//   softmax      online, base 2, fp32: row max over the quad's 4 lanes by
//                shuffles; each lane keeps a partial row sum of its columns,
//                reduced over the quad once at the end;
//   O += P·V     P rounded to bf16 reuses the C layout of S as the A layout
//                (C's n-tiles 2j, 2j+1 are A's k-step j); V's B fragments are
//                pairs of adjacent keys, one 32-bit load from Vt.
// Rows past num_q are computed (their queries read as zero) but not written;
// warps whose rows are all past num_q, or whose rows all precede the tile,
// skip the tile's math but still stage and synchronise.
// Grid (ceil(max_q/TS_PFT_ROWS), heads, nseq); block 32·TS_PFT_WARPS threads;
// dynamic shared memory 2·(TS_PFT_KEYS·(hd+TS_PFT_PAD) + hd·(TS_PFT_KEYS+TS_PFT_PAD))
// bytes (kernels.prefillTCSmem).

#define TS_PFT_WARPS 4
#define TS_PFT_ROWS 64 // TS_PFT_WARPS × 16 query rows
#define TS_PFT_KEYS 64 // key positions per shared-memory tile
#define TS_PFT_MAX_HD 128
#define TS_PFT_PAD 8 // bf16 elements of padding per shared-memory row

struct alignas(16) ts_f32x4 {
	float x, y, z, w;
};
struct alignas(8) ts_f32x2 {
	float x, y;
};
struct alignas(8) ts_u32x2 {
	unsigned x, y;
};

// Two floats as a bf16 pair: lo in the low half (the lower column or row).
__device__ __forceinline__ unsigned ts_pack_bf16x2(float lo, float hi) {
	return (unsigned)ts_f32_to_bf16(lo) | ((unsigned)ts_f32_to_bf16(hi) << 16);
}

// Four consecutive cache elements as two bf16 pairs (p 16-byte aligned for
// float, 8-byte for bf16).
__device__ __forceinline__ ts_u32x2 ts_load4_bf16x2(const float *p) {
	const ts_f32x4 v = *(const ts_f32x4 *)p;
	ts_u32x2 r;
	r.x = ts_pack_bf16x2(v.x, v.y);
	r.y = ts_pack_bf16x2(v.z, v.w);
	return r;
}
__device__ __forceinline__ ts_u32x2 ts_load4_bf16x2(const ts_bf16 *p) { return *(const ts_u32x2 *)p; }

// c += A·B for one 16×16 A (row-major fragments a), 16×8 B (col-major
// fragments b0, b1) and 16×8 f32 C, per the PTX ISA layout of m16n8k16.
__device__ __forceinline__ void ts_mma_bf16_16816(float *c, const unsigned *a, unsigned b0, unsigned b1) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		     "{%0,%1,%2,%3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ts_pft_stage_index maps staging item c (of TS_PFT_KEYS·hd/4, four
// consecutive dims of one key each) to its key row kr and first dim d: eight
// consecutive items are eight keys at the same dims (32 contiguous bytes of
// each bf16 row read per 8 lanes; the transposed V stores spread over banks).
__device__ __forceinline__ void ts_pft_stage_index(int c, int hd, int &kr, int &d) {
	const int chunks = hd / 4;
	kr = (c & 7) + 8 * (c / (8 * chunks));
	d = ((c >> 3) % chunks) * 4;
}

template <typename T>
__device__ __forceinline__ void prefill_attn_tc(float *out, const float *q, const T *Kc, const T *Vc,
						const int *q_start, const int *num_q, const int *ctx_lens,
						const int *block_tables, int max_blocks, int heads, int kvh, int bs,
						int hd, float scale, int window) {
	extern __shared__ ts_f32x4 pft_smem_raw[]; // 16-byte aligned, used as bf16
	unsigned short *pft_smem = (unsigned short *)pft_smem_raw;
	const int s = blockIdx.z, h = blockIdx.y;
	const int nq = num_q[s];
	const int i0 = blockIdx.x * TS_PFT_ROWS;
	if (i0 >= nq)
		return; // the whole block: before any synchronisation
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int g = lane >> 2, tig = lane & 3;
	const int ks = hd + TS_PFT_PAD;		       // Ks row stride
	const int vs = TS_PFT_KEYS + TS_PFT_PAD;       // Vt row stride
	unsigned short *Ks = pft_smem;		       // [TS_PFT_KEYS][ks]
	unsigned short *Vt = pft_smem + TS_PFT_KEYS * ks; // [hd][vs]
	const int pos0 = ctx_lens[s] - nq;		       // position of query 0
	const int last = pos0 + min(i0 + TS_PFT_ROWS, nq) - 1; // of the tile's last query
	const int kvi = h / (heads / kvh);
	const int *table = block_tables + (size_t)s * max_blocks;
	const int nkd = hd / 16; // k-steps of Q·Kᵀ
	const int ndt = hd / 8;	 // n-tiles of O
	const int wr = i0 + warp * 16;		     // the warp's first row
	const int r0 = wr + g, r1 = r0 + 8;	     // this lane's rows
	const bool live = wr < nq;		     // the warp has rows to write
	const int wlast = pos0 + min(wr + 16, nq) - 1; // position of its last such row
	const int lim0 = min(pos0 + r0, last), lim1 = min(pos0 + r1, last);
	// Sliding window (window > 0): keys ≤ pos − window are masked per row;
	// the key tiles start at the first key the block's first query sees (no
	// key behind every window is read), and a warp skips the tiles wholly
	// before its first query's window. win0/win1/wwin are −1 without a window.
	const int win0 = window > 0 ? pos0 + r0 - window : -1, win1 = window > 0 ? pos0 + r1 - window : -1;
	const int wwin = window > 0 ? pos0 + wr - window : -1;
	const int tbeg = window > 0 ? max(pos0 + i0 - window + 1, 0) : 0;

	// Q fragments: A of m16n8k16, k-step kd covers dims 16kd..16kd+15.
	const float qs = scale * 1.4426950408889634f; // softmax in base 2
	unsigned qa[TS_PFT_MAX_HD / 16][4];
	const size_t qrow = (size_t)heads * hd;
	const float *q0 = q + (size_t)(q_start[s] + r0) * qrow + (size_t)h * hd;
	const float *q1 = q0 + 8 * qrow;
#pragma unroll
	for (int kd = 0; kd < TS_PFT_MAX_HD / 16; kd++) {
		if (kd < nkd) {
			const int d = kd * 16 + 2 * tig;
			ts_f32x2 x00 = {0.0f, 0.0f}, x01 = x00, x10 = x00, x11 = x00;
			if (r0 < nq) {
				x00 = *(const ts_f32x2 *)(q0 + d);
				x01 = *(const ts_f32x2 *)(q0 + d + 8);
			}
			if (r1 < nq) {
				x10 = *(const ts_f32x2 *)(q1 + d);
				x11 = *(const ts_f32x2 *)(q1 + d + 8);
			}
			qa[kd][0] = ts_pack_bf16x2(x00.x * qs, x00.y * qs);
			qa[kd][1] = ts_pack_bf16x2(x10.x * qs, x10.y * qs);
			qa[kd][2] = ts_pack_bf16x2(x01.x * qs, x01.y * qs);
			qa[kd][3] = ts_pack_bf16x2(x11.x * qs, x11.y * qs);
		}
	}
	float o[TS_PFT_MAX_HD / 8][4];
#pragma unroll
	for (int dt = 0; dt < TS_PFT_MAX_HD / 8; dt++)
		o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
	float m0 = -TS_INF, m1 = -TS_INF; // running row maxima (base 2)
	float l0 = 0.0f, l1 = 0.0f;	  // this lane's share of the row sums

	for (int t0 = tbeg; t0 <= last; t0 += TS_PFT_KEYS) {
		__syncthreads(); // the previous tile is no longer read
		for (int c = tid; c < TS_PFT_KEYS * hd / 4; c += 32 * TS_PFT_WARPS) {
			int kr, d;
			ts_pft_stage_index(c, hd, kr, d);
			const int t = t0 + kr;
			ts_u32x2 kk = {0u, 0u}, vv = {0u, 0u}; // keys past last: zeros (masked below)
			if (t <= last) {
				const size_t off = (((size_t)table[t / bs] * kvh + kvi) * bs + t % bs) * hd + d;
				kk = ts_load4_bf16x2(Kc + off);
				vv = ts_load4_bf16x2(Vc + off);
			}
			*(ts_u32x2 *)(Ks + kr * ks + d) = kk;
			Vt[(d + 0) * vs + kr] = (unsigned short)(vv.x & 0xffffu);
			Vt[(d + 1) * vs + kr] = (unsigned short)(vv.x >> 16);
			Vt[(d + 2) * vs + kr] = (unsigned short)(vv.y & 0xffffu);
			Vt[(d + 3) * vs + kr] = (unsigned short)(vv.y >> 16);
		}
		__syncthreads();
		if (!live || t0 > wlast || t0 + TS_PFT_KEYS - 1 <= wwin)
			continue; // warp-uniform: nothing of this tile reaches the warp's rows

		// S = Q·Kᵀ: n-tile nt is keys t0+8nt..t0+8nt+7.
		float sc[TS_PFT_KEYS / 8][4];
#pragma unroll
		for (int nt = 0; nt < TS_PFT_KEYS / 8; nt++)
			sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
#pragma unroll
		for (int kd = 0; kd < TS_PFT_MAX_HD / 16; kd++) {
			if (kd < nkd) {
#pragma unroll
				for (int nt = 0; nt < TS_PFT_KEYS / 8; nt++) {
					const unsigned short *kp = Ks + (nt * 8 + g) * ks + kd * 16 + 2 * tig;
					ts_mma_bf16_16816(sc[nt], qa[kd], *(const unsigned *)kp, *(const unsigned *)(kp + 8));
				}
			}
		}
		// Mask, then the row maxima over the quad.
		float mx0 = -TS_INF, mx1 = -TS_INF;
#pragma unroll
		for (int nt = 0; nt < TS_PFT_KEYS / 8; nt++) {
#pragma unroll
			for (int j = 0; j < 2; j++) {
				const int kpos = t0 + nt * 8 + 2 * tig + j;
				if (kpos > lim0 || kpos <= win0)
					sc[nt][j] = -TS_INF;
				if (kpos > lim1 || kpos <= win1)
					sc[nt][2 + j] = -TS_INF;
				mx0 = fmaxf(mx0, sc[nt][j]);
				mx1 = fmaxf(mx1, sc[nt][2 + j]);
			}
		}
		mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
		mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
		mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
		mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
		const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
		const float b0 = mn0 == -TS_INF ? 0.0f : mn0; // a row with nothing yet: e^−inf = 0, not NaN
		const float b1 = mn1 == -TS_INF ? 0.0f : mn1;
		const float a0 = exp2f(m0 - b0), a1 = exp2f(m1 - b1);
		m0 = mn0;
		m1 = mn1;
		l0 *= a0;
		l1 *= a1;
#pragma unroll
		for (int dt = 0; dt < TS_PFT_MAX_HD / 8; dt++) {
			o[dt][0] *= a0;
			o[dt][1] *= a0;
			o[dt][2] *= a1;
			o[dt][3] *= a1;
		}
		// P = e^(S − m): row sums in fp32, A fragments in bf16.
		unsigned pa[TS_PFT_KEYS / 16][4];
#pragma unroll
		for (int nt = 0; nt < TS_PFT_KEYS / 8; nt++) {
			const float p0 = exp2f(sc[nt][0] - b0), p1 = exp2f(sc[nt][1] - b0);
			const float p2 = exp2f(sc[nt][2] - b1), p3 = exp2f(sc[nt][3] - b1);
			l0 += p0 + p1;
			l1 += p2 + p3;
			pa[nt / 2][(nt & 1) * 2 + 0] = ts_pack_bf16x2(p0, p1);
			pa[nt / 2][(nt & 1) * 2 + 1] = ts_pack_bf16x2(p2, p3);
		}
		// O += P·V: k-step kk is keys t0+16kk..t0+16kk+15, n-tile dt dims 8dt..8dt+7.
#pragma unroll
		for (int kk = 0; kk < TS_PFT_KEYS / 16; kk++) {
#pragma unroll
			for (int dt = 0; dt < TS_PFT_MAX_HD / 8; dt++) {
				if (dt < ndt) {
					const unsigned short *vp = Vt + (dt * 8 + g) * vs + kk * 16 + 2 * tig;
					ts_mma_bf16_16816(o[dt], pa[kk], *(const unsigned *)vp, *(const unsigned *)(vp + 8));
				}
			}
		}
	}

	l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
	l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
	l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
	l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
	const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
	float *o0 = out + (size_t)(q_start[s] + r0) * qrow + (size_t)h * hd + 2 * tig;
	float *o1 = o0 + 8 * qrow;
#pragma unroll
	for (int dt = 0; dt < TS_PFT_MAX_HD / 8; dt++) {
		if (dt < ndt) {
			if (r0 < nq) {
				const ts_f32x2 v = {o[dt][0] * inv0, o[dt][1] * inv0};
				*(ts_f32x2 *)(o0 + dt * 8) = v;
			}
			if (r1 < nq) {
				const ts_f32x2 v = {o[dt][2] * inv1, o[dt][3] * inv1};
				*(ts_f32x2 *)(o1 + dt * 8) = v;
			}
		}
	}
}

extern "C" __global__ void ts_paged_prefill_tc_f32(float *out, const float *q, const float *Kc, const float *Vc, const int *q_start,
				const int *num_q, const int *ctx_lens, const int *block_tables, int max_blocks,
				int heads, int kvh, int bs, int hd, float scale, int window) {
	prefill_attn_tc(out, q, Kc, Vc, q_start, num_q, ctx_lens, block_tables, max_blocks, heads, kvh, bs, hd, scale,
			window);
}

extern "C" __global__ void ts_paged_prefill_tc_bf16(float *out, const float *q, const ts_bf16 *Kc, const ts_bf16 *Vc,
				 const int *q_start, const int *num_q, const int *ctx_lens, const int *block_tables,
				 int max_blocks, int heads, int kvh, int bs, int hd, float scale, int window) {
	prefill_attn_tc(out, q, Kc, Vc, q_start, num_q, ctx_lens, block_tables, max_blocks, heads, kvh, bs, hd, scale,
			window);
}
