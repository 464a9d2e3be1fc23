package kernels

import (
	"encoding/binary"
	"errors"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/cuda"
)

func TestCUDASourcesListed(t *testing.T) {
	srcs, err := CUDASources()
	require.NoError(t, err)
	require.Len(t, srcs, len(cudaEntries()))
	seen := map[string]bool{}
	for _, s := range srcs {
		require.Contains(t, s.Source, "ts_block_sum", "%s lacks the common prelude", s.Name)
		require.Contains(t, s.Source, "#line 1 \""+s.Name+"\"")
		for _, e := range s.Entries {
			require.False(t, seen[e], "entry %s listed twice", e)
			seen[e] = true
			require.Contains(t, s.Source, "extern \"C\" __global__ void "+e+"(", "%s: entry %s not defined", s.Name, e)
		}
	}
}

// Every kernel source compiles through NVRTC to cubin for sm_80 and sm_90, and
// each cubin defines exactly the listed entry points. Needs only NVRTC (no GPU);
// skipped, saying so, where NVRTC is absent.
func TestCUDACompile(t *testing.T) {
	nv, err := cuda.LoadNVRTC()
	if errors.Is(err, cuda.ErrLibraryNotFound) {
		t.Skipf("NVRTC not installed, skipping CUDA kernel compile test (run scripts/install-deps.sh as root): %v", err)
	}
	require.NoError(t, err)
	defer nv.Close()
	srcs, err := CUDASources()
	require.NoError(t, err)
	for _, arch := range []string{"sm_80", "sm_90"} {
		for _, s := range srcs {
			t.Run(arch+"/"+s.Name, func(t *testing.T) {
				cubin, log, err := nv.Compile(s.Source, s.Name, arch, CUDAOptions())
				require.NoError(t, err)
				require.Empty(t, log, "NVRTC warnings")
				fns, err := cuda.CubinFunctions(cubin)
				require.NoError(t, err)
				slices.Sort(fns)
				want := slices.Clone(s.Entries)
				slices.Sort(want)
				require.Equal(t, want, fns)
			})
		}
	}
}

// The launch geometry in Go must match the #defines the kernels are built with.
func TestCUDADefinesMatchGo(t *testing.T) {
	srcs, err := CUDASources()
	require.NoError(t, err)
	var all strings.Builder
	for _, s := range srcs {
		all.WriteString(s.Source)
	}
	text := all.String()
	cases := []struct {
		define string
		value  int
	}{
		{"TS_DECODE_THREADS", cudaDecodeThreads},
		{"TS_MAX_GROUP", cudaMaxGroup},
		{"TS_MAX_HD", cudaMaxHeadDim},
		{"TS_PREFILL_WARPS", cudaPrefillWarps},
		{"TS_SAMPLE_THREADS", cudaSampleThreads},
		{"TS_PFT_WARPS", cudaPrefillTCWarps},
		{"TS_PFT_ROWS", cudaPrefillTCRows},
		{"TS_PFT_KEYS", cudaPrefillTCKeys},
		{"TS_PFT_MAX_HD", cudaPrefillTCMaxHD},
		{"TS_PFT_PAD", cudaPrefillTCPad},
		{"TS_CASC_THREADS", cudaCascadeThreads},
		{"TS_CASC_ROWS", cudaCascadeRows},
		{"TS_CASC_KEYS", cudaCascadeKeys},
	}
	for _, tc := range cases {
		re := regexp.MustCompile(`#define ` + tc.define + `\s+(\d+)`)
		m := re.FindStringSubmatch(text)
		require.NotNil(t, m, "#define %s not found", tc.define)
		require.Equal(t, strconv.Itoa(tc.value), m[1], tc.define)
	}
}

