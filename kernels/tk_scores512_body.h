// tk_scores512_body.h: the AVX-512 score, exp and P·V loops of paged
// attention, included by tk_ops.c once per cache element type (float, and
// f16/bf16 bits). The same contracts as tk_scores_body.h's, 16 lanes wide:
//   float TK_S5_NAME(TK_S5_KT const float *q, const TK_S5_ELEM *K, int hd,
//                    int n, float scale, float *s)
//   void TK_S5_PV(TK_S5_KT float *a, float c, const float *s,
//                 const TK_S5_ELEM *V, int n, int hd)
// Head sizes that are not a multiple of 16 take one masked chunk per row
// (masked lanes load as zero), so there is no scalar tail. Macros:
//   TK_S5_NAME, TK_S5_PV  the two functions' names
//   TK_S5_KT       leading parameters (empty, or `int kt,` for 16-bit)
//   TK_S5_ELEM     K's and V's element type
//   TK_S5_LDM(p, m)  the elements at p under mask m (16 lanes) as a __m512
//   (all undefined again at the end of this file)

// TK_S5_NAME: eight keys per pass, each with one 16-lane accumulator, then
// one fold to 256 bits and the AVX2 transpose-add.
TK_INLINE TK_TARGET_AVX512 float TK_S5_NAME(TK_S5_KT const float *q,
                                            const TK_S5_ELEM *K, int hd, int n,
                                            float scale, float *s) {
  const __m256 sc = _mm256_set1_ps(scale);
  __m256 bmv = _mm256_set1_ps(-FLT_MAX);
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const TK_S5_ELEM *Kj = K + (size_t)j * hd;
    __m512 a[8];
    for (int u = 0; u < 8; u++) a[u] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 16) {
      const __mmask16 m = tk_mask16(hd - d);
      const __m512 qv = _mm512_maskz_loadu_ps(m, q + d);
      for (int u = 0; u < 8; u++)
        a[u] = _mm512_fmadd_ps(qv, TK_S5_LDM(Kj + (size_t)u * hd + d, m), a[u]);
    }
    __m256 h[8];
    for (int u = 0; u < 8; u++)
      h[u] = _mm256_add_ps(_mm512_castps512_ps256(a[u]), _mm512_extractf32x8_ps(a[u], 1));
    const __m256 v = _mm256_mul_ps(hsum8x8(h), sc);
    _mm256_storeu_ps(s + j, v);
    bmv = _mm256_max_ps(bmv, v);
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(bmv), _mm256_extractf128_ps(bmv, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  float bm = _mm_cvtss_f32(m4);
  for (; j < n; j++) {  // the last n%8 keys, one at a time
    const TK_S5_ELEM *Kj = K + (size_t)j * hd;
    __m512 a0 = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 16) {
      const __mmask16 m = tk_mask16(hd - d);
      a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + d), TK_S5_LDM(Kj + d, m), a0);
    }
    s[j] = _mm512_reduce_add_ps(a0) * scale;
    if (s[j] > bm) bm = s[j];
  }
  return bm;
}

