// tk_lowp_body.h: the int8-activation matmul for one integer-dot level,
// included by tk_lowp.c once per level with
//   LPF(name)    the level's name for a function,
//   LP_TARGET    its target attribute,
//   LP_DOTB      (acc, u8 vector, s8 vector) -> acc + Σ4 u·s per int32 lane,
//   LP_DOTW      (acc, s16 vector, s16 vector) -> acc + Σ2 a·b per int32 lane,
//   LP_XOR8      1: Q8_0 weights are made unsigned by w^0x80 (the −128·Σx
//                correction rides in the activation block's corr); 0: the
//                sign trick |w|·sign(x, w), which keeps maddubs from
//                saturating,
//   LP_NMAX      weight rows per register tile (register budget),
//   LP_ZMM       (optional) 1: the 512-bit K-quant dot;
// all undefined again at the end of this file.
// Every level computes the same integers; only float summation order
// differs between levels.

// wq32 returns the 32 quants of legacy block b (Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1) as bytes: unsigned for the dot (Q8_0 signed when !LP_XOR8).
TK_INLINE LP_TARGET __m256i LPF(wq32)(const int WT, const uint8_t *b) {
  if (WT == TK_Q8_0) {
    __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(b + 2));
    return LP_XOR8 ? _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)) : v;
  }
  const int q5 = WT == TK_Q5_0 || WT == TK_Q5_1;
  const int mn = WT == TK_Q4_1 || WT == TK_Q5_1;  // a min after d: 2 bytes on
  b += 2 * mn;
  __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(b + (q5 ? 6 : 2)));
  // Elements 0..15 are the low nibbles, 16..31 the high ones.
  __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
  v = _mm256_and_si256(v, _mm256_set1_epi8(15));
  if (q5) {
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    // Byte e = 0xff where bit e of qh is set (ggml's bytes_from_bits_32).
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                           0x0101010101010101, 0x0000000000000000);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
    bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    bytes = _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
    v = _mm256_or_si256(v, _mm256_and_si256(bytes, _mm256_set1_epi8(16)));
  }
  return v;
}

// mm32_step accumulates block b of the M x N tile into acc (scale terms)
// and accm (Q4_1/Q5_1 min terms, in lane 0).
TK_INLINE LP_TARGET void LPF(mm32_step)(const int WT, const int M, const int N,
                                        const uint8_t *const *row, const int8_t *xq,
                                        const float *xd, const int32_t *xc, int k,
                                        int b, __m256 acc[4][4], __m256 accm[4][4]) {
  const int nb = k / TK_QK;
  const size_t bb = tk_blk_bytes(WT);
  const int sign = WT == TK_Q8_0 && !LP_XOR8;
  const int mn = WT == TK_Q4_1 || WT == TK_Q5_1;
  const float *xm = (const float *)(const void *)xc;  // mn: (d_x, d_x·Σq_x) per block
  __m256i wu[4];
  __m256 wd[4], wm[4];
  for (int j = 0; j < N; j++) {
    const uint8_t *blk = row[j] + (size_t)b * bb;
    wu[j] = LPF(wq32)(WT, blk);
    wd[j] = _mm256_set1_ps(_cvtsh_ss(tk_load_u16(blk)));
    if (mn) wm[j] = _mm256_set1_ps(_cvtsh_ss(tk_load_u16(blk + 2)));
  }
  for (int r = 0; r < M; r++) {
    __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(xq + (size_t)r * k + TK_QK * b));
    __m256 dx = _mm256_set1_ps(xd[(size_t)r * nb + b]);
    __m256i c0 = sign || mn ? _mm256_setzero_si256()
                            : _mm256_zextsi128_si256(_mm_cvtsi32_si128(xc[(size_t)r * nb + b]));
    __m256 xs = mn ? _mm256_zextps128_ps256(_mm_load_ss(xm + 2 * ((size_t)r * nb + b) + 1)) : _mm256_setzero_ps();
    for (int j = 0; j < N; j++) {
      __m256i s = sign ? LP_DOTB(c0, _mm256_sign_epi8(wu[j], wu[j]), _mm256_sign_epi8(xv, wu[j]))
                       : LP_DOTB(c0, wu[j], xv);
      acc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(wd[j], dx), acc[r][j]);
      if (mn) accm[r][j] = _mm256_fmadd_ps(wm[j], xs, accm[r][j]);
    }
  }
}

// mm32 computes the M x N tile y[r][n+j] (r < M ≤ 4, j < N ≤ 4) of a legacy
// type over all of k: per block and pair, one integer dot of 32 products,
// then one FMA of its float value scaled by d_w·d_x (Q4_1/Q5_1: and one of
// the min m_w times the block's d_x·Σq_x, in lane 0). Small tiles (M·N ≤
// 2) alternate two accumulator sets and keep the min terms apart, as
// mm32z does.
TK_INLINE LP_TARGET void LPF(mm32)(const int WT, const int M, const int N,
                                   const uint8_t *w, size_t wrow,
                                   const int8_t *xq, const float *xd,
                                   const int32_t *xc, int k, float *y,
                                   long ldy, int n) {
  const int nb = k / TK_QK, two = M * N <= 2;
  const uint8_t *row[4];
  for (int j = 0; j < N; j++) row[j] = w + (size_t)(n + j) * wrow;
  __m256 acc[4][4], acc2[4][4], accm[4][4], accm2[4][4];
  for (int r = 0; r < M; r++)
    for (int j = 0; j < N; j++) acc[r][j] = acc2[r][j] = accm[r][j] = accm2[r][j] = _mm256_setzero_ps();
  int b = 0;
  if (two)
    for (; b + 2 <= nb; b += 2) {
      LPF(mm32_step)(WT, M, N, row, xq, xd, xc, k, b, acc, accm);
      LPF(mm32_step)(WT, M, N, row, xq, xd, xc, k, b + 1, acc2, accm2);
    }
  for (; b < nb; b++) LPF(mm32_step)(WT, M, N, row, xq, xd, xc, k, b, acc, two ? accm : acc);
  for (int r = 0; r < M; r++)
    for (int j = 0; j < N; j++) {
      if (two) acc[r][j] = _mm256_add_ps(_mm256_add_ps(acc[r][j], acc2[r][j]), _mm256_add_ps(accm[r][j], accm2[r][j]));
      y[(size_t)r * ldy + n + j] = tk_hsum8(acc[r][j]);
    }
}

#ifdef LP_ZMM
// wq64 returns the 64 quants of legacy blocks b0 and b1 (bytes 0..31 and
// 32..63, each as wq32). Q4/Q5: both blocks' 16 nibble bytes in one
// 256-bit register, its halves spread to 128-bit lanes 0,0,1,1 and the odd
// lanes shifted by 4; Q5's fifth bits are the two 32-bit qh fields as one
// 64-bit byte mask.
TK_INLINE LP_TARGET __m512i LPF(wq64)(const int WT, const uint8_t *b0, const uint8_t *b1) {
  if (WT == TK_Q8_0) {
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)(b0 + 2))),
                                   _mm256_loadu_si256((const __m256i *)(const void *)(b1 + 2)), 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
  }
  const int q5 = WT == TK_Q5_0 || WT == TK_Q5_1;
  const int mn = WT == TK_Q4_1 || WT == TK_Q5_1;
  const size_t qo = 2 + 2 * (size_t)mn + (q5 ? 4 : 0);  // the nibbles' offset
  __m256i t = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(b0 + qo))),
                                      _mm_loadu_si128((const __m128i *)(const void *)(b1 + qo)), 1);
  __m512i z = _mm512_shuffle_i64x2(_mm512_castsi256_si512(t), _mm512_castsi256_si512(t), 0x50);
  const __m512i by4 = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0, 0,
                                       0x0004000400040004, 0x0004000400040004, 0, 0);
  z = _mm512_and_si512(_mm512_srlv_epi16(z, by4), _mm512_set1_epi8(15));
  if (q5) {
    uint32_t h0, h1;
    memcpy(&h0, b0 + 2 + 2 * mn, 4);
    memcpy(&h1, b1 + 2 + 2 * mn, 4);
    __mmask64 hk = _mm512_kunpackd(_cvtu32_mask32(h1), _cvtu32_mask32(h0));
    z = _mm512_mask_add_epi8(z, hk, z, _mm512_set1_epi8(16));
  }
  return z;
}

