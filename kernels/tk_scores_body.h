// tk_scores_body.h: the AVX2 score loop of paged attention, included by
// tk_ops.c once per cache element type (float, and f16/bf16 bits) so the
// two stay one loop. It defines
//   float TK_SC_NAME(TK_SC_KT const float *q, const TK_SC_ELEM *K, int hd,
//                    int n, float scale, float *s)
// which sets s[j] = scale·(q·K[j]) for j < n (K rows hd elements apart),
// eight positions at a time (eight dot-product accumulators, one
// transpose-add), and returns max_j s[j]. Macros:
//   TK_SC_QUAL     storage and inline qualifiers
//   TK_SC_KT       leading parameters (empty, or `int kt,` for 16-bit)
//   TK_SC_ELEM     K's element type
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

// Each inclusion instantiates one loop; the next sets its own parameters.
#undef TK_SC_NAME
#undef TK_SC_QUAL
#undef TK_SC_KT
#undef TK_SC_ELEM
#undef TK_SC_LD8
#undef TK_SC_LD1
#undef TK_SC_DOT
