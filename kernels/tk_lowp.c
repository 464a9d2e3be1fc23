// tk_lowp.c: the low-precision-activation kernels. BF16 weights meet
// activations rounded to bf16 in vdpbf16ps (AVX512-BF16 only); every block
// type (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K) meets activations
// quantised to int8 in integer dot products (AVX512-VNNI, AVX-VNNI, AVX2
// maddubs, portable C).
// Activations are converted once per MatMul (tk_x_bf16, tk_quant_act);
// weights are read straight from their stored bytes.
#include "tk_internal.h"

#if TK_X86
#define TK_TARGET_BF16                                                   \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16," \
                        "avx2,fma,f16c")))
#define TK_TARGET_VNNI512                                                \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni," \
                        "avx2,fma,f16c")))
#define TK_TARGET_AVXVNNI __attribute__((target("avxvnni,avx2,fma,f16c")))
#endif

int tk_cpu_features(void) {
  int f = 0;
#if TK_X86
  __builtin_cpu_init();
  if (!(tk_cpu_paths() & (1 << TK_AVX2))) return 0;
  int avx512 = (tk_cpu_paths() & (1 << TK_AVX512)) != 0;
  if (avx512 && __builtin_cpu_supports("avx512bf16")) f |= TK_FEAT_BF16;
  if (avx512 && __builtin_cpu_supports("avx512vnni")) f |= TK_FEAT_VNNI512;
  if (__builtin_cpu_supports("avxvnni")) f |= TK_FEAT_AVXVNNI;
#endif
  return f;
}

// ---- int8 activations ----

int tk_act_block(int wtype) {
  switch (wtype) {
    case TK_Q8_0: case TK_Q4_0: case TK_Q4_1: case TK_Q5_0: case TK_Q5_1:
      return TK_QK;
    case TK_Q2_K: case TK_Q3_K: case TK_Q4_K: case TK_Q5_K: case TK_Q6_K:
      return TK_QKK;
  }
  return 0;
}

// act_has_min reports a legacy type whose weights are d·q + m: its dot
// needs the activation block's sum d_x·Σq_x (a float in aux) in place of
// the integer correction.
static int act_has_min(int wtype) { return wtype == TK_Q4_1 || wtype == TK_Q5_1; }

// act_layout carves the activation buffer: qs int8 [m][k], then d float
// [m][k/B], then aux: int32 corr [m][k/32] (legacy), float pairs (d, d·Σq)
// [m][k/32][2] (Q4_1, Q5_1: one 16-byte load gives a block pair's both
// terms, the order of the weight blocks' (d, m) pairs) or int16 bsums
// [m][k/16] (K-quants), each region 64-byte aligned.
typedef struct {
  int8_t *qs;
  float *d;
  void *aux;
} act_t;

static size_t up64(size_t n) { return (n + 63) / 64 * 64; }

static act_t act_layout(int wtype, int m, int k, void *buf) {
  int be = tk_act_block(wtype);
  act_t a;
  uint8_t *p = (uint8_t *)buf;
  a.qs = (int8_t *)p;
  p += up64((size_t)m * k);
  a.d = (float *)(void *)p;
  p += up64(4 * (size_t)m * (k / be));
  a.aux = p;
  return a;
}

size_t tk_act_bytes(int wtype, int m, int k) {
  int be = tk_act_block(wtype);
  size_t aux = be == TK_QKK          ? 2 * (size_t)m * (k / 16)
               : act_has_min(wtype) ? 8 * (size_t)m * (k / TK_QK)
                                    : 4 * (size_t)m * (k / TK_QK);
  return up64((size_t)m * k) + up64(4 * (size_t)m * (k / be)) + up64(aux);
}

// act_off is the constant the integer dot must subtract per activation
// unit of Σx for a legacy block: the bias of its unsigned quants.
static int act_off(int lp, int wtype) {
  switch (wtype) {
    case TK_Q8_0:
      return lp >= TK_LP_AVXVNNI ? 128 : 0;
    case TK_Q4_0:
      return 8;
    case TK_Q5_0:
      return 16;
  }
  return 0;
}

