// tk_gemm.c: y = x·Wᵀ on the CPU. A blocked, packed GEMM with a register
// tiled microkernel (6x16 AVX2, 12x32 AVX-512, 6x16 portable C) for many
// rows, a streaming kernel for 5..32 rows (batched decode: 4x3 dot-product
// register tiles, no packed copies) and a GEMV path for 1..4 rows; the last
// two read every weight row from memory exactly once.
#include "tk_internal.h"

int tk_cpu_paths(void) {
  int m = 1 << TK_PORTABLE;
#if TK_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    m |= 1 << TK_AVX2;
  if ((m & (1 << TK_AVX2)) && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    m |= 1 << TK_AVX512;
#endif
  return m;
}

static int tk_nr(int isa) { return isa == TK_AVX512 ? 32 : 16; }

// pack_b_portable converts weight rows [n0, n0+nc) x cols [k0, k0+kc) into
// NR-column panels, each [kc][NR] float32, zero-padding the last panel. This
// is where F16/BF16 and the block types become float32: once per packed
// block, not per FMA. k0 is a multiple of KC (256), so a block is never
// split between two packed blocks.
static void pack_b_portable(int nr, int wtype, const uint8_t *w, size_t wrow,
                            int n0, int nc, int k0, int kc, float *pb,
                            float *tmp) {
  for (int jp = 0; jp < nc; jp += nr) {
    float *dst = pb + (size_t)jp * kc;
    int cols = nc - jp < nr ? nc - jp : nr;
    for (int j = 0; j < nr; j++) {
      if (j < cols) {
        const uint8_t *row = w + (size_t)(n0 + jp + j) * wrow;
        const float *src;
        if (wtype == TK_F32) {
          src = (const float *)(const void *)row + k0;
        } else {
          tk_cvt_portable(wtype, row, k0, kc, tmp);
          src = tmp;
        }
        for (int p = 0; p < kc; p++) dst[p * nr + j] = src[p];
      } else {
        for (int p = 0; p < kc; p++) dst[p * nr + j] = 0.0f;
      }
    }
  }
}

// store_tile writes (or adds) the valid mr x nr corner of a full register
// tile held in t[MR][ld].
static void store_tile(const float *t, int ld, float *c, long ldc, int mr,
                       int nr, int acc) {
  for (int r = 0; r < mr; r++)
    for (int j = 0; j < nr; j++) {
      if (acc)
        c[r * ldc + j] += t[r * ld + j];
      else
        c[r * ldc + j] = t[r * ld + j];
    }
}

static void pack_a_portable(const float *x, int k, int r0, int r1, float *pa) {
  for (int ip = r0; ip < r1; ip += TK_MR) {
    float *dst = pa + (size_t)ip * k;
    int rows = r1 - ip < TK_MR ? r1 - ip : TK_MR;
    for (int r = 0; r < TK_MR; r++) {
      if (r < rows) {
        const float *src = x + (size_t)(ip + r) * k;
        for (int p = 0; p < k; p++) dst[(size_t)p * TK_MR + r] = src[p];
      } else {
        for (int p = 0; p < k; p++) dst[(size_t)p * TK_MR + r] = 0.0f;
      }
    }
  }
}

#if TK_X86
// pack_a_avx512 is pack_a_portable 16 depths at a time in registers: the
// 96 floats of [16][MR] are 6 vectors, vector q lane j holding row
// (16q+j) % 6 at depth (16q+j) / 6. Each comes from three two-row
// permutes (rows 0/1, 2/3, 4/5 share one index vector) and two blends.
static TK_TARGET_AVX512 void pack_a_avx512(const float *x, int k, int r0,
                                           int r1, float *pa) {
  __m512i idx[TK_MR];
  __mmask16 m23[TK_MR], m45[TK_MR];
  for (int q = 0; q < TK_MR; q++) {
    int iv[16];
    unsigned b23 = 0, b45 = 0;
    for (int j = 0; j < 16; j++) {
      int e = 16 * q + j, r = e % TK_MR;
      iv[j] = e / TK_MR + 16 * (r & 1);
      if (r == 2 || r == 3) b23 |= 1u << j;
      if (r >= 4) b45 |= 1u << j;
    }
    idx[q] = _mm512_loadu_si512((const void *)iv);
    m23[q] = (__mmask16)b23;
    m45[q] = (__mmask16)b45;
  }
  for (int ip = r0; ip < r1; ip += TK_MR) {
    float *dst = pa + (size_t)ip * k;
    int rows = r1 - ip < TK_MR ? r1 - ip : TK_MR;
    const float *src[TK_MR];
    for (int r = 0; r < TK_MR; r++) src[r] = x + (size_t)(ip + (r < rows ? r : 0)) * k;
    int p = 0;
    for (; p + 16 <= k; p += 16) {
      __m512 v[TK_MR];
      for (int r = 0; r < TK_MR; r++)
        v[r] = r < rows ? _mm512_loadu_ps(src[r] + p) : _mm512_setzero_ps();
      float *d = dst + (size_t)p * TK_MR;
      for (int q = 0; q < TK_MR; q++) {
        __m512 t01 = _mm512_permutex2var_ps(v[0], idx[q], v[1]);
        __m512 t23 = _mm512_permutex2var_ps(v[2], idx[q], v[3]);
        __m512 t45 = _mm512_permutex2var_ps(v[4], idx[q], v[5]);
        __m512 o = _mm512_mask_blend_ps(m23[q], t01, t23);
        _mm512_storeu_ps(d + 16 * q, _mm512_mask_blend_ps(m45[q], o, t45));
      }
    }
    for (; p < k; p++)  // depth tail (k not a multiple of 16)
      for (int r = 0; r < TK_MR; r++) dst[(size_t)p * TK_MR + r] = r < rows ? src[r][p] : 0.0f;
  }
}
#endif

// tk_pack_a copies rows [r0, r1) of x (float32 [.][k]) into MR-row panels
// of pa: panel i holds rows i*MR.. as [k][MR], at pa + i*k*MR. r0 is a
// multiple of MR; rows past r1 in the last panel are zero.
void tk_pack_a(int isa, const float *x, int k, int r0, int r1, float *pa) {
#if TK_X86
  if (isa == TK_AVX512) {
    pack_a_avx512(x, k, r0, r1, pa);
    return;
  }
#endif
  (void)isa;
  pack_a_portable(x, k, r0, r1, pa);
}

// The microkernels compute an MR x NR tile over depth kc from one packed A
// panel (a: [kc][MR]) and one packed B panel (b: [kc][NR]); only the valid
// mr x nr corner is stored (acc: added to c).
static void ukr_portable(int kc, const float *a, int mr, const float *b,
                         float *c, long ldc, int nr, int acc) {
  float t[TK_MR][16];
  memset(t, 0, sizeof t);
  for (int p = 0; p < kc; p++) {
    const float *bp = b + p * 16;
    for (int r = 0; r < TK_MR; r++) {
      float av = a[p * TK_MR + r];
      for (int j = 0; j < 16; j++) t[r][j] += av * bp[j];
    }
  }
  store_tile(&t[0][0], 16, c, ldc, mr, nr, acc);
}

#if TK_X86
// pack_b_avx2 is pack_b_portable with conversion in registers and 8x8
// in-register transposes instead of scalar scatters.
static TK_TARGET_AVX2 void pack_b_avx2(int nr, int wtype, const uint8_t *w,
                                       size_t wrow, int n0, int nc, int k0,
                                       int kc, float *pb) {
  // The tk_quant.c block types (a K-quant block holds 256 weights, more
  // than one 8-wide load can decode on its own) are first decoded, 8 rows
  // x kc at a time, into this buffer, then transposed like F32 rows.
  float dec[8][TK_KC];
  const int blk = tk_is_blk(wtype);
  const int lt = blk ? TK_F32 : wtype, lk0 = blk ? 0 : k0;
  for (int jp = 0; jp < nc; jp += nr) {
    float *dst = pb + (size_t)jp * kc;
    for (int j0 = 0; j0 < nr; j0 += 8) {
      const uint8_t *rows[8];
      int valid[8];
      for (int j = 0; j < 8; j++) {
        int n = jp + j0 + j;
        valid[j] = n < nc;
        rows[j] = w + (size_t)(n0 + (valid[j] ? n : 0)) * wrow;
        if (blk) {
          if (valid[j]) tk_cvt_blk(1, wtype, rows[j], k0, kc, dec[j]);
          rows[j] = (const uint8_t *)(const void *)dec[j];
        }
      }
      int p = 0;
      for (; p + 8 <= kc; p += 8) {
        __m256 r[8];
        for (int j = 0; j < 8; j++)
          r[j] = valid[j] ? tk_ld8(lt, rows[j], lk0 + p) : _mm256_setzero_ps();
        __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
        __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
        __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
        __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
        __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
        __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
        __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
        __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
        __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
        __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
        __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
        __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
        float *d = dst + (size_t)p * nr + j0;
        _mm256_storeu_ps(d + 0 * nr, _mm256_permute2f128_ps(u0, u4, 0x20));
        _mm256_storeu_ps(d + 1 * nr, _mm256_permute2f128_ps(u1, u5, 0x20));
        _mm256_storeu_ps(d + 2 * nr, _mm256_permute2f128_ps(u2, u6, 0x20));
        _mm256_storeu_ps(d + 3 * nr, _mm256_permute2f128_ps(u3, u7, 0x20));
        _mm256_storeu_ps(d + 4 * nr, _mm256_permute2f128_ps(u0, u4, 0x31));
        _mm256_storeu_ps(d + 5 * nr, _mm256_permute2f128_ps(u1, u5, 0x31));
        _mm256_storeu_ps(d + 6 * nr, _mm256_permute2f128_ps(u2, u6, 0x31));
        _mm256_storeu_ps(d + 7 * nr, _mm256_permute2f128_ps(u3, u7, 0x31));
      }
      for (; p < kc; p++)  // depth tail (k not a multiple of 8)
        for (int j = 0; j < 8; j++)
          dst[(size_t)p * nr + j0 + j] = valid[j] ? tk_w1(lt, rows[j], lk0 + p) : 0.0f;
    }
  }
}

static TK_TARGET_AVX2 void ukr_avx2(int kc, const float *a, int mr,
                                    const float *b, float *c, long ldc, int nr,
                                    int acc) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int p = 0; p < kc; p++) {
    __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    __m256 ar;
    ar = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(ar, b0, c00);
    c01 = _mm256_fmadd_ps(ar, b1, c01);
    ar = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(ar, b0, c10);
    c11 = _mm256_fmadd_ps(ar, b1, c11);
    ar = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(ar, b0, c20);
    c21 = _mm256_fmadd_ps(ar, b1, c21);
    ar = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(ar, b0, c30);
    c31 = _mm256_fmadd_ps(ar, b1, c31);
    ar = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(ar, b0, c40);
    c41 = _mm256_fmadd_ps(ar, b1, c41);
    ar = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(ar, b0, c50);
    c51 = _mm256_fmadd_ps(ar, b1, c51);
    a += TK_MR;
    b += 16;
  }
  if (mr == TK_MR && nr == 16) {
#define TK_ROW(r, v0, v1)                              \
  do {                                                 \
    float *cr = c + (r) * ldc;                         \
    if (acc) {                                         \
      v0 = _mm256_add_ps(v0, _mm256_loadu_ps(cr));     \
      v1 = _mm256_add_ps(v1, _mm256_loadu_ps(cr + 8)); \
    }                                                  \
    _mm256_storeu_ps(cr, v0);                          \
    _mm256_storeu_ps(cr + 8, v1);                      \
  } while (0)
    TK_ROW(0, c00, c01);
    TK_ROW(1, c10, c11);
    TK_ROW(2, c20, c21);
    TK_ROW(3, c30, c31);
    TK_ROW(4, c40, c41);
    TK_ROW(5, c50, c51);
#undef TK_ROW
    return;
  }
  float t[TK_MR * 16];
  _mm256_storeu_ps(t + 0, c00);
  _mm256_storeu_ps(t + 8, c01);
  _mm256_storeu_ps(t + 16, c10);
  _mm256_storeu_ps(t + 24, c11);
  _mm256_storeu_ps(t + 32, c20);
  _mm256_storeu_ps(t + 40, c21);
  _mm256_storeu_ps(t + 48, c30);
  _mm256_storeu_ps(t + 56, c31);
  _mm256_storeu_ps(t + 64, c40);
  _mm256_storeu_ps(t + 72, c41);
  _mm256_storeu_ps(t + 80, c50);
  _mm256_storeu_ps(t + 88, c51);
  store_tile(t, 16, c, ldc, mr, nr, acc);
}

