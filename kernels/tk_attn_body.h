// tk_attn_body.h: the body of one paged-attention task, included once per
// path by tk_ops.c with these macros defined:
//   TK_ATTN_NAME   the function's name
//   TK_ATTN_ATTR   its target attribute (empty for portable)
//   TK_KV_T        the cache element: float, or uint16_t (f16/bf16 bits)
//   TK_SCORES(q,K,hd,n,scale,s)  s[j] = scale·(q·K[j]) for j < n (K rows
//                  hd elements apart), returning max_j s[j]
//   TK_PV(a,c,s,V,n,hd)  a = a*c + Σ_{j<n} s[j]·V[j] over hd elements
//   TK_EXPS(s,n,m)  s[j] = e^(s[j]-m) for j < n, returning their sum
// so the helpers inline into each instance.
//
// A query at position p sees the keys k with max(0, p-win+1) ≤ k ≤ p: the
// last win positions including its own (win = 0: all of 0..p). Blocks
// before b0, and blocks before the window of the task's first (earliest)
// query, are not read. When state is not NULL the pairs' softmax
// states are written there instead of out: state + (i*heads + h)*(hd+2)
// holds [max, sum, acc[hd]] (acc unnormalised) for the cascade's merge.
// prefetch > 0 asks for block b+prefetch while block b is computed (and
// for the first ones on entry): every path passes 1, which takes decode
// attention of a cache that is not in the CPU's caches from latency bound
// to near bandwidth bound. The body is always inlined, so each wrapper
// compiles it with its own constants.
//
// Optional: TK_ATTN_TILE(args) is a body of the same contract for a task of
// TK_ATTN_TILE_MIN..16 queries (see TK_S5_TILE), which the loops below
// hand such tasks to; fewer queries stay here, where a key row's widening
// and sums are not shared by enough queries to pay for the lane layout.

static inline __attribute__((always_inline)) TK_ATTN_ATTR void TK_ATTN_NAME(
    float *out, const float *q, const TK_KV_T *K, const TK_KV_T *V, int heads,
    int kv_heads, int block, int hd, const int32_t *table, int qstart, int numq,
    int ctx, int kvh, int i0, int i1, float scale, float *scratch, int b0,
    float *state, int prefetch, int win) {
#ifdef TK_ATTN_TILE
  if (i1 - i0 >= TK_ATTN_TILE_MIN && i1 - i0 <= 16) {
    TK_ATTN_TILE(out, q, K, V, heads, kv_heads, block, hd, table, qstart, numq,
                 ctx, kvh, i0, i1, scale, scratch, b0, state, prefetch, win);
    return;
  }
#endif
  const int group = heads / kv_heads;
  const int nq = (i1 - i0) * group;  // (query, head) pairs of this task
  const long ld = (long)heads * hd;  // row stride of q and out
  float *acc = scratch;              // [nq][hd]
  float *mx = acc + (size_t)nq * hd; // running max per pair
  float *l = mx + nq;                // running denominator per pair
  float *s = l + nq;                 // [block] scores of one block
  for (int t = 0; t < nq; t++) {
    mx[t] = -FLT_MAX;
    l[t] = 0.0f;
  }
  memset(acc, 0, sizeof(float) * (size_t)nq * hd);
  const int first_pos = ctx - numq;  // position of query 0
  const int last = first_pos + i1 - 1;
  const int nblocks = last / block + 1;
  int bfirst = b0;
  if (win > 0) {
    // Every later query's window starts later still: the blocks wholly
    // before query i0's window are nobody's.
    const int lo0 = first_pos + i0 - win + 1;
    if (lo0 > 0 && lo0 / block > bfirst) bfirst = lo0 / block;
  }
  for (int b = bfirst; b < nblocks; b++) {
    // The K and V block of this kv head is read once for the whole group.
    size_t base = ((size_t)table[b] * kv_heads + kvh) * block * hd;
    const TK_KV_T *Kb = K + base, *Vb = V + base;
    if (prefetch) {
      // Blocks are elsewhere in memory, where the hardware prefetcher
      // cannot guess them: ask for the block `prefetch` ahead (into L2)
      // while this one is computed, and for the ones before it on entry.
      const int p0 = b == bfirst ? b : b + prefetch;
      for (int pb = p0; pb <= b + prefetch && pb < nblocks; pb++) {
        const size_t nb = ((size_t)table[pb] * kv_heads + kvh) * block * hd;
        const char *pk = (const char *)(K + nb), *pv = (const char *)(V + nb);
        for (size_t o = 0; o < sizeof(TK_KV_T) * (size_t)block * hd; o += 64) {
          __builtin_prefetch(pk + o, 0, 2);
          __builtin_prefetch(pv + o, 0, 2);
        }
      }
    }
    for (int i = i0; i < i1; i++) {
      int pos = first_pos + i;
      int lim = pos + 1 - b * block;  // visible slots in this block
      if (lim <= 0) continue;
      if (lim > block) lim = block;
      int j0 = 0;  // first slot of this block inside the query's window
      if (win > 0) {
        j0 = pos - win + 1 - b * block;
        if (j0 < 0) j0 = 0;
        if (j0 >= lim) continue;
      }
      const int n = lim - j0;
      const TK_KV_T *Kw = Kb + (size_t)j0 * hd, *Vw = Vb + (size_t)j0 * hd;
      for (int g = 0; g < group; g++) {
        int h = kvh * group + g;
        int t = (i - i0) * group + g;
        const float *qv = q + (size_t)(qstart + i) * ld + (size_t)h * hd;
        // One block at a time: all scores, one max, one exp pass, then the
        // weighted V rows with the running rescale folded in.
        float bm = TK_SCORES(qv, Kw, hd, n, scale, s);
        float m_new = bm > mx[t] ? bm : mx[t];
        float corr = expf(mx[t] - m_new);
        float *a = acc + (size_t)t * hd;
        float lsum = l[t] * corr + TK_EXPS(s, n, m_new);
        TK_PV(a, corr, s, Vw, n, hd);
        l[t] = lsum;
        mx[t] = m_new;
      }
    }
  }
  if (state) {
    for (int i = i0; i < i1; i++)
      for (int g = 0; g < group; g++) {
        int t = (i - i0) * group + g;
        float *p = state + ((size_t)i * heads + kvh * group + g) * (hd + 2);
        p[0] = mx[t];
        p[1] = l[t];
        memcpy(p + 2, acc + (size_t)t * hd, sizeof(float) * (size_t)hd);
      }
    return;
  }
  for (int i = i0; i < i1; i++)
    for (int g = 0; g < group; g++) {
      int h = kvh * group + g;
      int t = (i - i0) * group + g;
      float inv = 1.0f / l[t];
      float *o = out + (size_t)(qstart + i) * ld + (size_t)h * hd;
      const float *a = acc + (size_t)t * hd;
      for (int d = 0; d < hd; d++) o[d] = a[d] * inv;
    }
}
