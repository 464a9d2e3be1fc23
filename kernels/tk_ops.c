// tk_ops.c: the element-wise and row kernels (RMSNorm, RoPE, SiLU·mul,
// softmax, argmax) and paged attention.
#include <float.h>
#include <math.h>

#include "tk_internal.h"

// ---- vector helpers with a portable and an AVX2 body ----

static float dot_portable(const float *a, const float *b, int n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
  float t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; i++) t += a[i] * b[i];
  return t;
}

#if TK_X86
// exps_sub_avx2: s[j] = e^(s[j] − m) for j < n; returns Σ s[j].
static inline TK_TARGET_AVX2 float exps_sub_avx2(float *s, int n, float m) {
  __m256 mv = _mm256_set1_ps(m), sum = _mm256_setzero_ps();
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 e = exp8_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
    _mm256_storeu_ps(s + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  float t = tk_hsum8(sum);
  for (; j < n; j++) {
    s[j] = expf(s[j] - m);
    t += s[j];
  }
  return t;
}

static inline TK_TARGET_AVX2 float dot_avx2(const float *a, const float *b, int n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0;
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8)
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float t = tk_hsum8(_mm256_add_ps(s0, s1));
  for (; i < n; i++) t += a[i] * b[i];
  return t;
}

// hsum8x8 returns the vector (Σv[0], …, Σv[7]) of the horizontal sums of
// eight vectors: a transpose-and-add in 6 hadds, 2 lane permutes, 1 add.
TK_INLINE TK_TARGET_AVX2 __m256 hsum8x8(const __m256 v[8]) {
  __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
  __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
  __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                       _mm256_permute2f128_ps(u0, u1, 0x31));
}

// scores_avx2: s[j] = scale·(q·K[j]) for j < n on a float cache, returning
// the max; pv_avx2: a = a*c + Σ_{j<n} s[j]·V[j] (see tk_scores_body.h).
#define TK_SC_NAME scores_avx2
#define TK_SC_PV pv_avx2
#define TK_SC_QUAL static inline
#define TK_SC_KT
#define TK_SC_ELEM float
#define TK_SC_LD8(p) _mm256_loadu_ps(p)
#define TK_SC_LD1(x) (x)
#define TK_SC_DOT(a, b, n) dot_avx2(a, b, n)
#include "tk_scores_body.h"

#endif

static float dot(int isa, const float *a, const float *b, int n) {
#if TK_X86
  if (isa != TK_PORTABLE) return dot_avx2(a, b, n);
#endif
  (void)isa;
  return dot_portable(a, b, n);
}

// ---- row kernels ----

void tk_rmsnorm(int isa, float *y, const float *x, const float *weight, int r0,
                int r1, int dim, float eps) {
  for (int r = r0; r < r1; r++) {
    const float *xr = x + (size_t)r * dim;
    float *yr = y + (size_t)r * dim;
    float ss = dot(isa, xr, xr, dim);
    float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int i = 0; i < dim; i++) yr[i] = xr[i] * inv * weight[i];
  }
}

void tk_rope(float *x, const int32_t *pos, int rows, int heads, int hd,
             float theta, float freq_scale) {
  // Frequency outer, rows inner: one pow per frequency per call, not per
  // row (it cost as much as the sin and cos); the angles are unchanged.
  for (int i = 0; i < hd / 2; i++) {
    double freq = pow((double)theta, -2.0 * i / (double)hd);
    for (int r = 0; r < rows; r++) {
      float *xr = x + (size_t)r * heads * hd;
      // Angles in double: positions reach 1e5 and float angles lose the
      // low-order radians there.
      double ang = (double)pos[r] * (double)freq_scale * freq;
      float c = (float)cos(ang), s = (float)sin(ang);
      for (int h = 0; h < heads; h++) {
        float *v = xr + (size_t)h * hd + 2 * i;
        float a = v[0], b = v[1];
        v[0] = a * c - b * s;
        v[1] = a * s + b * c;
      }
    }
  }
}