// row32_masks sets the masks of the first nr <= 32 lanes of a 32-wide
// register row held as two vectors (m0: lanes 0..15, m1: 16..31).
TK_INLINE TK_TARGET_AVX512 void row32_masks(int nr, __mmask16 *m0, __mmask16 *m1) {
  *m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
  *m1 = nr >= 32 ? 0xffff : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
}

// store_row32 writes (acc: adds to) the masked lanes of the register row
// (v0, v1) to cr: the edge tiles of the AVX-512 f32 and bf16 GEMMs.
TK_INLINE TK_TARGET_AVX512 void store_row32(float *cr, __m512 v0, __m512 v1, __mmask16 m0,
                                            __mmask16 m1, int acc) {
  if (acc) {
    v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, cr));
    v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, cr + 16));
  }
  _mm512_mask_storeu_ps(cr, m0, v0);
  _mm512_mask_storeu_ps(cr + 16, m1, v1);
}

// ukr512 is the AVX-512 microkernel for np (1 or 2) A panels at once: an
// (np*MR) x 32 register tile, a0 rows 0..5 and a1 rows 6..11 (a1 is the
// next panel, unused when np is 1). Two panels give 24 accumulators, so
// each 32-wide B row loaded from L1 feeds 24 FMAs instead of 12. The valid
// mr x nr corner goes to c straight from the registers: plain stores for a
// full tile, masked ones at the edges, no store_tile pass through a
// temporary. Each output is the same FMA chain over p as the 6x32 tile's,
// so results are bit-identical to it.
static inline __attribute__((always_inline)) TK_TARGET_AVX512 void
ukr512(const int np, int kc, const float *a0, const float *a1, int mr,
       const float *b, float *c, long ldc, int nr, int acc) {
  __m512 t0[2 * TK_MR], t1[2 * TK_MR];
#pragma GCC unroll 12
  for (int r = 0; r < np * TK_MR; r++) {
    t0[r] = _mm512_setzero_ps();
    t1[r] = _mm512_setzero_ps();
  }
  for (int p = 0; p < kc; p++) {
    __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 12
    for (int r = 0; r < np * TK_MR; r++) {
      __m512 av = _mm512_set1_ps(r < TK_MR ? a0[r] : a1[r - TK_MR]);
      t0[r] = _mm512_fmadd_ps(av, b0, t0[r]);
      t1[r] = _mm512_fmadd_ps(av, b1, t1[r]);
    }
    a0 += TK_MR;
    if (np > 1) a1 += TK_MR;
    b += 32;
  }
  if (mr == np * TK_MR && nr == 32) {
#pragma GCC unroll 12
    for (int r = 0; r < np * TK_MR; r++) {
      float *cr = c + (size_t)r * ldc;
      __m512 v0 = t0[r], v1 = t1[r];
      if (acc) {
        v0 = _mm512_add_ps(v0, _mm512_loadu_ps(cr));
        v1 = _mm512_add_ps(v1, _mm512_loadu_ps(cr + 16));
      }
      _mm512_storeu_ps(cr, v0);
      _mm512_storeu_ps(cr + 16, v1);
    }
    return;
  }
  __mmask16 m0, m1;
  row32_masks(nr, &m0, &m1);
#pragma GCC unroll 12
  for (int r = 0; r < np * TK_MR; r++) {
    if (r >= mr) break;
    store_row32(c + (size_t)r * ldc, t0[r], t1[r], m0, m1, acc);
  }
}