// quant_block_portable quantises n (32 or 256) floats: d = max|x|/127, q =
// round-to-nearest-even(x·(127/max|x|)) (all zero when max|x| = 0), and
// the sums of q per 16.
static void quant_block_portable(const float *x, int n, int8_t *q, float *d,
                                 int32_t *sum16) {
  float amax = 0;
  for (int i = 0; i < n; i++) {
    float a = x[i] < 0 ? -x[i] : x[i];
    amax = a > amax ? a : amax;
  }
  *d = amax / 127.0f;
  float id = amax != 0 ? 127.0f / amax : 0.0f;
  for (int i = 0; i < n; i++) {
    // x·id is within ±127 (and a tie rounds to even, as vcvtps2dq does).
    float v = x[i] * id;
    float f = __builtin_nearbyintf(v);
    q[i] = (int8_t)(int)f;
  }
  for (int g = 0; g < n / 16; g++) {
    int32_t s = 0;
    for (int i = 0; i < 16; i++) s += q[16 * g + i];
    sum16[g] = s;
  }
}

#if TK_X86
TK_INLINE TK_TARGET_AVX2 int32_t hsum_epi32_avx2(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// quant_block_avx2 is quant_block_portable in registers (the same
// operations, so the same bytes).
static TK_TARGET_AVX2 void quant_block_avx2(const float *x, int n, int8_t *q,
                                            float *d, int32_t *sum16) {
  const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 mx = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) mx = _mm256_max_ps(mx, _mm256_and_ps(abs, _mm256_loadu_ps(x + i)));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  float amax = _mm_cvtss_f32(m4);
  *d = amax / 127.0f;
  __m256 id = _mm256_set1_ps(amax != 0 ? 127.0f / amax : 0.0f);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int i = 0; i < n; i += 32) {
    __m256i v[4];
    for (int u = 0; u < 4; u++) v[u] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * u), id));
    sum16[i / 16] = hsum_epi32_avx2(_mm256_add_epi32(v[0], v[1]));
    sum16[i / 16 + 1] = hsum_epi32_avx2(_mm256_add_epi32(v[2], v[3]));
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    _mm256_storeu_si256((__m256i *)(void *)(q + i), _mm256_permutevar8x32_epi32(p, perm));
  }
}
#endif

void tk_quant_act(int lp, int wtype, const float *x, int m, int k, int r0,
                  int r1, void *buf) {
  act_t a = act_layout(wtype, m, k, buf);
  const int be = tk_act_block(wtype), nb = k / be, off = act_off(lp, wtype);
  int32_t s16[TK_QKK / 16];
  for (int r = r0; r < r1; r++) {
    for (int b = 0; b < nb; b++) {
      const float *xb = x + (size_t)r * k + (size_t)b * be;
      int8_t *q = a.qs + (size_t)r * k + (size_t)b * be;
      float *d = a.d + (size_t)r * nb + b;
#if TK_X86
      if (lp != TK_LP_PORTABLE)
        quant_block_avx2(xb, be, q, d, s16);
      else
#endif
        quant_block_portable(xb, be, q, d, s16);
      if (be == TK_QKK) {
        int16_t *bs = (int16_t *)a.aux + (size_t)r * (k / 16) + 16 * (size_t)b;
        for (int g = 0; g < 16; g++) bs[g] = (int16_t)s16[g];
      } else if (act_has_min(wtype)) {
        float *p = (float *)a.aux + 2 * ((size_t)r * nb + b);
        p[0] = *d;
        p[1] = *d * (float)(s16[0] + s16[1]);
      } else {
        ((int32_t *)a.aux)[(size_t)r * nb + b] = -off * (s16[0] + s16[1]);
      }
    }
  }
}

// ---- portable integer dots (the reference of the scheme) ----

// kq_off is the offset a K-quant's unsigned quants carry (weight ∝ q −
// off), 0 for the types with mins.
static int kq_off(int wtype) {
  return wtype == TK_Q6_K ? 32 : wtype == TK_Q3_K ? 4 : 0;
}