void tk_rope_table(float *cs, const int32_t *pos, int rows, int half,
                   const double *freqs) {
  for (int r = 0; r < rows; r++)
    for (int i = 0; i < half; i++) {
      // Angles in double, as tk_rope: positions reach 1e5.
      double ang = (double)pos[r] * freqs[i];
      cs[((size_t)r * half + i) * 2] = (float)cos(ang);
      cs[((size_t)r * half + i) * 2 + 1] = (float)sin(ang);
    }
}

void tk_rope_apply(float *x, const float *cs, int rows, int heads, int hd,
                   int neox) {
  const int half = hd / 2;
  for (int r = 0; r < rows; r++) {
    const float *t = cs + (size_t)r * half * 2;
    for (int h = 0; h < heads; h++) {
      float *v = x + ((size_t)r * heads + h) * hd;
      for (int i = 0; i < half; i++) {
        // NEOX (GPT-NeoX, Hugging Face rotate_half) pairs element i with
        // i+hd/2; the GGUF llama layout pairs adjacent elements.
        const int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
        float c = t[2 * i], s = t[2 * i + 1], a = v[ia], b = v[ib];
        v[ia] = a * c - b * s;
        v[ib] = a * s + b * c;
      }
    }
  }
}

#if TK_X86
// silu_mul_avx2 uses exp8_avx2 (≤ 2 ulp) for e^−g, then an exact divide
// and multiply. For g > 87 e^−g flushes to 0 and silu(g) = g, exact to
// float precision; for g < −88 e^−g is clamped at e^88 and silu(g) is a
// tiny negative number instead of a tinier one (both round to ≈ 0 next to
// any other activation).
static TK_TARGET_AVX2 void silu_mul_avx2(float *y, const float *gate,
                                         const float *up, long n) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  long i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 g = _mm256_loadu_ps(gate + i);
    __m256 e = exp8_avx2(_mm256_sub_ps(zero, g));
    __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(y + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; i++) {
    float g = gate[i];
    y[i] = g / (1.0f + expf(-g)) * up[i];
  }
}
#endif

