package kernels

import (
	"errors"
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
		{"embedding type", func() error { return k.Embedding(c, s, 1, 1, DType(7), 1, 1, 10, 8) }, "DType(7)"},
		{"embedding q8 cols", func() error { return k.Embedding(c, s, 1, 1, Q8_0, 1, 1, 10, 40) }, "cols 40"},
		{"cast f32", func() error { return k.CastF32(c, s, 1, 1, 10, cuda.F32) }, "want bf16 or f16"},
		{"kv shape", func() error { return k.KVWrite(c, s, CUDAKV{}, 1, 1, 1, 1) }, "must be positive"},
		{"kv headdim", func() error {
			return k.KVWrite(c, s, CUDAKV{NumBlocks: 1, KVHeads: 1, BlockSize: 16, HeadDim: 512}, 1, 1, 1, 1)
		}, "headDim 512 exceeds 256"},
		{"decode group", func() error {
			return k.DecodeAttention(c, s, 1, 1, kv, 1, 1, DecodeShape{Batch: 1, Heads: 3, MaxBlocks: 4, SplitBlocks: 4, Splits: 1}, 1, 1, 1)
		}, "heads 3 must be a multiple of kvHeads 2"},
		{"decode coverage", func() error {
			return k.DecodeAttention(c, s, 1, 1, kv, 1, 1, DecodeShape{Batch: 1, Heads: 4, MaxBlocks: 9, SplitBlocks: 4, Splits: 2}, 1, 1, 1)
		}, "cover fewer than the 9"},
		{"decode smem", func() error {
			return k.DecodeAttention(c, s, 1, 1, kv, 1, 1, DecodeShape{Batch: 1, Heads: 4, MaxBlocks: 20000, SplitBlocks: 20000, Splits: 1}, 1, 1, 1)
		}, "shared memory"},
		{"prefill heads", func() error {
			return k.PrefillAttention(c, s, 1, 1, kv, 1, 1, 1, 1, PrefillShape{Seqs: 1, Heads: 3, MaxQ: 4, MaxBlocks: 4}, 1)
		}, "heads 3 is not a multiple"},
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