// kq_int unpacks a K-quant super-block into integer quants q[256] (before
// the kq_off offset), per-16 scales sc[16] and per-16 mins mn[16]
// (Q2_K/Q4_K/Q5_K) and its float scales.
static void kq_int(int wtype, const uint8_t *b, int q[256], int sc[16],
                   int mn[16], float *d, float *dmin) {
  if (wtype == TK_Q2_K || wtype == TK_Q3_K) {
    // Two halves of 128, each four 2-bit planes of 32 bytes; element
    // 128n + 32j + l is plane j of byte 32n + l (Q3_K: its third bit is
    // bit 4n + j of hmask[l]). Sub-block i of 16 has scale byte i.
    const int q3 = wtype == TK_Q3_K;
    const uint8_t *qs = b + (q3 ? 32 : 16), *s = q3 ? b + 96 : b;
    *d = tk_f16_to_f32(tk_load_u16(b + (q3 ? 108 : 80)));
    *dmin = q3 ? 0 : tk_f16_to_f32(tk_load_u16(b + 82));
    for (int g = 0; g < 8; g++)
      for (int l = 0; l < 32; l++) {
        int v = (qs[32 * (g / 4) + l] >> (2 * (g % 4))) & 3;
        if (q3) v |= ((b[l] >> g) & 1) << 2;
        q[32 * g + l] = v;
      }
    for (int i = 0; i < 16; i++) {
      if (q3) {
        int lo = i < 8 ? s[i] & 0xf : s[i - 8] >> 4;
        int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        sc[i] = (lo | hi << 4) - 32, mn[i] = 0;
      } else {
        sc[i] = s[i] & 0xf, mn[i] = s[i] >> 4;
      }
    }
    return;
  }
  if (wtype == TK_Q6_K) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *s = (const int8_t *)(const void *)(b + 192);
    *d = tk_f16_to_f32(tk_load_u16(b + 208));
    *dmin = 0;
    for (int n = 0; n < 2; n++)
      for (int kk = 0; kk < 4; kk++)
        for (int l = 0; l < 32; l++) {
          int lo = (ql[64 * n + 32 * (kk & 1) + l] >> (4 * (kk >> 1))) & 0xf;
          int hi = (qh[32 * n + l] >> (2 * kk)) & 3;
          q[128 * n + 32 * kk + l] = lo | hi << 4;
        }
    for (int i = 0; i < 16; i++) sc[i] = s[i], mn[i] = 0;
    return;
  }
  int q5 = wtype == TK_Q5_K;
  *d = tk_f16_to_f32(tk_load_u16(b));
  *dmin = tk_f16_to_f32(tk_load_u16(b + 2));
  const uint8_t *s = b + 4, *qh = b + 16, *qs = b + (q5 ? 48 : 16);
  for (int i = 0; i < 8; i++) {
    int scv, mv;
    if (i < 4) {
      scv = s[i] & 63;
      mv = s[i + 4] & 63;
    } else {
      scv = (s[i + 4] & 0xf) | ((s[i - 4] >> 6) << 4);
      mv = (s[i + 4] >> 4) | ((s[i] >> 6) << 4);
    }
    sc[2 * i] = sc[2 * i + 1] = scv;
    mn[2 * i] = mn[2 * i + 1] = mv;
    for (int l = 0; l < 32; l++) {
      int v = (qs[32 * (i / 2) + l] >> (4 * (i % 2))) & 0xf;
      if (q5) v |= ((qh[l] >> i) & 1) << 4;
      q[32 * i + l] = v;
    }
  }
}