void tk_silu_mul(int isa, float *y, const float *gate, const float *up,
                 long n) {
#if TK_X86
  if (isa != TK_PORTABLE) {
    silu_mul_avx2(y, gate, up, n);
    return;
  }
#endif
  (void)isa;
  for (long i = 0; i < n; i++) {
    float g = gate[i];
    y[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

void tk_softmax(float *x, long n) {
  if (n <= 0) return;
  float mx = x[0];
  for (long i = 1; i < n; i++)
    if (x[i] > mx) mx = x[i];
  double sum = 0;
  for (long i = 0; i < n; i++) {
    x[i] = expf(x[i] - mx);
    sum += x[i];
  }
  float inv = (float)(1.0 / sum);
  for (long i = 0; i < n; i++) x[i] *= inv;
}

// The sampler's order: NaN below everything, +inf equal to FLT_MAX.
static inline float argmax_key(float v) { return v != v ? -INFINITY : (v > FLT_MAX ? FLT_MAX : v); }

long tk_argmax(const float *x, long n) {
  long best = 0;
  float bv = argmax_key(x[0]);
  for (long i = 1; i < n; i++) {
    const float v = argmax_key(x[i]);
    if (v > bv) best = i, bv = v;
  }
  return best;
}

// ---- paged attention ----

static inline float exps_sub_portable(float *s, int n, float m) {
  float t = 0;
  for (int j = 0; j < n; j++) {
    s[j] = expf(s[j] - m);
    t += s[j];
  }
  return t;
}

static inline float scores_portable(const float *q, const float *K, int hd,
                                    int n, float scale, float *s) {
  float bm = -FLT_MAX;
  for (int j = 0; j < n; j++) {
    s[j] = dot_portable(q, K + (size_t)j * hd, hd) * scale;
    if (s[j] > bm) bm = s[j];
  }
  return bm;
}

static inline void pv_portable(float *a, float c, const float *s,
                               const float *V, int n, int hd) {
  for (int d = 0; d < hd; d++) a[d] *= c;
  for (int j = 0; j < n; j++)
    for (int d = 0; d < hd; d++) a[d] += s[j] * V[(size_t)j * hd + d];
}

// ---- 16-bit cache helpers: the same loops with K/V widened on load ----

// kv16_f32 widens one cache element (kt TK_F16 or TK_BF16) to float.
static inline float kv16_f32(int kt, uint16_t h) {
  return tk_kv_f32(kt, &h, 0);
}

// dot16_portable is dot_portable with b a 16-bit cache row.
static inline float dot16_portable(int kt, const float *a, const uint16_t *b,
                                   int n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) s[j] += a[i + j] * kv16_f32(kt, b[i + j]);
  float t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; i++) t += a[i] * kv16_f32(kt, b[i]);
  return t;
}

static inline float scores16_portable(int kt, const float *q,
                                      const uint16_t *K, int hd, int n,
                                      float scale, float *s) {
  float bm = -FLT_MAX;
  for (int j = 0; j < n; j++) {
    s[j] = dot16_portable(kt, q, K + (size_t)j * hd, hd) * scale;
    if (s[j] > bm) bm = s[j];
  }
  return bm;
}

static inline void pv16_portable(int kt, float *a, float c, const float *s,
                                 const uint16_t *V, int n, int hd) {
  for (int d = 0; d < hd; d++) a[d] *= c;
  for (int j = 0; j < n; j++)
    for (int d = 0; d < hd; d++)
      a[d] += s[j] * kv16_f32(kt, V[(size_t)j * hd + d]);
}

#if TK_X86
// kv16_ld8 loads eight cache elements as floats: F16C for f16, a 16-bit
// left shift for bf16 (bf16 is the top half of a float).
TK_INLINE TK_TARGET_AVX2 __m256 kv16_ld8(int kt, const uint16_t *p) {
  const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);
  if (kt == TK_F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// kv16_ld1 is kv16_ld8 for one element (tails).
TK_INLINE TK_TARGET_AVX2 float kv16_ld1(int kt, uint16_t h) {
  return kt == TK_F16 ? _cvtsh_ss(h) : tk_bf16_to_f32(h);
}

TK_INLINE TK_TARGET_AVX2 float dot16_avx2(int kt, const float *a,
                                          const uint16_t *b, int n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0;
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), kv16_ld8(kt, b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), kv16_ld8(kt, b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8)
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), kv16_ld8(kt, b + i), s0);
  float t = tk_hsum8(_mm256_add_ps(s0, s1));
  for (; i < n; i++) t += a[i] * kv16_ld1(kt, b[i]);
  return t;
}

// scores16_avx2 and pv16_avx2 are scores_avx2 and pv_avx2 on a 16-bit
// cache of type kt: the same loops, widening in registers.
#define TK_SC_NAME scores16_avx2
#define TK_SC_PV pv16_avx2
#define TK_SC_QUAL TK_INLINE
#define TK_SC_KT int kt,
#define TK_SC_ELEM uint16_t
#define TK_SC_LD8(p) kv16_ld8(kt, p)
#define TK_SC_LD1(x) kv16_ld1(kt, x)
#define TK_SC_DOT(a, b, n) dot16_avx2(kt, a, b, n)
#include "tk_scores_body.h"

// ---- AVX-512: the same loops 16 lanes wide ----

// tk_mask16 is the mask of the first min(r, 16) lanes (r > 0).
TK_INLINE __mmask16 tk_mask16(int r) {
  return r >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << r) - 1);
}