// A warm start compiles nothing: the second CompileCUDA over the same cache
// directory reads every cubin from disk.
func TestCompileCUDAWarmCache(t *testing.T) {
	nv, err := cuda.LoadNVRTC()
	if errors.Is(err, cuda.ErrLibraryNotFound) {
		t.Skipf("NVRTC not installed, skipping CUDA cache test (run scripts/install-deps.sh as root): %v", err)
	}
	require.NoError(t, err)
	defer nv.Close()
	dir := t.TempDir()
	cold, err := cuda.NewCubinCache(nv, dir)
	require.NoError(t, err)
	mods, err := CompileCUDA(cold, "sm_80")
	require.NoError(t, err)
	compiles, hits := cold.Stats()
	require.Equal(t, int64(len(mods)), compiles)
	require.Zero(t, hits)

	warm, err := cuda.NewCubinCache(nv, dir)
	require.NoError(t, err)
	again, err := CompileCUDA(warm, "sm_80")
	require.NoError(t, err)
	compiles, hits = warm.Stats()
	require.Zero(t, compiles)
	require.Equal(t, int64(len(mods)), hits)
	require.Equal(t, mods, again)
}

// Bad shapes are rejected before anything reaches the device (the zero Ctx
// would fault if a launch were attempted).
func TestCUDALaunchValidation(t *testing.T) {
	var c cuda.Ctx
	var s cuda.Stream
	k := &CUDAKernels{fns: map[string]cuda.Function{}, smemCap: cudaDefaultSmemCap}
	kv := CUDAKV{NumBlocks: 8, KVHeads: 2, BlockSize: 16, HeadDim: 64}
	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"rmsnorm rows", func() error { return k.RMSNorm(c, s, 1, 1, 1, 0, 64, 1e-5) }, "RMSNorm"},
		{"rope odd", func() error { return k.RoPE(c, s, 1, 1, 2, 4, 63, 1e4, 1) }, "headDim 63 must be even"},
		{"rope freqs odd", func() error { return k.RoPEFreqs(c, s, 1, 1, 1, 2, 4, 63, true) }, "headDim 63 must be even"},
		{"rope freqs rows", func() error { return k.RoPEFreqs(c, s, 1, 1, 1, 0, 4, 64, false) }, "RoPEFreqs"},
		{"bias shape", func() error { return k.AddBias(c, s, 1, 1, 2, 0) }, "AddBias"},
		{"embedding type", func() error { return k.Embedding(c, s, 1, 1, DType(16), 1, 1, 10, 8) }, "DType(16)"},
		{"embedding q8 cols", func() error { return k.Embedding(c, s, 1, 1, Q8_0, 1, 1, 10, 40) }, "cols 40"},
		{"embedding q4_k cols", func() error { return k.Embedding(c, s, 1, 1, Q4_K, 1, 1, 10, 128) }, "Q4_K cols 128 is not a multiple of 256"},
		{"dequant type", func() error { return k.DequantToBF16(c, s, 1, 1, F16, 2, 32) }, "DequantToBF16 of F16: not a block type"},
		{"dequant cols", func() error { return k.DequantToBF16(c, s, 1, 1, Q5_1, 2, 48) }, "Q5_1 cols 48 is not a multiple of 32"},
		{"dequant rows", func() error { return k.DequantToBF16(c, s, 1, 1, Q6_K, 0, 256) }, "DequantToBF16"},
		{"dequant q6_k not loaded", func() error { return k.DequantToBF16(c, s, 1, 1, Q6_K, 1, 256) }, "ts_dequant_q6_k_bf16 not loaded"},
		{"embedding q3_k not loaded", func() error { return k.Embedding(c, s, 1, 1, Q3_K, 1, 1, 10, 256) }, "ts_embedding_q3_k not loaded"},
		{"cast f32", func() error { return k.CastF32(c, s, 1, 1, 10, cuda.F32) }, "want bf16 or f16"},
		{"kv shape", func() error { return k.KVWrite(c, s, CUDAKV{}, 1, 1, 1, 1) }, "must be positive"},
		{"kv headdim", func() error {
			return k.KVWrite(c, s, CUDAKV{NumBlocks: 1, KVHeads: 1, BlockSize: 16, HeadDim: 512}, 1, 1, 1, 1)
		}, "headDim 512 exceeds 256"},
		{"decode group", func() error {
			return k.DecodeAttention(c, s, 1, 1, kv, 1, 1, DecodeShape{Batch: 1, Heads: 3, MaxBlocks: 4, Splits: 1}, 1, 1, 1)
		}, "heads 3 must be a multiple of kvHeads 2"},
		{"decode splits", func() error {
			return k.DecodeAttention(c, s, 1, 1, kv, 1, 1, DecodeShape{Batch: 1, Heads: 4, MaxBlocks: 9}, 1, 1, 1)
		}, "splits"},
		{"decode smem", func() error {
			return k.DecodeAttention(c, s, 1, 1, kv, 1, 1, DecodeShape{Batch: 1, Heads: 4, MaxBlocks: 20000, Splits: 1}, 1, 1, 1)
		}, "20000 pages per split"},
		// The same table in 16 splits stages a sixteenth of the pages per
		// block: it passes validation and fails only at the launch.
		{"decode smem split", func() error {
			return k.DecodeAttention(c, s, 1, 1, kv, 1, 1, DecodeShape{Batch: 1, Heads: 4, MaxBlocks: 20000, Splits: 16}, 1, 1, 1)
		}, "ts_paged_decode_f32 not loaded"},
		{"decode with cascade splits", func() error {
			return k.DecodeAttention(c, s, 1, 1, kv, 1, 1, DecodeShape{Batch: 2, Heads: 4, MaxBlocks: 4, Splits: 1, CascadeSplits: 2}, 1, 1, 1)
		}, "use CascadeDecodeAttention"},
		{"cascade splits", func() error {
			return k.CascadeDecodeAttention(c, s, 1, 1, kv, 1, 1, CascadeInputs{1, 1, 1, 1},
				DecodeShape{Batch: 2, Heads: 4, MaxBlocks: 4, Splits: 1, CascadeTiles: 1}, 1, 1, 1)
		}, "cascadeSplits, cascadeTiles"},
		{"cascade inputs", func() error {
			return k.CascadeDecodeAttention(c, s, 1, 1, kv, 1, 1, CascadeInputs{StartBlocks: 1},
				DecodeShape{Batch: 2, Heads: 4, MaxBlocks: 4, Splits: 1, CascadeSplits: 1, CascadeTiles: 1}, 1, 1, 1)
		}, "every array must be set"},
		{"cascade smem", func() error {
			return k.CascadeDecodeAttention(c, s, 1, 1, CUDAKV{NumBlocks: 8, KVHeads: 2, BlockSize: 16, HeadDim: 256}, 1, 1, CascadeInputs{1, 1, 1, 1},
				DecodeShape{Batch: 2, Heads: 4, MaxBlocks: 4, Splits: 1, CascadeSplits: 1, CascadeTiles: 1}, 1, 1, 1)
		}, "bytes of shared memory (headDim 256)"},
		{"cascade launch", func() error {
			return k.CascadeDecodeAttention(c, s, 1, 1, kv, 1, 1, CascadeInputs{1, 1, 1, 1},
				DecodeShape{Batch: 2, Heads: 4, MaxBlocks: 4, Splits: 1, CascadeSplits: 1, CascadeTiles: 1}, 1, 1, 1)
		}, "ts_paged_decode_f32 not loaded"},
		{"prefill heads", func() error {
			return k.PrefillAttention(c, s, 1, 1, kv, 1, 1, 1, 1, PrefillShape{Seqs: 1, Heads: 3, MaxQ: 4, MaxBlocks: 4}, 1)
		}, "heads 3 is not a multiple"},
		{"prefill tc headdim", func() error {
			return k.PrefillAttention(c, s, 1, 1, CUDAKV{NumBlocks: 8, KVHeads: 2, BlockSize: 16, HeadDim: 72, BF16: true}, 1, 1, 1, 1,
				PrefillShape{Seqs: 1, Heads: 4, MaxQ: 4, MaxBlocks: 4, Kernel: PrefillTensorCore}, 1)
		}, "multiple of 16 up to 128, got 72"},
		{"prefill tc headdim 256", func() error {
			return k.PrefillAttention(c, s, 1, 1, CUDAKV{NumBlocks: 8, KVHeads: 2, BlockSize: 16, HeadDim: 256, BF16: true}, 1, 1, 1, 1,
				PrefillShape{Seqs: 1, Heads: 4, MaxQ: 4, MaxBlocks: 4, Kernel: PrefillTensorCore}, 1)
		}, "got 256"},
		{"prefill kernel", func() error {
			return k.PrefillAttention(c, s, 1, 1, kv, 1, 1, 1, 1, PrefillShape{Seqs: 1, Heads: 4, MaxQ: 4, MaxBlocks: 4, Kernel: 9}, 1)
		}, "PrefillKernel(9) is not one of"},
		{"prefill auto bf16", func() error {
			return k.PrefillAttention(c, s, 1, 1, CUDAKV{NumBlocks: 8, KVHeads: 2, BlockSize: 16, HeadDim: 128, BF16: true}, 1, 1, 1, 1,
				PrefillShape{Seqs: 1, Heads: 4, MaxQ: 4, MaxBlocks: 4}, 1)
		}, "ts_paged_prefill_tc_bf16 not loaded"},
		{"prefill auto f32", func() error {
			return k.PrefillAttention(c, s, 1, 1, kv, 1, 1, 1, 1, PrefillShape{Seqs: 1, Heads: 4, MaxQ: 4, MaxBlocks: 4}, 1)
		}, "ts_paged_prefill_f32 not loaded"},
		{"prefill forced tc f32", func() error {
			return k.PrefillAttention(c, s, 1, 1, kv, 1, 1, 1, 1, PrefillShape{Seqs: 1, Heads: 4, MaxQ: 4, MaxBlocks: 4, Kernel: PrefillTensorCore}, 1)
		}, "ts_paged_prefill_tc_f32 not loaded"},
		{"prefill forced warp bf16", func() error {
			return k.PrefillAttention(c, s, 1, 1, CUDAKV{NumBlocks: 8, KVHeads: 2, BlockSize: 16, HeadDim: 128, BF16: true}, 1, 1, 1, 1,
				PrefillShape{Seqs: 1, Heads: 4, MaxQ: 4, MaxBlocks: 4, Kernel: PrefillWarp}, 1)
		}, "ts_paged_prefill_bf16 not loaded"},
		{"not loaded", func() error { return k.Argmax(c, s, 1, 1, 1, 10) }, "ts_argmax not loaded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorContains(t, tc.call(), tc.want)
		})
	}
}