// mm32z_step accumulates block pair (b, b+1) of the M x N tile into acc
// (scale terms) and accm (Q4_1/Q5_1 min terms, in lanes 1 and 3).
// The weight blocks' f16 scales (Q4_1/Q5_1: and mins) of the pair are one
// 4-value conversion [d0, m0, d1, m1]; times the activation pairs
// [d_x0, d_x0·Σq_x0, d_x1, d_x1·Σq_x1] its odd lanes are the two min
// terms, so they cost one masked 128-bit FMA per pair; into accm when sep
// (small tiles, whose acc chains are few), else into acc's lanes 1 and 3
// (large tiles: 12 more accumulators would spill).
TK_INLINE LP_TARGET void LPF(mm32z_step)(const int WT, const int M, const int N, const int sep,
                                         const uint8_t *const *row, const int8_t *xq,
                                         const float *xd, const int32_t *xc, int k,
                                         int b, __m512 acc[4][4], __m128 accm[4][4]) {
  const int nb = k / TK_QK;
  const size_t bb = tk_blk_bytes(WT);
  const int mn = WT == TK_Q4_1 || WT == TK_Q5_1;
  const float *xa = (const float *)(const void *)xc;  // mn: (d_x, d_x·Σq_x) per block
  // Lanes 0..7 take element 0 of a 4-value source, lanes 8..15 element 1
  // (Q4_1/Q5_1 pairs: element 2).
  const __m512i pair = mn ? _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0)
                          : _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512i wu[4];
  __m512 wd[4];
  __m128 wf[4];
  for (int j = 0; j < N; j++) {
    const uint8_t *b0 = row[j] + (size_t)b * bb, *b1 = b0 + bb;
    wu[j] = LPF(wq64)(WT, b0, b1);
    uint32_t s0, s1;  // d (and m) of each block; !mn: d and a quant byte pair
    memcpy(&s0, b0, 4);
    memcpy(&s1, b1, 4);
    __m128i h = mn ? _mm_insert_epi32(_mm_cvtsi32_si128((int)s0), (int)s1, 1)
                   : _mm_insert_epi16(_mm_cvtsi32_si128((int)s0), (int)(s1 & 0xffff), 1);
    wf[j] = _mm_cvtph_ps(h);
    wd[j] = _mm512_permutexvar_ps(pair, _mm512_castps128_ps512(wf[j]));
  }
  for (int r = 0; r < M; r++) {
    __m512i xv = _mm512_loadu_si512((const void *)(xq + (size_t)r * k + TK_QK * b));
    __m128 xp = mn ? _mm_loadu_ps(xa + 2 * ((size_t)r * nb + b))
                   : _mm_castpd_ps(_mm_load_sd((const double *)(const void *)(xd + (size_t)r * nb + b)));
    __m512 dx = _mm512_permutexvar_ps(pair, _mm512_castps128_ps512(xp));
    // The two corrections into lanes 0 and 8 (a permute: vpexpandd from
    // memory is microcoded on Zen 4).
    __m512i c0 = mn ? _mm512_setzero_si512()
                    : _mm512_maskz_permutexvar_epi32(0x0101, pair, _mm512_castsi128_si512(_mm_loadl_epi64(
                                                                       (const __m128i *)(const void *)(xc + (size_t)r * nb + b))));
    for (int j = 0; j < N; j++) {
      __m512i s = _mm512_dpbusd_epi32(c0, wu[j], xv);
      acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(wd[j], dx), acc[r][j]);
      if (mn && sep)
        accm[r][j] = _mm_mask3_fmadd_ps(wf[j], xp, accm[r][j], 0xa);
      else if (mn)
        acc[r][j] = _mm512_mask3_fmadd_ps(_mm512_castps128_ps512(wf[j]), _mm512_castps128_ps512(xp), acc[r][j], 0xa);
    }
  }
}

// mm32z_gemv8 accumulates blocks b..b+7 of one weight row and one x row
// into *acc: four two-block dots, their 64 int32 lanes reduced to the 8
// block sums (unpacks, shuffles and adds), then one conversion and one FMA
// with the 8 blocks' scale products, instead of a conversion, scale
// product and FMA of 16 lanes per pair. Q4_1/Q5_1: sums in the even
// lanes and 1 in the odd ones, against [d_w·d_x, m_w·d_x·Σq_x] pairs, so
// the same FMA adds the min terms; the other types add the blocks'
// integer corrections to the sums.
TK_INLINE LP_TARGET void LPF(mm32z_gemv8)(const int WT, const uint8_t *row, const int8_t *xq,
                                          const float *xd, const int32_t *xc, int b,
                                          __m512 *acc) {
  const size_t bb = tk_blk_bytes(WT);
  const int mn = WT == TK_Q4_1 || WT == TK_Q5_1;
  const uint8_t *b0 = row + (size_t)b * bb;
  __m512i s[4];
  for (int p = 0; p < 4; p++)
    s[p] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), LPF(wq64)(WT, b0 + 2 * (size_t)p * bb, b0 + (2 * (size_t)p + 1) * bb),
                               _mm512_loadu_si512((const void *)(xq + TK_QK * (b + 2 * p))));
  // Per 128-bit lane L: [s0, s1, s2, s3 summed over L], then lanes 0+1 and
  // 2+3: dwords 0..3 hold the sums of blocks 0, 2, 4, 6, dwords 8..11 those
  // of blocks 1, 3, 5, 7.
  __m512i u01 = _mm512_add_epi32(_mm512_unpacklo_epi64(s[0], s[1]), _mm512_unpackhi_epi64(s[0], s[1]));
  __m512i u23 = _mm512_add_epi32(_mm512_unpacklo_epi64(s[2], s[3]), _mm512_unpackhi_epi64(s[2], s[3]));
  __m512 a = _mm512_castsi512_ps(u01), c = _mm512_castsi512_ps(u23);
  __m512i v = _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(a, c, _MM_SHUFFLE(2, 0, 2, 0))),
                               _mm512_castps_si512(_mm512_shuffle_ps(a, c, _MM_SHUFFLE(3, 1, 3, 1))));
  v = _mm512_add_epi32(v, _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  if (mn) {
    // Lane 2i: block i's sum; lane 2i+1: 1.
    const __m512i idx = _mm512_set_epi32(0, 11, 0, 3, 0, 10, 0, 2, 0, 9, 0, 1, 0, 8, 0, 0);
    __m512 f = _mm512_cvtepi32_ps(_mm512_mask_permutexvar_epi32(_mm512_set1_epi32(1), 0x5555, idx, v));
    __m128i h0 = _mm_cvtsi32_si128((int)lp_load_u32(b0)), h1 = _mm_cvtsi32_si128((int)lp_load_u32(b0 + 4 * bb));
    h0 = _mm_insert_epi32(h0, (int)lp_load_u32(b0 + bb), 1);
    h1 = _mm_insert_epi32(h1, (int)lp_load_u32(b0 + 5 * bb), 1);
    h0 = _mm_insert_epi32(h0, (int)lp_load_u32(b0 + 2 * bb), 2);
    h1 = _mm_insert_epi32(h1, (int)lp_load_u32(b0 + 6 * bb), 2);
    h0 = _mm_insert_epi32(h0, (int)lp_load_u32(b0 + 3 * bb), 3);
    h1 = _mm_insert_epi32(h1, (int)lp_load_u32(b0 + 7 * bb), 3);
    __m512 wdm = _mm512_cvtph_ps(_mm256_set_m128i(h1, h0));  // [d0, m0, .., d7, m7]
    const float *xa = (const float *)(const void *)xc;     // (d_x, d_x·Σq_x) per block
    *acc = _mm512_fmadd_ps(f, _mm512_mul_ps(wdm, _mm512_loadu_ps(xa + 2 * (size_t)b)), *acc);
    return;
  }
  const __m512i idx = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 11, 3, 10, 2, 9, 1, 8, 0);
  __m256i t = _mm512_castsi512_si256(_mm512_permutexvar_epi32(idx, v));
  t = _mm256_add_epi32(t, _mm256_loadu_si256((const __m256i *)(const void *)(xc + b)));
  __m128i h = _mm_cvtsi32_si128((int)tk_load_u16(b0));
  h = _mm_insert_epi16(h, (int)tk_load_u16(b0 + bb), 1);
  h = _mm_insert_epi16(h, (int)tk_load_u16(b0 + 2 * bb), 2);
  h = _mm_insert_epi16(h, (int)tk_load_u16(b0 + 3 * bb), 3);
  h = _mm_insert_epi16(h, (int)tk_load_u16(b0 + 4 * bb), 4);
  h = _mm_insert_epi16(h, (int)tk_load_u16(b0 + 5 * bb), 5);
  h = _mm_insert_epi16(h, (int)tk_load_u16(b0 + 6 * bb), 6);
  h = _mm_insert_epi16(h, (int)tk_load_u16(b0 + 7 * bb), 7);
  __m256 sc = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_loadu_ps(xd + b));
  *acc = _mm512_insertf32x8(*acc, _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), sc, _mm512_castps512_ps256(*acc)), 0);
}