// TK_S5_PV: a = a*c + Σ_{j<n} s[j]·V[j], 64 columns at a time in eight
// accumulators (even and odd rows apart, so two FMA chains per column
// vector hide the FMA latency), then 16 (or a masked tail) at a time.
TK_INLINE TK_TARGET_AVX512 void TK_S5_PV(TK_S5_KT float *a, float c,
                                         const float *s, const TK_S5_ELEM *V,
                                         int n, int hd) {
  const __m512 cv = _mm512_set1_ps(c);
  const __mmask16 all = 0xffff;
  int d = 0;
  for (; d + 64 <= hd; d += 64) {
    __m512 e0 = _mm512_mul_ps(cv, _mm512_loadu_ps(a + d));
    __m512 e1 = _mm512_mul_ps(cv, _mm512_loadu_ps(a + d + 16));
    __m512 e2 = _mm512_mul_ps(cv, _mm512_loadu_ps(a + d + 32));
    __m512 e3 = _mm512_mul_ps(cv, _mm512_loadu_ps(a + d + 48));
    __m512 o0 = _mm512_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
    int j = 0;
    for (; j + 2 <= n; j += 2) {
      const TK_S5_ELEM *v = V + (size_t)j * hd + d, *w = v + hd;
      const __m512 p = _mm512_set1_ps(s[j]), r = _mm512_set1_ps(s[j + 1]);
      e0 = _mm512_fmadd_ps(p, TK_S5_LDM(v, all), e0);
      e1 = _mm512_fmadd_ps(p, TK_S5_LDM(v + 16, all), e1);
      e2 = _mm512_fmadd_ps(p, TK_S5_LDM(v + 32, all), e2);
      e3 = _mm512_fmadd_ps(p, TK_S5_LDM(v + 48, all), e3);
      o0 = _mm512_fmadd_ps(r, TK_S5_LDM(w, all), o0);
      o1 = _mm512_fmadd_ps(r, TK_S5_LDM(w + 16, all), o1);
      o2 = _mm512_fmadd_ps(r, TK_S5_LDM(w + 32, all), o2);
      o3 = _mm512_fmadd_ps(r, TK_S5_LDM(w + 48, all), o3);
    }
    if (j < n) {
      const TK_S5_ELEM *v = V + (size_t)j * hd + d;
      const __m512 p = _mm512_set1_ps(s[j]);
      e0 = _mm512_fmadd_ps(p, TK_S5_LDM(v, all), e0);
      e1 = _mm512_fmadd_ps(p, TK_S5_LDM(v + 16, all), e1);
      e2 = _mm512_fmadd_ps(p, TK_S5_LDM(v + 32, all), e2);
      e3 = _mm512_fmadd_ps(p, TK_S5_LDM(v + 48, all), e3);
    }
    _mm512_storeu_ps(a + d, _mm512_add_ps(e0, o0));
    _mm512_storeu_ps(a + d + 16, _mm512_add_ps(e1, o1));
    _mm512_storeu_ps(a + d + 32, _mm512_add_ps(e2, o2));
    _mm512_storeu_ps(a + d + 48, _mm512_add_ps(e3, o3));
  }
  for (; d < hd; d += 16) {
    const __mmask16 m = tk_mask16(hd - d);
    __m512 e0 = _mm512_mul_ps(cv, _mm512_maskz_loadu_ps(m, a + d));
    for (int j = 0; j < n; j++)
      e0 = _mm512_fmadd_ps(_mm512_set1_ps(s[j]), TK_S5_LDM(V + (size_t)j * hd + d, m), e0);
    _mm512_mask_storeu_ps(a + d, m, e0);
  }
}

