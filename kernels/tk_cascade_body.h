// tk_cascade_body.h: the shared pass of cascade attention for one task,
// included once per vector path by tk_cascade.c with these defined:
//   CASC_NAME, CASC_ATTR   the function's name and target attribute
//   CASC_KV_T, VSETK(p)    the cache element (float, or uint16_t f16/bf16
//                          bits) and a vector of *p widened to float
//   VT, VL                 the vector type and its float lanes; a task's M
//                          rows are two vectors (M = 2·VL)
//   VLOAD VSTORE VZERO VSET1 VADD VSUB VMUL VMAX VEXP, VFMA(a,b,c) = a·b+c
//   KB, DB                 keys (scores) and head dims (P·V) held in
//                          registers per pass: 2·KB and 2·DB accumulators
//
// Why this shape: the M rows share every key, so scores are a small GEMM
// Sᵀ[j][m] = Σ_d K[j][d]·Qᵀ[d][m] with K read straight from the cache
// (one broadcast per key and dim, reused across 2 vectors of rows) and Q
// transposed once per task; the softmax then runs across rows in lanes
// (running max and sum are vectors), and accᵀ[d][m] += Σ_j V[j][d]·Pᵀ[j][m]
// is the same broadcast-FMA with vectors over rows.

static CASC_ATTR void CASC_NAME(const float *q, const CASC_KV_T *K, const CASC_KV_T *V,
                                int heads, int kv_heads, int block, int hd,
                                const int32_t *table, int b0, int b1,
                                const int32_t *qrows, int m0, int m1, int kvh,
                                float scale, float *part, float *scratch) {
  enum { M = 2 * VL };
  const int group = heads / kv_heads;
  const long ld = (long)heads * hd;
  const int nr = m1 - m0;
  const int kc = tk_casc_keys(block);
  const int nbc = kc / block;  // blocks per softmax step
  const size_t bstride = (size_t)block * hd;
  float *qt = scratch;                // [hd][M] scaled queries, transposed
  float *acc = qt + (size_t)hd * M;   // [hd][M] unnormalised output
  float *s = acc + (size_t)hd * M;    // [kc][M] scores, then weights
  float *st = s + (size_t)kc * M;     // [2][M] final max and sum
  for (int r = 0; r < M; r++) {
    if (r < nr) {
      const int m = m0 + r;
      const float *qv = q + (size_t)qrows[m / group] * ld +
                        (size_t)(kvh * group + m % group) * hd;
      for (int d = 0; d < hd; d++) qt[(size_t)d * M + r] = qv[d] * scale;
    } else {  // padding lanes: zero queries, finite scores, never written
      for (int d = 0; d < hd; d++) qt[(size_t)d * M + r] = 0.0f;
    }
  }
  memset(acc, 0, sizeof(float) * (size_t)hd * M);
  VT mx0 = VSET1(-FLT_MAX), mx1 = mx0, l0 = VZERO(), l1 = l0;
  for (int b = b0; b < b1; b += nbc) {
    const int be = b + nbc < b1 ? b + nbc : b1;
    const int n = (be - b) * block;
    VT bm0 = mx0, bm1 = mx1;
    for (int bb = b; bb < be; bb++) {
      const CASC_KV_T *Kb = K + ((size_t)table[bb] * kv_heads + kvh) * bstride;
      float *sb = s + (size_t)(bb - b) * block * M;
      int j = 0;
      for (; j + KB <= block; j += KB) {
        VT a0[KB], a1[KB];
#pragma GCC unroll 16
        for (int u = 0; u < KB; u++) a0[u] = a1[u] = VZERO();
        const CASC_KV_T *Kj = Kb + (size_t)j * hd;
        for (int d = 0; d < hd; d++) {
          const VT q0 = VLOAD(qt + (size_t)d * M), q1 = VLOAD(qt + (size_t)d * M + VL);
#pragma GCC unroll 16
          for (int u = 0; u < KB; u++) {
            const VT k = VSETK(Kj + (size_t)u * hd + d);
            a0[u] = VFMA(k, q0, a0[u]);
            a1[u] = VFMA(k, q1, a1[u]);
          }
        }
#pragma GCC unroll 16
        for (int u = 0; u < KB; u++) {
          VSTORE(sb + (size_t)(j + u) * M, a0[u]);
          VSTORE(sb + (size_t)(j + u) * M + VL, a1[u]);
          bm0 = VMAX(bm0, a0[u]);
          bm1 = VMAX(bm1, a1[u]);
        }
      }
      for (; j < block; j++) {  // block size not a multiple of KB
        VT a0 = VZERO(), a1 = VZERO();
        const CASC_KV_T *Kj = Kb + (size_t)j * hd;
        for (int d = 0; d < hd; d++) {
          const VT k = VSETK(Kj + d);
          a0 = VFMA(k, VLOAD(qt + (size_t)d * M), a0);
          a1 = VFMA(k, VLOAD(qt + (size_t)d * M + VL), a1);
        }
        VSTORE(sb + (size_t)j * M, a0);
        VSTORE(sb + (size_t)j * M + VL, a1);
        bm0 = VMAX(bm0, a0);
        bm1 = VMAX(bm1, a1);
      }
    }
    // Online softmax per lane: rescale the old state by e^(old max − new).
    const VT c0 = VEXP(VSUB(mx0, bm0)), c1 = VEXP(VSUB(mx1, bm1));
    VT s0 = VZERO(), s1 = VZERO();
    for (int j = 0; j < n; j++) {
      const VT e0 = VEXP(VSUB(VLOAD(s + (size_t)j * M), bm0));
      const VT e1 = VEXP(VSUB(VLOAD(s + (size_t)j * M + VL), bm1));
      VSTORE(s + (size_t)j * M, e0);
      VSTORE(s + (size_t)j * M + VL, e1);
      s0 = VADD(s0, e0);
      s1 = VADD(s1, e1);
    }
    l0 = VFMA(l0, c0, s0);
    l1 = VFMA(l1, c1, s1);
    mx0 = bm0;
    mx1 = bm1;
    int d = 0;
    for (; d + DB <= hd; d += DB) {
      VT a0[DB], a1[DB];
#pragma GCC unroll 16
      for (int u = 0; u < DB; u++) {
        a0[u] = VMUL(VLOAD(acc + (size_t)(d + u) * M), c0);
        a1[u] = VMUL(VLOAD(acc + (size_t)(d + u) * M + VL), c1);
      }
      for (int bb = b; bb < be; bb++) {
        const CASC_KV_T *Vb = V + ((size_t)table[bb] * kv_heads + kvh) * bstride + d;
        const float *pb = s + (size_t)(bb - b) * block * M;
        for (int j = 0; j < block; j++) {
          const VT p0 = VLOAD(pb + (size_t)j * M), p1 = VLOAD(pb + (size_t)j * M + VL);
#pragma GCC unroll 16
          for (int u = 0; u < DB; u++) {
            const VT v = VSETK(Vb + (size_t)j * hd + u);
            a0[u] = VFMA(v, p0, a0[u]);
            a1[u] = VFMA(v, p1, a1[u]);
          }
        }
      }
#pragma GCC unroll 16
      for (int u = 0; u < DB; u++) {
        VSTORE(acc + (size_t)(d + u) * M, a0[u]);
        VSTORE(acc + (size_t)(d + u) * M + VL, a1[u]);
      }
    }
    for (; d < hd; d++) {  // head size not a multiple of DB
      VT a0 = VMUL(VLOAD(acc + (size_t)d * M), c0);
      VT a1 = VMUL(VLOAD(acc + (size_t)d * M + VL), c1);
      for (int bb = b; bb < be; bb++) {
        const CASC_KV_T *Vb = V + ((size_t)table[bb] * kv_heads + kvh) * bstride + d;
        const float *pb = s + (size_t)(bb - b) * block * M;
        for (int j = 0; j < block; j++) {
          const VT v = VSETK(Vb + (size_t)j * hd);
          a0 = VFMA(v, VLOAD(pb + (size_t)j * M), a0);
          a1 = VFMA(v, VLOAD(pb + (size_t)j * M + VL), a1);
        }
      }
      VSTORE(acc + (size_t)d * M, a0);
      VSTORE(acc + (size_t)d * M + VL, a1);
    }
  }
  VSTORE(st, mx0);
  VSTORE(st + VL, mx1);
  VSTORE(st + M, l0);
  VSTORE(st + M + VL, l1);
  for (int r = 0; r < nr; r++) {
    const int m = m0 + r;
    float *p = part + ((size_t)(m / group) * heads + kvh * group + m % group) * (hd + 2);
    p[0] = st[r];
    p[1] = st[M + r];
    for (int d = 0; d < hd; d++) p[2 + d] = acc[(size_t)d * M + r];
  }
}