static void qmm_portable(int wtype, const uint8_t *w, size_t wrow, act_t a,
                         int m, int k, float *y, long ldy, int n0, int n1) {
  const int be = tk_act_block(wtype), nb = k / be;
  const size_t bb = tk_blk_bytes(wtype);
  for (int n = n0; n < n1; n++) {
    const uint8_t *row = w + (size_t)n * wrow;
    for (int r = 0; r < m; r++) {
      const int8_t *xq = a.qs + (size_t)r * k;
      float acc = 0;
      for (int b = 0; b < nb; b++) {
        const uint8_t *blk = row + (size_t)b * bb;
        const int8_t *xb = xq + (size_t)b * be;
        float dx = a.d[(size_t)r * nb + b];
        if (be == TK_QK) {
          int32_t s = 0;
          for (int l = 0; l < 32; l++) {
            int v;
            if (wtype == TK_Q8_0) {
              v = (int8_t)blk[2 + l];
            } else {
              // Q4_1/Q5_1 keep their quants unsigned (the min is added
              // below); Q4_0/Q5_0 centre them.
              int q5 = wtype == TK_Q5_0 || wtype == TK_Q5_1, mn = act_has_min(wtype);
              const uint8_t *qs = blk + 2 + 2 * mn + (q5 ? 4 : 0);
              v = l < 16 ? qs[l] & 0xf : qs[l - 16] >> 4;
              if (q5) {
                uint32_t qh;
                memcpy(&qh, blk + 2 + 2 * mn, 4);
                v |= (int)((qh >> l) & 1) << 4;
              }
              if (!mn) v -= q5 ? 16 : 8;
            }
            s += v * xb[l];
          }
          acc += tk_f16_to_f32(tk_load_u16(blk)) * dx * (float)s;
          if (act_has_min(wtype))
            acc += tk_f16_to_f32(tk_load_u16(blk + 2)) * ((const float *)a.aux)[2 * ((size_t)r * nb + b) + 1];
        } else {
          int q[256], sc[16], mn[16];
          float d, dmin;
          kq_int(wtype, blk, q, sc, mn, &d, &dmin);
          const int16_t *bs = (const int16_t *)a.aux + (size_t)r * (k / 16) + 16 * (size_t)b;
          int32_t s = 0, smin = 0;
          for (int i = 0; i < 16; i++) {
            int32_t t = 0;
            for (int l = 0; l < 16; l++) t += q[16 * i + l] * xb[16 * i + l];
            t -= kq_off(wtype) * bs[i];
            s += sc[i] * t;
            smin += mn[i] * bs[i];
          }
          acc += d * dx * (float)s - dmin * dx * (float)smin;
        }
      }
      y[(size_t)r * ldy + n] = acc;
    }
  }
}

#if TK_X86
// ---- the SIMD levels ----

static inline uint32_t lp_load_u32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

#define LPF(name) name##_avx2
#define LP_TARGET TK_TARGET_AVX2
#define LP_DOTB(acc, u, s) \
  _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)))
#define LP_DOTW(acc, a, b) _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
#define LP_XOR8 0
#define LP_NMAX 2
#include "tk_lowp_body.h"

#define LPF(name) name##_avxvnni
#define LP_TARGET TK_TARGET_AVXVNNI
#define LP_DOTB(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#define LP_DOTW(acc, a, b) _mm256_dpwssd_avx_epi32(acc, a, b)
#define LP_XOR8 1
#define LP_NMAX 2
#include "tk_lowp_body.h"

#define LPF(name) name##_vnni512
#define LP_TARGET TK_TARGET_VNNI512
#define LP_DOTB(acc, u, s) _mm256_dpbusd_epi32(acc, u, s)
#define LP_DOTW(acc, a, b) _mm256_dpwssd_epi32(acc, a, b)
#define LP_XOR8 1
#define LP_NMAX 3
#define LP_ZMM 1
#include "tk_lowp_body.h"
#endif

void tk_qmm_tile(int lp, int wtype, const uint8_t *w, size_t wrow,
                 const void *act, int m, float *y, long ldy, int k, int n0,
                 int n1) {
  act_t a = act_layout(wtype, m, k, (void *)act);
#if TK_X86
  switch (lp) {
    case TK_LP_VNNI512:
      qmm_vnni512(wtype, w, wrow, a.qs, a.d, a.aux, m, k, y, ldy, n0, n1);
      return;
    case TK_LP_AVXVNNI:
      qmm_avxvnni(wtype, w, wrow, a.qs, a.d, a.aux, m, k, y, ldy, n0, n1);
      return;
    case TK_LP_AVX2:
      qmm_avx2(wtype, w, wrow, a.qs, a.d, a.aux, m, k, y, ldy, n0, n1);
      return;
  }
#endif
  qmm_portable(wtype, w, wrow, a, m, k, y, ldy, n0, n1);
}