func TestDecodeScratchBytes(t *testing.T) {
	o, ml := DecodeScratchBytes(DecodeShape{Batch: 2, Heads: 8, Splits: 3}, 128)
	require.Equal(t, uint64(4*2*8*3*128), o)
	require.Equal(t, uint64(4*2*8*3*2), ml)
	require.Equal(t, 4*(4*128+4*16+3*4+8), decodeSmem(4, 128, 16, 8))
}

// DecodeSplitRange cuts each row by its own context: the ranges of one row
// are contiguous, cover exactly its blocks, each at most ceil(rowBlocks/splits)
// and so at most the ceil(maxBlocks/splits) pages the launch sizes shared
// memory for; splits past the row's end are empty.
func TestDecodeSplitRange(t *testing.T) {
	type rng struct{ first, end int }
	ranges := func(ctx, bs, maxBlocks, splits int) []rng {
		var out []rng
		for s := range splits {
			f, e := DecodeSplitRange(ctx, bs, maxBlocks, splits, s)
			out = append(out, rng{f, e})
		}
		return out
	}
	// A 4K-token row of a 128K-context table (8192 columns) in 16 splits: 16
	// blocks each, all busy, where a plan from the table width gave one split
	// of 512 blocks the whole row.
	for s, r := range ranges(4096, 16, 8192, 16) {
		require.Equal(t, rng{16 * s, 16 * (s + 1)}, r, "split %d", s)
	}
	require.Equal(t, []rng{{0, 1}, {1, 1}, {1, 1}}, ranges(1, 16, 19, 3))
	require.Equal(t, []rng{{0, 1}, {1, 2}, {2, 2}}, ranges(17, 16, 19, 3))
	require.Equal(t, []rng{{0, 7}, {7, 14}, {14, 19}}, ranges(300, 16, 19, 3))
	require.Equal(t, []rng{{0, 0}, {0, 0}}, ranges(0, 16, 19, 2), "a padding row")
	require.Equal(t, []rng{{0, 2}, {2, 4}}, ranges(1000, 16, 4, 2), "clamped to the table")
	for _, bs := range []int{1, 16, 32} {
		for _, maxBlocks := range []int{1, 7, 64} {
			for splits := 1; splits <= 20; splits++ {
				for ctx := 0; ctx <= maxBlocks*bs; ctx++ {
					rowBlocks := ceilDiv(ctx, bs)
					next := 0
					for s, r := range ranges(ctx, bs, maxBlocks, splits) {
						require.Equal(t, next, r.first, "ctx %d bs %d splits %d: split %d starts where the last ended", ctx, bs, splits, s)
						require.LessOrEqual(t, r.end-r.first, ceilDiv(maxBlocks, splits))
						require.LessOrEqual(t, r.end-r.first, ceilDiv(rowBlocks, splits))
						next = r.end
					}
					require.Equal(t, rowBlocks, next, "ctx %d bs %d splits %d: every block covered", ctx, bs, splits)
				}
			}
		}
	}
}