// mm32z is mm32 on 512-bit registers (LP_XOR8 levels only): two blocks
// per vpdpbusd, their scale pairs [d0 x8, d1 x8] built once per weight row
// and per x row and block pair, so one dot, conversion, scale product and
// FMA cover 64 products instead of 32. An odd last block goes through the
// 256-bit step. Small tiles (M·N ≤ 2) keep a second set of accumulators
// for alternate block pairs: one FMA chain would bound them by its
// latency, and the Q4_1/Q5_1 min terms in 128-bit accumulators apart.
TK_INLINE LP_TARGET void LPF(mm32z)(const int WT, const int M, const int N,
                                    const uint8_t *w, size_t wrow,
                                    const int8_t *xq, const float *xd,
                                    const int32_t *xc, int k, float *y,
                                    long ldy, int n) {
  const int nb = k / TK_QK;
  const size_t bb = tk_blk_bytes(WT);
  const int mn = WT == TK_Q4_1 || WT == TK_Q5_1, two = M * N <= 2;
  const float *xm = (const float *)(const void *)xc;  // mn: (d_x, d_x·Σq_x) per block
  const uint8_t *row[4];
  for (int j = 0; j < N; j++) row[j] = w + (size_t)(n + j) * wrow;
  __m512 acc[4][4], acc2[4][4];
  __m128 accm[4][4], accm2[4][4];
  for (int r = 0; r < M; r++)
    for (int j = 0; j < N; j++) {
      acc[r][j] = acc2[r][j] = _mm512_setzero_ps();
      accm[r][j] = accm2[r][j] = _mm_setzero_ps();
    }
  int b = 0;
  __m512 acc8 = _mm512_setzero_ps();  // M = N = 1: blocks of 8 (mm32z_gemv8)
  if (M == 1 && N == 1)
    for (; b + 8 <= nb; b += 8) LPF(mm32z_gemv8)(WT, row[0], xq, xd, xc, b, &acc8);
  if (two)
    for (; b + 4 <= nb; b += 4) {
      LPF(mm32z_step)(WT, M, N, 1, row, xq, xd, xc, k, b, acc, accm);
      LPF(mm32z_step)(WT, M, N, 1, row, xq, xd, xc, k, b + 2, acc2, accm2);
    }
  for (; b + 2 <= nb; b += 2) LPF(mm32z_step)(WT, M, N, two, row, xq, xd, xc, k, b, acc, accm);
  __m256 t[4][4];
  for (int r = 0; r < M; r++)
    for (int j = 0; j < N; j++) {
      if (two) acc[r][j] = _mm512_add_ps(acc[r][j], _mm512_add_ps(acc2[r][j], acc8));
      t[r][j] = _mm256_add_ps(_mm512_castps512_ps256(acc[r][j]), _mm512_extractf32x8_ps(acc[r][j], 1));
      if (mn && two) t[r][j] = _mm256_add_ps(t[r][j], _mm256_zextps128_ps256(_mm_add_ps(accm[r][j], accm2[r][j])));
    }
  if (b < nb) {
    for (int j = 0; j < N; j++) {
      const uint8_t *blk = row[j] + (size_t)b * bb;
      __m256i wu = LPF(wq32)(WT, blk);
      __m256 wd = _mm256_set1_ps(_cvtsh_ss(tk_load_u16(blk)));
      for (int r = 0; r < M; r++) {
        __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(xq + (size_t)r * k + TK_QK * b));
        __m256i c0 = mn ? _mm256_setzero_si256() : _mm256_zextsi128_si256(_mm_cvtsi32_si128(xc[(size_t)r * nb + b]));
        __m256i s = LP_DOTB(c0, wu, xv);
        t[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(wd, _mm256_set1_ps(xd[(size_t)r * nb + b])), t[r][j]);
        if (mn)
          t[r][j] = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(tk_load_u16(blk + 2))),
                                    _mm256_zextps128_ps256(_mm_load_ss(xm + 2 * ((size_t)r * nb + b) + 1)), t[r][j]);
      }
    }
  }
  for (int r = 0; r < M; r++)
    for (int j = 0; j < N; j++) y[(size_t)r * ldy + n + j] = tk_hsum8(t[r][j]);
}

// gemv2z is the decode GEMV (one row of x) over two weight rows r0 and r1
// read side by side, eight blocks of each in turn, each line prefetched
// TK_GEMV2_PF ahead: two streams per core (TK_GEMV2 in tk_internal.h).
// nb % 8 == 0 (the caller checks).
TK_INLINE LP_TARGET void LPF(gemv2z)(const int WT, const uint8_t *r0, const uint8_t *r1,
                                     const int8_t *xq, const float *xd, const int32_t *xc,
                                     int k, float *y0, float *y1) {
  const int nb = k / TK_QK;
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  const size_t bb = tk_blk_bytes(WT);
  for (int b = 0; b < nb; b += 8) {
    tk_pf_ahead(r0 + (size_t)b * bb, 8 * bb);
    tk_pf_ahead(r1 + (size_t)b * bb, 8 * bb);
    LPF(mm32z_gemv8)(WT, r0, xq, xd, xc, b, &a0);
    LPF(mm32z_gemv8)(WT, r1, xq, xd, xc, b, &a1);
  }
  *y0 = tk_hsum8(_mm256_add_ps(_mm512_castps512_ps256(a0), _mm512_extractf32x8_ps(a0, 1)));
  *y1 = tk_hsum8(_mm256_add_ps(_mm512_castps512_ps256(a1), _mm512_extractf32x8_ps(a1, 1)));
}
#define LP_GEMV2 1
#define LP_MM32 LPF(mm32z)
#else
// Without 512-bit registers qmm never calls gemv2z (LP_GEMV2_ON is 0).
TK_INLINE LP_TARGET void LPF(gemv2z)(const int WT, const uint8_t *r0, const uint8_t *r1,
                                     const int8_t *xq, const float *xd, const int32_t *xc,
                                     int k, float *y0, float *y1) {
  (void)WT, (void)r0, (void)r1, (void)xq, (void)xd, (void)xc, (void)k, (void)y0, (void)y1;
}
#define LP_MM32 LPF(mm32)
#endif

// mm32_rows runs the N-row weight tile at n over all m rows of x, four at
// a time: the N weight rows stay in L1 while the rows of x pass.
// Each row group also prefetches its share of the pfb bytes at pf (the
// next tile): the hardware prefetcher alone leaves the memory idle while a
// tile's rows are computed.
TK_INLINE LP_TARGET void LPF(mm32_rows)(const int WT, const int N,
                                        const uint8_t *w, size_t wrow,
                                        const int8_t *xq, const float *xd,
                                        const int32_t *xc, int m, int k,
                                        float *y, long ldy, int n,
                                        const uint8_t *pf, size_t pfb) {
  const int nb = k / TK_QK;
  const size_t lines = (pfb + 63) / 64, groups = (size_t)(m + 3) / 4;
  for (int r = 0; r < m; r += 4) {
    size_t g = (size_t)r / 4;
    for (size_t i = lines * g / groups; i < lines * (g + 1) / groups; i++)
      _mm_prefetch((const char *)(pf + 64 * i), _MM_HINT_T0);
    const int8_t *q = xq + (size_t)r * k;
    const float *d = xd + (size_t)r * nb;
    // Q4_1/Q5_1: (d_x, d_x·Σq_x) pairs, two words per block.
    const int32_t *c = xc + (size_t)r * nb * (WT == TK_Q4_1 || WT == TK_Q5_1 ? 2 : 1);
    float *yr = y + (size_t)r * ldy;
    switch (m - r < 4 ? m - r : 4) {
      case 1: LP_MM32(WT, 1, N, w, wrow, q, d, c, k, yr, ldy, n); break;
      case 2: LP_MM32(WT, 2, N, w, wrow, q, d, c, k, yr, ldy, n); break;
      case 3: LP_MM32(WT, 3, N, w, wrow, q, d, c, k, yr, ldy, n); break;
      default: LP_MM32(WT, 4, N, w, wrow, q, d, c, k, yr, ldy, n); break;
    }
  }
}

// kq_sc16 spreads sixteen int16 per-16 scales s16 over the eight groups
// of 32: sc[g] holds scale 2g in its low 128 bits and 2g+1 in its high
// ones (shuffles of the eight scales of each 128-bit half, duplicated).
TK_INLINE LP_TARGET void LPF(kq_sc16)(__m256i s16, __m256i sc[8]) {
  __m256i half[2] = {_mm256_permute2x128_si256(s16, s16, 0x00), _mm256_permute2x128_si256(s16, s16, 0x11)};
  for (int g = 0; g < 8; g++) {
    int i = 2 * (g % 4);
    __m256i idx = _mm256_set_m128i(_mm_set1_epi16((short)((2 * i + 3) << 8 | (2 * i + 2))),
                                   _mm_set1_epi16((short)((2 * i + 1) << 8 | 2 * i)));
    sc[g] = _mm256_shuffle_epi8(half[g / 4], idx);
  }
}