// ---- bf16 activations (AVX512-BF16) ----

#if TK_X86
// tk_x_bf16: vcvtne2ps2bf16 rounds to nearest even and flushes denormal
// inputs and results to zero.
static TK_TARGET_BF16 void x_bf16(const float *x, int m, int k, int kp,
                                  uint16_t *xb) {
  for (int r = 0; r < m; r++) {
    const float *xr = x + (size_t)r * k;
    uint16_t *o = xb + (size_t)r * kp;
    for (int c = 0; c < kp; c += 32) {
      int n0 = k - c, n1 = k - c - 16;
      __mmask16 m0 = n0 >= 16 ? 0xffff : n0 > 0 ? (__mmask16)((1u << n0) - 1) : 0;
      __mmask16 m1 = n1 >= 16 ? 0xffff : n1 > 0 ? (__mmask16)((1u << n1) - 1) : 0;
      __m512 lo = _mm512_maskz_loadu_ps(m0, xr + c), hi = _mm512_maskz_loadu_ps(m1, xr + c + 16);
      _mm512_storeu_si512((void *)(o + c), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
}

// mm_bf16 computes the M x N tile y[r][n+j] over columns [c0, c0+len) of
// bf16 weight rows (wr[j]) and bf16 x rows (kp apart, zero padded): per 32
// columns one vdpbf16ps per pair, 16 products each.
TK_INLINE TK_TARGET_BF16 void mm_bf16(const int M, const int N,
                                      const uint16_t *const *wr,
                                      const uint16_t *x, int kp, int c0,
                                      int len, float *y, long ldy, int n,
                                      int acc) {
  __m512 a[4][4];
  for (int r = 0; r < M; r++)
    for (int j = 0; j < 4; j++) a[r][j] = _mm512_setzero_ps();
  int c = 0;
  if (N == 1)  // one weight row: four chains per x row hide vdpbf16ps latency
    for (; c + 128 <= len; c += 128)
      for (int u = 0; u < 4; u++) {
        __m512i wv = _mm512_loadu_si512((const void *)(wr[0] + c0 + c + 32 * u));
        for (int r = 0; r < M; r++)
          a[r][u] = _mm512_dpbf16_ps(a[r][u], (__m512bh)wv,
                                     (__m512bh)_mm512_loadu_si512((const void *)(x + (size_t)r * kp + c0 + c + 32 * u)));
      }
  if (N == 1)
    for (int r = 0; r < M; r++) a[r][0] = _mm512_add_ps(_mm512_add_ps(a[r][0], a[r][1]), _mm512_add_ps(a[r][2], a[r][3]));
  for (; c + 32 <= len; c += 32) {
    __m512i xv[4];
    for (int r = 0; r < M; r++) xv[r] = _mm512_loadu_si512((const void *)(x + (size_t)r * kp + c0 + c));
    for (int j = 0; j < N; j++) {
      __m512i wv = _mm512_loadu_si512((const void *)(wr[j] + c0 + c));
      for (int r = 0; r < M; r++) a[r][j] = _mm512_dpbf16_ps(a[r][j], (__m512bh)wv, (__m512bh)xv[r]);
    }
  }
  if (c < len) {  // tail: masked weight loads; x is zero past k
    __mmask32 mk = (__mmask32)((1ull << (len - c)) - 1);
    __m512i xv[4];
    for (int r = 0; r < M; r++) xv[r] = _mm512_maskz_loadu_epi16(mk, x + (size_t)r * kp + c0 + c);
    for (int j = 0; j < N; j++) {
      __m512i wv = _mm512_maskz_loadu_epi16(mk, wr[j] + c0 + c);
      for (int r = 0; r < M; r++) a[r][j] = _mm512_dpbf16_ps(a[r][j], (__m512bh)wv, (__m512bh)xv[r]);
    }
  }
  if (N == 4) {
    // The 16 sums at once: 128-bit lane r of s holds y[r][n..n+3] (45
    // shuffles and adds where 16 reductions take 128).
    __m512 q[4];
    for (int r = 0; r < 4; r++) {
      if (r >= M) {
        q[r] = _mm512_setzero_ps();
        continue;
      }
      __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(a[r][0], a[r][1]), _mm512_unpackhi_ps(a[r][0], a[r][1]));
      __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(a[r][2], a[r][3]), _mm512_unpackhi_ps(a[r][2], a[r][3]));
      q[r] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t1))),
                           _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t1))));
    }
    __m512 y01 = _mm512_add_ps(_mm512_shuffle_f32x4(q[0], q[1], 0x44), _mm512_shuffle_f32x4(q[0], q[1], 0xee));
    __m512 y23 = _mm512_add_ps(_mm512_shuffle_f32x4(q[2], q[3], 0x44), _mm512_shuffle_f32x4(q[2], q[3], 0xee));
    __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(y01, y23, 0x88), _mm512_shuffle_f32x4(y01, y23, 0xdd));
    float t[16];
    _mm512_storeu_ps(t, s);
    for (int r = 0; r < M; r++) {
      float *d = y + (size_t)r * ldy + n;
      __m128 v = _mm_loadu_ps(t + 4 * r);
      _mm_storeu_ps(d, acc ? _mm_add_ps(v, _mm_loadu_ps(d)) : v);
    }
    return;
  }
  for (int r = 0; r < M; r++)
    for (int j = 0; j < N; j++) {
      float t = _mm512_reduce_add_ps(a[r][j]);
      float *d = y + (size_t)r * ldy + n + j;
      *d = acc ? *d + t : t;
    }
}