// kv16_ldm16 loads the cache elements at p under mask m (masked lanes
// zero) as 16 floats: F16C for f16, a 16-bit left shift for bf16.
TK_INLINE TK_TARGET_AVX512 __m512 kv16_ldm16(int kt, const uint16_t *p,
                                             __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  if (kt == TK_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// exps_sub_avx512 is exps_sub_avx2 16 lanes wide (the same exp polynomial,
// so the two paths' weights agree to the ulp), with a masked tail.
static inline TK_TARGET_AVX512 float exps_sub_avx512(float *s, int n, float m) {
  const __m512 mv = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  for (int j = 0; j < n; j += 16) {
    const __mmask16 k = tk_mask16(n - j);
    const __m512 e = exp16_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), mv));
    _mm512_mask_storeu_ps(s + j, k, e);
    sum = _mm512_mask_add_ps(sum, k, sum, e);
  }
  return _mm512_reduce_add_ps(sum);
}

#define TK_S5_NAME scores_avx512
#define TK_S5_PV pv_avx512
#define TK_S5_KT
#define TK_S5_ELEM float
#define TK_S5_LDM(p, m) _mm512_maskz_loadu_ps(m, p)
#define TK_S5_TILE attn_tile_avx512
#define TK_S5_WIDE 0
#include "tk_scores512_body.h"

#define TK_S5_NAME scores16_avx512
#define TK_S5_PV pv16_avx512
#define TK_S5_KT int kt,
#define TK_S5_ELEM uint16_t
#define TK_S5_LDM(p, m) kv16_ldm16(kt, p, m)
#define TK_S5_TILE attn_tile16_avx512
#define TK_S5_WIDE 1
#include "tk_scores512_body.h"

#endif

// ---- instances: one body per (path, cache type) ----

#define TK_ATTN_NAME attn_portable_body
#define TK_ATTN_ATTR
#define TK_KV_T float
#define TK_SCORES scores_portable
#define TK_PV pv_portable
#define TK_EXPS exps_sub_portable
#include "tk_attn_body.h"
#undef TK_ATTN_NAME
#undef TK_ATTN_ATTR
#undef TK_KV_T
#undef TK_SCORES
#undef TK_PV
#undef TK_EXPS

// The plain task and the cascade tail of this path: one body, inlined into
// each with its own constants.
static void attn_portable(
    float *out, const float *q, const float *K, const float *V, int heads,
    int kv_heads, int block, int hd, const int32_t *table, int qstart, int numq,
    int ctx, int kvh, int i0, int i1, float scale, float *scratch, int win) {
  if (win > 0)
    attn_portable_body(out, q, K, V, heads, kv_heads, block, hd, table, qstart, numq,
        ctx, kvh, i0, i1, scale, scratch, 0, NULL, 1, win);
  else  // the unwindowed loop, with the window's tests folded away
    attn_portable_body(out, q, K, V, heads, kv_heads, block, hd, table, qstart, numq,
        ctx, kvh, i0, i1, scale, scratch, 0, NULL, 1, 0);
}

static void attn_tail_portable(
    float *out, const float *q, const float *K, const float *V, int heads,
    int kv_heads, int block, int hd, const int32_t *table, int qstart, int numq,
    int ctx, int kvh, int i0, int i1, float scale, float *scratch, int b0,
    float *state, int win) {
  attn_portable_body(out, q, K, V, heads, kv_heads, block, hd, table, qstart, numq,
      ctx, kvh, i0, i1, scale, scratch, b0, state, 1, win);
}

