// sampling.cu: next-token sampling on the GPU, one block per row of logits.
//
// Per row r: temperature[r] below 1e-5 (sampling.GreedyBelow) means argmax
// (ties to the lowest id). Otherwise, as package sampling does on the CPU:
// logits are divided by the temperature (NaN counts as −inf, +inf as the
// largest float), then min_p (keep p ≥ min_p·p_max; 0 = off), top_k (keep the
// k largest, ties with the k-th kept; 0 = off) and top_p (keep the smallest
// top set whose mass reaches top_p; ties at the boundary kept; 1 = off) filter
// the row, and the token is drawn by inverse CDF in token-id order with the
// uniform u[r] ∈ [0, 1), which the host draws from the request's seeded RNG
// (so seeds keep one meaning on every backend). A row with no finite logit is
// uniform. Thresholds come from a radix select over the order-preserving bit
// pattern of the scaled logits, with counts (top_k) or probabilities (top_p) as
// weights: a few passes over the row, no sort.
//
// Grid: rows blocks; block TS_SAMPLE_THREADS threads.

#define TS_SAMPLE_THREADS 256
#define TS_GREEDY_BELOW 1e-5f

// Scaled logit of element i: NaN → −inf, overflow → ±FLT_MAX.
__device__ __forceinline__ float ts_scaled(const float *x, int i, float inv_t) {
	float v = x[i] * inv_t;
	if (v != v)
		return -TS_INF;
	return fminf(v, TS_FLT_MAX);
}