// gemv_bf16 computes y[r][n] for r < M ≤ 4 and n in [n0, n1): one weight
// row at a time over all of k, so the weights are one sequential stream,
// prefetched TK_STREAM_PF ahead (tk_pf_row; the depth chunks of mm_bf16_tile
// made a k = 8192 GEMV two strided passes at 0.56 of read bandwidth), and
// four chains per x row to hide the vdpbf16ps latency. x rows are kp
// apart and zero past k.
TK_INLINE TK_TARGET_BF16 void gemv_bf16(const int M, const uint8_t *w,
                                        size_t wrow, const uint16_t *x,
                                        int kp, float *y, long ldy, int k,
                                        int n0, int n1) {
  for (int n = n0; n < n1; n++) {
    const uint16_t *wr = (const uint16_t *)(const void *)(w + (size_t)n * wrow);
    tk_pf_row(w + (size_t)n * wrow, wrow);
    __m512 a[4][4];
    for (int r = 0; r < M; r++)
      for (int u = 0; u < 4; u++) a[r][u] = _mm512_setzero_ps();
    int c = 0;
    for (; c + 128 <= k; c += 128)
      for (int u = 0; u < 4; u++) {
        __m512i wv = _mm512_loadu_si512((const void *)(wr + c + 32 * u));
        for (int r = 0; r < M; r++)
          a[r][u] = _mm512_dpbf16_ps(a[r][u], (__m512bh)wv,
                                     (__m512bh)_mm512_loadu_si512((const void *)(x + (size_t)r * kp + c + 32 * u)));
      }
    for (; c < k; c += 32) {  // the last weight block masked: x is zero past k
      int left = k - c;
      __mmask32 mk = left >= 32 ? 0xffffffffu : (__mmask32)((1u << left) - 1);
      __m512i wv = _mm512_maskz_loadu_epi16(mk, wr + c);
      for (int r = 0; r < M; r++)
        a[r][0] = _mm512_dpbf16_ps(a[r][0], (__m512bh)wv, (__m512bh)_mm512_loadu_si512((const void *)(x + (size_t)r * kp + c)));
    }
    for (int r = 0; r < M; r++)
      y[(size_t)r * ldy + n] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[r][0], a[r][1]), _mm512_add_ps(a[r][2], a[r][3])));
  }
}