// kq_scales unpacks the scales of K-quant super-block b: *s holds the 16
// int16 per-16 scales (Q2_K, Q3_K, Q6_K) or, for Q4_K/Q5_K, the 8 per-32
// scales in words 0..7 (their 8 mins in words 8..15). Types with mins:
// *mins holds the 16 mins of the bsums of 16 ([m0,m0,..,m7,m7] for
// Q4_K/Q5_K) and *dmin the min scale; Q3_K and Q6_K: *mins holds the 16
// scales (for the offset, kq_off).
TK_INLINE LP_TARGET void LPF(kq_scales)(const int WT, const uint8_t *b, __m256i *s16,
                                        __m256i *mins, float *d, float *dmin) {
  if (WT == TK_Q3_K) {
    // The twelve scale bytes to sixteen 6-bit codes (scale = code − 32):
    // low nibbles from bytes 0..7 (low then high nibble), top two bits
    // of code i from bits 2(i/4), 2(i/4)+1 of byte 8 + i%4: dword lane
    // i/4 of the broadcast bytes 8..11 shifted right by 2(i/4). In
    // registers: scalar unpacking through the stack cost more than the
    // whole decode.
    __m128i x = _mm_loadl_epi64((const __m128i *)(const void *)(b + 96));
    __m128i lo = _mm_and_si128(_mm_unpacklo_epi64(x, _mm_srli_epi16(x, 4)), _mm_set1_epi8(15));
    uint32_t hb;
    memcpy(&hb, b + 104, 4);
    __m128i h = _mm_set1_epi32((int)hb);
    h = _mm_and_si128(_mm_slli_epi32(_mm_srlv_epi32(h, _mm_setr_epi32(0, 2, 4, 6)), 4), _mm_set1_epi8(0x30));
    *s16 = *mins = _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_or_si128(lo, h), _mm_set1_epi8(32)));
    *d = _cvtsh_ss(tk_load_u16(b + 108));
    *dmin = 0;
  } else if (WT == TK_Q2_K) {  // byte i: scale (low nibble) and min (high nibble) of sub-block i
    __m128i s = _mm_loadu_si128((const __m128i *)(const void *)b);
    *s16 = _mm256_cvtepu8_epi16(_mm_and_si128(s, _mm_set1_epi8(15)));
    *mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(15)));
    *d = _cvtsh_ss(tk_load_u16(b + 80));
    *dmin = _cvtsh_ss(tk_load_u16(b + 82));
  } else if (WT == TK_Q6_K) {
    *s16 = *mins = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(b + 192)));
    *d = _cvtsh_ss(tk_load_u16(b + 208));
    *dmin = 0;
  } else {
    *d = _cvtsh_ss(tk_load_u16(b));
    *dmin = _cvtsh_ss(tk_load_u16(b + 2));
    // The twelve scale bytes to eight 6-bit scales then eight mins (ggml's
    // utmp shuffle; the same values as tk_scale_min_k4).
    uint32_t u[4];
    memcpy(u, b + 4, 12);
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
    const uint32_t aux = u[1] & k1;
    u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
    u[2] = aux;
    u[0] &= k1;
    // Built in registers: reading u back from the stack as wider loads
    // than its stores stalls store forwarding (~30 cycles a block).
    __m256i ms = _mm256_cvtepu8_epi16(_mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]));
    *s16 = ms;
    __m128i mn = _mm256_extracti128_si256(ms, 1);
    *mins = _mm256_set_m128i(_mm_unpackhi_epi16(mn, mn), _mm_unpacklo_epi16(mn, mn));
  }
}

// kq_decode unpacks K-quant super-block b for the dot: q[g] holds the
// unsigned quants of elements 32g..32g+31, sc[g] the int16 scale(s) their
// maddubs pairs take (one per 16 elements for Q2_K, Q3_K and Q6_K, one per
// 32 for Q4_K/Q5_K); *mins, *d and *dmin as kq_scales.
TK_INLINE LP_TARGET void LPF(kq_decode)(const int WT, const uint8_t *b,
                                        __m256i q[8], __m256i sc[8],
                                        __m256i *mins, float *d,
                                        float *dmin) {
  const __m256i m4 = _mm256_set1_epi8(15);
  __m256i s16;
  LPF(kq_scales)(WT, b, &s16, mins, d, dmin);
  if (WT == TK_Q2_K || WT == TK_Q3_K) {
    // Element 128n + 32j + l is 2-bit plane j of byte 32n + l of qs
    // (Q3_K: its third bit is bit 4n + j of hmask[l]).
    const int q3 = WT == TK_Q3_K;
    const uint8_t *qs = b + (q3 ? 32 : 16);
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256i hb = q3 ? _mm256_loadu_si256((const __m256i *)(const void *)b) : _mm256_setzero_si256();
    for (int n = 0; n < 2; n++) {
      __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * n));
      for (int j = 0; j < 4; j++) {
        __m256i t = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m3);
        if (q3) {  // bit g = 4n + j moved straight to bit 2 (as kq_decodez)
          const int g = 4 * n + j;
          __m256i h = g < 2 ? _mm256_slli_epi16(hb, 2 - g) : g == 2 ? hb : _mm256_srli_epi16(hb, g - 2);
          t = _mm256_or_si256(t, _mm256_and_si256(h, _mm256_set1_epi8(4)));
        }
        q[4 * n + j] = t;
      }
    }
    LPF(kq_sc16)(s16, sc);
    return;
  }
  if (WT == TK_Q6_K) {
    const uint8_t *ql = b, *qh = b + 128;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int n = 0; n < 2; n++) {
      __m256i l0 = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 64 * n));
      __m256i l1 = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 64 * n + 32));
      __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(qh + 32 * n));
      __m256i lo[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                       _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                       _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
      for (int kk = 0; kk < 4; kk++) {
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(h, 2 * kk), m3);
        q[4 * n + kk] = _mm256_or_si256(lo[kk], _mm256_slli_epi16(hi, 4));
      }
    }
    LPF(kq_sc16)(s16, sc);
    return;
  }
  const int q5 = WT == TK_Q5_K;
  __m256i sc2 = _mm256_permute2x128_si256(s16, s16, 0x00);  // the 8 scales, both halves
  for (int g = 0; g < 8; g++) sc[g] = _mm256_shuffle_epi8(sc2, _mm256_set1_epi16((short)((2 * g + 1) << 8 | 2 * g)));
  const uint8_t *qs = b + (q5 ? 48 : 16);
  __m256i hb = q5 ? _mm256_loadu_si256((const __m256i *)(const void *)(b + 16)) : _mm256_setzero_si256();
  const __m256i one = _mm256_set1_epi8(1);
  for (int j = 0; j < 4; j++) {
    __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * j));
    __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (q5) {  // bit g of qh[l] is the fifth bit of element l of sub-block g
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * j), one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * j + 1), one), 4));
    }
    q[2 * j] = lo;
    q[2 * j + 1] = hi;
  }
}