// Under a sliding window a row's splits cover exactly the blocks from the
// one holding its window's first position (ctx − window) to its end, evenly,
// so no split is spent on blocks every position of which is masked; a
// cascade member's start block wins when it lies later.
func TestDecodeWindowSplitRange(t *testing.T) {
	type rng struct{ first, end int }
	ranges := func(ctx, start, window, bs, maxBlocks, splits int) []rng {
		var out []rng
		for s := range splits {
			f, e := DecodeWindowSplitRange(ctx, start, window, bs, maxBlocks, splits, s)
			out = append(out, rng{f, e})
		}
		return out
	}
	cases := []struct {
		name                                 string
		ctx, start, window, bs, maxBlocks, n int
		want                                 []rng
	}{
		{"4K row, 1K window: blocks 192..256", 4096, 0, 1024, 16, 8192, 4, []rng{{192, 208}, {208, 224}, {224, 240}, {240, 256}}},
		{"window edge inside a block", 100, 0, 30, 16, 19, 2, []rng{{4, 6}, {6, 7}}},
		{"window of one position", 100, 0, 1, 16, 19, 3, []rng{{6, 7}, {7, 7}, {7, 7}}},
		{"window equal to the context", 100, 0, 100, 16, 19, 2, []rng{{0, 4}, {4, 7}}},
		{"window past the context", 100, 0, 5000, 16, 19, 2, []rng{{0, 4}, {4, 7}}},
		{"no window", 100, 0, 0, 16, 19, 2, []rng{{0, 4}, {4, 7}}},
		{"a member's start block past the window's", 100, 5, 64, 16, 19, 2, []rng{{5, 6}, {6, 7}}},
		{"the window's block past the start block", 100, 1, 20, 16, 19, 2, []rng{{5, 6}, {6, 7}}},
		{"a padding row", 0, 0, 8, 16, 19, 2, []rng{{0, 0}, {0, 0}}},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, ranges(tc.ctx, tc.start, tc.window, tc.bs, tc.maxBlocks, tc.n), tc.name)
	}
	for _, bs := range []int{1, 16} {
		for _, window := range []int{1, 5, 16, 40} {
			for splits := 1; splits <= 6; splits++ {
				for ctx := 0; ctx <= 7*bs; ctx++ {
					rowBlocks := ceilDiv(ctx, bs)
					next := min(max(ctx-window, 0)/bs, rowBlocks)
					for s, r := range ranges(ctx, 0, window, bs, 7, splits) {
						require.Equal(t, next, r.first, "ctx %d bs %d window %d splits %d: split %d", ctx, bs, window, splits, s)
						next = r.end
					}
					require.Equal(t, rowBlocks, next, "ctx %d bs %d window %d splits %d: every live block covered", ctx, bs, window, splits)
				}
			}
		}
	}
}