// gemv2_bf16 is gemv_bf16 for one row of x over the rows [n0, n1) split in
// two halves read side by side (see gemv2z in tk_lowp_body.h): two
// streams per core, each prefetched TK_GEMV2_PF ahead a line per line read.
TK_INLINE TK_TARGET_BF16 void gemv2_bf16(const uint8_t *w, size_t wrow, const uint16_t *x,
                                         float *y, int k, int n0, int n1) {
  const int h = (n1 - n0) / 2;
  for (int i = 0; i < h; i++) {
    const uint16_t *ra = (const uint16_t *)(const void *)(w + (size_t)(n0 + i) * wrow);
    const uint16_t *rb = (const uint16_t *)(const void *)(w + (size_t)(n0 + h + i) * wrow);
    __m512 a[4], b[4];
    for (int u = 0; u < 4; u++) a[u] = b[u] = _mm512_setzero_ps();
    int c = 0;
    for (; c + 128 <= k; c += 128) {
      for (int u = 0; u < 4; u++) {
        tk_pf_ahead(ra + c + 32 * u, 64);
        tk_pf_ahead(rb + c + 32 * u, 64);
        __m512bh xv = (__m512bh)_mm512_loadu_si512((const void *)(x + c + 32 * u));
        a[u] = _mm512_dpbf16_ps(a[u], (__m512bh)_mm512_loadu_si512((const void *)(ra + c + 32 * u)), xv);
        b[u] = _mm512_dpbf16_ps(b[u], (__m512bh)_mm512_loadu_si512((const void *)(rb + c + 32 * u)), xv);
      }
    }
    for (; c < k; c += 32) {  // the last weight block masked: x is zero past k
      int left = k - c;
      __mmask32 mk = left >= 32 ? 0xffffffffu : (__mmask32)((1u << left) - 1);
      __m512bh xv = (__m512bh)_mm512_loadu_si512((const void *)(x + c));
      a[0] = _mm512_dpbf16_ps(a[0], (__m512bh)_mm512_maskz_loadu_epi16(mk, ra + c), xv);
      b[0] = _mm512_dpbf16_ps(b[0], (__m512bh)_mm512_maskz_loadu_epi16(mk, rb + c), xv);
    }
    y[n0 + i] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
    y[n0 + h + i] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(b[0], b[1]), _mm512_add_ps(b[2], b[3])));
  }
  if (2 * h < n1 - n0) gemv_bf16(1, w, wrow, x, 0, y, 1, k, n0 + 2 * h, n1);
}

#define TK_BF16_KC 4096  // depth chunk: 4 weight rows' share (32 KiB) in L1