#ifdef LP_ZMM
// kq_decodez is kq_decode on 512-bit registers: Q[p] holds the quants of
// groups 2p and 2p+1 (elements 64p..64p+63, the order of x), SC[p] the
// int16 scales of its 32 maddubs pairs (words 8i..8i+7: sub-block 4p+i of
// 16). Each pair comes from one 256-bit source broadcast to both halves
// and shifted per half (vpsrlvw).
TK_INLINE LP_TARGET void LPF(kq_decodez)(const int WT, const uint8_t *b,
                                         __m512i Q[4], __m512i SC[4],
                                         __m256i *mins, float *d, float *dmin) {
  __m256i s16;
  LPF(kq_scales)(WT, b, &s16, mins, d, dmin);
  // w8: word w holds w/8 (its sub-block of 16 within the pair).
  const __m512i w8 = _mm512_cvtepu8_epi16(_mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                           2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const int per32 = WT == TK_Q4_K || WT == TK_Q5_K;
  for (int p = 0; p < 4; p++) {  // per-32 scales: word w takes scale 2p + w/16
    __m512i idx = per32 ? _mm512_add_epi16(_mm512_srli_epi16(w8, 1), _mm512_set1_epi16((short)(2 * p)))
                        : _mm512_add_epi16(w8, _mm512_set1_epi16((short)(4 * p)));
    SC[p] = _mm512_permutexvar_epi16(idx, _mm512_castsi256_si512(s16));
  }
#define KQ_BC(ptr) _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(ptr)))
#define KQ_CNT(a, c) _mm512_inserti64x4(_mm512_set1_epi16((short)(a)), _mm256_set1_epi16((short)(c)), 1)
  const __m512i m4 = _mm512_set1_epi8(15), m3 = _mm512_set1_epi8(3);
  if (WT == TK_Q2_K || WT == TK_Q3_K) {
    // Groups 2p, 2p+1: 2-bit planes 2(p%2), 2(p%2)+1 of chunk p/2 (Q3_K:
    // third bits 2p, 2p+1 of hmask).
    const int q3 = WT == TK_Q3_K;
    const uint8_t *qs = b + (q3 ? 32 : 16);
    __m512i hb = q3 ? KQ_BC(b) : _mm512_setzero_si512();
    for (int n = 0; n < 2; n++) {
      __m512i v = KQ_BC(qs + 32 * n);
      for (int h = 0; h < 2; h++) {
        int p = 2 * n + h;
        __m512i t = _mm512_and_si512(_mm512_srlv_epi16(v, KQ_CNT(4 * h, 4 * h + 2)), m3);
        if (q3) {
          // Bits 2p, 2p+1 moved straight to bit 2: left by 2, 1 for p = 0,
          // else right by 2p − 2, 2p − 1 (within each byte of the word:
          // no count reaches another byte's bit 2).
          __m512i hh = p == 0 ? _mm512_sllv_epi16(hb, KQ_CNT(2, 1)) : _mm512_srlv_epi16(hb, KQ_CNT(2 * p - 2, 2 * p - 1));
          t = _mm512_or_si512(t, _mm512_and_si512(hh, _mm512_set1_epi8(4)));
        }
        Q[p] = t;
      }
    }
  } else if (WT == TK_Q6_K) {
    // Groups 4n..4n+3 are the low/high nibbles of ql's 64 bytes 64n.. with
    // 2-bit planes 0..3 of qh's 32 bytes 32n.. on top.
    for (int n = 0; n < 2; n++) {
      __m512i l = _mm512_loadu_si512((const void *)(b + 64 * n)), h = KQ_BC(b + 128 + 32 * n);
      for (int hh = 0; hh < 2; hh++) {
        __m512i lo = _mm512_and_si512(hh ? _mm512_srli_epi16(l, 4) : l, m4);
        __m512i hi = _mm512_and_si512(_mm512_slli_epi16(_mm512_srlv_epi16(h, KQ_CNT(4 * hh, 4 * hh + 2)), 4),
                                      _mm512_set1_epi8(0x30));
        Q[2 * n + hh] = _mm512_or_si512(lo, hi);
      }
    }
  } else {
    // Groups 2j, 2j+1: the low, then high nibbles of chunk j (Q5_K: fifth
    // bits 2j, 2j+1 of qh).
    const int q5 = WT == TK_Q5_K;
    const uint8_t *qs = b + (q5 ? 48 : 16);
    __m512i hb = q5 ? KQ_BC(b + 16) : _mm512_setzero_si512();
    for (int j = 0; j < 4; j++) {
      __m512i t = _mm512_and_si512(_mm512_srlv_epi16(KQ_BC(qs + 32 * j), KQ_CNT(0, 4)), m4);
      if (q5)
        t = _mm512_or_si512(t, _mm512_and_si512(_mm512_slli_epi16(_mm512_srlv_epi16(hb, KQ_CNT(2 * j, 2 * j + 1)), 4),
                                                _mm512_set1_epi8(16)));
      Q[j] = t;
    }
  }
#undef KQ_BC
#undef KQ_CNT
}
#endif

// mmk computes y[r][n] for r < m (≤ 32), n in [n0, n1) of a K-quant type:
// each super-block is decoded once and dotted with all m rows, whose float
// accumulators wait in acc (L1) between super-blocks.
TK_INLINE LP_TARGET void LPF(mmk)(const int WT, const uint8_t *w, size_t wrow,
                                  const int8_t *xq, const float *xd,
                                  const int16_t *xs, int m, int k, float *y,
                                  long ldy, int n0, int n1) {
  const int nsb = k / TK_QKK;
  const size_t bb = tk_blk_bytes(WT);
  // The scale and min terms in two accumulators: one chain of both FMAs
  // would bound a one-row GEMV by their latency.
  __m256 acc[32], accm[32];
  for (int n = n0; n < n1; n++) {
    const uint8_t *row = w + (size_t)n * wrow;
    for (int r = 0; r < m; r++) acc[r] = accm[r] = _mm256_setzero_ps();
    for (int sb = 0; sb < nsb; sb++) {
      __m256i mins;
#ifndef LP_ZMM
      __m256i q[8], sc[8];
#endif
      float d, dmin;
      if (m > 4 && n + 1 < n1)  // the next row's block, a row's time ahead
        for (size_t o = 0; o < bb; o += 64)
          _mm_prefetch((const char *)(row + wrow + (size_t)sb * bb + o), _MM_HINT_T0);
#ifdef LP_ZMM
      __m512i Q[4], SC[4];
      LPF(kq_decodez)(WT, row + (size_t)sb * bb, Q, SC, &mins, &d, &dmin);
#else
      LPF(kq_decode)(WT, row + (size_t)sb * bb, q, sc, &mins, &d, &dmin);
#endif
      __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(dmin);
      for (int r = 0; r < m; r++) {
        const int8_t *xr = xq + (size_t)r * k + TK_QKK * sb;
#ifdef LP_ZMM
        // Two independent integer chains of two dots of 64 products each.
        __m512i is2[2];
        for (int p = 0; p < 2; p++)
          is2[p] = _mm512_madd_epi16(_mm512_maddubs_epi16(Q[p], _mm512_loadu_si512((const void *)(xr + 64 * p))), SC[p]);
        for (int p = 2; p < 4; p++)
          is2[p - 2] = _mm512_dpwssd_epi32(is2[p - 2], _mm512_maddubs_epi16(Q[p], _mm512_loadu_si512((const void *)(xr + 64 * p))),
                                           SC[p]);
        __m512i isz = _mm512_add_epi32(is2[0], is2[1]);
        __m256i is = _mm256_add_epi32(_mm512_castsi512_si256(isz), _mm512_extracti64x4_epi64(isz, 1));
#else
        // Four independent integer chains: one chain of eight dependent
        // dots would make a one-row GEMV latency-bound.
        __m256i is4[4];
        for (int g = 0; g < 4; g++) {
          __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(xr + 32 * g));
          is4[g] = _mm256_madd_epi16(_mm256_maddubs_epi16(q[g], xv), sc[g]);
        }
        for (int g = 4; g < 8; g++) {
          __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(xr + 32 * g));
          is4[g - 4] = LP_DOTW(is4[g - 4], _mm256_maddubs_epi16(q[g], xv), sc[g]);
        }
        __m256i is = _mm256_add_epi32(_mm256_add_epi32(is4[0], is4[1]), _mm256_add_epi32(is4[2], is4[3]));
#endif
        __m256i bs = _mm256_loadu_si256((const __m256i *)(const void *)(xs + (size_t)r * (k / 16) + 16 * sb));
        __m256 dx = _mm256_set1_ps(xd[(size_t)r * nsb + sb]);
        // Σ sc·(q − off)·x = Σ sc·q·x − off·Σ sc·bsum (off 32 or 4)
        if (WT == TK_Q6_K || WT == TK_Q3_K)
          is = _mm256_sub_epi32(is, _mm256_slli_epi32(_mm256_madd_epi16(bs, mins), WT == TK_Q6_K ? 5 : 2));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(vd, dx), acc[r]);
        if (WT != TK_Q6_K && WT != TK_Q3_K)
          accm[r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mins)), _mm256_mul_ps(vm, dx), accm[r]);
      }
    }
    for (int r = 0; r < m; r++)
      y[(size_t)r * ldy + n] = tk_hsum8(WT != TK_Q6_K && WT != TK_Q3_K ? _mm256_add_ps(acc[r], accm[r]) : acc[r]);
  }
}

// ---- K-quant int8 GEMM over interleaved 8- and 16-row tiles (m > 1) ----
//
// mmk dots each decoded super-block with one x row per maddubs/madd pair
// and reduces 8 lanes per row and super-block. The tile kernels instead
// decode 8 weight rows once per depth chunk into a scratch whose 32-bit
// lane j holds 4 consecutive quants of row j, so one vpdpbusd against a
// broadcast of 4 x bytes adds 32 products into the 8 outputs' lanes: no
// horizontal sums, and the scratch (L1) serves every row of x. Only the
// per-32-scale types (Q4_K, Q5_K) take it. The 512-bit level packs 16 rows
// (one vpdpbusd adds 64 products into 16 lanes, the broadcast per dot
// unchanged: twice the products per x load and per dot), measured 1.5x
// (m = 8) to 2x (m = 512) the 8-row tile on Zen 5; a 32-row tile (two
// dots per broadcast, two x rows at a time) spilled and ran 0.8x of it.

