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

// scores_avx2: s[j] = scale·(q·K[j]) for j < n, eight positions at a time
// (eight dot-product accumulators, one transpose-add), returning the max.
static inline TK_TARGET_AVX2 float scores_avx2(const float *q, const float *K,
                                               int hd, int n, float scale,
                                               float *s) {
  const int hd8 = hd & ~7;
  const __m256 sc = _mm256_set1_ps(scale);
  __m256 bmv = _mm256_set1_ps(-FLT_MAX);
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const float *Kj = K + (size_t)j * hd;
    __m256 a[8];
    for (int u = 0; u < 8; u++) a[u] = _mm256_setzero_ps();
    for (int d = 0; d < hd8; d += 8) {
      __m256 qv = _mm256_loadu_ps(q + d);
      for (int u = 0; u < 8; u++)
        a[u] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(Kj + (size_t)u * hd + d), a[u]);
    }
    __m256 v = hsum8x8(a);
    if (hd8 < hd) {  // head size not a multiple of 8
      float tail[8];
      for (int u = 0; u < 8; u++) {
        float t = 0;
        for (int d = hd8; d < hd; d++) t += q[d] * Kj[(size_t)u * hd + d];
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
    s[j] = dot_avx2(q, K + (size_t)j * hd, hd) * scale;
    if (s[j] > bm) bm = s[j];
  }
  return bm;
}

// pv_avx2: a = a*c + Σ_{j<n} s[j]·V[j], 32 columns at a time held in
// registers across all n rows (one load and store of a per block).
static inline TK_TARGET_AVX2 void pv_avx2(float *a, float c, const float *s,
                                          const float *V, int n, int hd) {
  const __m256 cv = _mm256_set1_ps(c);
  int d = 0;
  for (; d + 32 <= hd; d += 32) {
    __m256 a0 = _mm256_mul_ps(cv, _mm256_loadu_ps(a + d));
    __m256 a1 = _mm256_mul_ps(cv, _mm256_loadu_ps(a + d + 8));
    __m256 a2 = _mm256_mul_ps(cv, _mm256_loadu_ps(a + d + 16));
    __m256 a3 = _mm256_mul_ps(cv, _mm256_loadu_ps(a + d + 24));
    for (int j = 0; j < n; j++) {
      const float *v = V + (size_t)j * hd + d;
      __m256 p = _mm256_broadcast_ss(s + j);
      a0 = _mm256_fmadd_ps(p, _mm256_loadu_ps(v), a0);
      a1 = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 8), a1);
      a2 = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 16), a2);
      a3 = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 24), a3);
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
                           _mm256_loadu_ps(V + (size_t)j * hd + d), a0);
    _mm256_storeu_ps(a + d, a0);
  }
  for (; d < hd; d++) {
    float t = a[d] * c;
    for (int j = 0; j < n; j++) t += s[j] * V[(size_t)j * hd + d];
    a[d] = t;
  }
}
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

