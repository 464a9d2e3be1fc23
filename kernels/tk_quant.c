// tk_quant.c: block decoders of the GGML weight types Q4_0, Q4_1, Q5_0,
// Q5_1 (blocks of 32) and Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (super-blocks of
// 256), portable and AVX2. Layouts are ggml-common.h's block_* structs.
//
// Every decoder rounds exactly as ggml's dequantize_row_* (ggml-quants.c)
// does: a product and the following sum are two float32 roundings, never
// one FMA (this file is C11, so the compiler does not contract them), and
// the AVX2 decoders do the same operations in the same order as the
// portable ones. So every path sees the same weights as internal/quant's Go
// reference, and the kernels differ from it only by summation order.
#include "tk_internal.h"

// tk_scale_min_k4 unpacks the 6-bit scale and min of sub-block j (0..7) of
// a Q4_K/Q5_K block's 12 scale bytes (ggml's get_scale_min_k4).
static inline void tk_scale_min_k4(const uint8_t *q, int j, uint8_t *sc,
                                   uint8_t *m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// tk_q3k_scale returns the 6-bit scale code (scale = code − 32) of
// sub-block j (0..15) of a Q3_K block's 12 scale bytes.
static inline int tk_q3k_scale(const uint8_t *sc, int j) {
  int lo = j < 8 ? sc[j] & 0xf : sc[j - 8] >> 4;
  int hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
  return lo | hi << 4;
}

static inline uint32_t tk_load_u32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

void tk_dq_block(int wtype, const uint8_t *b, float *y) {
  switch (wtype) {
    case TK_Q4_0: {
      float d = tk_f16_to_f32(tk_load_u16(b));
      const uint8_t *qs = b + 2;
      for (int j = 0; j < 16; j++) {
        y[j] = (float)((qs[j] & 0xf) - 8) * d;
        y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
      }
      return;
    }
    case TK_Q4_1: {
      float d = tk_f16_to_f32(tk_load_u16(b)), m = tk_f16_to_f32(tk_load_u16(b + 2));
      const uint8_t *qs = b + 4;
      for (int j = 0; j < 16; j++) {
        y[j] = (float)(qs[j] & 0xf) * d + m;
        y[j + 16] = (float)(qs[j] >> 4) * d + m;
      }
      return;
    }
    case TK_Q5_0:
    case TK_Q5_1: {
      int q51 = wtype == TK_Q5_1;
      float d = tk_f16_to_f32(tk_load_u16(b));
      float m = q51 ? tk_f16_to_f32(tk_load_u16(b + 2)) : 0.0f;
      uint32_t qh = tk_load_u32(b + (q51 ? 4 : 2));
      const uint8_t *qs = b + (q51 ? 8 : 6);
      for (int j = 0; j < 16; j++) {
        int x0 = (qs[j] & 0xf) | (int)((qh >> j) & 1) << 4;
        int x1 = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
        if (q51) {
          y[j] = (float)x0 * d + m;
          y[j + 16] = (float)x1 * d + m;
        } else {
          y[j] = (float)(x0 - 16) * d;
          y[j + 16] = (float)(x1 - 16) * d;
        }
      }
      return;
    }
    case TK_Q2_K: {
      const uint8_t *sc = b, *qs = b + 16;
      float d = tk_f16_to_f32(tk_load_u16(b + 80)), dmin = tk_f16_to_f32(tk_load_u16(b + 82));
      // Two halves of 128; in each, four 2-bit planes (shift 2j) of 32
      // bytes, each two sub-blocks of 16 with their own scale/min byte.
      for (int n = 0; n < 2; n++)
        for (int j = 0; j < 4; j++)
          for (int h = 0; h < 2; h++) {
            uint8_t s = sc[n * 8 + j * 2 + h];
            float dl = d * (float)(s & 0xf), ml = dmin * (float)(s >> 4);
            const uint8_t *q = qs + n * 32 + h * 16;
            float *o = y + n * 128 + j * 32 + h * 16;
            for (int l = 0; l < 16; l++) o[l] = dl * (float)((q[l] >> (2 * j)) & 3) - ml;
          }
      return;
    }
    case TK_Q3_K: {
      const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
      float d = tk_f16_to_f32(tk_load_u16(b + 108));
      for (int n = 0; n < 2; n++)
        for (int j = 0; j < 4; j++)
          for (int h = 0; h < 2; h++) {
            float dl = d * (float)(tk_q3k_scale(sc, n * 8 + j * 2 + h) - 32);
            const uint8_t *q = qs + n * 32 + h * 16, *m = hm + h * 16;
            float *o = y + n * 128 + j * 32 + h * 16;
            for (int l = 0; l < 16; l++) {
              int v = ((q[l] >> (2 * j)) & 3) - (((m[l] >> (n * 4 + j)) & 1) ? 0 : 4);
              o[l] = dl * (float)v;
            }
          }
      return;
    }
    case TK_Q4_K:
    case TK_Q5_K: {
      int q5 = wtype == TK_Q5_K;
      float d = tk_f16_to_f32(tk_load_u16(b)), dmin = tk_f16_to_f32(tk_load_u16(b + 2));
      const uint8_t *sc = b + 4, *qh = b + 16, *qs = b + (q5 ? 48 : 16);
      // Eight sub-blocks of 32: the low, then the high nibbles of each 32
      // bytes; Q5_K's fifth bit of element l of sub-block i is bit i of qh[l].
      for (int i = 0; i < 8; i++) {
        uint8_t s, mn;
        tk_scale_min_k4(sc, i, &s, &mn);
        float d1 = d * (float)s, m1 = dmin * (float)mn;
        const uint8_t *q = qs + 32 * (i / 2);
        int sh = 4 * (i % 2);
        for (int l = 0; l < 32; l++) {
          int v = (q[l] >> sh) & 0xf;
          if (q5) v |= ((qh[l] >> i) & 1) << 4;
          y[32 * i + l] = d1 * (float)v - m1;
        }
      }
      return;
    }
    case TK_Q6_K: {
      const uint8_t *ql = b, *qh = b + 128;
      const int8_t *sc = (const int8_t *)(const void *)(b + 192);
      float d = tk_f16_to_f32(tk_load_u16(b + 208));
      // Element 128n + 32k + l: low nibble (k < 2) or high nibble of
      // ql[64n + 32(k&1) + l], bits 2k of qh[32n + l], scale 8n + 2k + l/16.
      for (int n = 0; n < 2; n++)
        for (int k = 0; k < 4; k++)
          for (int l = 0; l < 32; l++) {
            int lo = (ql[64 * n + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0xf;
            int hi = (qh[32 * n + l] >> (2 * k)) & 3;
            float ds = d * (float)sc[8 * n + 2 * k + l / 16];
            y[128 * n + 32 * k + l] = ds * (float)((lo | hi << 4) - 32);
          }
      return;
    }
  }
}

#if TK_X86
// tk_u8x8 widens 8 bytes at p to 8 int32 lanes.
TK_INLINE TK_TARGET_AVX2 __m256i tk_u8x8(const uint8_t *p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
}

// tk_bits8 returns lane i = (v_i >> s) & mask.
TK_INLINE TK_TARGET_AVX2 __m256i tk_bits8(__m256i v, int s, int mask) {
  return _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_set1_epi32(s)), _mm256_set1_epi32(mask));
}

// tk_qh5 returns lane i = bit (e0 + i) of qh, moved to bit 4 (the fifth bit
// of Q5_0/Q5_1 element e0 + i).
TK_INLINE TK_TARGET_AVX2 __m256i tk_qh5(uint32_t qh, int e0) {
  __m256i idx = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(e0));
  __m256i bit = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)qh), idx), _mm256_set1_epi32(1));
  return _mm256_slli_epi32(bit, 4);
}