static TK_TARGET_BF16 void mm_bf16_tile(const uint8_t *w, size_t wrow,
                                        const uint16_t *xb, int kp, int m,
                                        float *y, long ldy, int k, int n0,
                                        int n1) {
  switch (m) {
    case 1:
      if (TK_GEMV2) gemv2_bf16(w, wrow, xb, y, k, n0, n1);
      else gemv_bf16(1, w, wrow, xb, kp, y, ldy, k, n0, n1);
      return;
    case 2: gemv_bf16(2, w, wrow, xb, kp, y, ldy, k, n0, n1); return;
    case 3: gemv_bf16(3, w, wrow, xb, kp, y, ldy, k, n0, n1); return;
    case 4: gemv_bf16(4, w, wrow, xb, kp, y, ldy, k, n0, n1); return;
  }
  for (int c0 = 0; c0 < k; c0 += TK_BF16_KC) {
    int len = k - c0 < TK_BF16_KC ? k - c0 : TK_BF16_KC, acc = c0 > 0;
    for (int n = n0; n < n1;) {
      // Four weight rows at a time (one for the tail); each stays in L1
      // while the rows of x pass four at a time, prefetching the next
      // four's chunk.
      int nn = n1 - n >= 4 ? 4 : 1;
      const uint16_t *wr[4];
      for (int j = 0; j < nn; j++) wr[j] = (const uint16_t *)(const void *)(w + (size_t)(n + j) * wrow);
      int nx = nn == 4 ? (n1 - n - 4 < 4 ? n1 - n - 4 : 4) : 0;
      size_t lines = nx > 0 ? (2 * (size_t)len + 63) / 64 : 0, groups = (size_t)(m + 3) / 4;
      for (int r = 0; r < m; r += 4) {
        size_t g = (size_t)r / 4;
        for (size_t i = lines * g / groups; i < lines * (g + 1) / groups; i++)
          for (int j = 0; j < nx; j++)
            _mm_prefetch((const char *)(w + (size_t)(n + 4 + j) * wrow + 2 * (size_t)c0 + 64 * i), _MM_HINT_T0);
        const uint16_t *xr = xb + (size_t)r * kp;
        float *yr = y + (size_t)r * ldy;
        int mm = m - r < 4 ? m - r : 4;
#define TK_MMB(M)                                                  \
  if (nn == 4)                                                     \
    mm_bf16(M, 4, wr, xr, kp, c0, len, yr, ldy, n, acc);           \
  else                                                             \
    mm_bf16(M, 1, wr, xr, kp, c0, len, yr, ldy, n, acc);
        switch (mm) {
          case 1: TK_MMB(1) break;
          case 2: TK_MMB(2) break;
          case 3: TK_MMB(3) break;
          default: TK_MMB(4) break;
        }
#undef TK_MMB
      }
      n += nn;
    }
  }
}

// pack_a_bf16 rounds each MR-row panel's rows a depth chunk at a time into
// tmp (whose u16 pairs are already the little-endian 32-bit pairs), then
// interleaves them: per pair index, MR consecutive 32-bit stores.
static TK_TARGET_BF16 void pack_a_bf16(const float *x, int k, int r0, int r1,
                                       uint32_t *pa) {
  const int kh = k / 2;
  uint32_t tmp[TK_MR][TK_KC / 2];
  for (int ip = r0; ip < r1; ip += TK_MR) {
    uint32_t *dst = pa + (size_t)ip * kh;
    int rows = r1 - ip < TK_MR ? r1 - ip : TK_MR;
    for (int c0 = 0; c0 < k; c0 += TK_KC) {
      int len = k - c0 < TK_KC ? k - c0 : TK_KC;
      for (int r = 0; r < TK_MR; r++) {
        if (r < rows)
          x_bf16(x + (size_t)(ip + r) * k + c0, 1, len, TK_KC, (uint16_t *)(void *)tmp[r]);
        else
          memset(tmp[r], 0, sizeof tmp[r]);
      }
      uint32_t *d = dst + (size_t)(c0 / 2) * TK_MR;
      for (int p = 0; p < len / 2; p++)
        for (int r = 0; r < TK_MR; r++) d[(size_t)p * TK_MR + r] = tmp[r][p];
    }
  }
}
#endif

void tk_x_bf16(const float *x, int m, int k, int kp, uint16_t *xb) {
#if TK_X86
  x_bf16(x, m, k, kp, xb);
#else
  (void)x, (void)m, (void)k, (void)kp, (void)xb;
#endif
}

void tk_mm_bf16_tile(const uint8_t *w, size_t wrow, const uint16_t *xb,
                     int kp, int m, float *y, long ldy, int k, int n0,
                     int n1) {
#if TK_X86
  mm_bf16_tile(w, wrow, xb, kp, m, y, ldy, k, n0, n1);
#else
  (void)w, (void)wrow, (void)xb, (void)kp, (void)m, (void)y, (void)ldy, (void)k, (void)n0, (void)n1;
#endif
}

void tk_pack_a_bf16(const float *x, int k, int r0, int r1, uint32_t *pa) {
#if TK_X86
  pack_a_bf16(x, k, r0, r1, pa);
#else
  (void)x, (void)k, (void)r0, (void)r1, (void)pa;
#endif
}
