// tk_scores_body.h: the AVX2 score and P·V loops of paged attention,
// included by tk_ops.c once per cache element type (float, and f16/bf16
// bits) so each stays one loop. It defines
//   float TK_SC_NAME(TK_SC_KT const float *q, const TK_SC_ELEM *K, int hd,
//                    int n, float scale, float *s)
// which sets s[j] = scale·(q·K[j]) for j < n (K rows hd elements apart),
// eight positions at a time (eight dot-product accumulators, one
// transpose-add), and returns max_j s[j], and
//   void TK_SC_PV(TK_SC_KT float *a, float c, const float *s,
//                 const TK_SC_ELEM *V, int n, int hd)
// which sets a = a·c + Σ_{j<n} s[j]·V[j]. Macros:
//   TK_SC_NAME, TK_SC_PV  the two functions' names
//   TK_SC_QUAL     storage and inline qualifiers
//   TK_SC_KT       leading parameters (empty, or `int kt,` for 16-bit)
//   TK_SC_ELEM     K's and V's element type
//   TK_SC_LD8(p)   eight elements at p as a __m256
//   TK_SC_LD1(x)   one element x as a float
//   TK_SC_DOT(a, b, n)  the float dot product of n elements (tail rows)
//   (all undefined again at the end of this file)

TK_SC_QUAL TK_TARGET_AVX2 float TK_SC_NAME(TK_SC_KT const float *q,
                                           const TK_SC_ELEM *K, int hd, int n,
                                           float scale, float *s) {
  const int hd8 = hd & ~7;
  const __m256 sc = _mm256_set1_ps(scale);
  __m256 bmv = _mm256_set1_ps(-FLT_MAX);
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const TK_SC_ELEM *Kj = K + (size_t)j * hd;
    __m256 a[8];
    for (int u = 0; u < 8; u++) a[u] = _mm256_setzero_ps();
    for (int d = 0; d < hd8; d += 8) {
      __m256 qv = _mm256_loadu_ps(q + d);
      for (int u = 0; u < 8; u++)
        a[u] = _mm256_fmadd_ps(qv, TK_SC_LD8(Kj + (size_t)u * hd + d), a[u]);
    }
    __m256 v = hsum8x8(a);
    if (hd8 < hd) {  // head size not a multiple of 8
      float tail[8];
      for (int u = 0; u < 8; u++) {
        float t = 0;
        for (int d = hd8; d < hd; d++) t += q[d] * TK_SC_LD1(Kj[(size_t)u * hd + d]);
        tail[u] = t;
      }
      v = _mm256_add_ps(v, _mm256_loadu_ps(tail));
    }
    v = _mm256_mul_ps(v, sc);
    _mm256_storeu_ps(s + j, v);
    bmv = _mm256_max_ps(bmv, v);
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(bmv), _mm256_extractf128_ps(bmv, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  float bm = _mm_cvtss_f32(m4);
  for (; j < n; j++) {
    s[j] = TK_SC_DOT(q, K + (size_t)j * hd, hd) * scale;
    if (s[j] > bm) bm = s[j];
  }
  return bm;
}


// TK_SC_PV: a = a*c + Σ_{j<n} s[j]·V[j] over hd columns, 32 columns at a
// time held in registers across all n rows (one load and store of a per
// block).
TK_SC_QUAL TK_TARGET_AVX2 void TK_SC_PV(TK_SC_KT float *a, float c,
                                        const float *s, const TK_SC_ELEM *V,
                                        int n, int hd) {
  const __m256 cv = _mm256_set1_ps(c);
  int d = 0;
  for (; d + 32 <= hd; d += 32) {
    __m256 a0 = _mm256_mul_ps(cv, _mm256_loadu_ps(a + d));
    __m256 a1 = _mm256_mul_ps(cv, _mm256_loadu_ps(a + d + 8));
    __m256 a2 = _mm256_mul_ps(cv, _mm256_loadu_ps(a + d + 16));
    __m256 a3 = _mm256_mul_ps(cv, _mm256_loadu_ps(a + d + 24));
    for (int j = 0; j < n; j++) {
      const TK_SC_ELEM *v = V + (size_t)j * hd + d;
      __m256 p = _mm256_broadcast_ss(s + j);
      a0 = _mm256_fmadd_ps(p, TK_SC_LD8(v), a0);
      a1 = _mm256_fmadd_ps(p, TK_SC_LD8(v + 8), a1);
      a2 = _mm256_fmadd_ps(p, TK_SC_LD8(v + 16), a2);
      a3 = _mm256_fmadd_ps(p, TK_SC_LD8(v + 24), a3);
    }
    _mm256_storeu_ps(a + d, a0);
    _mm256_storeu_ps(a + d + 8, a1);
    _mm256_storeu_ps(a + d + 16, a2);
    _mm256_storeu_ps(a + d + 24, a3);
  }
  for (; d + 8 <= hd; d += 8) {
    __m256 a0 = _mm256_mul_ps(cv, _mm256_loadu_ps(a + d));
    for (int j = 0; j < n; j++)
      a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(s + j),
                           TK_SC_LD8(V + (size_t)j * hd + d), a0);
    _mm256_storeu_ps(a + d, a0);
  }
  for (; d < hd; d++) {
    float t = a[d] * c;
    for (int j = 0; j < n; j++) t += s[j] * TK_SC_LD1(V[(size_t)j * hd + d]);
    a[d] = t;
  }
}

// Each inclusion instantiates one pair of loops; the next sets its own
// parameters.
#undef TK_SC_NAME
#undef TK_SC_PV
#undef TK_SC_QUAL
#undef TK_SC_KT
#undef TK_SC_ELEM
#undef TK_SC_LD8
#undef TK_SC_LD1
#undef TK_SC_DOT