// Order-preserving key of a float: a > b ⇔ key(a) > key(b).
__device__ __forceinline__ unsigned ts_key(float f) {
	const unsigned u = __float_as_uint(f);
	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float ts_unkey(unsigned k) {
	return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// ts_select returns the largest key K such that the weight of kept elements
// with key ≥ K reaches target (weight 1 per element when by_prob is false, else
// e^(z−zmax)). Elements below floor_key are not kept. All threads get K.
__device__ unsigned ts_select(const float *x, int n, float inv_t, float zmax, unsigned floor_key, bool by_prob,
			      float target) {
	__shared__ float hist[256];
	__shared__ unsigned s_prefix;
	__shared__ float s_remaining;
	__syncthreads(); // a previous call's result may still be being read
	if (threadIdx.x == 0) {
		s_prefix = 0;
		s_remaining = target;
	}
	unsigned mask = 0;
	for (int shift = 24; shift >= 0; shift -= 8) {
		for (int i = threadIdx.x; i < 256; i += blockDim.x)
			hist[i] = 0.0f;
		__syncthreads();
		const unsigned prefix = s_prefix;
		for (int i = threadIdx.x; i < n; i += blockDim.x) {
			const float z = ts_scaled(x, i, inv_t);
			const unsigned k = ts_key(z);
			if (k < floor_key || (k & mask) != prefix)
				continue;
			atomicAdd(&hist[(k >> shift) & 255u], by_prob ? expf(z - zmax) : 1.0f);
		}
		__syncthreads();
		if (threadIdx.x == 0) {
			// Walk buckets from the top until the remaining weight is reached;
			// when rounding leaves it unreached, settle on the lowest non-empty one.
			float rem = s_remaining, before = 0.0f;
			int pick = -1, lowest = -1;
			for (int bk = 255; bk >= 0; bk--) {
				const float w = hist[bk];
				if (w <= 0.0f)
					continue;
				lowest = bk;
				if (before + w >= rem) {
					pick = bk;
					break;
				}
				before += w;
			}
			if (pick < 0) {
				pick = lowest < 0 ? 0 : lowest;
				before = 0.0f;
				for (int bk = 255; bk > pick; bk--)
					before += hist[bk];
			}
			s_remaining = rem - before;
			s_prefix = prefix | ((unsigned)pick << shift);
		}
		mask |= 255u << shift;
		__syncthreads();
	}
	return s_prefix;
}

extern "C" __global__ void ts_sample(int *out, const float *logits, int n, const float *temperature,
				     const int *top_k, const float *top_p, const float *min_p, const float *u) {
	const int r = blockIdx.x;
	const float *x = logits + (size_t)r * n;
	const float temp = temperature[r];
	const bool greedy = !(temp >= TS_GREEDY_BELOW);
	const float inv_t = greedy ? 1.0f : 1.0f / temp;

	// Maximum and its lowest index (the greedy answer).
	float best = 0.0f;
	int bi = -1;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		const float z = ts_scaled(x, i, inv_t);
		if (bi < 0 || z > best) {
			best = z;
			bi = i;
		}
	}
	ts_block_argmax(best, bi);
	if (greedy) {
		if (threadIdx.x == 0)
			out[r] = bi < 0 ? 0 : bi;
		return;
	}
	if (best == -TS_INF) { // no information: uniform over the row
		if (threadIdx.x == 0)
			out[r] = min(n - 1, (int)(u[r] * (float)n));
		return;
	}
	const float zmax = best;

	// min_p: p/p_max = e^(z − zmax) ≥ min_p ⇔ z ≥ zmax + ln(min_p).
	unsigned floor_key = 0;
	const float mp = min_p[r];
	if (mp > 0.0f)
		floor_key = ts_key(zmax + logf(mp));
	const int k = top_k[r];
	if (k > 0 && k < n)
		floor_key = max(floor_key, ts_select(x, n, inv_t, zmax, floor_key, false, (float)k));
	const float tp = top_p[r];
	if (tp < 1.0f) {
		float mass = 0.0f;
		for (int i = threadIdx.x; i < n; i += blockDim.x) {
			const float z = ts_scaled(x, i, inv_t);
			if (ts_key(z) >= floor_key)
				mass += expf(z - zmax);
		}
		mass = ts_block_sum(mass);
		floor_key = max(floor_key, ts_select(x, n, inv_t, zmax, floor_key, true, tp * mass));
	}

	// Inverse CDF in id order: each thread owns a contiguous chunk of ids.
	__shared__ float pre[TS_SAMPLE_THREADS];
	__shared__ float s_total;
	__shared__ int s_tok, s_last;
	const int chunk = (n + blockDim.x - 1) / blockDim.x;
	const int c0 = min(n, (int)threadIdx.x * chunk), c1 = min(n, c0 + chunk);
	float local = 0.0f;
	int last = -1;
	for (int i = c0; i < c1; i++) {
		const float z = ts_scaled(x, i, inv_t);
		if (ts_key(z) >= floor_key) {
			local += expf(z - zmax);
			last = i;
		}
	}
	if (threadIdx.x == 0) {
		s_tok = 0x7fffffff;
		s_last = -1;
	}
	pre[threadIdx.x] = local;
	__syncthreads();
	if (last >= 0)
		atomicMax(&s_last, last);
	if (threadIdx.x == 0) { // exclusive prefix sums of the chunk masses
		float run = 0.0f;
		for (int t = 0; t < (int)blockDim.x; t++) {
			const float w = pre[t];
			pre[t] = run;
			run += w;
		}
		s_total = run;
	}
	__syncthreads();
	// The chunk whose [pre, pre+local) holds the target finds the token,
	// summing in the same order as local so the bounds agree exactly.
	const float rem = u[r] * s_total - pre[threadIdx.x];
	if (local > 0.0f && rem >= 0.0f && rem < local) {
		float acc = 0.0f;
		int tok = last;
		for (int i = c0; i < c1; i++) {
			const float z = ts_scaled(x, i, inv_t);
			if (ts_key(z) >= floor_key) {
				acc += expf(z - zmax);
				if (rem < acc) {
					tok = i;
					break;
				}
			}
		}
		atomicMin(&s_tok, tok);
	}
	__syncthreads();
	if (threadIdx.x == 0)
		out[r] = s_tok != 0x7fffffff ? s_tok : (s_last >= 0 ? s_last : bi);
}
