// tk.h: the C side of package kernels (CPU kernels called through cgo).
//
// Every entry point takes the instruction-set path as an argument (isa) so
// that Go owns the choice and tests can force every path the CPU supports.
// No function keeps a pointer it was given after it returns.
#ifndef TURNSTILE_TK_H
#define TURNSTILE_TK_H

#include <stddef.h>
#include <stdint.h>

// Weight element types: the GGML type ids.
enum { TK_F32 = 0, TK_F16 = 1, TK_Q8_0 = 8, TK_BF16 = 30 };

// Instruction-set paths.
enum { TK_PORTABLE = 0, TK_AVX2 = 1, TK_AVX512 = 2 };

// GEMM blocking: KC is the depth of one packed block (a multiple of the Q8_0
// block so packing never splits a block).
#define TK_KC 256
#define TK_MR 6
#define TK_MC 96  // rows of x per L2 block (a multiple of MR)
#define TK_QK 32
#define TK_Q8_BYTES 34

// tk_cpu_paths returns a bitmask (1 << path) of the paths this CPU can run.
int tk_cpu_paths(void);

// tk_pack_a packs rows [r0, r1) of x (float32 [m][k]) into MR-row panels:
// panel i is [k][MR] at pa + i*MR*k; r0 is a multiple of MR and rows past r1
// in the last panel are zero. pa holds roundUp(m, MR)*k floats. isa picks
// the transpose (AVX-512: in registers, 16 depths at a time).
void tk_pack_a(int isa, const float *x, int k, int r0, int r1, float *pa);

// tk_gemm_tile computes y[0:m][n0:n1] = x[0:m][:] · W[n0:n1][:]ᵀ from x
// packed by tk_pack_a (pa). y is float32 [m][ldy]; W rows are wrow bytes
// apart. Caller-owned scratch: pb (n1-n0+32)*KC floats, tmp KC+64 floats.
void tk_gemm_tile(int isa, int wtype, const uint8_t *w, size_t wrow,
                  const float *pa, float *y, long ldy, int k, int m, int n0,
                  int n1, float *pb, float *tmp);

// tk_gemv_tile computes y[r][n] for r < m (1..4) and n in [n0, n1), reading
// each weight row once. tmp needs k+64 floats (portable path only).
void tk_gemv_tile(int isa, int wtype, const uint8_t *w, size_t wrow,
                  const float *x, int m, float *y, long ldy, int k, int n0,
                  int n1, float *tmp);

// tk_stream_tile is tk_gemv_tile for any m (meant for 5..32): weight rows
// are converted in registers (no packed copy) and each is read from memory
// once while all m rows of x, kept in L2, pass over it. tmp needs 4*k+64
// floats.
void tk_stream_tile(int isa, int wtype, const uint8_t *w, size_t wrow,
                    const float *x, int m, float *y, long ldy, int k, int n0,
                    int n1, float *tmp);

// ---- low-precision activations (tk_lowp.c) ----

// Optional extensions (tk_cpu_features bits) the low-precision kernels use.
enum { TK_FEAT_BF16 = 1, TK_FEAT_VNNI512 = 2, TK_FEAT_AVXVNNI = 4 };
int tk_cpu_features(void);

// Integer-dot levels of the int8-activation kernels: portable C, AVX2
// (maddubs), AVX-VNNI and AVX512-VNNI (both vpdpbusd on 256 bits).
enum { TK_LP_PORTABLE = 0, TK_LP_AVX2 = 1, TK_LP_AVXVNNI = 2, TK_LP_VNNI512 = 3 };

// tk_act_block is the activation block (32 or 256) for wtype, 0 where
// wtype has no int8-activation kernel.
int tk_act_block(int wtype);
// tk_act_bytes is the size of tk_quant_act's buffer for m rows of k.
size_t tk_act_bytes(int wtype, int m, int k);
// tk_quant_act quantises rows [r0, r1) of x (float32 [m][k]) per
// tk_act_block: scale d = max|x|/127 (float32) and int8 q =
// round-half-even(x·127/max|x|), plus the per-block sums the weight type
// needs, into buf (tk_act_bytes, 64-byte aligned).
void tk_quant_act(int lp, int wtype, const float *x, int m, int k, int r0,
                  int r1, void *buf);