// The decode launch packs exactly the parameter list of ts_paged_decode_*
// in attention.cu: each parameter at its natural alignment, holding the value
// its name says (the launch fails at "not loaded", after packing).
func TestCUDADecodeArgsMatchKernel(t *testing.T) {
	srcs, err := CUDASources()
	require.NoError(t, err)
	var src string
	for _, s := range srcs {
		if s.Name == "attention.cu" {
			src = s.Source
		}
	}
	require.NotEmpty(t, src)
	kv := CUDAKV{K: 0x3000, V: 0x4000, NumBlocks: 8, KVHeads: 2, BlockSize: 16, HeadDim: 64}
	const out, q, tables, ctxLens, oPart, mlPart = 0x1000, 0x2000, 0x5000, 0x6000, 0x7000, 0x8000
	d := DecodeShape{Batch: 3, Heads: 8, MaxBlocks: 9, Splits: 5, Window: 4096}
	scale := float32(0.125)
	want := map[string]uint64{
		"o_part": oPart, "ml_part": mlPart, "q": q, "Kc": uint64(kv.K), "Vc": uint64(kv.V),
		"block_tables": tables, "max_blocks": uint64(d.MaxBlocks), "ctx_lens": ctxLens,
		"heads": uint64(d.Heads), "kvh": uint64(kv.KVHeads), "bs": uint64(kv.BlockSize), "hd": uint64(kv.HeadDim),
		"scale": uint64(math.Float32bits(scale)), "window": uint64(d.Window),
		// The plain launch: no start blocks (every row from block 0) and
		// one partial slot per split.
		"start_blocks": 0, "slots": uint64(d.Splits),
	}
	for _, bf16 := range []bool{false, true} {
		kv.BF16 = bf16
		name := "ts_paged_decode" + kv.suffix()
		k := &CUDAKernels{fns: map[string]cuda.Function{}, smemCap: cudaDefaultSmemCap}
		require.ErrorContains(t, k.DecodeAttention(cuda.Ctx{}, cuda.Stream{}, out, q, kv, tables, ctxLens, d, scale, oPart, mlPart),
			name+" not loaded")
		checkPackedArgs(t, src, name, k.args.Bytes(), want)
	}
}