// d·v − m (two roundings, as ggml) and v·d for 8 int lanes v.
TK_INLINE TK_TARGET_AVX2 __m256 tk_affine8(__m256i v, __m256 d, __m256 m) {
  return _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(v)), m);
}
TK_INLINE TK_TARGET_AVX2 __m256 tk_scale8(__m256i v, __m256 d) {
  return _mm256_mul_ps(_mm256_cvtepi32_ps(v), d);
}

// tk_emit hands on 8 decoded weights, elements c..c+7 of a block. M = 0
// stores them at o + c (tk_dq_block_avx2). M = 1..4 is the fused GEMV: it
// multiplies them into accumulator a of each of the M rows of x (x at the
// block's first element, rows k floats apart), so the weights never leave
// the registers. The callers pass a as a loop constant that rotates over
// four accumulators (two for M > 2, to stay within 16 registers) so that
// consecutive FMAs do not wait on each other.
TK_INLINE TK_TARGET_AVX2 void tk_emit(const int M, float *o, const float *x,
                                      int k, __m256 acc[4][4], int a, int c,
                                      __m256 w) {
  if (M == 0) {
    _mm256_storeu_ps(o + c, w);
    return;
  }
  a &= M > 2 ? 1 : 3;
  for (int r = 0; r < M; r++)
    acc[r][a] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + (size_t)r * k + c), acc[r][a]);
}