static TK_TARGET_AVX512 void ukr_avx512(int kc, const float *a, int mr,
                                        const float *b, float *c, long ldc,
                                        int nr, int acc) {
  ukr512(1, kc, a, a, mr, b, c, ldc, nr, acc);
}

// ukr_avx512x2 is the 12x32 tile: a is panel i, a1 panel i+1 (mr > MR).
static TK_TARGET_AVX512 void ukr_avx512x2(int kc, const float *a,
                                          const float *a1, int mr,
                                          const float *b, float *c, long ldc,
                                          int nr, int acc) {
  ukr512(2, kc, a, a1, mr, b, c, ldc, nr, acc);
}
#endif

void tk_gemm_tile(int isa, int wtype, const uint8_t *w, size_t wrow,
                  const float *pa, float *y, long ldy, int k, int m, int n0,
                  int n1, float *pb, float *tmp) {
  int nr = tk_nr(isa);
  int nc = n1 - n0;
  for (int k0 = 0; k0 < k; k0 += TK_KC) {
    int kc = k - k0 < TK_KC ? k - k0 : TK_KC;
    // The packed weight block (nc x kc) is built once and stays in L2 while
    // every row block of x passes over it.
#if TK_X86
    if (isa != TK_PORTABLE)
      pack_b_avx2(nr, wtype, w, wrow, n0, nc, k0, kc, pb);
    else
#endif
      pack_b_portable(nr, wtype, w, wrow, n0, nc, k0, kc, pb, tmp);
    // The next depth block's weight lines are prefetched into L2, a share
    // per (row block, panel) step, while this block is computed, so packing
    // it does not wait on memory (in prefill pack_b read the weights from
    // DRAM at ~15% of the microkernel's time on F16, ~12% of the run on
    // F32). (prow, pline) walks the lines row by row: no division per line.
    size_t pbeg = 0, plines = 0, pall = 0, psteps = 1, pstep = 0, pdone = 0;
    size_t prow = 0, pline = 0;
#if TK_X86
    if (isa != TK_PORTABLE && k0 + TK_KC < k) {
      int kn = k - k0 - TK_KC < TK_KC ? k - k0 - TK_KC : TK_KC;
      pbeg = tk_row_bytes(wtype, k0 + TK_KC);
      // + 1: a row's span need not start on a line.
      plines = (tk_row_bytes(wtype, k0 + TK_KC + kn) - pbeg + 63) / 64 + 1;
      pall = plines * (size_t)nc;
      psteps = (size_t)((m + TK_MC - 1) / TK_MC) * (size_t)((nc + nr - 1) / nr);
    }
#endif
    for (int i0 = 0; i0 < m; i0 += TK_MC) {
      int i1 = m - i0 < TK_MC ? m : i0 + TK_MC;
      // One packed B panel (kc x NR, 16 KiB on AVX2) stays in L1 while the
      // A panels of the row block (in L2) stream past it.
      for (int jp = 0; jp < nc; jp += nr, pstep++) {
#if TK_X86
        for (size_t pend = pall * (pstep + 1) / psteps; pdone < pend; pdone++) {
          _mm_prefetch((const char *)(w + (size_t)(n0 + prow) * wrow + pbeg + 64 * pline),
                       _MM_HINT_T1);
          if (++pline == plines) pline = 0, prow++;
        }
#endif
        const float *bp = pb + (size_t)jp * kc;
        int cols = nc - jp < nr ? nc - jp : nr;
#if TK_X86
        if (isa == TK_AVX512) {
          // Two MR-row panels per tile (MC is a multiple of 2*MR); a last
          // block of at most MR rows takes the 6x32 tile.
          for (int ip = i0; ip < i1; ip += 2 * TK_MR) {
            const float *ap = pa + (size_t)ip * k + (size_t)k0 * TK_MR;
            int rows = i1 - ip < 2 * TK_MR ? i1 - ip : 2 * TK_MR;
            float *c = y + (size_t)ip * ldy + n0 + jp;
            if (rows > TK_MR)
              ukr_avx512x2(kc, ap, ap + (size_t)TK_MR * k, rows, bp, c, ldy, cols, k0 > 0);
            else
              ukr_avx512(kc, ap, rows, bp, c, ldy, cols, k0 > 0);
          }
          continue;
        }
#endif
        for (int ip = i0; ip < i1; ip += TK_MR) {
          const float *ap = pa + (size_t)ip * k + (size_t)k0 * TK_MR;
          int rows = i1 - ip < TK_MR ? i1 - ip : TK_MR;
          float *c = y + (size_t)ip * ldy + n0 + jp;
#if TK_X86
          if (isa == TK_AVX2) {
            ukr_avx2(kc, ap, rows, bp, c, ldy, cols, k0 > 0);
            continue;
          }
#endif
          ukr_portable(kc, ap, rows, bp, c, ldy, cols, k0 > 0);
        }
      }
    }
  }
}

#if TK_X86
#define TK_TARGET_BF16_GEMM                                              \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16," \
                        "avx2,fma,f16c")))

// ukr_bf16 is ukr_avx512 with bf16 pairs: a is [kh][MR] pairs of x, b is
// [kh][32] pairs of W (depth 2p, 2p+1 of one column per 32-bit lane); one
// vdpbf16ps does 16 columns x 2 depths for one row. The valid mr x nr
// corner goes to c with masked stores straight from the registers (a
// scalar store_tile pass cost ~5% of the tile).
static TK_TARGET_BF16_GEMM void ukr_bf16(int kh, const uint32_t *a, int mr,
                                         const uint32_t *b, float *c,
                                         long ldc, int nr, int acc) {
  __m512 t0[TK_MR], t1[TK_MR];
  for (int r = 0; r < TK_MR; r++) {
    t0[r] = _mm512_setzero_ps();
    t1[r] = _mm512_setzero_ps();
  }
  for (int p = 0; p < kh; p++) {
    __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void *)b);
    __m512bh b1 = (__m512bh)_mm512_loadu_si512((const void *)(b + 16));
    for (int r = 0; r < TK_MR; r++) {
      __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[r]);
      t0[r] = _mm512_dpbf16_ps(t0[r], av, b0);
      t1[r] = _mm512_dpbf16_ps(t1[r], av, b1);
    }
    a += TK_MR;
    b += 32;
  }
  __mmask16 m0, m1;
  row32_masks(nr, &m0, &m1);
  for (int r = 0; r < TK_MR && r < mr; r++) {
    store_row32(c + (size_t)r * ldc, t0[r], t1[r], m0, m1, acc);
  }
}
#endif