// TK_ATTN_WRAPT defines NAME (the plain task) and NAME##_tail (the cascade
// tail) over body BODY for a cache of elements T; TK_ATTN_WRAP is it for a
// 16-bit cache.
#define TK_ATTN_WRAPT(NAME, BODY, ATTR, T)                                        \
  static ATTR void NAME(float *out, const float *q, const T *K,               \
                        const T *V, int heads, int kv_heads, int block,        \
                        int hd, const int32_t *table, int qstart, int numq,   \
                        int ctx, int kvh, int i0, int i1, float scale,        \
                        float *scratch, int win) {                            \
    if (win > 0)                                                              \
      BODY(out, q, K, V, heads, kv_heads, block, hd, table, qstart, numq,     \
           ctx, kvh, i0, i1, scale, scratch, 0, NULL, 1, win);                \
    else /* the unwindowed loop, the window's tests folded away */            \
      BODY(out, q, K, V, heads, kv_heads, block, hd, table, qstart, numq,     \
           ctx, kvh, i0, i1, scale, scratch, 0, NULL, 1, 0);                  \
  }                                                                           \
  static ATTR void NAME##_tail(                                               \
      float *out, const float *q, const T *K, const T *V,                    \
      int heads, int kv_heads, int block, int hd, const int32_t *table,      \
      int qstart, int numq, int ctx, int kvh, int i0, int i1, float scale,   \
      float *scratch, int b0, float *state, int win) {                       \
    BODY(out, q, K, V, heads, kv_heads, block, hd, table, qstart, numq, ctx,  \
         kvh, i0, i1, scale, scratch, b0, state, 1, win);                     \
  }
#define TK_ATTN_WRAP(NAME, BODY, ATTR) TK_ATTN_WRAPT(NAME, BODY, ATTR, uint16_t)

#define TK_ATTN_ATTR
#define TK_KV_T uint16_t
#define TK_EXPS exps_sub_portable
#define TK_ATTN_NAME attn_portable_f16_body
#define TK_SCORES(q, K, hd, n, sc, s) scores16_portable(TK_F16, q, K, hd, n, sc, s)
#define TK_PV(a, c, s, V, n, hd) pv16_portable(TK_F16, a, c, s, V, n, hd)
#include "tk_attn_body.h"
#undef TK_ATTN_NAME
#undef TK_SCORES
#undef TK_PV
#define TK_ATTN_NAME attn_portable_bf16_body
#define TK_SCORES(q, K, hd, n, sc, s) scores16_portable(TK_BF16, q, K, hd, n, sc, s)
#define TK_PV(a, c, s, V, n, hd) pv16_portable(TK_BF16, a, c, s, V, n, hd)
#include "tk_attn_body.h"
#undef TK_ATTN_NAME
#undef TK_SCORES
#undef TK_PV
#undef TK_ATTN_ATTR
#undef TK_KV_T
#undef TK_EXPS
TK_ATTN_WRAP(attn_portable_f16, attn_portable_f16_body, )
TK_ATTN_WRAP(attn_portable_bf16, attn_portable_bf16_body, )

#if TK_X86
#define TK_ATTN_NAME attn_avx2_body
#define TK_ATTN_ATTR TK_TARGET_AVX2
#define TK_KV_T float
#define TK_SCORES scores_avx2
#define TK_PV pv_avx2
#define TK_EXPS exps_sub_avx2
#include "tk_attn_body.h"
#undef TK_ATTN_NAME
#undef TK_ATTN_ATTR
#undef TK_KV_T
#undef TK_SCORES
#undef TK_PV
#undef TK_EXPS

// The plain task and the cascade tail of this path: one body, inlined into
// each with its own constants.
static TK_TARGET_AVX2 void attn_avx2(
    float *out, const float *q, const float *K, const float *V, int heads,
    int kv_heads, int block, int hd, const int32_t *table, int qstart, int numq,
    int ctx, int kvh, int i0, int i1, float scale, float *scratch, int win) {
  if (win > 0)
    attn_avx2_body(out, q, K, V, heads, kv_heads, block, hd, table, qstart, numq,
        ctx, kvh, i0, i1, scale, scratch, 0, NULL, 1, win);
  else  // the unwindowed loop, with the window's tests folded away
    attn_avx2_body(out, q, K, V, heads, kv_heads, block, hd, table, qstart, numq,
        ctx, kvh, i0, i1, scale, scratch, 0, NULL, 1, 0);
}