// tk_qmm_tile computes y[r][n] for r < m, n in [n0, n1) from activations
// quantised by tk_quant_act (same lp, wtype, m, k).
void tk_qmm_tile(int lp, int wtype, const uint8_t *w, size_t wrow,
                 const void *act, int m, float *y, long ldy, int k, int n0,
                 int n1);

// tk_x_bf16 rounds x (float32 [m][k]) to bf16 (nearest even, denormals to
// zero) into xb [m][kp], kp a multiple of 32 ≥ k, zero padded. The bf16
// entry points run only where tk_cpu_features has TK_FEAT_BF16.
void tk_x_bf16(const float *x, int m, int k, int kp, uint16_t *xb);
// tk_mm_bf16_tile is tk_stream_tile for BF16 weights and bf16 x (any m).
void tk_mm_bf16_tile(const uint8_t *w, size_t wrow, const uint16_t *xb,
                     int kp, int m, float *y, long ldy, int k, int n0,
                     int n1);
// tk_pack_a_bf16 is tk_pack_a into bf16 pairs: panel i is [k/2][MR] 32-bit
// pairs (depth 2p low, 2p+1 high) at pa + i*MR*(k/2); k is even.
void tk_pack_a_bf16(const float *x, int k, int r0, int r1, uint32_t *pa);
// TK_BF16_GKC is the depth chunk of tk_gemm_tile_bf16, in bf16 columns:
// k ≤ 1024 (the 110M model's 768) packs each weight row in one piece and
// never reloads y.
#define TK_BF16_GKC 1024
// tk_gemm_tile_bf16 is tk_gemm_tile for BF16 weights and x packed by
// tk_pack_a_bf16 (k even). pb needs (n1-n0+32)*TK_BF16_GKC/2 floats.
void tk_gemm_tile_bf16(const uint8_t *w, size_t wrow, const uint32_t *pa,
                       float *y, long ldy, int k, int m, int n0, int n1,
                       float *pb);

// tk_dequant_rows writes rows[i] of W (cols elements each) to out[i][cols].
void tk_dequant_rows(int isa, int wtype, const uint8_t *w, size_t wrow,
                     int cols, const int32_t *rows, int nrows, float *out);

// tk_rmsnorm: y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, rows r0..r1.
void tk_rmsnorm(int isa, float *y, const float *x, const float *weight, int r0,
                int r1, int dim, float eps);

// tk_rope rotates adjacent pairs of every head of every row in place.
void tk_rope(float *x, const int32_t *pos, int rows, int heads, int hd,
             float theta, float freq_scale);

// tk_rope_table writes cs [rows][half][2]: (cos, sin) of pos[r]·freqs[i]
// radians, computed in double and rounded to float.
void tk_rope_table(float *cs, const int32_t *pos, int rows, int half,
                   const double *freqs);
// tk_rope_apply rotates pair i of every head of row r of x in place by the
// angle whose (cos, sin) is cs[r][i] (tk_rope_table): pairs (2i, 2i+1), or
// (i, i+hd/2) with neox.
void tk_rope_apply(float *x, const float *cs, int rows, int heads, int hd,
                   int neox);

// tk_silu_mul: y = g/(1+e^−g)·up. The AVX2 path's exp is a polynomial
// (≤ 2 ulp), so its result may differ from the portable one by a few ulp.
void tk_silu_mul(int isa, float *y, const float *gate, const float *up,
                 long n);
void tk_softmax(float *x, long n);
long tk_argmax(const float *x, long n);