// LP_KT_CHUNK is the super-blocks per packed depth chunk (82 vectors, 2.6
// KB each: 10.5 KB of stack).
#define LP_KT_CHUNK 4
// LP_KZ_CHUNK: the same for the 16-row tile (82 vectors of 64 bytes: 21
// KB of stack; 2 measured slower).
#define LP_KZ_CHUNK 4
// Vector indices in one packed super-block: quants of group c, dword i
// at 8c + i; the per-32 scales (int32) at LP_KT_SC + c; the mins as int16
// pairs (m, m), for the per-16 bsum pairs, at LP_KT_MP + c; then d, dmin.
#define LP_KT_SC 64
#define LP_KT_MP 72
#define LP_KT_D 80
#define LP_KT_DM 81
#define LP_KT_VECS 82

// kt_tp8 transposes the 8x8 int32 matrix v in place: v[i] lane j = v[j]
// lane i.
TK_INLINE LP_TARGET void LPF(kt_tp8)(__m256i v[8]) {
  __m256i a[8], b[8];
  for (int i = 0; i < 8; i += 2) {
    a[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
    a[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
  }
  for (int i = 0; i < 8; i += 4)
    for (int h = 0; h < 2; h++) {  // b[i + c] lane 4u + l: v[i + l] lane c + 4u (c < 4)
      b[i + 2 * h] = _mm256_unpacklo_epi64(a[i + h], a[i + h + 2]);
      b[i + 2 * h + 1] = _mm256_unpackhi_epi64(a[i + h], a[i + h + 2]);
    }
  for (int i = 0; i < 4; i++) {
    v[i] = _mm256_permute2x128_si256(b[i], b[i + 4], 0x20);
    v[i + 4] = _mm256_permute2x128_si256(b[i], b[i + 4], 0x31);
  }
}

// kt_pack8 decodes super-blocks [s0, s0+ns) of weight rows n..n+7 into
// the packed layout at base: super-block s at base + s·ss, its vector v at
// base + s·ss + vs·v (vs = 1: the 8-row tile; vs = 2: one 256-bit half of
// a 16-row tile's 512-bit vectors).
TK_INLINE LP_TARGET void LPF(kt_pack8)(const int WT, const uint8_t *w, size_t wrow, int n, int s0,
                                       int ns, __m256i *base, const size_t ss, const int vs) {
  const size_t bb = tk_blk_bytes(WT);
  for (int s = 0; s < ns; s++) {
    __m256i q[8][8], scl[8], mns[8];
    float d[8], dm[8];
    for (int j = 0; j < 8; j++) {
      const uint8_t *b = w + (size_t)(n + j) * wrow + (size_t)(s0 + s) * bb;
      __m256i sc[8], mins, s16;
      LPF(kq_decode)(WT, b, q[j], sc, &mins, &d[j], &dm[j]);
      LPF(kq_scales)(WT, b, &s16, &mins, &d[j], &dm[j]);
      scl[j] = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(s16));
      mns[j] = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(s16, 1));
    }
    __m256i *p = base + (size_t)s * ss;
    for (int c = 0; c < 8; c++) {
      __m256i v[8];
      for (int j = 0; j < 8; j++) v[j] = q[j][c];
      LPF(kt_tp8)(v);
      for (int i = 0; i < 8; i++) _mm256_store_si256(p + vs * (8 * c + i), v[i]);
    }
    LPF(kt_tp8)(scl);
    LPF(kt_tp8)(mns);
    for (int c = 0; c < 8; c++) {
      _mm256_store_si256(p + vs * (LP_KT_SC + c), scl[c]);
      _mm256_store_si256(p + vs * (LP_KT_MP + c), _mm256_or_si256(mns[c], _mm256_slli_epi32(mns[c], 16)));
    }
    _mm256_store_si256(p + vs * LP_KT_D, _mm256_castps_si256(_mm256_loadu_ps(d)));
    _mm256_store_si256(p + vs * LP_KT_DM, _mm256_castps_si256(_mm256_loadu_ps(dm)));
  }
}

// kt_pack decodes super-blocks [s0, s0+ns) of weight rows n..n+7 into pw.
TK_INLINE LP_TARGET void LPF(kt_pack)(const int WT, const uint8_t *w, size_t wrow, int n, int s0,
                                      int ns, __m256i (*pw)[LP_KT_VECS]) {
  LPF(kt_pack8)(WT, w, wrow, n, s0, ns, pw[0], LP_KT_VECS, 1);
}

TK_INLINE LP_TARGET __m256i LPF(kt_bc4)(const void *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// kt_rows accumulates the packed chunk pw (ns super-blocks from s0) times
// R ≤ 4 rows of x into acc[r] (lane j: output n+j of row r).
TK_INLINE LP_TARGET void LPF(kt_rows)(const int R, const __m256i (*pw)[LP_KT_VECS], int s0, int ns,
                                      const int8_t *xq, const float *xd, const int16_t *xs, int k,
                                      __m256 acc[4]) {
  const int nsb = k / TK_QKK;
  for (int s = 0; s < ns; s++) {
    const __m256i *p = pw[s];
    const int sb = s0 + s;
    __m256i isb[4], ms[4];
    for (int r = 0; r < R; r++) isb[r] = ms[r] = _mm256_setzero_si256();
    for (int c = 0; c < 8; c++) {
      // Two chains per row (even and odd dwords): R chains alone would
      // leave vpdpbusd latency-bound.
      __m256i ia[4], ib[4];
      for (int r = 0; r < R; r++) ia[r] = ib[r] = _mm256_setzero_si256();
      for (int i = 0; i < 8; i += 2) {
        __m256i w0 = _mm256_load_si256(p + 8 * c + i), w1 = _mm256_load_si256(p + 8 * c + i + 1);
        for (int r = 0; r < R; r++) {
          const int8_t *xr = xq + (size_t)r * k + TK_QKK * sb + 32 * c + 4 * i;
          ia[r] = LP_DOTB(ia[r], w0, LPF(kt_bc4)(xr));
          ib[r] = LP_DOTB(ib[r], w1, LPF(kt_bc4)(xr + 4));
        }
      }
      __m256i sc = _mm256_load_si256(p + LP_KT_SC + c), mp = _mm256_load_si256(p + LP_KT_MP + c);
      for (int r = 0; r < R; r++) {
        isb[r] = _mm256_add_epi32(isb[r], _mm256_mullo_epi32(_mm256_add_epi32(ia[r], ib[r]), sc));
        ms[r] = LP_DOTW(ms[r], mp, LPF(kt_bc4)(xs + (size_t)r * (k / 16) + 16 * sb + 2 * c));
      }
    }
    __m256 d = _mm256_castsi256_ps(_mm256_load_si256(p + LP_KT_D));
    __m256 dm = _mm256_castsi256_ps(_mm256_load_si256(p + LP_KT_DM));
    for (int r = 0; r < R; r++) {
      __m256 dx = _mm256_set1_ps(xd[(size_t)r * nsb + sb]);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isb[r]), _mm256_mul_ps(d, dx), acc[r]);
      acc[r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms[r]), _mm256_mul_ps(dm, dx), acc[r]);
    }
  }
}

#ifdef LP_ZMM
// kz_pack is kt_pack for weight rows n..n+15: rows n..n+7 in the low 256
// bits of each 512-bit vector, n+8..n+15 in the high ones, so lane j
// holds row n+j.
TK_INLINE LP_TARGET void LPF(kz_pack)(const int WT, const uint8_t *w, size_t wrow, int n, int s0,
                                      int ns, __m512i (*pz)[LP_KT_VECS]) {
  __m256i *base = (__m256i *)(void *)pz[0];
  LPF(kt_pack8)(WT, w, wrow, n, s0, ns, base, 2 * LP_KT_VECS, 2);
  LPF(kt_pack8)(WT, w, wrow, n + 8, s0, ns, base + 1, 2 * LP_KT_VECS, 2);
}

TK_INLINE LP_TARGET __m512i LPF(kz_bc4)(const void *p) {
  int32_t v;
  memcpy(&v, p, 4);
  // gcc emits a vpbroadcastd rather than vpdpbusd's {1to16} operand; an
  // asm dot with the folded broadcast measured no faster.
  return _mm512_set1_epi32(v);
}