static TK_TARGET_AVX2 void attn_tail_avx2(
    float *out, const float *q, const float *K, const float *V, int heads,
    int kv_heads, int block, int hd, const int32_t *table, int qstart, int numq,
    int ctx, int kvh, int i0, int i1, float scale, float *scratch, int b0,
    float *state, int win) {
  attn_avx2_body(out, q, K, V, heads, kv_heads, block, hd, table, qstart, numq,
      ctx, kvh, i0, i1, scale, scratch, b0, state, 1, win);
}

#define TK_ATTN_ATTR TK_TARGET_AVX2
#define TK_KV_T uint16_t
#define TK_EXPS exps_sub_avx2
#define TK_ATTN_NAME attn_avx2_f16_body
#define TK_SCORES(q, K, hd, n, sc, s) scores16_avx2(TK_F16, q, K, hd, n, sc, s)
#define TK_PV(a, c, s, V, n, hd) pv16_avx2(TK_F16, a, c, s, V, n, hd)
#include "tk_attn_body.h"
#undef TK_ATTN_NAME
#undef TK_SCORES
#undef TK_PV
#define TK_ATTN_NAME attn_avx2_bf16_body
#define TK_SCORES(q, K, hd, n, sc, s) scores16_avx2(TK_BF16, q, K, hd, n, sc, s)
#define TK_PV(a, c, s, V, n, hd) pv16_avx2(TK_BF16, a, c, s, V, n, hd)
#include "tk_attn_body.h"
#undef TK_ATTN_NAME
#undef TK_SCORES
#undef TK_PV
#undef TK_ATTN_ATTR
#undef TK_KV_T
#undef TK_EXPS
TK_ATTN_WRAP(attn_avx2_f16, attn_avx2_f16_body, TK_TARGET_AVX2)
TK_ATTN_WRAP(attn_avx2_bf16, attn_avx2_bf16_body, TK_TARGET_AVX2)

// AVX-512 tasks of 8 or more queries (prefill tiles) take the lane-layout
// tile body (TK_S5_TILE); decode's one query per task stays on the
// per-query loops.
#define TK_ATTN_ATTR TK_TARGET_AVX512
#define TK_EXPS exps_sub_avx512
#define TK_ATTN_TILE_MIN 8
#define TK_KV_T float
#define TK_ATTN_NAME attn_avx512_f32_body
#define TK_SCORES scores_avx512
#define TK_PV pv_avx512
#define TK_ATTN_TILE attn_tile_avx512
#include "tk_attn_body.h"
#undef TK_ATTN_NAME
#undef TK_SCORES
#undef TK_PV
#undef TK_KV_T
#undef TK_ATTN_TILE
#define TK_KV_T uint16_t
#define TK_ATTN_NAME attn_avx512_f16_body
#define TK_SCORES(q, K, hd, n, sc, s) scores16_avx512(TK_F16, q, K, hd, n, sc, s)
#define TK_PV(a, c, s, V, n, hd) pv16_avx512(TK_F16, a, c, s, V, n, hd)
#define TK_ATTN_TILE(...) attn_tile16_avx512(TK_F16, __VA_ARGS__)
#include "tk_attn_body.h"
#undef TK_ATTN_NAME
#undef TK_SCORES
#undef TK_PV
#undef TK_ATTN_TILE
#define TK_ATTN_NAME attn_avx512_bf16_body
#define TK_SCORES(q, K, hd, n, sc, s) scores16_avx512(TK_BF16, q, K, hd, n, sc, s)
#define TK_PV(a, c, s, V, n, hd) pv16_avx512(TK_BF16, a, c, s, V, n, hd)
#define TK_ATTN_TILE(...) attn_tile16_avx512(TK_BF16, __VA_ARGS__)
#include "tk_attn_body.h"
#undef TK_ATTN_NAME
#undef TK_SCORES
#undef TK_PV
#undef TK_ATTN_TILE
#undef TK_ATTN_TILE_MIN
#undef TK_ATTN_ATTR
#undef TK_KV_T
#undef TK_EXPS
TK_ATTN_WRAPT(attn_avx512_f32, attn_avx512_f32_body, TK_TARGET_AVX512, float)
TK_ATTN_WRAP(attn_avx512_f16, attn_avx512_f16_body, TK_TARGET_AVX512)
TK_ATTN_WRAP(attn_avx512_bf16, attn_avx512_bf16_body, TK_TARGET_AVX512)
#endif