// The tensor-core prefill dispatch rule: a bf16 cache with headDim a
// multiple of 16 up to 128 whose tiles fit the shared memory allowed; every
// other shape, and every float32 cache unless asked, on the warp kernel.
func TestPrefillKernelChoice(t *testing.T) {
	k := &CUDAKernels{fns: map[string]cuda.Function{}, smemCap: cudaDefaultSmemCap}
	require.Equal(t, 18432, prefillTCSmem(64))
	require.Equal(t, 35840, prefillTCSmem(128))
	for hd := 1; hd <= cudaMaxHeadDim; hd++ {
		for _, bf16 := range []bool{false, true} {
			kv := CUDAKV{NumBlocks: 1, KVHeads: 1, BlockSize: 16, HeadDim: hd, BF16: bf16}
			tcOK := hd%16 == 0 && hd <= 128
			if tcOK {
				require.LessOrEqual(t, prefillTCSmem(hd), cudaDefaultSmemCap, "headDim %d fits without opting in", hd)
			}
			got, err := k.prefillKernel(kv, PrefillShape{})
			require.NoError(t, err)
			want := PrefillWarp
			if bf16 && tcOK {
				want = PrefillTensorCore
			}
			require.Equal(t, want, got, "auto, headDim %d bf16 %v", hd, bf16)
			got, err = k.prefillKernel(kv, PrefillShape{Kernel: PrefillWarp})
			require.NoError(t, err)
			require.Equal(t, PrefillWarp, got)
			got, err = k.prefillKernel(kv, PrefillShape{Kernel: PrefillTensorCore})
			if tcOK {
				require.NoError(t, err)
				require.Equal(t, PrefillTensorCore, got)
			} else {
				require.Error(t, err, "headDim %d", hd)
			}
		}
	}
	// A device allowing less shared memory than the tiles need keeps auto on
	// the warp kernel and refuses a forced tensor-core launch.
	small := &CUDAKernels{fns: map[string]cuda.Function{}, smemCap: 32 << 10}
	kv := CUDAKV{NumBlocks: 1, KVHeads: 1, BlockSize: 16, HeadDim: 128, BF16: true}
	got, err := small.prefillKernel(kv, PrefillShape{})
	require.NoError(t, err)
	require.Equal(t, PrefillWarp, got)
	_, err = small.prefillKernel(kv, PrefillShape{Kernel: PrefillTensorCore})
	require.ErrorContains(t, err, "35840 bytes of shared memory")
}

