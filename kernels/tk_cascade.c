// tk_cascade.c: the shared pass of cascade (shared-prefix) paged attention:
// every query of a group's members against the group's shared blocks at
// once, leaving per-row partial softmax states that tk_attn_tail continues.
#include <float.h>
#include <math.h>

#include "tk_internal.h"

// casc_portable is the plain per-row online softmax (one row at a time, no
// transpose): the reference the vector bodies are tested against. kt is
// the cache type (a constant once inlined into its instance below).
static inline __attribute__((always_inline)) void casc_portable_body(
    int kt, const float *q, const void *K, const void *V, int heads,
    int kv_heads, int block, int hd, const int32_t *table, int b0, int b1,
    const int32_t *qrows, int m0, int m1, int kvh, float scale, float *part,
    float *scratch) {
  const int group = heads / kv_heads;
  const long ld = (long)heads * hd;
  const size_t bstride = (size_t)block * hd;
  const size_t esize = kt == TK_F32 ? sizeof(float) : sizeof(uint16_t);
  float *s = scratch;  // [block]
  for (int m = m0; m < m1; m++) {
    const int g = m % group;
    const float *qv = q + (size_t)qrows[m / group] * ld + (size_t)(kvh * group + g) * hd;
    float *p = part + ((size_t)(m / group) * heads + kvh * group + g) * (hd + 2);
    float *a = p + 2;
    float mx = -FLT_MAX, lsum = 0.0f;
    memset(a, 0, sizeof(float) * (size_t)hd);
    for (int b = b0; b < b1; b++) {
      const size_t base = ((size_t)table[b] * kv_heads + kvh) * bstride * esize;
      const void *Kb = (const char *)K + base, *Vb = (const char *)V + base;
      float bm = mx;
      for (int j = 0; j < block; j++) {
        float t = 0.0f;
        for (int d = 0; d < hd; d++) t += qv[d] * tk_kv_f32(kt, Kb, (size_t)j * hd + d);
        s[j] = t * scale;
        if (s[j] > bm) bm = s[j];
      }
      const float c = expf(mx - bm);
      float bs = 0.0f;
      for (int j = 0; j < block; j++) {
        s[j] = expf(s[j] - bm);
        bs += s[j];
      }
      for (int d = 0; d < hd; d++) a[d] *= c;
      for (int j = 0; j < block; j++)
        for (int d = 0; d < hd; d++) a[d] += s[j] * tk_kv_f32(kt, Vb, (size_t)j * hd + d);
      lsum = lsum * c + bs;
      mx = bm;
    }
    p[0] = mx;
    p[1] = lsum;
  }
}

#define CASC_PORTABLE(NAME, KT)                                              \
  static void NAME(const float *q, const void *K, const void *V, int heads, \
                   int kv_heads, int block, int hd, const int32_t *table,   \
                   int b0, int b1, const int32_t *qrows, int m0, int m1,    \
                   int kvh, float scale, float *part, float *scratch) {     \
    casc_portable_body(KT, q, K, V, heads, kv_heads, block, hd, table, b0,  \
                       b1, qrows, m0, m1, kvh, scale, part, scratch);       \
  }
CASC_PORTABLE(casc_portable, TK_F32)
CASC_PORTABLE(casc_portable_f16, TK_F16)
CASC_PORTABLE(casc_portable_bf16, TK_BF16)

#if TK_X86
#define CASC_ATTR TK_TARGET_AVX2
#define VT __m256
#define VL 8
#define VLOAD _mm256_loadu_ps
#define VSTORE _mm256_storeu_ps
#define VZERO _mm256_setzero_ps
#define VSET1 _mm256_set1_ps
#define VADD _mm256_add_ps
#define VSUB _mm256_sub_ps
#define VMUL _mm256_mul_ps
#define VMAX _mm256_max_ps
#define VEXP exp8_avx2
#define VFMA _mm256_fmadd_ps
#define KB 4  // 16 ymm registers: 8 accumulators + 2 query vectors
#define DB 4
#define CASC_KV_T float
#define VSETK(p) VSET1(*(p))
#define CASC_NAME casc_avx2
#include "tk_cascade_body.h"
#undef CASC_NAME
#undef CASC_KV_T
#undef VSETK
// 16-bit caches: each element is broadcast and widened in registers.
#define CASC_KV_T uint16_t
#define VSETK(p) _mm256_cvtph_ps(_mm_set1_epi16((short)*(p)))
#define CASC_NAME casc_avx2_f16
#include "tk_cascade_body.h"
#undef CASC_NAME
#undef VSETK
#define VSETK(p) _mm256_castsi256_ps(_mm256_set1_epi32((int)((uint32_t)*(p) << 16)))
#define CASC_NAME casc_avx2_bf16
#include "tk_cascade_body.h"
#undef CASC_NAME
#undef VSETK
#undef CASC_KV_T
#include "tk_cascade_isa_end.h"