// AVX-512 machines run the 16-lane bodies: half the instructions per key
// row of the AVX2 ones, whose loads and FMAs bound decode attention.
void tk_attn_task(int isa, int kvtype, float *out, const float *q,
                  const void *K, const void *V, int heads, int kv_heads,
                  int block, int hd, const int32_t *table, int qstart,
                  int numq, int ctx, int kvh, int i0, int i1, float scale,
                  float *scratch, int win) {
#define TK_ATTN_ARGS                                                       \
  out, q, K, V, heads, kv_heads, block, hd, table, qstart, numq, ctx, kvh, \
      i0, i1, scale, scratch
#if TK_X86
  if (isa == TK_AVX512) {
    switch (kvtype) {
      case TK_F16: attn_avx512_f16(TK_ATTN_ARGS, win); return;
      case TK_BF16: attn_avx512_bf16(TK_ATTN_ARGS, win); return;
      default: attn_avx512_f32(TK_ATTN_ARGS, win); return;
    }
  }
  if (isa != TK_PORTABLE) {
    switch (kvtype) {
      case TK_F16: attn_avx2_f16(TK_ATTN_ARGS, win); return;
      case TK_BF16: attn_avx2_bf16(TK_ATTN_ARGS, win); return;
      default: attn_avx2(TK_ATTN_ARGS, win); return;
    }
  }
#endif
  (void)isa;
  switch (kvtype) {
    case TK_F16: attn_portable_f16(TK_ATTN_ARGS, win); return;
    case TK_BF16: attn_portable_bf16(TK_ATTN_ARGS, win); return;
    default: attn_portable(TK_ATTN_ARGS, win); return;
  }
}

void tk_attn_tail(int isa, int kvtype, float *out, const float *q,
                  const void *K, const void *V, int heads, int kv_heads,
                  int block, int hd, const int32_t *table, int qstart,
                  int numq, int ctx, int kvh, int i0, int i1, float scale,
                  float *scratch, int b0, float *state, int win) {
#if TK_X86
  if (isa == TK_AVX512) {
    switch (kvtype) {
      case TK_F16: attn_avx512_f16_tail(TK_ATTN_ARGS, b0, state, win); return;
      case TK_BF16: attn_avx512_bf16_tail(TK_ATTN_ARGS, b0, state, win); return;
      default: attn_avx512_f32_tail(TK_ATTN_ARGS, b0, state, win); return;
    }
  }
  if (isa != TK_PORTABLE) {
    switch (kvtype) {
      case TK_F16: attn_avx2_f16_tail(TK_ATTN_ARGS, b0, state, win); return;
      case TK_BF16: attn_avx2_bf16_tail(TK_ATTN_ARGS, b0, state, win); return;
      default: attn_tail_avx2(TK_ATTN_ARGS, b0, state, win); return;
    }
  }
#endif
  (void)isa;
  switch (kvtype) {
    case TK_F16: attn_portable_f16_tail(TK_ATTN_ARGS, b0, state, win); return;
    case TK_BF16: attn_portable_bf16_tail(TK_ATTN_ARGS, b0, state, win); return;
    default: attn_tail_portable(TK_ATTN_ARGS, b0, state, win); return;
  }
#undef TK_ATTN_ARGS
}

// ---- KV write: float rows rounded into a 16-bit cache ----