// kz_rows is kt_rows on the 16-row tile: one 512-bit vpdpbusd (64
// products into 16 outputs' lanes) per broadcast of 4 x bytes.
TK_INLINE LP_TARGET void LPF(kz_rows)(const int R, const __m512i (*pz)[LP_KT_VECS], int s0, int ns,
                                      const int8_t *xq, const float *xd, const int16_t *xs, int k,
                                      __m512 acc[4]) {
  const int nsb = k / TK_QKK;
  for (int s = 0; s < ns; s++) {
    const __m512i *p = pz[s];
    const int sb = s0 + s;
    __m512i isb[4], ms[4];
    for (int r = 0; r < R; r++) isb[r] = ms[r] = _mm512_setzero_si512();
    for (int c = 0; c < 8; c++) {
      // Two chains per row (even and odd dwords), as kt_rows.
      __m512i ia[4], ib[4];
      for (int r = 0; r < R; r++) ia[r] = ib[r] = _mm512_setzero_si512();
      for (int i = 0; i < 8; i += 2) {
        __m512i w0 = _mm512_load_si512((const void *)(p + 8 * c + i));
        __m512i w1 = _mm512_load_si512((const void *)(p + 8 * c + i + 1));
        for (int r = 0; r < R; r++) {
          const int8_t *xr = xq + (size_t)r * k + TK_QKK * sb + 32 * c + 4 * i;
          ia[r] = _mm512_dpbusd_epi32(ia[r], w0, LPF(kz_bc4)(xr));
          ib[r] = _mm512_dpbusd_epi32(ib[r], w1, LPF(kz_bc4)(xr + 4));
        }
      }
      __m512i sc = _mm512_load_si512((const void *)(p + LP_KT_SC + c));
      __m512i mp = _mm512_load_si512((const void *)(p + LP_KT_MP + c));
      for (int r = 0; r < R; r++) {
        isb[r] = _mm512_add_epi32(isb[r], _mm512_mullo_epi32(_mm512_add_epi32(ia[r], ib[r]), sc));
        ms[r] = _mm512_dpwssd_epi32(ms[r], mp, LPF(kz_bc4)(xs + (size_t)r * (k / 16) + 16 * sb + 2 * c));
      }
    }
    __m512 d = _mm512_castsi512_ps(_mm512_load_si512((const void *)(p + LP_KT_D)));
    __m512 dm = _mm512_castsi512_ps(_mm512_load_si512((const void *)(p + LP_KT_DM)));
    for (int r = 0; r < R; r++) {
      __m512 dx = _mm512_set1_ps(xd[(size_t)r * nsb + sb]);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isb[r]), _mm512_mul_ps(d, dx), acc[r]);
      acc[r] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms[r]), _mm512_mul_ps(dm, dx), acc[r]);
    }
  }
}
#endif

// mmkt computes y[r][n] for r < m, n in [n0, n1) of Q4_K or Q5_K: 16-row
// (LP_ZMM, kz_pack) then 8-row weight tiles packed per depth chunk
// (kt_pack) and run over all m rows of x four at a time; rows past the
// last whole 8-row tile go through mmk.
TK_INLINE LP_TARGET void LPF(mmkt)(const int WT, const uint8_t *w, size_t wrow, const int8_t *xq,
                                   const float *xd, const int16_t *xs, int m, int k, float *y, long ldy,
                                   int n0, int n1) {
  const int nsb = k / TK_QKK;
  __m256i pw[LP_KT_CHUNK][LP_KT_VECS] __attribute__((aligned(64)));
  int n = n0;
#ifdef LP_ZMM
  __m512i pz[LP_KZ_CHUNK][LP_KT_VECS] __attribute__((aligned(64)));
  for (; n + 16 <= n1; n += 16)
    for (int s0 = 0; s0 < nsb; s0 += LP_KZ_CHUNK) {
      const int ns = nsb - s0 < LP_KZ_CHUNK ? nsb - s0 : LP_KZ_CHUNK;
      LPF(kz_pack)(WT, w, wrow, n, s0, ns, pz);
      for (int r = 0; r < m; r += 4) {
        __m512 acc[4];
        for (int i = 0; i < 4; i++) acc[i] = _mm512_setzero_ps();
        const int8_t *q = xq + (size_t)r * k;
        const float *d = xd + (size_t)r * nsb;
        const int16_t *bs = xs + (size_t)r * (k / 16);
        const int rr = m - r < 4 ? m - r : 4;
        switch (rr) {
          case 1: LPF(kz_rows)(1, (const __m512i(*)[LP_KT_VECS])pz, s0, ns, q, d, bs, k, acc); break;
          case 2: LPF(kz_rows)(2, (const __m512i(*)[LP_KT_VECS])pz, s0, ns, q, d, bs, k, acc); break;
          case 3: LPF(kz_rows)(3, (const __m512i(*)[LP_KT_VECS])pz, s0, ns, q, d, bs, k, acc); break;
          default: LPF(kz_rows)(4, (const __m512i(*)[LP_KT_VECS])pz, s0, ns, q, d, bs, k, acc); break;
        }
        for (int i = 0; i < rr; i++) {
          float *yr = y + (size_t)(r + i) * ldy + n;
          _mm512_storeu_ps(yr, s0 ? _mm512_add_ps(_mm512_loadu_ps(yr), acc[i]) : acc[i]);
        }
      }
    }
#endif
  for (; n + 8 <= n1; n += 8)
    for (int s0 = 0; s0 < nsb; s0 += LP_KT_CHUNK) {
      const int ns = nsb - s0 < LP_KT_CHUNK ? nsb - s0 : LP_KT_CHUNK;
      LPF(kt_pack)(WT, w, wrow, n, s0, ns, pw);
      for (int r = 0; r < m; r += 4) {
        __m256 acc[4];
        for (int i = 0; i < 4; i++) acc[i] = _mm256_setzero_ps();
        const int8_t *q = xq + (size_t)r * k;
        const float *d = xd + (size_t)r * nsb;
        const int16_t *bs = xs + (size_t)r * (k / 16);
        const int rr = m - r < 4 ? m - r : 4;
        switch (rr) {
          case 1: LPF(kt_rows)(1, (const __m256i(*)[LP_KT_VECS])pw, s0, ns, q, d, bs, k, acc); break;
          case 2: LPF(kt_rows)(2, (const __m256i(*)[LP_KT_VECS])pw, s0, ns, q, d, bs, k, acc); break;
          case 3: LPF(kt_rows)(3, (const __m256i(*)[LP_KT_VECS])pw, s0, ns, q, d, bs, k, acc); break;
          default: LPF(kt_rows)(4, (const __m256i(*)[LP_KT_VECS])pw, s0, ns, q, d, bs, k, acc); break;
        }
        for (int i = 0; i < rr; i++) {
          float *yr = y + (size_t)(r + i) * ldy + n;
          _mm256_storeu_ps(yr, s0 ? _mm256_add_ps(_mm256_loadu_ps(yr), acc[i]) : acc[i]);
        }
      }
    }
  for (int r0 = 0; n < n1 && r0 < m; r0 += 32)
    LPF(mmk)(WT, w, wrow, xq + (size_t)r0 * k, xd + (size_t)r0 * nsb, xs + (size_t)r0 * (k / 16),
             m - r0 < 32 ? m - r0 : 32, k, y + (size_t)r0 * ldy, ldy, n, n1);
}
#undef LP_KT_CHUNK
#undef LP_KZ_CHUNK
#undef LP_KT_SC
#undef LP_KT_MP
#undef LP_KT_D
#undef LP_KT_DM
#undef LP_KT_VECS

// mmk1 is mmk for one row of x (the decode GEMV), y[n] for n in [n0, n1).
// On 512-bit levels the integer dot stays 512 bits wide up to one float
// accumulator per row and no loop runs over rows of x; the 256-bit levels
// keep mmk with m = 1 (a copy of it measured 6% slower for Q2_K on AVX2).
// The rows are read in order and prefetched TK_STREAM_PF ahead, a row at a
// time (with the weights in 4 KiB pages a prefetch 1-4 KiB ahead showed no
// gain; see tk_pf_row).
#ifdef LP_ZMM
// kq1_sb accumulates super-block sb of one weight row and the one row of
// x into *acc (and the mins into *accm): mmk1's loop body.
TK_INLINE LP_TARGET void LPF(kq1_sb)(const int WT, const uint8_t *row, const int8_t *xq,
                                     const float *xd, const int16_t *xs, int sb, __m512 *acc,
                                     __m256 *accm) {
  const size_t bb = tk_blk_bytes(WT);
  const int off = WT == TK_Q6_K || WT == TK_Q3_K;  // an offset, else mins
  const int8_t *xr = xq + TK_QKK * sb;
  __m256i mins;
  float d, dmin;
  __m512i Q[4], SC[4];
  LPF(kq_decodez)(WT, row + (size_t)sb * bb, Q, SC, &mins, &d, &dmin);
  // Two independent integer chains of two dots of 64 products each.
  __m512i is2[2];
  for (int p = 0; p < 2; p++)
    is2[p] = _mm512_madd_epi16(_mm512_maddubs_epi16(Q[p], _mm512_loadu_si512((const void *)(xr + 64 * p))), SC[p]);
  for (int p = 2; p < 4; p++)
    is2[p - 2] = _mm512_dpwssd_epi32(is2[p - 2], _mm512_maddubs_epi16(Q[p], _mm512_loadu_si512((const void *)(xr + 64 * p))),
                                     SC[p]);
  __m512i is = _mm512_add_epi32(is2[0], is2[1]);
  __m256i c = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(xs + 16 * sb)), mins);
  const float dx = xd[sb];
  // Σ sc·(q − off)·x = Σ sc·q·x − off·Σ sc·bsum (off 32 or 4)
  if (off) is = _mm512_sub_epi32(is, _mm512_zextsi256_si512(_mm256_slli_epi32(c, WT == TK_Q6_K ? 5 : 2)));
  *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_set1_ps(d * dx), *acc);
  if (!off) *accm = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(c), _mm256_set1_ps(dmin * dx), *accm);
}