void tk_rope_freqs(float *x, const int32_t *pos, int rows, int heads, int hd,
                   const double *freqs, int neox) {
  const int half = hd / 2;
  for (int i = 0; i < half; i++) {
    // NEOX (GPT-NeoX, Hugging Face rotate_half) pairs element i with i+hd/2;
    // the GGUF llama layout pairs adjacent elements.
    const int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
    for (int r = 0; r < rows; r++) {
      float *xr = x + (size_t)r * heads * hd;
      double ang = (double)pos[r] * freqs[i];
      float c = (float)cos(ang), s = (float)sin(ang);
      for (int h = 0; h < heads; h++) {
        float *v = xr + (size_t)h * hd;
        float a = v[ia], b = v[ib];
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

#define TK_ATTN_NAME attn_portable_body
#define TK_ATTN_ATTR
#define TK_SCORES scores_portable
#define TK_PV pv_portable
#define TK_EXPS exps_sub_portable
#include "tk_attn_body.h"
#undef TK_ATTN_NAME
#undef TK_ATTN_ATTR
#undef TK_SCORES
#undef TK_PV
#undef TK_EXPS

// The plain task and the cascade tail of this path: one body, inlined into
// each with its own constants.
static void attn_portable(
    float *out, const float *q, const float *K, const float *V, int heads,
    int kv_heads, int block, int hd, const int32_t *table, int qstart, int numq,
    int ctx, int kvh, int i0, int i1, float scale, float *scratch) {
  attn_portable_body(out, q, K, V, heads, kv_heads, block, hd, table, qstart, numq,
      ctx, kvh, i0, i1, scale, scratch, 0, NULL, 0);
}

static void attn_tail_portable(
    float *out, const float *q, const float *K, const float *V, int heads,
    int kv_heads, int block, int hd, const int32_t *table, int qstart, int numq,
    int ctx, int kvh, int i0, int i1, float scale, float *scratch, int b0,
    float *state) {
  attn_portable_body(out, q, K, V, heads, kv_heads, block, hd, table, qstart, numq,
      ctx, kvh, i0, i1, scale, scratch, b0, state, 1);
}

#if TK_X86
#define TK_ATTN_NAME attn_avx2_body
#define TK_ATTN_ATTR TK_TARGET_AVX2
#define TK_SCORES scores_avx2
#define TK_PV pv_avx2
#define TK_EXPS exps_sub_avx2
#include "tk_attn_body.h"
#undef TK_ATTN_NAME
#undef TK_ATTN_ATTR
#undef TK_SCORES
#undef TK_PV
#undef TK_EXPS

// The plain task and the cascade tail of this path: one body, inlined into
// each with its own constants.
static TK_TARGET_AVX2 void attn_avx2(
    float *out, const float *q, const float *K, const float *V, int heads,
    int kv_heads, int block, int hd, const int32_t *table, int qstart, int numq,
    int ctx, int kvh, int i0, int i1, float scale, float *scratch) {
  attn_avx2_body(out, q, K, V, heads, kv_heads, block, hd, table, qstart, numq,
      ctx, kvh, i0, i1, scale, scratch, 0, NULL, 0);
}

static TK_TARGET_AVX2 void attn_tail_avx2(
    float *out, const float *q, const float *K, const float *V, int heads,
    int kv_heads, int block, int hd, const int32_t *table, int qstart, int numq,
    int ctx, int kvh, int i0, int i1, float scale, float *scratch, int b0,
    float *state) {
  attn_avx2_body(out, q, K, V, heads, kv_heads, block, hd, table, qstart, numq,
      ctx, kvh, i0, i1, scale, scratch, b0, state, 1);
}
#endif

void tk_attn_task(int isa, float *out, const float *q, const float *K,
                  const float *V, int heads, int kv_heads, int block, int hd,
                  const int32_t *table, int qstart, int numq, int ctx,
                  int kvh, int i0, int i1, float scale, float *scratch) {
#if TK_X86
  // AVX-512 machines run the AVX2 body (attention is a small share of time).
  if (isa != TK_PORTABLE) {
    attn_avx2(out, q, K, V, heads, kv_heads, block, hd, table, qstart, numq, ctx,
              kvh, i0, i1, scale, scratch);
    return;
  }
#endif
  (void)isa;
  attn_portable(out, q, K, V, heads, kv_heads, block, hd, table, qstart, numq,
                ctx, kvh, i0, i1, scale, scratch);
}

void tk_attn_tail(int isa, float *out, const float *q, const float *K,
                  const float *V, int heads, int kv_heads, int block, int hd,
                  const int32_t *table, int qstart, int numq, int ctx,
                  int kvh, int i0, int i1, float scale, float *scratch,
                  int b0, float *state) {
#if TK_X86
  if (isa != TK_PORTABLE) {
    attn_tail_avx2(out, q, K, V, heads, kv_heads, block, hd, table, qstart,
                   numq, ctx, kvh, i0, i1, scale, scratch, b0, state);
    return;
  }
#endif
  (void)isa;
  attn_tail_portable(out, q, K, V, heads, kv_heads, block, hd, table, qstart,
                     numq, ctx, kvh, i0, i1, scale, scratch, b0, state);
}