void tk_gemm_tile_bf16(const uint8_t *w, size_t wrow, const uint32_t *pa,
                       float *y, long ldy, int k, int m, int n0, int n1,
                       float *pb) {
#if TK_X86
  const int nr = 32, nc = n1 - n0, kh = k / 2;
  for (int k0 = 0; k0 < k; k0 += TK_BF16_GKC) {
    int kc = k - k0 < TK_BF16_GKC ? k - k0 : TK_BF16_GKC;
    // A bf16 row holds kc/2 32-bit pairs, so the F32 packer transposes
    // pairs into [kc/2][32] panels.
    pack_b_avx2(nr, TK_F32, w, wrow, n0, nc, k0 / 2, kc / 2, pb);
    const uint32_t *pbu = (const uint32_t *)(const void *)pb;
    for (int i0 = 0; i0 < m; i0 += TK_MC) {
      int i1 = m - i0 < TK_MC ? m : i0 + TK_MC;
      for (int jp = 0; jp < nc; jp += nr) {
        const uint32_t *bp = pbu + (size_t)jp * (kc / 2);
        int cols = nc - jp < nr ? nc - jp : nr;
        for (int ip = i0; ip < i1; ip += TK_MR) {
          const uint32_t *ap = pa + (size_t)ip * kh + (size_t)(k0 / 2) * TK_MR;
          int rows = i1 - ip < TK_MR ? i1 - ip : TK_MR;
          ukr_bf16(kc / 2, ap, rows, bp, y + (size_t)ip * ldy + n0 + jp, ldy, cols, k0 > 0);
        }
      }
    }
  }
#else
  (void)w, (void)wrow, (void)pa, (void)y, (void)ldy, (void)k, (void)m, (void)n0, (void)n1, (void)pb;
#endif
}

// ---- GEMV: 1..4 activation rows, every weight row read once ----

static void gemv_portable(int wtype, const uint8_t *w, size_t wrow,
                          const float *x, int m, float *y, long ldy, int k,
                          int n0, int n1, float *tmp) {
  for (int n = n0; n < n1; n++) {
    const uint8_t *row = w + (size_t)n * wrow;
    const float *wv;
    if (wtype == TK_F32) {
      wv = (const float *)(const void *)row;
    } else {
      tk_cvt_portable(wtype, row, 0, k, tmp);
      wv = tmp;
    }
    for (int r = 0; r < m; r++) {
      const float *xr = x + (size_t)r * k;
      // Eight partial sums: the compiler vectorises this without fast-math.
      float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int c = 0;
      for (; c + 8 <= k; c += 8)
        for (int j = 0; j < 8; j++) s[j] += xr[c + j] * wv[c + j];
      float t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
      for (; c < k; c++) t += xr[c] * wv[c];
      y[(size_t)r * ldy + n] = t;
    }
  }
}

#if TK_X86
// gemv_avx2_body is instantiated with constant M (rows of x), U (vectors per
// step) and WT (weight type) so every loop below unrolls into registers.
TK_INLINE TK_TARGET_AVX2 void gemv_avx2_body(const int M, const int U,
                                             const int WT, const uint8_t *w,
                                             size_t wrow, const float *x,
                                             float *y, long ldy, int k,
                                             int n0, int n1) {
  for (int n = n0; n < n1; n++) {
    const uint8_t *row = w + (size_t)n * wrow;
    // F32 rows stream no faster with the prefetch (2 of 5 paired tg128
    // rounds, median 0.84x); F16 and BF16 4 and 5 of 5.
    if (WT != TK_F32) tk_pf_row(row, wrow);
    __m256 acc[4][4];
    for (int r = 0; r < M; r++)
      for (int u = 0; u < U; u++) acc[r][u] = _mm256_setzero_ps();
    int c = 0;
    for (; c + 8 * U <= k; c += 8 * U) {
      __m256 wv[4];
      for (int u = 0; u < U; u++) wv[u] = tk_ld8(WT, row, c + 8 * u);
      for (int r = 0; r < M; r++)
        for (int u = 0; u < U; u++)
          acc[r][u] = _mm256_fmadd_ps(
              wv[u], _mm256_loadu_ps(x + (size_t)r * k + c + 8 * u), acc[r][u]);
    }
    for (; c + 8 <= k; c += 8) {
      __m256 wv = tk_ld8(WT, row, c);
      for (int r = 0; r < M; r++)
        acc[r][0] =
            _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + (size_t)r * k + c), acc[r][0]);
    }
    for (int r = 0; r < M; r++) {
      __m256 s = acc[r][0];
      for (int u = 1; u < U; u++) s = _mm256_add_ps(s, acc[r][u]);
      float t = tk_hsum8(s);
      for (int cc = c; cc < k; cc++) t += x[(size_t)r * k + cc] * tk_w1(WT, row, cc);
      y[(size_t)r * ldy + n] = t;
    }
  }
}

// gemv_q8_body is the Q8_0 GEMV: per 32-weight block the int8 values are
// widened once, dotted with x, and the block sum is scaled by d once (not
// per vector). Two accumulators per row (even and odd blocks) hide the FMA
// latency of the per-block update.
// q8_block_dot returns Σ q·x over one block as 8 partial sums (not yet
// scaled by d).
TK_INLINE TK_TARGET_AVX2 __m256 q8_block_dot(const __m256 q[4], const float *xr) {
  __m256 t0 = _mm256_mul_ps(q[0], _mm256_loadu_ps(xr));
  __m256 t1 = _mm256_mul_ps(q[1], _mm256_loadu_ps(xr + 8));
  t0 = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(xr + 16), t0);
  t1 = _mm256_fmadd_ps(q[3], _mm256_loadu_ps(xr + 24), t1);
  return _mm256_add_ps(t0, t1);
}

TK_INLINE TK_TARGET_AVX2 void q8_block_load(const uint8_t *blk, __m256 *d,
                                            __m256 q[4]) {
  *d = _mm256_set1_ps(_cvtsh_ss(tk_load_u16(blk)));
  for (int u = 0; u < 4; u++)
    q[u] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
        _mm_loadl_epi64((const __m128i *)(const void *)(blk + 2 + 8 * u))));
}