// checkPackedArgs checks that packed holds exactly the parameter list of
// kernel name in src: each parameter at its natural alignment, holding the
// value want gives for its name.
func checkPackedArgs(t *testing.T, src, name string, packed []byte, want map[string]uint64) {
	t.Helper()
	m := regexp.MustCompile(`extern "C" __global__ void ` + name + `\(([^)]*)\)`).FindStringSubmatch(src)
	require.NotNil(t, m, "%s not found", name)
	off := 0
	seen := map[string]bool{}
	for _, p := range strings.Split(m[1], ",") {
		p = strings.TrimSpace(p)
		f := strings.FieldsFunc(p, func(r rune) bool { return r == ' ' || r == '*' || r == '\t' || r == '\n' })
		pname := f[len(f)-1]
		size := 4
		if strings.Contains(p, "*") {
			size = 8
		} else {
			require.Contains(t, []string{"int", "float"}, f[0], "%s: parameter %q", name, p)
		}
		off = (off + size - 1) / size * size
		require.LessOrEqual(t, off+size, len(packed), "%s: parameter %s past the packed %d bytes", name, pname, len(packed))
		var got uint64
		if size == 8 {
			got = binary.LittleEndian.Uint64(packed[off:])
		} else {
			got = uint64(binary.LittleEndian.Uint32(packed[off:]))
		}
		v, ok := want[pname]
		require.True(t, ok, "%s: no expected value for parameter %s", name, pname)
		require.Equal(t, v, got, "%s: parameter %s at offset %d", name, pname, off)
		seen[pname] = true
		off += size
	}
	require.Equal(t, off, len(packed), "%s: packed size", name)
	require.Len(t, seen, len(want))
}