TK_INLINE LP_TARGET float LPF(kq1_sum)(const int WT, __m512 acc, __m256 accm) {
  const int off = WT == TK_Q6_K || WT == TK_Q3_K;
  __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
  return tk_hsum8(off ? a8 : _mm256_add_ps(a8, accm));
}
#endif

// mmk1 is mmk for one row of x (the decode GEMV), y[n] for n in [n0, n1).
// On 512-bit levels the integer dot stays 512 bits wide up to one float
// accumulator per row and no loop runs over rows of x; the 256-bit levels
// keep mmk with m = 1 (a copy of it measured 6% slower for Q2_K on AVX2).
// The rows go two at a time from the two halves of [n0, n1), a super-block
// of each in turn, each line prefetched TK_GEMV2_PF ahead (TK_GEMV2 in
// tk_internal.h); an odd last row, or all of them with TK_GEMV2 0, one at
// a time prefetched TK_STREAM_PF ahead (tk_pf_row).
TK_INLINE LP_TARGET void LPF(mmk1)(const int WT, const uint8_t *w, size_t wrow,
                                   const int8_t *xq, const float *xd,
                                   const int16_t *xs, int k, float *y, int n0,
                                   int n1) {
#ifdef LP_ZMM
  const int nsb = k / TK_QKK;
  int n = n0;
#if TK_GEMV2
  if (n1 - n >= 2) {  // two streams (TK_GEMV2)
    const int h = (n1 - n) / 2;
    for (int i = 0; i < h; i++) {
      const uint8_t *ra = w + (size_t)(n + i) * wrow, *rb = ra + (size_t)h * wrow;
      __m512 aa = _mm512_setzero_ps(), ab = _mm512_setzero_ps();
      __m256 ma = _mm256_setzero_ps(), mb = _mm256_setzero_ps();
      for (int sb = 0; sb < nsb; sb++) {
        const size_t bb = tk_blk_bytes(WT);
        tk_pf_ahead(ra + (size_t)sb * bb, bb);
        tk_pf_ahead(rb + (size_t)sb * bb, bb);
        LPF(kq1_sb)(WT, ra, xq, xd, xs, sb, &aa, &ma);
        LPF(kq1_sb)(WT, rb, xq, xd, xs, sb, &ab, &mb);
      }
      y[n + i] = LPF(kq1_sum)(WT, aa, ma);
      y[n + h + i] = LPF(kq1_sum)(WT, ab, mb);
    }
    n += 2 * h;
  }
#endif
  for (; n < n1; n++) {
    const uint8_t *row = w + (size_t)n * wrow;
    tk_pf_row(row, wrow);
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int sb = 0; sb < nsb; sb++) LPF(kq1_sb)(WT, row, xq, xd, xs, sb, &acc, &accm);
    y[n] = LPF(kq1_sum)(WT, acc, accm);
  }
#else
  LPF(mmk)(WT, w, wrow, xq, xd, xs, 1, k, y, 1, n0, n1);
#endif
}

#define LP_N_FOR(M) ((M) == 1 ? 4 : LP_NMAX)
// LP_KT_MIN is the fewest rows of x that take the tile kernels (mmkt):
// measured faster from 8 rows up (BenchmarkMatMul m=8, 32, 512); below 5,
// packing 8 rows per chunk outweighs what the tile saves over mmk's GEMV.
#define LP_KT_MIN 5

#if defined(LP_GEMV2) && TK_GEMV2
#define LP_GEMV2_ON 1
#else
#define LP_GEMV2_ON 0
#endif
LP_TARGET static void LPF(qmm)(int wtype, const uint8_t *w, size_t wrow,
                               const int8_t *xq, const float *xd,
                               const void *aux, int m, int k, float *y,
                               long ldy, int n0, int n1) {
  switch (wtype) {
#define LP_KCASE(T)                                                                    \
  case T:                                                                              \
    if (m == 1) { /* a constant row count keeps the accumulators in registers */       \
      LPF(mmk1)(T, w, wrow, xq, xd, (const int16_t *)aux, k, y, n0, n1);               \
      return;                                                                          \
    }                                                                                  \
    if (m >= LP_KT_MIN && (T == TK_Q4_K || T == TK_Q5_K)) {                            \
      LPF(mmkt)(T, w, wrow, xq, xd, (const int16_t *)aux, m, k, y, ldy, n0, n1);       \
      return;                                                                          \
    }                                                                                  \
    for (int r0 = 0; r0 < m; r0 += 32) {                                               \
      int mm = m - r0 < 32 ? m - r0 : 32;                                              \
      LPF(mmk)(T, w, wrow, xq + (size_t)r0 * k, xd + (size_t)r0 * (k / TK_QKK),        \
               (const int16_t *)aux + (size_t)r0 * (k / 16), mm, k, y + (size_t)r0 * ldy, \
               ldy, n0, n1);                                                           \
    }                                                                                  \
    return;
    LP_KCASE(TK_Q2_K)
    LP_KCASE(TK_Q3_K)
    LP_KCASE(TK_Q4_K)
    LP_KCASE(TK_Q5_K)
    LP_KCASE(TK_Q6_K)
#undef LP_KCASE
#define LP_LCASE(T)                                                                       \
  case T: {                                                                               \
    const int32_t *xc = (const int32_t *)aux;                                             \
    int n = n0;                                                                           \
    /* GEMV rows (m ≤ 4) go one weight row at a time (a tile of         */               \
    /* interleaved short rows measured slower on the 110M model); at     */               \
    /* m = 1 two at a time from the tile's two halves (gemv2z).          */               \
    if (m > 4)                                                                            \
      for (; n + LP_NMAX <= n1; n += LP_NMAX) {                                           \
        int nx = n1 - (n + LP_NMAX) < LP_NMAX ? n1 - (n + LP_NMAX) : LP_NMAX;             \
        LPF(mm32_rows)(T, LP_NMAX, w, wrow, xq, xd, xc, m, k, y, ldy, n,                  \
                       w + (size_t)(n + LP_NMAX) * wrow, (size_t)nx * wrow);              \
      }                                                                                   \
    if (LP_GEMV2_ON && m == 1 && (k / TK_QK) % 8 == 0 && n1 - n >= 2) {                 \
      const int h = (n1 - n) / 2;                                                         \
      for (int i = 0; i < h; i++) {                                                       \
        const uint8_t *ra = w + (size_t)(n + i) * wrow, *rb = ra + (size_t)h * wrow;      \
        LPF(gemv2z)(T, ra, rb, xq, xd, xc, k, y + n + i, y + n + h + i);                  \
      }                                                                                   \
      n += 2 * h;                                                                         \
    }                                                                                     \
    for (; n < n1; n++) {                                                                 \
      if (m <= 4) tk_pf_row(w + (size_t)n * wrow, wrow);                                  \
      LPF(mm32_rows)(T, 1, w, wrow, xq, xd, xc, m, k, y, ldy, n, w, 0);                   \
    }                                                                                     \
    return;                                                                               \
  }
    LP_LCASE(TK_Q8_0)
    LP_LCASE(TK_Q4_0)
    LP_LCASE(TK_Q4_1)
    LP_LCASE(TK_Q5_0)
    LP_LCASE(TK_Q5_1)
#undef LP_LCASE
  }
}
#undef LP_N_FOR
#undef LP_KT_MIN
#undef LP_MM32
#undef LP_GEMV2
#undef LP_GEMV2_ON

// Each inclusion instantiates one dot level; the next sets its own
// parameters (LP_ZMM is optional).
#undef LPF
#undef LP_TARGET
#undef LP_DOTB
#undef LP_DOTW
#undef LP_XOR8
#undef LP_NMAX
#undef LP_ZMM