#ifdef TK_S5_TILE
// TK_S5_TILE: one task of 8..16 queries of one sequence (i1-i0 of them,
// i0 < i1 ≤ i0+16) and the query heads of kv head kvh, tk_attn_body.h's
// contract (out or state, b0, window, prefetch), with the queries in the
// 16 lanes: Qᵀ [hd][16] per head once per task, then per block and run of
// ≤ 16 keys S = K·Qᵀ as one vector per key (key row elements broadcast,
// no horizontal sums), the online softmax lane-wise (one running max and
// sum per query), and Oᵀ [hd][16] += Vᵀ·P. Each K/V element is widened
// once per task (TK_S5_WIDE: 16-bit cache rows into scratch) and reused by
// every query and head of the task, where the one-query loops re-widen it
// per query: that and the horizontal sums bound prefill attention.
// Scratch: group·(2·hd·16 + 32) + 256 + (TK_S5_WIDE ? 2·block·hd : 0).
TK_INLINE TK_TARGET_AVX512 void TK_S5_TILE(
    TK_S5_KT float *out, const float *q, const TK_S5_ELEM *K,
    const TK_S5_ELEM *V, int heads, int kv_heads, int block, int hd,
    const int32_t *table, int qstart, int numq, int ctx, int kvh, int i0,
    int i1, float scale, float *scratch, int b0, float *state, int prefetch,
    int win) {
  const int group = heads / kv_heads;
  const int nr = i1 - i0;            // queries (lanes) of this task
  const long ld = (long)heads * hd;  // row stride of q and out
  const size_t hq = (size_t)hd * 16;
  float *Qt = scratch;               // [group][hd][16] queries, transposed
  float *Ot = Qt + group * hq;       // [group][hd][16] unnormalised outputs
  float *M = Ot + group * hq;        // [group][16] running max
  float *L = M + group * 16;         // [group][16] running sum
  float *P = L + group * 16;         // [16][16] one run's weights, key-major
#if TK_S5_WIDE
  float *Kf = P + 256, *Vf = Kf + (size_t)block * hd;  // one block, widened
#endif
  for (int g = 0; g < group; g++) {
    const int h = kvh * group + g;
    float *qt = Qt + g * hq;
    memset(qt, 0, sizeof(float) * hq);  // lanes ≥ nr stay zero
    for (int i = 0; i < nr; i++) {
      const float *qv = q + (size_t)(qstart + i0 + i) * ld + (size_t)h * hd;
      for (int d = 0; d < hd; d++) qt[(size_t)d * 16 + i] = qv[d];
    }
    memset(Ot + g * hq, 0, sizeof(float) * hq);
    _mm512_storeu_ps(M + g * 16, _mm512_set1_ps(-FLT_MAX));
    _mm512_storeu_ps(L + g * 16, _mm512_setzero_ps());
  }
  const int first_pos = ctx - numq;  // position of query 0
  const int qp0 = first_pos + i0;    // position of lane 0
  const int last = first_pos + i1 - 1;
  const int nblocks = last / block + 1;
  const __mmask16 lanes = (__mmask16)((1u << nr) - 1);
  int bfirst = b0;
  if (win > 0) {
    const int lo0 = qp0 - win + 1;
    if (lo0 > 0 && lo0 / block > bfirst) bfirst = lo0 / block;
  }
  const __m512 sc = _mm512_set1_ps(scale);
  for (int b = bfirst; b < nblocks; b++) {
    size_t base = ((size_t)table[b] * kv_heads + kvh) * block * hd;
    const TK_S5_ELEM *Kb = K + base, *Vb = V + base;
    if (prefetch) {
      const int p0 = b == bfirst ? b + 1 : b + prefetch;
      for (int pb = p0; pb <= b + prefetch && pb < nblocks; pb++) {
        const size_t nb = ((size_t)table[pb] * kv_heads + kvh) * block * hd;
        const char *pk = (const char *)(K + nb), *pv = (const char *)(V + nb);
        for (size_t o = 0; o < sizeof(TK_S5_ELEM) * (size_t)block * hd; o += 64) {
          __builtin_prefetch(pk + o, 0, 2);
          __builtin_prefetch(pv + o, 0, 2);
        }
      }
    }
    // Keys [jlo, jhi) of this block are visible to some lane.
    int jhi = last + 1 - b * block;
    if (jhi > block) jhi = block;
    int jlo = 0;
    if (win > 0) {
      jlo = qp0 - win + 1 - b * block;
      if (jlo < 0) jlo = 0;
    }
    if (jlo >= jhi) continue;
#if TK_S5_WIDE
    // The whole block (its slots all exist), so runs of 16 keys may read
    // the rows past jhi, whose lanes are masked.
    {
      const int nel = block * hd;
      for (int o = 0; o < nel; o += 16) {
        const __mmask16 m = tk_mask16(nel - o);
        _mm512_mask_storeu_ps(Kf + o, m, TK_S5_LDM(Kb + o, m));
        _mm512_mask_storeu_ps(Vf + o, m, TK_S5_LDM(Vb + o, m));
      }
    }
    const float *Kr = Kf, *Vr = Vf;
#else
    const float *Kr = Kb, *Vr = Vb;
#endif
    for (int c = jlo; c < jhi; c += 16) {
      const int kc = jhi - c < 16 ? jhi - c : 16;
      // Lane i (position qp0+i) sees key kp iff kp ≤ qp0+i, and with a
      // window qp0+i - kp < win: i ≥ dl and i < dl + win for dl = kp-qp0.
      __mmask16 vis[16];
      for (int u = 0; u < 16; u++) {
        const int dl = b * block + c + u - qp0;
        __mmask16 v = u < kc ? lanes : 0;
        if (dl > 0) v &= dl >= 16 ? 0 : (__mmask16)(0xffffu << dl);
        if (win > 0) {
          const int hi = dl + win;
          v &= hi <= 0 ? 0 : hi >= 16 ? 0xffff : (__mmask16)((1u << hi) - 1);
        }
        vis[u] = v;
      }
      const float *Kc = Kr + (size_t)c * hd, *Vc = Vr + (size_t)c * hd;
      for (int g = 0; g < group; g++) {
        const float *qt = Qt + g * hq;
        __m512 s[16];
        if (c + 16 <= block) {
          // Sixteen keys at once: one Qᵀ row load per 16 FMAs.
          for (int u = 0; u < 16; u++) s[u] = _mm512_setzero_ps();
          for (int d = 0; d < hd; d++) {
            const __m512 qd = _mm512_loadu_ps(qt + (size_t)d * 16);
            for (int u = 0; u < 16; u++)
              s[u] = _mm512_fmadd_ps(_mm512_set1_ps(Kc[(size_t)u * hd + d]), qd, s[u]);
          }
        } else {  // a run at the end of a block of < 16 slots left
          for (int u = 0; u < 16; u++) s[u] = _mm512_setzero_ps();
          for (int u = 0; u < kc; u++) {
            __m512 a0 = _mm512_setzero_ps(), a1 = a0;
            int d = 0;
            for (; d + 2 <= hd; d += 2) {
              a0 = _mm512_fmadd_ps(_mm512_set1_ps(Kc[(size_t)u * hd + d]),
                                   _mm512_loadu_ps(qt + (size_t)d * 16), a0);
              a1 = _mm512_fmadd_ps(_mm512_set1_ps(Kc[(size_t)u * hd + d + 1]),
                                   _mm512_loadu_ps(qt + (size_t)(d + 1) * 16), a1);
            }
            if (d < hd)
              a0 = _mm512_fmadd_ps(_mm512_set1_ps(Kc[(size_t)u * hd + d]),
                                   _mm512_loadu_ps(qt + (size_t)d * 16), a0);
            s[u] = _mm512_add_ps(a0, a1);
          }
        }
        const __m512 lo = _mm512_set1_ps(-FLT_MAX);
        __m512 bm = lo;
        for (int u = 0; u < 16; u++) {
          s[u] = _mm512_mask_mul_ps(lo, vis[u], s[u], sc);  // hidden: -FLT_MAX
          bm = _mm512_max_ps(bm, s[u]);
        }
        float *mg = M + g * 16, *lg = L + g * 16;
        const __m512 mo = _mm512_loadu_ps(mg);
        const __m512 mn = _mm512_max_ps(mo, bm);
        const __m512 corr = exp16_avx512(_mm512_sub_ps(mo, mn));
        __m512 sum = _mm512_setzero_ps();
        for (int u = 0; u < kc; u++) {
          const __m512 e = _mm512_maskz_mov_ps(vis[u], exp16_avx512(_mm512_sub_ps(s[u], mn)));
          sum = _mm512_add_ps(sum, e);
          _mm512_storeu_ps(P + u * 16, e);
        }
        _mm512_storeu_ps(lg, _mm512_fmadd_ps(_mm512_loadu_ps(lg), corr, sum));
        _mm512_storeu_ps(mg, mn);
        // Oᵀ = Oᵀ·corr + Σ_u V[u]ᵀ P[u], sixteen head columns at a time.
        float *ot = Ot + g * hq;
        int d = 0;
        for (; d + 16 <= hd; d += 16) {
          __m512 o[16];
          for (int k = 0; k < 16; k++)
            o[k] = _mm512_mul_ps(corr, _mm512_loadu_ps(ot + (size_t)(d + k) * 16));
          for (int u = 0; u < kc; u++) {
            const __m512 pu = _mm512_loadu_ps(P + u * 16);
            const float *vr = Vc + (size_t)u * hd + d;
            for (int k = 0; k < 16; k++)
              o[k] = _mm512_fmadd_ps(_mm512_set1_ps(vr[k]), pu, o[k]);
          }
          for (int k = 0; k < 16; k++) _mm512_storeu_ps(ot + (size_t)(d + k) * 16, o[k]);
        }
        for (; d < hd; d++) {
          __m512 o0 = _mm512_mul_ps(corr, _mm512_loadu_ps(ot + (size_t)d * 16));
          for (int u = 0; u < kc; u++)
            o0 = _mm512_fmadd_ps(_mm512_set1_ps(Vc[(size_t)u * hd + d]),
                                 _mm512_loadu_ps(P + u * 16), o0);
          _mm512_storeu_ps(ot + (size_t)d * 16, o0);
        }
      }
    }
  }
  for (int g = 0; g < group; g++) {
    const int h = kvh * group + g;
    const float *ot = Ot + g * hq, *mg = M + g * 16, *lg = L + g * 16;
    for (int i = 0; i < nr; i++) {
      if (state) {
        float *p = state + ((size_t)(i0 + i) * heads + h) * (hd + 2);
        p[0] = mg[i];
        p[1] = lg[i];
        for (int d = 0; d < hd; d++) p[2 + d] = ot[(size_t)d * 16 + i];
      } else {
        const float inv = 1.0f / lg[i];
        float *o = out + (size_t)(qstart + i0 + i) * ld + (size_t)h * hd;
        for (int d = 0; d < hd; d++) o[d] = ot[(size_t)d * 16 + i] * inv;
      }
    }
  }
}
#endif

#undef TK_S5_NAME
#undef TK_S5_PV
#undef TK_S5_KT
#undef TK_S5_ELEM
#undef TK_S5_LDM
#undef TK_S5_TILE
#undef TK_S5_WIDE