// f32_to_f16 rounds to the nearest half, ties to even; beyond the half
// range is ±Inf, NaN stays a quiet NaN (internal/half.F32ToF16 exactly).
static inline uint16_t f32_to_f16(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  const uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
  const int32_t exp = (int32_t)((b >> 23) & 0xffu);
  const uint32_t man = b & 0x7fffffu;
  if (exp == 0xff) return sign | (man ? 0x7e00u : 0x7c00u);
  const int32_t e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00u;
  if (e <= 0) {  // subnormal half (or zero): shift the whole mantissa in
    if (e < -10) return sign;
    const uint32_t m = man | 0x800000u, shift = (uint32_t)(14 - e);
    uint32_t h = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (h & 1))) h++;
    return sign | (uint16_t)h;
  }
  uint32_t h = (uint32_t)e << 10 | man >> 13;
  const uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;  // may carry to Inf
  return sign | (uint16_t)h;
}

// f32_to_bf16 rounds to the nearest bfloat16, ties to even; NaN stays a
// quiet NaN (internal/half.F32ToBF16 exactly).
static inline uint16_t f32_to_bf16(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(b >> 16) | 0x40;
  b += 0x7fffu + ((b >> 16) & 1);
  return (uint16_t)(b >> 16);
}

static void cvt16_portable(int kt, uint16_t *dst, const float *src, int n) {
  for (int i = 0; i < n; i++)
    dst[i] = kt == TK_F16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
}

#if TK_X86
// bf16x8_avx2 rounds eight floats to bfloat16 as f32_to_bf16 does, as
// eight 32-bit lanes holding the 16-bit results.
TK_INLINE TK_TARGET_AVX2 __m256i bf16x8_avx2(__m256 x) {
  const __m256i b = _mm256_castps_si256(x);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(
      _mm256_add_epi32(b, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_cmpgt_epi32(
      _mm256_and_si256(b, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(r, qnan, nan);
}

static TK_TARGET_AVX2 void cvt16_avx2(int kt, uint16_t *dst, const float *src,
                                      int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    __m128i h;
    if (kt == TK_F16) {
      h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      const __m256i w = bf16x8_avx2(x);
      // Pack the eight 32-bit lanes (each < 2^16) to 16 bits, in order.
      h = _mm_packus_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    }
    _mm_storeu_si128((__m128i *)(void *)(dst + i), h);
  }
  cvt16_portable(kt, dst + i, src + i, n - i);
}

static TK_TARGET_AVX512 void cvt16_avx512(int kt, uint16_t *dst,
                                          const float *src, int n) {
  int i = 0;
  if (kt == TK_F16) {
    for (; i + 16 <= n; i += 16)
      _mm256_storeu_si256((__m256i *)(void *)(dst + i),
                          _mm512_cvtps_ph(_mm512_loadu_ps(src + i),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  cvt16_avx2(kt, dst + i, src + i, n - i);
}
#endif

void tk_kv_write16(int isa, int kvtype, uint16_t *K, uint16_t *V,
                   const float *k, const float *v, const int32_t *pos, int n,
                   const int32_t *table, int kv_heads, int block, int hd) {
  const size_t row = (size_t)kv_heads * hd;
  for (int i = 0; i < n; i++) {
    const int p = pos[i];
    const size_t blk = (size_t)table[p / block], slot = (size_t)(p % block);
    for (int h = 0; h < kv_heads; h++) {
      const size_t dst = ((blk * kv_heads + h) * block + slot) * hd;
      const size_t src = (size_t)i * row + (size_t)h * hd;
#if TK_X86
      if (isa == TK_AVX512) {
        cvt16_avx512(kvtype, K + dst, k + src, hd);
        cvt16_avx512(kvtype, V + dst, v + src, hd);
        continue;
      }
      if (isa == TK_AVX2) {
        cvt16_avx2(kvtype, K + dst, k + src, hd);
        cvt16_avx2(kvtype, V + dst, v + src, hd);
        continue;
      }
#endif
      (void)isa;
      cvt16_portable(kvtype, K + dst, k + src, hd);
      cvt16_portable(kvtype, V + dst, v + src, hd);
    }
  }
}