#define CASC_ATTR TK_TARGET_AVX512
#define VT __m512
#define VL 16
#define VLOAD _mm512_loadu_ps
#define VSTORE _mm512_storeu_ps
#define VZERO _mm512_setzero_ps
#define VSET1 _mm512_set1_ps
#define VADD _mm512_add_ps
#define VSUB _mm512_sub_ps
#define VMUL _mm512_mul_ps
#define VMAX _mm512_max_ps
#define VEXP exp16_avx512
#define VFMA _mm512_fmadd_ps
#define KB 8  // 32 zmm registers: 16 accumulators + 2 query vectors
#define DB 8
#define CASC_KV_T float
#define VSETK(p) VSET1(*(p))
#define CASC_NAME casc_avx512
#include "tk_cascade_body.h"
#undef CASC_NAME
#undef CASC_KV_T
#undef VSETK
// 16-bit caches: each element is broadcast and widened in registers.
#define CASC_KV_T uint16_t
#define VSETK(p) _mm512_cvtph_ps(_mm256_set1_epi16((short)*(p)))
#define CASC_NAME casc_avx512_f16
#include "tk_cascade_body.h"
#undef CASC_NAME
#undef VSETK
#define VSETK(p) _mm512_castsi512_ps(_mm512_set1_epi32((int)((uint32_t)*(p) << 16)))
#define CASC_NAME casc_avx512_bf16
#include "tk_cascade_body.h"
#undef CASC_NAME
#undef VSETK
#undef CASC_KV_T
#include "tk_cascade_isa_end.h"
#endif

void tk_cascade_task(int isa, int kvtype, const float *q, const void *K,
                     const void *V, int heads, int kv_heads, int block, int hd,
                     const int32_t *table, int b0, int b1,
                     const int32_t *qrows, int m0, int m1, int kvh,
                     float scale, float *part, float *scratch) {
#define CASC_ARGS                                                            \
  q, K, V, heads, kv_heads, block, hd, table, b0, b1, qrows, m0, m1, kvh, \
      scale, part, scratch
#if TK_X86
  if (isa == TK_AVX512) {
    switch (kvtype) {
      case TK_F16: casc_avx512_f16(CASC_ARGS); return;
      case TK_BF16: casc_avx512_bf16(CASC_ARGS); return;
      default: casc_avx512(CASC_ARGS); return;
    }
  }
  if (isa == TK_AVX2) {
    switch (kvtype) {
      case TK_F16: casc_avx2_f16(CASC_ARGS); return;
      case TK_BF16: casc_avx2_bf16(CASC_ARGS); return;
      default: casc_avx2(CASC_ARGS); return;
    }
  }
#endif
  (void)isa;
  switch (kvtype) {
    case TK_F16: casc_portable_f16(CASC_ARGS); return;
    case TK_BF16: casc_portable_bf16(CASC_ARGS); return;
    default: casc_portable(CASC_ARGS); return;
  }
#undef CASC_ARGS
}

void tk_cascade_merge(float *out, const float *part, long chunk, int nstates,
                      const int32_t *qrows, int s0, int s1, int heads, int hd) {
  const long ld = (long)heads * hd;
  for (int s = s0; s < s1; s++)
    for (int h = 0; h < heads; h++) {
      const float *p = part + ((size_t)s * heads + h) * (hd + 2);
      float *o = out + (size_t)qrows[s] * ld + (size_t)h * hd;
      float m = p[0];
      for (int c = 1; c < nstates; c++)
        if (p[c * chunk] > m) m = p[c * chunk];
      // Each state's weights were relative to its own max: scale them all
      // to the joint max m (factors ≤ 1, one of them exactly 1).
      float w = expf(p[0] - m), lsum = p[1] * w;
      for (int d = 0; d < hd; d++) o[d] = p[2 + d] * w;
      for (int c = 1; c < nstates; c++) {
        const float *pc = p + c * chunk;
        w = expf(pc[0] - m);
        lsum += pc[1] * w;
        for (int d = 0; d < hd; d++) o[d] += pc[2 + d] * w;
      }
      const float inv = 1.0f / lsum;
      for (int d = 0; d < hd; d++) o[d] *= inv;
    }
}
