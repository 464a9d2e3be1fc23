// Package kernels is the arithmetic of the forward pass, on the CPU and on
// NVIDIA GPUs: GEMM and GEMV over F32/F16/BF16 and GGML block-quantised
// weights (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K; the
// CUDA kernels read F32/F16/BF16/Q8_0, and dequantise the other block
// types to bf16 when the weights are uploaded), RMSNorm, RoPE, SiLU·mul, softmax,
// paged attention, KV writes, embedding gather, argmax and sampling.
//
// # CPU
//
// The kernels are C (tk_*.c), compiled by cgo with -O3 and no -march flag:
// AVX-512 and AVX2+FMA bodies carry per-function target attributes and are
// chosen at run time, with a portable C fallback, so one binary runs on any
// x86-64 (and builds on other architectures with the portable path only).
// Work is split across cores by Workers, a Go worker pool that makes one cgo
// call per tile, never per element (one tile in all for a one-worker pool
// or a tiny matrix). MatMul picks by rows of x: GEMV (1..4), streaming
// (5..32, each weight read once, no packing) or the packed GEMM. Block
// types are read straight from the (mmapped) quantised bytes: tk_quant.c
// decodes a block into registers (GEMV) or into an L1 buffer (packing,
// streaming), in ggml's rounding order, so every path sees the exact
// weights of the Go reference. By default (Workers.SetExact(false))
// tk_lowp.c rounds the activations once per MatMul where the weights allow
// a cheaper dot product, as llama.cpp does: to bf16 pairs for BF16 weights
// on AVX512-BF16 CPUs (vdpbf16ps in the GEMV, streaming and GEMM
// kernels), and to int8 blocks (32, or 256 with per-16 sums for the
// K-quants) for every block type at up to 32 rows
// (vpdpbusd/vpdpwssd with AVX512-VNNI or AVX-VNNI, maddubs on AVX2,
// portable C otherwise). The Ref* functions are plain-Go
// references (float64 accumulation) used by the tests here and by the CUDA
// kernel tests.
//
// Beyond that: an int8 GEMM over interleaved weight-row tiles for Q4_K
// and Q5_K from 5 rows up, prefill included (16 rows per 512-bit vpdpbusd
// on AVX512-VNNI, 8 elsewhere); AVX-512 streaming tiles for F32 and F16
// weights in batched decode and a 12x32 register tile in the packed GEMM;
// decode GEMVs (int8, bf16, f16) that prefetch each weight row 16 KiB
// ahead, which pays once the weights sit in huge pages; AVX-512 paged
// attention that prefetches the next block and, for query tiles of 8..16
// rows (prefill), a body with one query per lane over K/V blocks widened
// once per task; sliding-window masks on plain and cascade attention; and
// a read-bandwidth probe of eight interleaved streams per core. Workers'
// hand-offs spin up to 50 µs before parking; each worker takes its own
// contiguous share of a job's tiles and steals from the back of the
// others'; matrices that share x (q/k/v, gate/up) are one job on every
// path up to 32 rows, and on the int8 kernels at any.
//
// # Cascade attention
//
// When sequences share a leading run of KV blocks (a common prompt),
// PagedAttentionGroups reads that run once per group and kv head instead
// of once per sequence. Decode attention of one query is a dot product per
// key, bound by memory and by loads; all members' queries against the same
// keys form a small GEMM instead (queries transposed into vector lanes,
// each key element broadcast once for 32 rows), which runs near the FMA
// peak from cache. The softmax over the shared run and over each member's
// own tail are computed separately, each as a state (max m, sum l,
// unnormalised output a), and joined exactly by the log-sum-exp rule:
// with M = max(m₁, m₂), l = l₁e^(m₁−M) + l₂e^(m₂−M) and
// a = a₁e^(m₁−M) + a₂e^(m₂−M), out = a/l — the same rescale the online
// softmax applies from one block to the next, so splitting the keys
// anywhere changes only the rounding. Joining at the end rather than
// starting the tail from the shared state lets the compute-bound shared
// pass and the memory-bound tails run at the same time.
//
// # CUDA
//
// The CUDA kernels are sources (attention.cu, ops.cu, quant.cu, sampling.cu,
// sharing cuda_common.cuh), embedded and compiled to cubin by NVRTC at start-up for
// the device's architecture (package cuda loads NVRTC and the driver with
// dlopen, so building needs no toolkit). cuda_launch.go and
// cuda_runner_ops.go are their typed launchers: one driver launch per
// kernel, arguments packed as the kernels declare them; cuda_plan.go sizes
// launch grids and decode splits. The CPU kernels are their numerical
// reference.
//
// Paged decode attention splits each row by its own context; prefill
// attention for bf16 caches runs on tensor cores (mma.sync, bf16) beside
// the exact f32 warp kernel, and all three take a sliding window. Argmax
// breaks ties in the host sampler's order. Every GGML block type is
// dequantised to bf16 on the device (quant.cu) and gathered for
// embeddings, bit-exact with internal/quant: the decoders' Go mirror
// (CUDAQuantAt, CUDADequantBF16) checks their index math on the host.
// Cascade attention on the device is a shared pass writing decode-split
// partials that the combine merges, with the group layout as data in
// captured graphs. Lane- and thread-level Go emulations of the
// tensor-core and cascade kernels check their index math without a GPU.
//
// Layouts shared with the forward pass and the CUDA kernels:
//   - weights W: row-major [Rows][Cols] as stored in GGUF; y[m][n] = Σ_k x[m][k]·W[n][k];
//   - KV cache per layer (KVLayer): K and V [numBlocks][kvHeads][blockSize][headDim]
//     of one KVTypes element type: float32 (K, V), or F16 or BF16 bits (K16, V16);
//     position p of a sequence is at offset p%blockSize of block table[p/blockSize]
//     (its KV slot is table[p/blockSize]*blockSize + p%blockSize);
//   - Q/K/V activations: [tokens][heads*headDim], head h at columns h*headDim.
package kernels