// The prefill launch packs exactly the parameter list of the kernel it picks,
// warp or tensor-core, for either cache type.
func TestCUDAPrefillArgsMatchKernel(t *testing.T) {
	srcs, err := CUDASources()
	require.NoError(t, err)
	var src string
	for _, s := range srcs {
		if s.Name == "attention.cu" {
			src = s.Source
		}
	}
	require.NotEmpty(t, src)
	kv := CUDAKV{K: 0x3000, V: 0x4000, NumBlocks: 8, KVHeads: 2, BlockSize: 16, HeadDim: 64}
	const out, q, qStart, numQ, ctxLens, tables = 0x1000, 0x2000, 0x5000, 0x6000, 0x7000, 0x8000
	scale := float32(0.125)
	for _, pk := range []PrefillKernel{PrefillWarp, PrefillTensorCore} {
		for _, bf16 := range []bool{false, true} {
			kv.BF16 = bf16
			p := PrefillShape{Seqs: 3, Heads: 8, MaxQ: 70, MaxBlocks: 9, Kernel: pk, Window: 4096}
			name := "ts_paged_prefill" + kv.suffix()
			if pk == PrefillTensorCore {
				name = "ts_paged_prefill_tc" + kv.suffix()
			}
			k := &CUDAKernels{fns: map[string]cuda.Function{}, smemCap: cudaDefaultSmemCap}
			require.ErrorContains(t, k.PrefillAttention(cuda.Ctx{}, cuda.Stream{}, out, q, kv, qStart, numQ, ctxLens, tables, p, scale),
				name+" not loaded")
			checkPackedArgs(t, src, name, k.args.Bytes(), map[string]uint64{
				"out": out, "q": q, "Kc": uint64(kv.K), "Vc": uint64(kv.V), "q_start": qStart, "num_q": numQ,
				"ctx_lens": ctxLens, "block_tables": tables, "max_blocks": uint64(p.MaxBlocks), "heads": uint64(p.Heads),
				"kvh": uint64(kv.KVHeads), "bs": uint64(kv.BlockSize), "hd": uint64(kv.HeadDim),
				"scale": uint64(math.Float32bits(scale)), "window": uint64(p.Window),
			})
		}
	}
}

// The tensor-core prefill kernels keep their fragments in registers: ptxas
// (asked through NVRTC for -v) reports no stack frame and no spills for
// sm_80 and sm_90.
func TestCUDAPrefillTCNoSpills(t *testing.T) {
	nv, err := cuda.LoadNVRTC()
	if errors.Is(err, cuda.ErrLibraryNotFound) {
		t.Skipf("NVRTC not installed, skipping the register check (run scripts/install-deps.sh as root): %v", err)
	}
	require.NoError(t, err)
	defer nv.Close()
	srcs, err := CUDASources()
	require.NoError(t, err)
	var src CUDASource
	for _, s := range srcs {
		if s.Name == "attention.cu" {
			src = s
		}
	}
	re := regexp.MustCompile(`Function properties for (\w+)\s*\n\s*ptxas\s*\.\s*(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads\s*\n\s*ptxas info\s*: Used (\d+) registers`)
	for _, arch := range []string{"sm_80", "sm_90"} {
		_, log, err := nv.Compile(src.Source, src.Name, arch, append(CUDAOptions(), "--ptxas-options=-v"))
		require.NoError(t, err)
		found := map[string]bool{}
		for _, m := range re.FindAllStringSubmatch(log, -1) {
			if !strings.HasPrefix(m[1], "ts_paged_prefill_tc_") {
				continue
			}
			found[m[1]] = true
			t.Logf("%s %s: %s registers, stack %s, spill stores %s, loads %s", arch, m[1], m[5], m[2], m[3], m[4])
			require.Equal(t, []string{"0", "0", "0"}, m[2:5], "%s %s: stack frame, spill stores, spill loads", arch, m[1])
		}
		require.Len(t, found, 2, "%s: ptxas reports for both tensor-core kernels in:\n%s", arch, log)
	}
}

// BenchmarkCUDAWarmStart measures loading every kernel's cubin from a full
// cache (the warm start budget is 100 ms for all kernels).
func BenchmarkCUDAWarmStart(b *testing.B) {
	nv, err := cuda.LoadNVRTC()
	if err != nil {
		b.Skipf("NVRTC not available: %v", err)
	}
	defer nv.Close()
	dir := b.TempDir()
	cc, err := cuda.NewCubinCache(nv, dir)
	require.NoError(b, err)
	_, err = CompileCUDA(cc, "sm_90")
	require.NoError(b, err)
	b.ResetTimer()
	for range b.N {
		warm, err := cuda.NewCubinCache(nv, dir)
		require.NoError(b, err)
		if _, err := CompileCUDA(warm, "sm_90"); err != nil {
			b.Fatal(err)
		}
	}
}