// gemv_q8_body is the Q8_0 GEMV: per 32-weight block the int8 values are
// widened once, dotted with x, and the block sum is scaled by d once (not
// per vector). Blocks go in pairs with one accumulator each, so the
// per-block update's FMA latency is hidden and the accumulators stay in
// registers.
TK_INLINE TK_TARGET_AVX2 void gemv_q8_body(const int M, const uint8_t *w,
                                           size_t wrow, const float *x,
                                           float *y, long ldy, int k, int n0,
                                           int n1) {
  const int nb = k / TK_QK;
  for (int n = n0; n < n1; n++) {
    const uint8_t *row = w + (size_t)n * wrow;
    __m256 acc0[4], acc1[4];
    for (int r = 0; r < M; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();
    int b = 0;
    for (; b + 2 <= nb; b += 2) {
      __m256 d0, d1, q0[4], q1[4];
      q8_block_load(row + (size_t)b * TK_Q8_BYTES, &d0, q0);
      q8_block_load(row + (size_t)(b + 1) * TK_Q8_BYTES, &d1, q1);
      for (int r = 0; r < M; r++) {
        const float *xr = x + (size_t)r * k + b * TK_QK;
        acc0[r] = _mm256_fmadd_ps(d0, q8_block_dot(q0, xr), acc0[r]);
        acc1[r] = _mm256_fmadd_ps(d1, q8_block_dot(q1, xr + TK_QK), acc1[r]);
      }
    }
    if (b < nb) {
      __m256 d0, q0[4];
      q8_block_load(row + (size_t)b * TK_Q8_BYTES, &d0, q0);
      for (int r = 0; r < M; r++)
        acc0[r] = _mm256_fmadd_ps(d0, q8_block_dot(q0, x + (size_t)r * k + b * TK_QK), acc0[r]);
    }
    for (int r = 0; r < M; r++)
      y[(size_t)r * ldy + n] = tk_hsum8(_mm256_add_ps(acc0[r], acc1[r]));
  }
}

#define TK_GEMV_M(WT)                                                       \
  switch (m) {                                                              \
    case 1:                                                                 \
      gemv_avx2_body(1, 4, WT, w, wrow, x, y, ldy, k, n0, n1);              \
      return;                                                               \
    case 2:                                                                 \
      gemv_avx2_body(2, 4, WT, w, wrow, x, y, ldy, k, n0, n1);              \
      return;                                                               \
    case 3:                                                                 \
      gemv_avx2_body(3, 2, WT, w, wrow, x, y, ldy, k, n0, n1);              \
      return;                                                               \
    default:                                                                \
      gemv_avx2_body(4, 2, WT, w, wrow, x, y, ldy, k, n0, n1);              \
      return;                                                               \
  }

static TK_TARGET_AVX2 void gemv_avx2(int wtype, const uint8_t *w, size_t wrow,
                                     const float *x, int m, float *y, long ldy,
                                     int k, int n0, int n1) {
  if (tk_is_blk(wtype)) {  // tk_quant.c: decoded in registers
    tk_gemv_blk_avx2(wtype, w, wrow, x, m, y, ldy, k, n0, n1);
    return;
  }
  switch (wtype) {
    case TK_F32:
      TK_GEMV_M(TK_F32);
    case TK_F16:
      TK_GEMV_M(TK_F16);
    case TK_BF16:
      TK_GEMV_M(TK_BF16);
    default:  // Q8_0
      switch (m) {
        case 1:
          gemv_q8_body(1, w, wrow, x, y, ldy, k, n0, n1);
          return;
        case 2:
          gemv_q8_body(2, w, wrow, x, y, ldy, k, n0, n1);
          return;
        case 3:
          gemv_q8_body(3, w, wrow, x, y, ldy, k, n0, n1);
          return;
        default:
          gemv_q8_body(4, w, wrow, x, y, ldy, k, n0, n1);
          return;
      }
  }
}
#undef TK_GEMV_M
#endif

#if TK_X86
// ---- streaming GEMM: 5..32 rows of x, every weight row read once ----

// mm_avx2_body computes the M x N block y[r][n+j] (r < M ≤ 4, j < N ≤ 3)
// over len columns in dot-product form, with float32 weight rows: per step
// 12 FMAs from 4 + 3 vector loads, 12 accumulators in registers. (Measured
// on Zen 3 at m=32, k=768: 4x3 runs 77 GFLOP/s/core, 3x4 69, 2x6 47 — the
// compiler loads each weight twice there — and the packed GEMM 62.)
// x points at the first column (rows k floats apart); weight rows are wrow
// bytes apart. acc adds to y instead of storing.
TK_INLINE TK_TARGET_AVX2 void mm_avx2_body(const int M, const int N,
                                           const float *w, size_t wrow,
                                           const float *x, int k, int len,
                                           float *y, long ldy, int n, int acc) {
  const float *row[3];
  for (int j = 0; j < N; j++)
    row[j] = (const float *)(const void *)((const uint8_t *)(const void *)w +
                                           (size_t)(n + j) * wrow);
  __m256 a[4][3];
  for (int r = 0; r < M; r++)
    for (int j = 0; j < N; j++) a[r][j] = _mm256_setzero_ps();
  int c = 0;
  for (; c + 8 <= len; c += 8) {
    __m256 xv[4];
    for (int r = 0; r < M; r++) xv[r] = _mm256_loadu_ps(x + (size_t)r * k + c);
    for (int j = 0; j < N; j++) {
      __m256 wv = _mm256_loadu_ps(row[j] + c);
      for (int r = 0; r < M; r++) a[r][j] = _mm256_fmadd_ps(wv, xv[r], a[r][j]);
    }
  }
  for (int r = 0; r < M; r++)
    for (int j = 0; j < N; j++) {
      float t = tk_hsum8(a[r][j]);
      for (int cc = c; cc < len; cc++) t += x[(size_t)r * k + cc] * row[j][cc];
      float *d = y + (size_t)r * ldy + n + j;
      *d = acc ? *d + t : t;
    }
}

#define TK_MM_N(M)                                                 \
  switch (nn) {                                                    \
    case 1:                                                        \
      mm_avx2_body(M, 1, w, wrow, x, k, len, y, ldy, n, acc);      \
      return;                                                      \
    case 2:                                                        \
      mm_avx2_body(M, 2, w, wrow, x, k, len, y, ldy, n, acc);      \
      return;                                                      \
    default:                                                       \
      mm_avx2_body(M, 3, w, wrow, x, k, len, y, ldy, n, acc);      \
      return;                                                      \
  }

static TK_TARGET_AVX2 void mm_avx2_f32(const float *w, size_t wrow,
                                       const float *x, int k, int len, int mm,
                                       float *y, long ldy, int n, int nn,
                                       int acc) {
  switch (mm) {
    case 1:
      TK_MM_N(1);
    case 2:
      TK_MM_N(2);
    case 3:
      TK_MM_N(3);
    default:
      TK_MM_N(4);
  }
}
#undef TK_MM_N

// TK_STREAM_XBYTES bounds the bytes of x one depth chunk spans (m rows),
// so x stays in L2 while the weight rows of the tile stream past it.
#define TK_STREAM_XBYTES (192 * 1024)
#define TK_STREAM_KMAX 768

static TK_TARGET_AVX2 void stream_avx2(int wtype, const uint8_t *w,
                                       size_t wrow, const float *x, int m,
                                       float *y, long ldy, int k, int n0,
                                       int n1, float *tmp) {
  // Depth chunks: equal, multiples of 32 (whole Q8_0 and legacy blocks)
  // or of 256 (whole K-quant super-blocks), with the m rows' share of x
  // under TK_STREAM_XBYTES (L2) and a weight row's share at most
  // TK_STREAM_KMAX floats (L1).
  int kmax = TK_STREAM_XBYTES / (4 * m);
  kmax = kmax < 256 ? 256 : kmax > TK_STREAM_KMAX ? TK_STREAM_KMAX : kmax;
  int nchunks = (k + kmax - 1) / kmax;
  int kc = (k + nchunks - 1) / nchunks;
  int align = tk_blk_elems(wtype) > 32 ? tk_blk_elems(wtype) : 32;
  kc = (kc + align - 1) / align * align;
  for (int c0 = 0; c0 < k; c0 += kc) {
    int len = k - c0 < kc ? k - c0 : kc;
    // Bytes [pb0, pb1) of a weight row hold columns [c0, c0+len).
    size_t pb0 = tk_row_bytes(wtype, c0), pb1 = tk_row_bytes(wtype, c0 + len);
    // Three weight rows stay in L1 while every row of x passes over them,
    // so each weight is read from memory once. F32 rows are used in place;
    // other types are converted once per chunk into tmp (3 x len floats,
    // in L1), not once per group of x rows.
    for (int n = n0; n < n1; n += 3) {
      int nn = n1 - n < 3 ? n1 - n : 3;
      const float *wb = (const float *)(const void *)w + c0;
      size_t wr = wrow;
      int nb = n;
      if (wtype != TK_F32) {
        for (int j = 0; j < nn; j++)
          tk_cvt_avx2(wtype, w + (size_t)(n + j) * wrow, c0, len, tmp + (size_t)j * len);
        wb = tmp;
        wr = 4 * (size_t)len;
        nb = 0;
      }
      // The next three rows' chunk comes from memory while this one is
      // computed: each group of x rows prefetches its share of its lines
      // (the hardware prefetcher alone leaves the memory idle for all but
      // the first group).
      int nx = n1 - (n + 3) < 3 ? n1 - (n + 3) : 3;
      size_t plines = nx > 0 ? (pb1 - pb0 + 63) / 64 : 0;
      size_t groups = (size_t)(m + 3) / 4, g = 0;
      for (int r = 0; r < m; r += 4, g++) {
        int mm = m - r < 4 ? m - r : 4;
        for (size_t i = plines * g / groups; i < plines * (g + 1) / groups; i++)
          for (int j = 0; j < nx; j++)
            _mm_prefetch((const char *)(w + (size_t)(n + 3 + j) * wrow + pb0 + 64 * i),
                         _MM_HINT_T0);
        mm_avx2_f32(wb, wr, x + (size_t)r * k + c0, k, len, mm,
                    y + (size_t)r * ldy + n - nb, ldy, nb, nn, c0 > 0);
      }
    }
  }
}
#endif

#if TK_X86
// ---- F16 weights on AVX-512F: 16-lane conversions, 4x4 register tiles ----

// f16_cvt_avx512 writes elements [c0, c0+n) of an F16 weight row to out as
// float32 (vcvtph2ps is exact), 16 at a time with a masked tail.
static TK_TARGET_AVX512 void f16_cvt_avx512(const uint8_t *row, int c0, int n,
                                            float *out) {
  const uint16_t *h = (const uint16_t *)(const void *)row + c0;
  int i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(h + i))));
  if (i < n) {
    __mmask16 mk = (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(out + i, mk, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, h + i)));
  }
}

