// tk_internal.h: helpers shared by the C kernel files (scalar conversions,
// target attributes, the AVX2 loaders). Not part of the cgo interface.
#ifndef TURNSTILE_TK_INTERNAL_H
#define TURNSTILE_TK_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "tk.h"

// TK_NO_X86 builds the portable path only, as on other architectures.
#if defined(__x86_64__) && !defined(TK_NO_X86)
#include <immintrin.h>
#define TK_X86 1
// Per-function targets: the binary runs on any x86-64; these bodies run only
// after tk_cpu_paths said the CPU has the features.
#define TK_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TK_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define TK_INLINE static inline __attribute__((always_inline))
#else
#define TK_X86 0
#endif

static inline float tk_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {
      // Subnormal half: renormalise into a normal float.
      int e = -1;
      do {
        e++;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static inline float tk_bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

// tk_kv_f32 returns element i of a KV cache row of type kt (TK_F32, or
// TK_F16/TK_BF16 bits) as a float.
static inline float tk_kv_f32(int kt, const void *row, size_t i) {
  if (kt == TK_F32) return ((const float *)row)[i];
  const uint16_t h = ((const uint16_t *)row)[i];
  return kt == TK_F16 ? tk_f16_to_f32(h) : tk_bf16_to_f32(h);
}

static inline uint16_t tk_load_u16(const uint8_t *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

// The block-quantised weight types beside Q8_0 (GGML type ids, like tk.h's
// enum): legacy blocks of 32 and K-quant super-blocks of 256. Their block
// decoders live in tk_quant.c; Q8_0 keeps its inline paths below.
enum {
  TK_Q4_0 = 2,
  TK_Q4_1 = 3,
  TK_Q5_0 = 6,
  TK_Q5_1 = 7,
  TK_Q2_K = 10,
  TK_Q3_K = 11,
  TK_Q4_K = 12,
  TK_Q5_K = 13,
  TK_Q6_K = 14
};
#define TK_QKK 256  // K-quant super-block elements (and the largest block)

// tk_is_blk reports whether wtype is one of the tk_quant.c block types.
static inline int tk_is_blk(int wtype) {
  switch (wtype) {
    case TK_Q4_0: case TK_Q4_1: case TK_Q5_0: case TK_Q5_1:
    case TK_Q2_K: case TK_Q3_K: case TK_Q4_K: case TK_Q5_K: case TK_Q6_K:
      return 1;
  }
  return 0;
}

// tk_blk_elems is the elements per block of wtype (1 for F32/F16/BF16).
static inline int tk_blk_elems(int wtype) {
  switch (wtype) {
    case TK_F32: case TK_F16: case TK_BF16:
      return 1;
    case TK_Q2_K: case TK_Q3_K: case TK_Q4_K: case TK_Q5_K: case TK_Q6_K:
      return TK_QKK;
  }
  return TK_QK;
}

// tk_blk_bytes is the bytes per block of wtype (ggml-common.h's block_*).
static inline size_t tk_blk_bytes(int wtype) {
  switch (wtype) {
    case TK_F32: return 4;
    case TK_F16: case TK_BF16: return 2;
    case TK_Q4_0: return 18;
    case TK_Q4_1: return 20;
    case TK_Q5_0: return 22;
    case TK_Q5_1: return 24;
    case TK_Q2_K: return 84;
    case TK_Q3_K: return 110;
    case TK_Q4_K: return 144;
    case TK_Q5_K: return 176;
    case TK_Q6_K: return 210;
  }
  return TK_Q8_BYTES;
}

// tk_dq_block decodes one block of a tk_is_blk type (blk: its bytes) into
// out (tk_blk_elems floats), bit-exactly as ggml's dequantize_row_* does.
void tk_dq_block(int wtype, const uint8_t *blk, float *out);
#if TK_X86
// tk_dq_block_avx2 is tk_dq_block with AVX2 (same operations, same order,
// so the same floats). Only after tk_cpu_paths reported AVX2.
void tk_dq_block_avx2(int wtype, const uint8_t *blk, float *out);
// tk_gemv_blk_avx2 is the GEMV (m = 1..4 rows of x, as tk_gemv_tile) of a
// tk_is_blk type: blocks are decoded in registers straight into the dot
// products. k is a multiple of the block size.
void tk_gemv_blk_avx2(int wtype, const uint8_t *w, size_t wrow, const float *x,
                      int m, float *y, long ldy, int k, int n0, int n1);
#endif

// tk_cvt_blk writes elements [c0, c0+n) of a row of a tk_is_blk type to
// out, decoding whole blocks (straight into out when a block lies wholly
// inside the range, else through a block buffer).
static inline void tk_cvt_blk(int avx2, int wtype, const uint8_t *row, int c0,
                              int n, float *out) {
  const int be = tk_blk_elems(wtype);
  const size_t bb = tk_blk_bytes(wtype);
  float buf[TK_QKK];
  for (int c = c0; c < c0 + n;) {
    int b = c / be, off = c - b * be;
    int take = be - off < c0 + n - c ? be - off : c0 + n - c;
    float *dst = off == 0 && take == be ? out + (c - c0) : buf;
#if TK_X86
    if (avx2)
      tk_dq_block_avx2(wtype, row + (size_t)b * bb, dst);
    else
#endif
      tk_dq_block(wtype, row + (size_t)b * bb, dst);
    (void)avx2;
    if (dst == buf) memcpy(out + (c - c0), buf + off, 4 * (size_t)take);
    c += take;
  }
}

// tk_row_bytes is the byte offset of column c in a weight row (for block
// types, rounded up to a whole block).
static inline size_t tk_row_bytes(int wtype, int c) {
  switch (wtype) {
    case TK_F32:
      return 4 * (size_t)c;
    case TK_F16:
    case TK_BF16:
      return 2 * (size_t)c;
    default: {
      int be = tk_blk_elems(wtype);
      return (size_t)((c + be - 1) / be) * tk_blk_bytes(wtype);
    }
  }
}

// tk_w1 returns element c of a weight row (scalar, any type).
static inline float tk_w1(int wtype, const uint8_t *row, int c) {
  switch (wtype) {
    case TK_F32: {
      float f;
      memcpy(&f, row + 4 * (size_t)c, 4);
      return f;
    }
    case TK_F16:
      return tk_f16_to_f32(tk_load_u16(row + 2 * (size_t)c));
    case TK_BF16:
      return tk_bf16_to_f32(tk_load_u16(row + 2 * (size_t)c));
    case TK_Q8_0: {
      const uint8_t *b = row + (size_t)(c / TK_QK) * TK_Q8_BYTES;
      return tk_f16_to_f32(tk_load_u16(b)) * (float)(int8_t)b[2 + c % TK_QK];
    }
    default: {
      // A whole block is decoded for one element: only depth tails and
      // odd offsets come here, never an inner loop.
      float v;
      tk_cvt_blk(0, wtype, row, c, 1, &v);
      return v;
    }
  }
}

// tk_cvt_portable writes elements [c0, c0+n) of a weight row to out.
static inline void tk_cvt_portable(int wtype, const uint8_t *row, int c0, int n,
                                   float *out) {
  switch (wtype) {
    case TK_F32:
      memcpy(out, row + 4 * (size_t)c0, 4 * (size_t)n);
      return;
    case TK_F16:
      for (int i = 0; i < n; i++)
        out[i] = tk_f16_to_f32(tk_load_u16(row + 2 * (size_t)(c0 + i)));
      return;
    case TK_BF16:
      for (int i = 0; i < n; i++)
        out[i] = tk_bf16_to_f32(tk_load_u16(row + 2 * (size_t)(c0 + i)));
      return;
    case TK_Q8_0:
      for (int i = 0; i < n; i++) out[i] = tk_w1(wtype, row, c0 + i);
      return;
    default:
      tk_cvt_blk(0, wtype, row, c0, n, out);
      return;
  }
}

#if TK_X86
// tk_ld8 loads weights [c, c+8) of a row as floats; c is a multiple of 8
// (so a Q8_0 load never straddles a block). F32, F16, BF16 and Q8_0 only:
// the other block types are decoded a block at a time (tk_cvt_blk).
TK_INLINE TK_TARGET_AVX2 __m256 tk_ld8(int wtype, const uint8_t *row, int c) {
  switch (wtype) {
    case TK_F32:
      return _mm256_loadu_ps((const float *)(const void *)row + c);
    case TK_F16:
      return _mm256_cvtph_ps(
          _mm_loadu_si128((const __m128i *)(const void *)(row + 2 * (size_t)c)));
    case TK_BF16: {
      __m256i v = _mm256_cvtepu16_epi32(
          _mm_loadu_si128((const __m128i *)(const void *)(row + 2 * (size_t)c)));
      return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
    default: {
      const uint8_t *b = row + (size_t)(c / TK_QK) * TK_Q8_BYTES;
      float d = _cvtsh_ss(tk_load_u16(b));
      __m128i q = _mm_loadl_epi64((const __m128i *)(const void *)(b + 2 + c % TK_QK));
      __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
      return _mm256_mul_ps(f, _mm256_set1_ps(d));
    }
  }
}

// TK_STREAM_PF is how far ahead (bytes) a decode GEMV prefetches the
// weight rows it streams, one prefetch per cache line of the row it is about
// to start: with the weights in 2 MiB pages (internal/hugemem) a prefetch
// no longer stops at a 4 KiB page it has no TLB entry for, and 16 KiB ahead
// keeps enough lines in flight that a core computing on one row no longer
// leaves the memory idle (Q8_0 layer matmuls at m = 1: 50-60 -> 71-77 GB/s
// best, 4 KiB 56-70, 32 KiB as 16; interleaved rounds on this VM).
#ifndef TK_STREAM_PF
#define TK_STREAM_PF 16384
#endif
// TK_STREAM_PF_HINT is its cache level, a knob for A/B builds like
// TK_STREAM_PF (CGO_CFLAGS=-DTK_STREAM_PF_HINT=_MM_HINT_T2): at the 1B
// shape, whose weights stream from DRAM, T2 and no prefetch at all each
// won on some types and lost on the 110M shape (docs/experiments.md, "The
// 1B shape: where decode time goes"), so T0 stays.
#ifndef TK_STREAM_PF_HINT
#define TK_STREAM_PF_HINT _MM_HINT_T0
#endif

// The decode GEMVs of the int8 (qmm: Q8_0 family and K-quants) and BF16
// paths at one row of x read two weight rows at once, from the two halves
// of their tile (TK_GEMV2; 0 builds the one-row GEMVs, for A/B): a core
// keeps more lines in flight over two streams than over one (the read
// probe on 2 cores: 23-25 GB/s with one stream each, 28-30 with two), and
// the weights of a 1B model stream from DRAM. Each line they read is
// prefetched TK_GEMV2_PF bytes ahead as they go, not a row's worth at the
// start of each row as tk_pf_row does: at 1B the burst of a row's
// prefetches filled the L1 miss buffers (Q8_0 decode from 12.7 to 22-23
// tok/s, Q4_K_M 20.7 to 34, BF16 7.0 to 9.3; the 110M Q8_0 shape, whose
// weights sit in the LLC, gained 4-12%; 2 KiB beat 4 KiB at 1B by 6-14%;
// docs/experiments.md, "Two weight streams per core").
#ifndef TK_GEMV2
#define TK_GEMV2 1
#endif
#ifndef TK_GEMV2_PF
#define TK_GEMV2_PF 2048
#endif

// tk_pf_ahead prefetches the bytes [p + TK_GEMV2_PF, p + TK_GEMV2_PF + n),
// a line at a time: the two-stream GEMVs call it for what they are about to
// read, so the prefetches keep pace with the reads instead of bursting.
TK_INLINE void tk_pf_ahead(const void *p, size_t n) {
  const char *q = (const char *)p + TK_GEMV2_PF;
  for (size_t o = 0; TK_GEMV2_PF > 0 && o < n; o += 64) _mm_prefetch(q + o, TK_STREAM_PF_HINT);
}

// tk_pf_row prefetches the bytes [p + TK_STREAM_PF, p + TK_STREAM_PF + n)
// into L1 (TK_STREAM_PF_HINT). A prefetch past the end of the matrix is a hint that the CPU
// drops; it neither faults nor reads out of bounds.
TK_INLINE void tk_pf_row(const uint8_t *p, size_t n) {
#if TK_STREAM_PF > 0  // 0: off (for A/B builds)
  const char *q = (const char *)((uintptr_t)p + TK_STREAM_PF);
  for (size_t i = 0; i < n; i += 64) _mm_prefetch(q + i, TK_STREAM_PF_HINT);
#else
  (void)p, (void)n;
#endif
}

TK_INLINE TK_TARGET_AVX2 float tk_hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// exp8_avx2 is e^x for 8 floats: x = n·ln2 + r with |r| ≤ ln2/2, e^r by a
// degree-6 polynomial (Taylor, error < 2e-7 relative on that interval),
// 2^n built in the exponent field. Inputs below −87 flush to 0 (the
// softmax weights that small are < 1e-37 of the largest). About 2 ulp.
TK_INLINE TK_TARGET_AVX2 __m256 exp8_avx2(__m256 x) {
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

// exp16_avx512 is exp8_avx2 for 16 floats (same reduction and polynomial,
// so the two paths' weights agree to the ulp).
TK_INLINE TK_TARGET_AVX512 __m512 exp16_avx512(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.0f), hi = _mm512_set1_ps(88.0f);
  __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  __m512i e = _mm512_slli_epi32(
      _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(keep, p, _mm512_castsi512_ps(e));
}

// tk_cvt_avx2 is tk_cvt_portable with vector conversions.
static inline TK_TARGET_AVX2 void tk_cvt_avx2(int wtype, const uint8_t *row,
                                              int c0, int n, float *out) {
  if (tk_is_blk(wtype)) {
    tk_cvt_blk(1, wtype, row, c0, n, out);
    return;
  }
  int i = 0;
  if (c0 % 8 == 0) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, tk_ld8(wtype, row, c0 + i));
  }
  for (; i < n; i++) out[i] = tk_w1(wtype, row, c0 + i);
}
#endif

// tk_cvt converts with the best helper the path allows.
static inline void tk_cvt(int isa, int wtype, const uint8_t *row, int c0, int n,
                          float *out) {
#if TK_X86
  if (isa != TK_PORTABLE) {
    tk_cvt_avx2(wtype, row, c0, n, out);
    return;
  }
#endif
  (void)isa;
  tk_cvt_portable(wtype, row, c0, n, out);
}

#endif