// tk_dq_body decodes one block of type WT and emits its weights (see
// tk_emit). Same operations in the same order as tk_dq_block.
TK_INLINE TK_TARGET_AVX2 void tk_dq_body(const int M, const int WT,
                                         const uint8_t *b, float *y,
                                         const float *x, int k,
                                         __m256 acc[4][4]) {
  const __m256i c15 = _mm256_set1_epi32(15);
  switch (WT) {
    case TK_Q4_0:
    case TK_Q5_0: {
      const int q5 = WT == TK_Q5_0;
      __m256 d = _mm256_set1_ps(tk_f16_to_f32(tk_load_u16(b)));
      uint32_t qh = q5 ? tk_load_u32(b + 2) : 0;
      const uint8_t *qs = b + (q5 ? 6 : 2);
      __m256i bias = _mm256_set1_epi32(q5 ? 16 : 8);
      for (int g = 0; g < 2; g++) {
        __m256i v = tk_u8x8(qs + 8 * g);
        __m256i lo = _mm256_and_si256(v, c15), hi = _mm256_srli_epi32(v, 4);
        if (q5) {
          lo = _mm256_or_si256(lo, tk_qh5(qh, 8 * g));
          hi = _mm256_or_si256(hi, tk_qh5(qh, 16 + 8 * g));
        }
        tk_emit(M, y, x, k, acc, 2 * g, 8 * g, tk_scale8(_mm256_sub_epi32(lo, bias), d));
        tk_emit(M, y, x, k, acc, 2 * g + 1, 16 + 8 * g, tk_scale8(_mm256_sub_epi32(hi, bias), d));
      }
      return;
    }
    case TK_Q4_1:
    case TK_Q5_1: {
      const int q5 = WT == TK_Q5_1;
      __m256 d = _mm256_set1_ps(tk_f16_to_f32(tk_load_u16(b)));
      __m256 m = _mm256_set1_ps(tk_f16_to_f32(tk_load_u16(b + 2)));
      uint32_t qh = q5 ? tk_load_u32(b + 4) : 0;
      const uint8_t *qs = b + (q5 ? 8 : 4);
      for (int g = 0; g < 2; g++) {
        __m256i v = tk_u8x8(qs + 8 * g);
        __m256i lo = _mm256_and_si256(v, c15), hi = _mm256_srli_epi32(v, 4);
        if (q5) {
          lo = _mm256_or_si256(lo, tk_qh5(qh, 8 * g));
          hi = _mm256_or_si256(hi, tk_qh5(qh, 16 + 8 * g));
        }
        // x·d + m: mul, then add (ggml's order).
        tk_emit(M, y, x, k, acc, 2 * g, 8 * g, _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(lo), d), m));
        tk_emit(M, y, x, k, acc, 2 * g + 1, 16 + 8 * g, _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(hi), d), m));
      }
      return;
    }
    case TK_Q2_K: {
      const uint8_t *sc = b, *qs = b + 16;
      float d = tk_f16_to_f32(tk_load_u16(b + 80)), dmin = tk_f16_to_f32(tk_load_u16(b + 82));
      for (int n = 0; n < 2; n++)
        for (int h = 0; h < 2; h++) {
          const uint8_t *q = qs + n * 32 + h * 16;
          __m256i v0 = tk_u8x8(q), v1 = tk_u8x8(q + 8);
          for (int j = 0; j < 4; j++) {
            uint8_t s = sc[n * 8 + j * 2 + h];
            __m256 dl = _mm256_set1_ps(d * (float)(s & 0xf));
            __m256 ml = _mm256_set1_ps(dmin * (float)(s >> 4));
            int c = n * 128 + j * 32 + h * 16;
            tk_emit(M, y, x, k, acc, j, c, tk_affine8(_mm256_and_si256(_mm256_srli_epi32(v0, 2 * j), _mm256_set1_epi32(3)), dl, ml));
            tk_emit(M, y, x, k, acc, j + 1, c + 8, tk_affine8(_mm256_and_si256(_mm256_srli_epi32(v1, 2 * j), _mm256_set1_epi32(3)), dl, ml));
          }
        }
      return;
    }
    case TK_Q3_K: {
      const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
      float d = tk_f16_to_f32(tk_load_u16(b + 108));
      const __m256i four = _mm256_set1_epi32(4), three = _mm256_set1_epi32(3), one = _mm256_set1_epi32(1);
      for (int n = 0; n < 2; n++)
        for (int h = 0; h < 2; h++) {
          const uint8_t *q = qs + n * 32 + h * 16;
          __m256i v[2] = {tk_u8x8(q), tk_u8x8(q + 8)};
          __m256i m[2] = {tk_u8x8(hm + h * 16), tk_u8x8(hm + h * 16 + 8)};
          for (int j = 0; j < 4; j++) {
            __m256 dl = _mm256_set1_ps(d * (float)(tk_q3k_scale(sc, n * 8 + j * 2 + h) - 32));
            int c = n * 128 + j * 32 + h * 16;
            for (int g = 0; g < 2; g++) {
              // low 2 bits − 4, plus 4 where the high bit is set
              __m256i xq = _mm256_sub_epi32(_mm256_and_si256(_mm256_srli_epi32(v[g], 2 * j), three), four);
              __m256i hb = _mm256_and_si256(_mm256_srli_epi32(m[g], n * 4 + j), one);
              xq = _mm256_add_epi32(xq, _mm256_slli_epi32(hb, 2));
              tk_emit(M, y, x, k, acc, j + g, c + 8 * g, tk_scale8(xq, dl));
            }
          }
        }
      return;
    }
    case TK_Q4_K:
    case TK_Q5_K: {
      const int q5 = WT == TK_Q5_K;
      float d = tk_f16_to_f32(tk_load_u16(b)), dmin = tk_f16_to_f32(tk_load_u16(b + 2));
      const uint8_t *sc = b + 4, *qh = b + 16, *qs = b + (q5 ? 48 : 16);
      // One load of 8 quant bytes serves two sub-blocks: its low nibbles
      // are sub-block 2j's, its high nibbles sub-block 2j+1's.
      for (int j = 0; j < 4; j++) {
        uint8_t s0, m0, s1, m1;
        tk_scale_min_k4(sc, 2 * j, &s0, &m0);
        tk_scale_min_k4(sc, 2 * j + 1, &s1, &m1);
        __m256 d0 = _mm256_set1_ps(d * (float)s0), n0 = _mm256_set1_ps(dmin * (float)m0);
        __m256 d1 = _mm256_set1_ps(d * (float)s1), n1 = _mm256_set1_ps(dmin * (float)m1);
        for (int g = 0; g < 4; g++) {
          __m256i v = tk_u8x8(qs + 32 * j + 8 * g);
          __m256i lo = _mm256_and_si256(v, c15), hi = _mm256_srli_epi32(v, 4);
          if (q5) {
            __m256i h = tk_u8x8(qh + 8 * g);
            lo = _mm256_or_si256(lo, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2 * j), _mm256_set1_epi32(1)), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2 * j + 1), _mm256_set1_epi32(1)), 4));
          }
          tk_emit(M, y, x, k, acc, g, 64 * j + 8 * g, tk_affine8(lo, d0, n0));
          tk_emit(M, y, x, k, acc, g + 1, 64 * j + 32 + 8 * g, tk_affine8(hi, d1, n1));
        }
      }
      return;
    }
    case TK_Q6_K: {
      const uint8_t *ql = b, *qh = b + 128;
      const int8_t *sc = (const int8_t *)(const void *)(b + 192);
      float d = tk_f16_to_f32(tk_load_u16(b + 208));
      const __m256i c32 = _mm256_set1_epi32(32), three = _mm256_set1_epi32(3);
      float ds16[16];  // the 16 sub-block scales d·sc, each used twice below
      for (int i = 0; i < 16; i++) ds16[i] = d * (float)sc[i];
      for (int n = 0; n < 2; n++)
        for (int g = 0; g < 4; g++) {
          __m256i h = tk_u8x8(qh + 32 * n + 8 * g);
          __m256i l0 = tk_u8x8(ql + 64 * n + 8 * g), l1 = tk_u8x8(ql + 64 * n + 32 + 8 * g);
          __m256i lo4[4] = {_mm256_and_si256(l0, c15), _mm256_and_si256(l1, c15), _mm256_srli_epi32(l0, 4),
                            _mm256_srli_epi32(l1, 4)};
          for (int kk = 0; kk < 4; kk++) {
            __m256i hi = _mm256_and_si256(_mm256_srli_epi32(h, 2 * kk), three);
            __m256i xq = _mm256_sub_epi32(_mm256_or_si256(lo4[kk], _mm256_slli_epi32(hi, 4)), c32);
            __m256 ds = _mm256_broadcast_ss(&ds16[8 * n + 2 * kk + g / 2]);
            // (d·sc)·q, as ggml: the scale product first.
            tk_emit(M, y, x, k, acc, kk, 128 * n + 32 * kk + 8 * g, _mm256_mul_ps(ds, _mm256_cvtepi32_ps(xq)));
          }
        }
      return;
    }
  }
}