// mm_f16_avx512 computes the M x N block y[r][j] (r < M ≤ 4, j < N ≤ 4)
// over len columns in dot-product form: x rows k floats apart, weight rows
// already float32 in wt, ld floats apart (in L1). Per 16 columns M + N
// loads feed M·N FMAs; the tail is masked. acc adds to y instead of storing.
TK_INLINE TK_TARGET_AVX512 void mm_f16_avx512(const int M, const int N,
                                              const float *wt, int ld,
                                              const float *x, int k, int len,
                                              float *y, long ldy, int acc) {
  __m512 a[4][4];
  for (int r = 0; r < M; r++)
    for (int j = 0; j < N; j++) a[r][j] = _mm512_setzero_ps();
  int c = 0;
  for (; c + 16 <= len; c += 16) {
    __m512 xv[4];
    for (int r = 0; r < M; r++) xv[r] = _mm512_loadu_ps(x + (size_t)r * k + c);
    for (int j = 0; j < N; j++) {
      __m512 wv = _mm512_loadu_ps(wt + (size_t)j * ld + c);
      for (int r = 0; r < M; r++) a[r][j] = _mm512_fmadd_ps(wv, xv[r], a[r][j]);
    }
  }
  if (c < len) {
    __mmask16 mk = (__mmask16)((1u << (len - c)) - 1);
    __m512 xv[4];
    for (int r = 0; r < M; r++) xv[r] = _mm512_maskz_loadu_ps(mk, x + (size_t)r * k + c);
    for (int j = 0; j < N; j++) {
      __m512 wv = _mm512_maskz_loadu_ps(mk, wt + (size_t)j * ld + c);
      for (int r = 0; r < M; r++) a[r][j] = _mm512_fmadd_ps(wv, xv[r], a[r][j]);
    }
  }
  if (N == 4) {
    // All 4·M sums at once by transposing adds: 128-bit lane r of s ends
    // up holding y[r][0..3] (far fewer shuffles than 16 reductions).
    __m512 q[4];
    for (int r = 0; r < 4; r++) {
      if (r >= M) {
        q[r] = _mm512_setzero_ps();
        continue;
      }
      // Per 128-bit lane: [a0+a2, a1+a3] pairs of j=0,1 and of j=2,3, then
      // [Σj0, Σj1, Σj2, Σj3] partial sums in each of the four lanes.
      __m512 p01 = _mm512_add_ps(_mm512_unpacklo_ps(a[r][0], a[r][1]), _mm512_unpackhi_ps(a[r][0], a[r][1]));
      __m512 p23 = _mm512_add_ps(_mm512_unpacklo_ps(a[r][2], a[r][3]), _mm512_unpackhi_ps(a[r][2], a[r][3]));
      __m512d d01 = _mm512_castps_pd(p01), d23 = _mm512_castps_pd(p23);
      q[r] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(d01, d23)),
                           _mm512_castpd_ps(_mm512_unpackhi_pd(d01, d23)));
    }
    // Fold the four lanes of each q[r] while gathering row r into lane r.
    __m512 h01 = _mm512_add_ps(_mm512_shuffle_f32x4(q[0], q[1], 0x44), _mm512_shuffle_f32x4(q[0], q[1], 0xee));
    __m512 h23 = _mm512_add_ps(_mm512_shuffle_f32x4(q[2], q[3], 0x44), _mm512_shuffle_f32x4(q[2], q[3], 0xee));
    __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(h01, h23, 0x88), _mm512_shuffle_f32x4(h01, h23, 0xdd));
    float t[16];
    _mm512_storeu_ps(t, s);
    for (int r = 0; r < M; r++) {
      float *d = y + (size_t)r * ldy;
      __m128 v = _mm_loadu_ps(t + 4 * r);
      _mm_storeu_ps(d, acc ? _mm_add_ps(v, _mm_loadu_ps(d)) : v);
    }
    return;
  }
  for (int r = 0; r < M; r++)
    for (int j = 0; j < N; j++) {
      float t = _mm512_reduce_add_ps(a[r][j]);
      float *d = y + (size_t)r * ldy + j;
      *d = acc ? *d + t : t;
    }
}

#define TK_MMF16_N(M)                                              \
  switch (nn) {                                                    \
    case 1:                                                        \
      mm_f16_avx512(M, 1, wt, len, x, k, len, y, ldy, acc);        \
      return;                                                      \
    case 2:                                                        \
      mm_f16_avx512(M, 2, wt, len, x, k, len, y, ldy, acc);        \
      return;                                                      \
    case 3:                                                        \
      mm_f16_avx512(M, 3, wt, len, x, k, len, y, ldy, acc);        \
      return;                                                      \
    default:                                                       \
      mm_f16_avx512(M, 4, wt, len, x, k, len, y, ldy, acc);        \
      return;                                                      \
  }

// mm_f16_block dispatches mm_f16_avx512 on the block's rows (mm) and
// weight rows (nn), each 1..4.
static TK_TARGET_AVX512 void mm_f16_block(const float *wt, const float *x,
                                          int k, int len, int mm, int nn,
                                          float *y, long ldy, int acc) {
  switch (mm) {
    case 1:
      TK_MMF16_N(1);
    case 2:
      TK_MMF16_N(2);
    case 3:
      TK_MMF16_N(3);
    default:
      TK_MMF16_N(4);
  }
}
#undef TK_MMF16_N

