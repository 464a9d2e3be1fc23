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

#undef TK_S5_NAME
#undef TK_S5_PV
#undef TK_S5_KT
#undef TK_S5_ELEM
#undef TK_S5_LDM
