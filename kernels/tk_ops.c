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
// exp8_avx2 is e^x for 8 floats: x = n·ln2 + r with |r| ≤ ln2/2, e^r by a
// degree-6 polynomial (Taylor, error < 2e-7 relative on that interval),
// 2^n built in the exponent field. Inputs below −87 flush to 0 (the
// softmax weights that small are < 1e-37 of the largest). About 2 ulp.
static inline TK_TARGET_AVX2 __m256 exp8_avx2(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.0f), hi = _mm256_set1_ps(88.0f);
  __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

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

// y = y*c + p*v
static inline TK_TARGET_AVX2 void scale_axpy_avx2(float *y, float c, float p,
                                           const float *v, int n) {
  __m256 cv = _mm256_set1_ps(c), pv = _mm256_set1_ps(p);
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + i),
                                            _mm256_mul_ps(cv, _mm256_loadu_ps(y + i))));
  for (; i < n; i++) y[i] = y[i] * c + p * v[i];
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
  for (int r = 0; r < rows; r++) {
    double p = (double)pos[r] * (double)freq_scale;
    float *xr = x + (size_t)r * heads * hd;
    for (int i = 0; i < hd / 2; i++) {
      // Angles in double: positions reach 1e5 and float angles lose the
      // low-order radians there.
      double ang = p * pow((double)theta, -2.0 * i / (double)hd);
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

void tk_silu_mul(float *y, const float *gate, const float *up, long n) {
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

long tk_argmax(const float *x, long n) {
  long best = 0;
  for (long i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
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

static inline void scale_axpy_portable(float *y, float c, float p,
                                       const float *v, int n) {
  for (int i = 0; i < n; i++) y[i] = y[i] * c + p * v[i];
}

#define TK_ATTN_NAME attn_portable
#define TK_ATTN_ATTR
#define TK_DOT dot_portable
#define TK_AXPY scale_axpy_portable
#define TK_EXPS exps_sub_portable
#include "tk_attn_body.h"
#undef TK_ATTN_NAME
#undef TK_ATTN_ATTR
#undef TK_DOT
#undef TK_AXPY
#undef TK_EXPS

#if TK_X86
#define TK_ATTN_NAME attn_avx2
#define TK_ATTN_ATTR TK_TARGET_AVX2
#define TK_DOT dot_avx2
#define TK_AXPY scale_axpy_avx2
#define TK_EXPS exps_sub_avx2
#include "tk_attn_body.h"
#undef TK_ATTN_NAME
#undef TK_ATTN_ATTR
#undef TK_DOT
#undef TK_AXPY
#undef TK_EXPS
#endif

void tk_attn_task(int isa, float *out, const float *q, const float *K,
                  const float *V, int heads, int kv_heads, int block, int hd,
                  const int32_t *table, int qstart, int numq, int ctx,
                  int kvh, int i0, int i1, float scale, float *scratch) {
#if TK_X86
  // AVX-512 machines run the AVX2 body (attention is a small share of time).
  if (isa != TK_PORTABLE) {
    attn_avx2(out, q, K, V, heads, kv_heads, block, hd, table, qstart, numq,
              ctx, kvh, i0, i1, scale, scratch);
    return;
  }
#endif
  (void)isa;
  attn_portable(out, q, K, V, heads, kv_heads, block, hd, table, qstart, numq,
                ctx, kvh, i0, i1, scale, scratch);
}