// stream_f16_rows is stream_avx2 for F16 weights on AVX-512F: weight rows
// four at a time, each row's depth chunk converted once into tmp (4 x len
// floats, in L1), then every group of four x rows passes over them with
// 16-lane FMAs. tmp holds at least 4·k floats.
static TK_TARGET_AVX512 void stream_f16_rows(const uint8_t *w, size_t wrow,
                                             const float *x, int m, float *y,
                                             long ldy, int k, int n0, int n1,
                                             float *tmp) {
  // Depth chunks as in stream_avx2 (x's share in L2, a weight row's in L1),
  // multiples of 16 columns.
  int kmax = TK_STREAM_XBYTES / (4 * m);
  kmax = kmax < 256 ? 256 : kmax > TK_STREAM_KMAX ? TK_STREAM_KMAX : kmax;
  int nchunks = (k + kmax - 1) / kmax;
  int kc = (k + nchunks - 1) / nchunks;
  kc = (kc + 15) / 16 * 16;
  for (int c0 = 0; c0 < k; c0 += kc) {
    int len = k - c0 < kc ? k - c0 : kc;
    for (int n = n0; n < n1; n += 4) {
      int nn = n1 - n < 4 ? n1 - n : 4;
      for (int j = 0; j < nn; j++)
        f16_cvt_avx512(w + (size_t)(n + j) * wrow, c0, len, tmp + (size_t)j * len);
      // The next four rows' chunk is prefetched, a share per group of x
      // rows, while this one is computed.
      int nx = n1 - (n + 4) < 4 ? n1 - (n + 4) : 4;
      size_t plines = nx > 0 ? (2 * (size_t)len + 63) / 64 + 1 : 0;
      size_t groups = (size_t)(m + 3) / 4, g = 0;
      for (int r = 0; r < m; r += 4, g++) {
        int mm = m - r < 4 ? m - r : 4;
        for (size_t i = plines * g / groups; i < plines * (g + 1) / groups; i++)
          for (int j = 0; j < nx; j++)
            _mm_prefetch((const char *)(w + (size_t)(n + 4 + j) * wrow + 2 * (size_t)c0 + 64 * i),
                         _MM_HINT_T0);
        mm_f16_block(tmp, x + (size_t)r * k + c0, k, len, mm, nn,
                     y + (size_t)r * ldy + n, ldy, c0 > 0);
      }
    }
  }
}

// TK_F16_XROWS is the most rows of x one pass of stream_f16_rows takes:
// more rows (prefill) go in blocks of this many, each a pass over the
// tile's weight rows (from L2/L3 after the first), so the block's share of
// x stays in L2 at full depth chunks (MatMul streams F16 up to 64 rows;
// past that the packed GEMM's outer-product tile won, measured at m=512).
#define TK_F16_XROWS 64

static TK_TARGET_AVX512 void stream_f16_avx512(const uint8_t *w, size_t wrow,
                                               const float *x, int m,
                                               float *y, long ldy, int k,
                                               int n0, int n1, float *tmp) {
  for (int r0 = 0; r0 < m; r0 += TK_F16_XROWS) {
    int mb = m - r0 < TK_F16_XROWS ? m - r0 : TK_F16_XROWS;
    stream_f16_rows(w, wrow, x + (size_t)r0 * k, mb, y + (size_t)r0 * ldy, ldy, k, n0, n1, tmp);
  }
}
#endif

#if TK_X86
// ---- AVX-512 F32 streaming: 5..32 rows of x, every weight row read once ----

// mm512_f32_body computes the M x N block y[r][n+j] (r < M ≤ 4, j < N ≤ 6)
// over len columns in dot-product form, as mm_avx2_body does at 16 floats a
// vector: per step M + N loads and M·N FMAs, 24 accumulators at 4x6. A wider
// N than AVX2's 3 halves how often x is re-read from L2. acc adds to y.
TK_INLINE TK_TARGET_AVX512 void mm512_f32_body(const int M, const int N,
                                               const float *w, size_t wrow,
                                               const float *x, int k, int len,
                                               float *y, long ldy, int n,
                                               int acc) {
  const float *row[6];
  for (int j = 0; j < N; j++)
    row[j] = (const float *)(const void *)((const uint8_t *)(const void *)w +
                                           (size_t)(n + j) * wrow);
  __m512 a[4][6];
  for (int r = 0; r < M; r++)
    for (int j = 0; j < N; j++) a[r][j] = _mm512_setzero_ps();
  int c = 0;
  for (; c + 16 <= len; c += 16) {
    __m512 xv[4];
    for (int r = 0; r < M; r++) xv[r] = _mm512_loadu_ps(x + (size_t)r * k + c);
    for (int j = 0; j < N; j++) {
      __m512 wv = _mm512_loadu_ps(row[j] + c);
      for (int r = 0; r < M; r++) a[r][j] = _mm512_fmadd_ps(wv, xv[r], a[r][j]);
    }
  }
  if (c < len) {
    __mmask16 mk = (__mmask16)((1u << (len - c)) - 1);
    __m512 xv[4];
    for (int r = 0; r < M; r++) xv[r] = _mm512_maskz_loadu_ps(mk, x + (size_t)r * k + c);
    for (int j = 0; j < N; j++) {
      __m512 wv = _mm512_maskz_loadu_ps(mk, row[j] + c);
      for (int r = 0; r < M; r++) a[r][j] = _mm512_fmadd_ps(wv, xv[r], a[r][j]);
    }
  }
  for (int r = 0; r < M; r++)
    for (int j = 0; j < N; j++) {
      float t = _mm512_reduce_add_ps(a[r][j]);
      float *d = y + (size_t)r * ldy + n + j;
      *d = acc ? *d + t : t;
    }
}

#define TK_MM512_N(M)                                              \
  switch (nn) {                                                    \
    case 1:                                                        \
      mm512_f32_body(M, 1, w, wrow, x, k, len, y, ldy, n, acc);    \
      return;                                                      \
    case 2:                                                        \
      mm512_f32_body(M, 2, w, wrow, x, k, len, y, ldy, n, acc);    \
      return;                                                      \
    case 3:                                                        \
      mm512_f32_body(M, 3, w, wrow, x, k, len, y, ldy, n, acc);    \
      return;                                                      \
    case 4:                                                        \
      mm512_f32_body(M, 4, w, wrow, x, k, len, y, ldy, n, acc);    \
      return;                                                      \
    case 5:                                                        \
      mm512_f32_body(M, 5, w, wrow, x, k, len, y, ldy, n, acc);    \
      return;                                                      \
    default:                                                       \
      mm512_f32_body(M, 6, w, wrow, x, k, len, y, ldy, n, acc);    \
      return;                                                      \
  }

static TK_TARGET_AVX512 void mm512_f32(const float *w, size_t wrow,
                                       const float *x, int k, int len, int mm,
                                       float *y, long ldy, int n, int nn,
                                       int acc) {
  switch (mm) {
    case 1:
      TK_MM512_N(1);
    case 2:
      TK_MM512_N(2);
    case 3:
      TK_MM512_N(3);
    default:
      TK_MM512_N(4);
  }
}
#undef TK_MM512_N

// TK_STREAM512_NR is the weight rows stream512_f32 keeps in L1 at a time
// (measured on Zen 5, one core, 110M shapes, per CPU-second vs AVX2: 6 rows
// 1.2-1.5x at m=8..32, 4 rows 1.1-1.3x, 3 rows 0.75x; prefetching into L2
// instead of L1 was no faster).
#define TK_STREAM512_NR 6