#define TK_EACH_BLK(F) \
  F(TK_Q4_0) F(TK_Q4_1) F(TK_Q5_0) F(TK_Q5_1) F(TK_Q2_K) F(TK_Q3_K) F(TK_Q4_K) F(TK_Q5_K) F(TK_Q6_K)

TK_TARGET_AVX2 void tk_dq_block_avx2(int wtype, const uint8_t *b, float *y) {
  switch (wtype) {
#define TK_CASE(T)                           \
  case T:                                    \
    tk_dq_body(0, T, b, y, NULL, 0, NULL);   \
    return;
    TK_EACH_BLK(TK_CASE)
#undef TK_CASE
  }
}

// gemv_blk computes y[r][n] = Σ_c x[r][c]·W[n][c] for r < M, n in [n0, n1):
// each weight row is decoded block by block in registers and multiplied
// into the M rows of x at once, so it is read from memory exactly once.
TK_INLINE TK_TARGET_AVX2 void gemv_blk(const int M, const int WT,
                                       const uint8_t *w, size_t wrow,
                                       const float *x, float *y, long ldy,
                                       int k, int n0, int n1) {
  const int be = tk_blk_elems(WT);
  const size_t bb = tk_blk_bytes(WT);
  const int nb = k / be;
  for (int n = n0; n < n1; n++) {
    const uint8_t *row = w + (size_t)n * wrow;
    __m256 acc[4][4];
    for (int r = 0; r < 4; r++)
      for (int a = 0; a < 4; a++) acc[r][a] = _mm256_setzero_ps();
    for (int bi = 0; bi < nb; bi++)
      tk_dq_body(M, WT, row + (size_t)bi * bb, NULL, x + (size_t)bi * be, k, acc);
    for (int r = 0; r < M; r++)
      y[(size_t)r * ldy + n] = tk_hsum8(_mm256_add_ps(_mm256_add_ps(acc[r][0], acc[r][1]),
                                                      _mm256_add_ps(acc[r][2], acc[r][3])));
  }
}

TK_TARGET_AVX2 void tk_gemv_blk_avx2(int wtype, const uint8_t *w, size_t wrow,
                                     const float *x, int m, float *y,
                                     long ldy, int k, int n0, int n1) {
  switch (wtype) {
#define TK_CASE(T)                                          \
  case T:                                                   \
    switch (m) {                                            \
      case 1:                                               \
        gemv_blk(1, T, w, wrow, x, y, ldy, k, n0, n1);      \
        return;                                             \
      case 2:                                               \
        gemv_blk(2, T, w, wrow, x, y, ldy, k, n0, n1);      \
        return;                                             \
      case 3:                                               \
        gemv_blk(3, T, w, wrow, x, y, ldy, k, n0, n1);      \
        return;                                             \
      default:                                              \
        gemv_blk(4, T, w, wrow, x, y, ldy, k, n0, n1);      \
        return;                                             \
    }
    TK_EACH_BLK(TK_CASE)
#undef TK_CASE
  }
}
#endif
