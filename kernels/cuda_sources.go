package kernels

// The CUDA half of the kernel set (files cuda_*.go and *.cu):
//   - ops.cu: RMSNorm, RoPE, SiLU·mul, embedding (F32/F16/BF16/Q8_0 tables),
//     f32→bf16/f16 activation casts, Q8_0→bf16 weight dequantisation, argmax;
//   - attention.cu: KV write by slot mapping, paged decode attention (GQA: each
//     KV head read once per group; split across blocks for long contexts and
//     merged; page indices staged in shared memory; a shared-prefix pass that
//     attends a group's common leading blocks once for all its members),
//     causal varlen prefill
//     (a tiled FlashAttention-2 kernel on the tensor cores through mma.sync
//     for head dims a multiple of 16 up to 128, a warp per query otherwise);
//   - quant.cu: the other block types (Q4_0, Q4_1, Q5_0, Q5_1, Q2_K ... Q6_K):
//     bf16 weight dequantisation and embedding gathers, bit-exact with
//     internal/quant;
//   - sampling.cu: temperature, min_p, top_k, top_p by radix select, inverse-CDF
//     draw with a host-supplied uniform;
//   - weight GEMMs go through cuBLASLt (package cuda, Ctx.MatmulWT).
// Layouts are the CPU ones (see doc.go). The KV cache may be float32 (*_f32
// entry points, identical to the CPU cache) or bf16 (*_bf16): bf16 is the GPU
// default because decode attention is bound by reading the cache, and it halves
// that traffic and the memory; f32 exists for exact comparison with the CPU.

import (
	"embed"
	"fmt"
	"slices"
	"strings"
)

// The CUDA kernel sources, compiled at start-up by NVRTC (package cuda) for the
// device's architecture. cuda_common.cuh is prepended to each .cu because NVRTC
// gets no include path.
//
//go:embed *.cu
var cudaFS embed.FS

//go:embed cuda_common.cuh
var cudaCommon string

// CUDASource is one CUDA translation unit ready for NVRTC.
type CUDASource struct {
	Name    string   // file name, e.g. "attention.cu"
	Source  string   // the full text NVRTC compiles (common prelude included)
	Entries []string // the extern "C" kernels it defines
}

// cudaEntries lists every kernel entry point per source file. A test checks
// that each compiled cubin defines exactly these.
func cudaEntries() map[string][]string {
	return map[string][]string{
		"ops.cu": {
			"ts_rmsnorm", "ts_rope", "ts_silu_mul",
			"ts_embedding_f32", "ts_embedding_f16", "ts_embedding_bf16", "ts_embedding_q8_0",
			"ts_dequant_q8_0_bf16", "ts_cast_f32_bf16", "ts_cast_f32_f16", "ts_argmax",
			"ts_rope_freqs", "ts_add_bias",
		},
		"attention.cu": {
			"ts_kv_write_f32", "ts_kv_write_bf16",
			"ts_paged_decode_f32", "ts_paged_decode_bf16", "ts_decode_combine",
			"ts_cascade_shared_f32", "ts_cascade_shared_bf16",
			"ts_paged_prefill_f32", "ts_paged_prefill_bf16",
			"ts_paged_prefill_tc_f32", "ts_paged_prefill_tc_bf16",
		},
		"sampling.cu": {"ts_sample"},
		"quant.cu": {
			"ts_dequant_q4_0_bf16", "ts_dequant_q4_1_bf16", "ts_dequant_q5_0_bf16", "ts_dequant_q5_1_bf16",
			"ts_dequant_q2_k_bf16", "ts_dequant_q3_k_bf16", "ts_dequant_q4_k_bf16", "ts_dequant_q5_k_bf16",
			"ts_dequant_q6_k_bf16",
			"ts_embedding_q4_0", "ts_embedding_q4_1", "ts_embedding_q5_0", "ts_embedding_q5_1",
			"ts_embedding_q2_k", "ts_embedding_q3_k", "ts_embedding_q4_k", "ts_embedding_q5_k",
			"ts_embedding_q6_k",
		},
	}
}

// CUDAOptions are the NVRTC options every kernel source is compiled with (the
// architecture is added by the compiler call).
func CUDAOptions() []string {
	return []string{"--std=c++17"}
}

// CUDASources returns every embedded .cu file with the common prelude and its
// entry points, sorted by name. It fails if a file has no entry list or a list
// names a missing file, so the two cannot drift apart.
func CUDASources() ([]CUDASource, error) {
	files, err := cudaFS.ReadDir(".")
	if err != nil {
		return nil, fmt.Errorf("kernels: embedded CUDA sources: %w", err)
	}
	entries := cudaEntries()
	var out []CUDASource
	for _, f := range files {
		name := f.Name()
		src, err := cudaFS.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("kernels: embedded CUDA source %s: %w", name, err)
		}
		ents, ok := entries[name]
		if !ok {
			return nil, fmt.Errorf("kernels: CUDA source %s has no entry-point list in cudaEntries", name)
		}
		delete(entries, name)
		// #line keeps NVRTC's messages pointing into the .cu file itself.
		full := cudaCommon + "\n#line 1 \"" + name + "\"\n" + string(src)
		out = append(out, CUDASource{Name: name, Source: full, Entries: slices.Clone(ents)})
	}
	if len(entries) > 0 {
		var missing []string
		for n := range entries {
			missing = append(missing, n)
		}
		slices.Sort(missing)
		return nil, fmt.Errorf("kernels: cudaEntries lists sources that are not embedded: %s", strings.Join(missing, ", "))
	}
	slices.SortFunc(out, func(a, b CUDASource) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