// stream512_f32 is stream_avx2 for F32 weights on AVX-512: the same depth
// chunks (x's share in L2, a weight row's in L1), six weight rows at a time
// used in place, and the next six rows' chunk prefetched across the groups
// of x rows.
static TK_TARGET_AVX512 void stream512_f32(const uint8_t *w, size_t wrow,
                                           const float *x, int m, float *y,
                                           long ldy, int k, int n0, int n1) {
  const int NR = TK_STREAM512_NR;
  int kmax = TK_STREAM_XBYTES / (4 * m);
  kmax = kmax < 256 ? 256 : kmax > TK_STREAM_KMAX ? TK_STREAM_KMAX : kmax;
  int nchunks = (k + kmax - 1) / kmax;
  int kc = (k + nchunks - 1) / nchunks;
  kc = (kc + 31) / 32 * 32;
  for (int c0 = 0; c0 < k; c0 += kc) {
    int len = k - c0 < kc ? k - c0 : kc;
    size_t pb0 = 4 * (size_t)c0, pb1 = 4 * (size_t)(c0 + len);
    const float *wb = (const float *)(const void *)w + c0;
    for (int n = n0; n < n1; n += NR) {
      int nn = n1 - n < NR ? n1 - n : NR;
      int nx = n1 - (n + NR) < NR ? n1 - (n + NR) : NR;
      size_t plines = nx > 0 ? (pb1 - pb0 + 63) / 64 : 0;
      size_t groups = (size_t)(m + 3) / 4, g = 0;
      for (int r = 0; r < m; r += 4, g++) {
        int mm = m - r < 4 ? m - r : 4;
        for (size_t i = plines * g / groups; i < plines * (g + 1) / groups; i++)
          for (int j = 0; j < nx; j++)
            _mm_prefetch((const char *)(w + (size_t)(n + NR + j) * wrow + pb0 + 64 * i),
                         _MM_HINT_T0);
        mm512_f32(wb, wrow, x + (size_t)r * k + c0, k, len, mm, y + (size_t)r * ldy, ldy,
                  n, nn, c0 > 0);
      }
    }
  }
}
#endif

void tk_stream_tile(int isa, int wtype, const uint8_t *w, size_t wrow,
                    const float *x, int m, float *y, long ldy, int k, int n0,
                    int n1, float *tmp) {
#if TK_X86

  if (isa == TK_AVX512 && wtype == TK_F32) {
    stream512_f32(w, wrow, x, m, y, ldy, k, n0, n1);
    return;
  }
  if (isa == TK_AVX512 && wtype == TK_F16) {
    stream_f16_avx512(w, wrow, x, m, y, ldy, k, n0, n1, tmp);
    return;
  }
  if (isa != TK_PORTABLE) {
    stream_avx2(wtype, w, wrow, x, m, y, ldy, k, n0, n1, tmp);
    return;
  }
#endif
  (void)isa;
  // The portable GEMV converts each weight row once for all m rows.
  gemv_portable(wtype, w, wrow, x, m, y, ldy, k, n0, n1, tmp);
}

void tk_gemv_tile(int isa, int wtype, const uint8_t *w, size_t wrow,
                  const float *x, int m, float *y, long ldy, int k, int n0,
                  int n1, float *tmp) {
  // More than four rows are done four at a time (each pass re-reads W).
  while (m > 0) {
    int mm = m < 4 ? m : 4;
#if TK_X86
    // AVX-512 machines run the AVX2 GEMV: it is bandwidth-bound, so wider
    // registers do not make it faster (an AVX-512 F32 GEMV measured the
    // same per CPU-second on Zen 5, and 10-15% slower with software
    // prefetch 512 B to 8 KiB ahead).
    if (isa != TK_PORTABLE) {
      gemv_avx2(wtype, w, wrow, x, mm, y, ldy, k, n0, n1);
    } else
#endif
    {
      (void)isa;
      gemv_portable(wtype, w, wrow, x, mm, y, ldy, k, n0, n1, tmp);
    }
    m -= mm;
    x += (size_t)mm * k;
    y += (size_t)mm * ldy;
  }
}

void tk_dequant_rows(int isa, int wtype, const uint8_t *w, size_t wrow,
                     int cols, const int32_t *rows, int nrows, float *out) {
  for (int i = 0; i < nrows; i++)
    tk_cvt(isa, wtype, w + (size_t)rows[i] * wrow, 0, cols, out + (size_t)i * cols);
}

// ---- machine limits, measured in-repo ----

static double peak_portable(long iters, float *sink) {
  float a[16];
  for (int i = 0; i < 16; i++) a[i] = (float)i * 0.1f;
  for (long it = 0; it < iters; it++)
    for (int i = 0; i < 16; i++) a[i] = a[i] * 0.9999999f + 1e-7f;
  float s = 0;
  for (int i = 0; i < 16; i++) s += a[i];
  *sink = s;
  return (double)iters * 16 * 2;
}

#if TK_X86
static TK_TARGET_AVX2 double peak_avx2(long iters, float *sink) {
  // Twelve independent chains cover 2 FMA pipes x 4-5 cycles of latency.
  __m256 a[12];
  for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps((float)i * 0.1f);
  __m256 b = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < iters; it++)
    for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], b, c);
  __m256 s = a[0];
  for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, a[i]);
  *sink = tk_hsum8(s);
  return (double)iters * 12 * 8 * 2;
}

static TK_TARGET_AVX512 double peak_avx512(long iters, float *sink) {
  __m512 a[16];
  for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps((float)i * 0.1f);
  __m512 b = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < iters; it++)
    for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(a[i], b, c);
  __m512 s = a[0];
  for (int i = 1; i < 16; i++) s = _mm512_add_ps(s, a[i]);
  *sink = _mm512_reduce_add_ps(s);
  return (double)iters * 16 * 16 * 2;
}

// read_sum_avx2 reads n floats as TK_READ_STREAMS interleaved sequential
// streams, one cache line of each in turn: a core keeps more lines in
// flight over several streams than over one (2 cores here read 35-40 GB/s
// over one stream each and 44-54 GB/s over eight), and a decode step's
// matmuls read several matrices' rows at once, so one stream would
// understate the bandwidth they can reach.
#ifndef TK_READ_STREAMS
#define TK_READ_STREAMS 8
#endif
static TK_TARGET_AVX2 float read_sum_avx2(const float *p, long n) {
  __m256 s[TK_READ_STREAMS];
  for (int j = 0; j < TK_READ_STREAMS; j++) s[j] = _mm256_setzero_ps();
  const long per = n / TK_READ_STREAMS / 16 * 16;  // whole lines per stream
  for (long i = 0; i < per; i += 16)
    for (int j = 0; j < TK_READ_STREAMS; j++) {
      const float *q = p + j * per + i;
      s[j] = _mm256_add_ps(s[j], _mm256_add_ps(_mm256_loadu_ps(q), _mm256_loadu_ps(q + 8)));
    }
  __m256 t8 = s[0];
  for (int j = 1; j < TK_READ_STREAMS; j++) t8 = _mm256_add_ps(t8, s[j]);
  float t = tk_hsum8(t8);
  for (long i = TK_READ_STREAMS * per; i < n; i++) t += p[i];
  return t;
}
#endif

double tk_peak_fma(int isa, long iters, float *sink) {
#if TK_X86
  if (isa == TK_AVX512) return peak_avx512(iters, sink);
  if (isa == TK_AVX2) return peak_avx2(iters, sink);
#endif
  (void)isa;
  return peak_portable(iters, sink);
}

float tk_read_sum(int isa, const float *p, long n) {
#if TK_X86
  if (isa != TK_PORTABLE) return read_sum_avx2(p, n);
#endif
  (void)isa;
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  long i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) s[j] += p[i + j];
  float t = 0;
  for (int j = 0; j < 8; j++) t += s[j];
  for (; i < n; i++) t += p[i];
  return t;
}