// Paged KV cache element types (kvtype): TK_F32, TK_F16 or TK_BF16 (the
// weight type ids). K and V point at float or uint16_t bits accordingly,
// both laid out [blocks][kv_heads][block][hd].

// tk_attn_task: one (sequence, kv head, query range) task of paged attention.
// Queries i in [i0, i1) of the sequence sit at q/out rows qstart+i and at
// positions ctx-numq+i; they attend causally to positions 0..their own,
// or with win > 0 (a sliding window) to the last win of them only (the
// query at p sees max(0, p-win+1)..p). 16-bit K/V are widened to float in
// registers. scratch needs (i1-i0)*group*(hd+2) + block floats.
void tk_attn_task(int isa, int kvtype, float *out, const float *q,
                  const void *K, const void *V, int heads, int kv_heads,
                  int block, int hd, const int32_t *table, int qstart,
                  int numq, int ctx, int kvh, int i0, int i1, float scale,
                  float *scratch, int win);

// tk_attn_tail is tk_attn_task for a cascade member's tail: it reads
// blocks from b0 on and writes each (query i, head h) pair's softmax state
// [max, sum, acc[hd]] (acc unnormalised) to state + (i*heads + h)*(hd+2)
// instead of out. Same scratch as tk_attn_task.
void tk_attn_tail(int isa, int kvtype, float *out, const float *q,
                  const void *K, const void *V, int heads, int kv_heads,
                  int block, int hd, const int32_t *table, int qstart,
                  int numq, int ctx, int kvh, int i0, int i1, float scale,
                  float *scratch, int b0, float *state, int win);

// tk_kv_write16 stores n tokens' k and v rows ([n][kv_heads*hd] floats)
// into a 16-bit cache (kvtype TK_F16 or TK_BF16) at positions pos through
// table, rounding to nearest even (F16C on the vector paths).
void tk_kv_write16(int isa, int kvtype, uint16_t *K, uint16_t *V,
                   const float *k, const float *v, const int32_t *pos, int n,
                   const int32_t *table, int kv_heads, int block, int hd);

// tk_cascade_merge joins the nstates softmax states of every head of query
// slots [s0, s1) (state c of (slot s, head h) at part + c*chunk +
// (s*heads + h)*(hd+2)) by the log-sum-exp rule and writes the normalised
// result to out row qrows[s].
void tk_cascade_merge(float *out, const float *part, long chunk, int nstates,
                      const int32_t *qrows, int s0, int s1, int heads, int hd);

// Cascade shared pass: rows of a task are (member query slot, query head of
// the kv head's GQA group) pairs, row m = slot*group + g. A task holds at
// most TK_CASC_M512 rows on the AVX-512 path, TK_CASC_M on the others, and
// reads keys in chunks of tk_casc_keys(block) positions.
#define TK_CASC_M512 32
#define TK_CASC_M 16
static inline int tk_casc_keys(int block) {
  return block >= 64 ? block : (64 / block) * block;
}

// tk_cascade_task attends rows [m0, m1) (slots' q rows in qrows[slot]) of
// one kv head to blocks [b0, b1) of table, unmasked, and writes each row's
// state [max, sum, acc[hd]] (scores scaled by scale, acc unnormalised) to
// part + (slot*heads + h)*(hd+2). scratch needs
// M*(2*hd + tk_casc_keys(block) + 2) floats for the path's M.
void tk_cascade_task(int isa, int kvtype, const float *q, const void *K,
                     const void *V, int heads, int kv_heads, int block, int hd,
                     const int32_t *table, int b0, int b1,
                     const int32_t *qrows, int m0, int m1, int kvh,
                     float scale, float *part, float *scratch);

// tk_peak_fma runs iters rounds of independent FMAs and returns the number
// of floating-point operations done; *sink defeats dead-code elimination.
double tk_peak_fma(int isa, long iters, float *sink);

// tk_read_sum reads n floats once, as several interleaved sequential
// streams, and returns their sum (bandwidth probe).
float tk_read_sum(int isa, const float *p, long n);

#endif
