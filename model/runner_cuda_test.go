package model

import (
	"errors"
	"math"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/cuda"
	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/step"
)

// These tests check the CUDA runner's host half and plans on any machine;
// runner_cuda_gpu_test.go runs the runner itself where a GPU is present.

func TestCUDARunnerConfigResolve(t *testing.T) {
	m := loadStories(t)
	base := CUDARunnerConfig{Seats: 8, BlockSize: 16, MaxBatchTokens: 64, KVType: DefaultCUDAKVType}
	cases := []struct {
		name    string
		mod     func(c *CUDARunnerConfig)
		wantErr string
		check   func(t *testing.T, c CUDARunnerConfig)
	}{
		{"defaults", func(c *CUDARunnerConfig) {}, "", func(t *testing.T, c CUDARunnerConfig) {
			require.Equal(t, 0.9, c.GPUMemoryFraction)
			require.Equal(t, 8, c.MaxGraphBatch, "min(Seats, MaxBatchTokens, 256)")
		}},
		{"graph cap", func(c *CUDARunnerConfig) { c.Seats, c.MaxBatchTokens = 1000, 1000 }, "", func(t *testing.T, c CUDARunnerConfig) {
			require.Equal(t, 256, c.MaxGraphBatch)
		}},
		{"fixed blocks", func(c *CUDARunnerConfig) { c.KVBlocks = 100 }, "", func(t *testing.T, c CUDARunnerConfig) {
			require.Equal(t, 100, c.KVBlocks)
		}},
		{"seats", func(c *CUDARunnerConfig) { c.Seats = 0 }, "Seats = 0", nil},
		{"block size", func(c *CUDARunnerConfig) { c.BlockSize = -1 }, "BlockSize = -1", nil},
		{"batch tokens", func(c *CUDARunnerConfig) { c.MaxBatchTokens = 0 }, "MaxBatchTokens = 0", nil},
		{"device", func(c *CUDARunnerConfig) { c.Device = -2 }, "Device = -2", nil},
		{"blocks negative", func(c *CUDARunnerConfig) { c.KVBlocks = -1 }, "KVBlocks = -1", nil},
		{"kv f32", func(c *CUDARunnerConfig) { c.KVType = kernels.F32 }, "", func(t *testing.T, c CUDARunnerConfig) {
			require.Equal(t, kernels.F32, c.KVType)
		}},
		{"kv f16", func(c *CUDARunnerConfig) { c.KVType = kernels.F16 }, "KVType = F16: the CUDA runner's KV cache is F32 or BF16", nil},
		{"kv q8_0", func(c *CUDARunnerConfig) { c.KVType = kernels.Q8_0 }, "KVType = Q8_0", nil},
		{"exclusive", func(c *CUDARunnerConfig) { c.KVBlocks, c.GPUMemoryFraction = 10, 0.5 }, "exclusive", nil},
		{"fraction", func(c *CUDARunnerConfig) { c.GPUMemoryFraction = 1.5 }, "GPUMemoryFraction = 1.5", nil},
		{"fraction nan", func(c *CUDARunnerConfig) { c.GPUMemoryFraction = math.NaN() }, "GPUMemoryFraction = NaN", nil},
		{"graph negative", func(c *CUDARunnerConfig) { c.MaxGraphBatch = -1 }, "MaxGraphBatch = -1", nil},
		{"graph too big", func(c *CUDARunnerConfig) { c.MaxGraphBatch = 9 }, "MaxGraphBatch = 9 exceeds min(Seats 8, MaxBatchTokens 64)", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.mod(&c)
			got, err := c.resolve(m)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			tc.check(t, got)
		})
	}
	_, err := base.resolve(nil)
	require.ErrorContains(t, err, "nil model")
}

// Without libcuda the constructor fails with an error that says so.
func TestNewCUDARunnerWithoutDriver(t *testing.T) {
	drv, derr := cuda.LoadDriver()
	if derr == nil {
		drv.Close()
		t.Skip("a CUDA driver is installed here: the no-driver error path cannot be exercised")
	}
	m := loadStories(t)
	r, err := NewCUDARunner(m, CUDARunnerConfig{Seats: 2, BlockSize: 16, MaxBatchTokens: 16, KVType: DefaultCUDAKVType})
	require.Nil(t, r)
	require.ErrorContains(t, err, "CUDA runner needs the CUDA driver")
	require.True(t, errors.Is(err, cuda.ErrLibraryNotFound), "error %v should wrap ErrLibraryNotFound", err)
	// A bad configuration is reported before any library is loaded.
	_, err = NewCUDARunner(m, CUDARunnerConfig{Seats: 0, BlockSize: 16, MaxBatchTokens: 16, KVType: DefaultCUDAKVType})
	require.ErrorContains(t, err, "Seats = 0")
}

// The CUDA runner takes a token embedding of every type the CPU runner
// reads: the table stays as stored (the device gathers it), and a tied
// output of a block type is dequantised on the device. A type it cannot
// read is refused by name before any driver is looked for.
func TestCUDAEmbeddingTypes(t *testing.T) {
	for _, typ := range []gguf.GGMLType{gguf.TypeQ4_K, gguf.TypeQ4_0, gguf.TypeQ6_K, gguf.TypeQ5_1, gguf.TypeQ2_K} {
		s := kquantSpec(typ, gguf.TypeF32)
		s.Tied = true
		m := loadSynth(t, s)
		p, err := cudaPlanWeights(m)
		require.NoError(t, err, "%v table", typ)
		require.Equal(t, cudaUploadCopy, p.embd.how, "%v table", typ)
		require.Equal(t, kernels.DType(typ), p.embd.dt)
		require.Equal(t, cudaUploadDequant, p.output.how, "tied %v output", typ)
		require.NotEqual(t, p.embd.off, p.output.off, "the bf16 output is its own copy")
	}
	for _, typ := range kernels.Types {
		require.True(t, cudaEmbeddingReads(typ), "%v", typ)
	}
	m := loadSynth(t, kquantSpec(gguf.TypeQ4_K, gguf.TypeF32))
	m.embd.Type = kernels.DType(16) // IQ2_XXS: no decoder here or on the device
	want := `model: CUDA runner: tensor "token_embd.weight" has type DType(16); the device embedding reads F32, F16, BF16 and the block types Q4_0 ... Q6_K`
	r, err := NewCUDARunner(m, CUDARunnerConfig{Seats: 2, BlockSize: 16, MaxBatchTokens: 16, KVType: DefaultCUDAKVType})
	require.Nil(t, r)
	require.ErrorContains(t, err, want)
	_, err = cudaPlanWeights(m)
	require.ErrorContains(t, err, want)
}

// requireDisjoint checks that ranges [off, off+size) are aligned and do not overlap.
func requireDisjoint(t *testing.T, what string, offs, sizes []uint64, total uint64) {
	t.Helper()
	idx := make([]int, len(offs))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return offs[idx[a]] < offs[idx[b]] })
	end := uint64(0)
	for _, i := range idx {
		require.Zero(t, offs[i]%cudaAlign, "%s range %d at %d is not aligned", what, i, offs[i])
		require.GreaterOrEqual(t, offs[i], end, "%s range %d overlaps the previous one", what, i)
		end = offs[i] + sizes[i]
	}
	require.LessOrEqual(t, end, total, "%s ranges exceed the allocation", what)
}

func TestCUDAWeightPlan(t *testing.T) {
	type want struct {
		gemm kernels.DType
		hows map[cudaUpload]int // uploads per method
		tied bool               // output shares the embedding's bytes
	}
	cases := []struct {
		name string
		m    func(t *testing.T) *Llama
		want want
	}{
		{"stories f32", func(t *testing.T) *Llama { return loadStories(t) }, want{kernels.F32, map[cudaUpload]int{cudaUploadCopy: 2 + 5*7}, false}},
		{"bf16", func(t *testing.T) *Llama { return loadSynth(t, smallSpec(gguf.TypeBF16)) }, want{kernels.BF16, map[cudaUpload]int{cudaUploadCopy: 2 + 3*7}, false}},
		{"f16 tied", func(t *testing.T) *Llama {
			s := smallSpec(gguf.TypeF16)
			s.Tied = true
			return loadSynth(t, s)
		}, want{kernels.F16, map[cudaUpload]int{cudaUploadCopy: 1 + 3*7}, true}},
		{"mixed", func(t *testing.T) *Llama {
			return loadSynth(t, smallSpec(gguf.TypeF32, gguf.TypeQ8_0, gguf.TypeF16, gguf.TypeBF16))
		},
			// 23 matrices cycle over the four types from the embedding on;
			// the embedding is copied as stored whatever its type.
			want{kernels.BF16, map[cudaUpload]int{cudaUploadCopy: 1 + 5, cudaUploadCastF32: 5, cudaUploadDequant: 6, cudaUploadHost: 6}, false}},
		{"k-quant matrices", func(t *testing.T) *Llama {
			return loadSynth(t, kquantSpec(gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeQ6_K, gguf.TypeQ5_0))
		},
			// 2 layers: embedding (Q8_0, as stored) + 15 matrices cycling
			// Q4_K, Q6_K, Q5_0, Q8_0 from the output on: every block type
			// staged as stored and dequantised on the device, none on the
			// host.
			want{kernels.BF16, map[cudaUpload]int{cudaUploadCopy: 1, cudaUploadDequant: 15}, false}},
		// llama.cpp's Q4_K_M file: a Q6_K table as stored, its Q4_K and
		// Q6_K matrices (the output among them) dequantised on the device.
		{"Q4_K_M fixture", func(t *testing.T) *Llama { return quantFixtureModel(t, "llama-Q4_K_M.gguf") },
			want{kernels.BF16, map[cudaUpload]int{cudaUploadCopy: 1, cudaUploadDequant: 8}, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m(t)
			p, err := cudaPlanWeights(m)
			require.NoError(t, err)
			require.Equal(t, tc.want.gemm, p.gemm)
			require.Equal(t, tc.want.gemm, cudaGemmTypeOf(m))
			hows := map[cudaUpload]int{}
			var offs, sizes []uint64
			var staged uint64 // the largest matrix converted on the device, as stored
			p.each(func(w *cudaWeight) {
				hows[w.how]++
				if w.how == cudaUploadDequant || w.how == cudaUploadCastF32 {
					staged = max(staged, uint64(len(w.src.Data)))
				}
				offs, sizes = append(offs, w.off), append(sizes, w.size)
				require.Equal(t, cudaUploadFor(w.src.Type, w.dt), w.how)
				if w.dt == w.src.Type {
					require.Equal(t, uint64(len(w.src.Data)), w.size)
				} else {
					require.Equal(t, uint64(w.src.Rows*w.src.Cols)*cudaElemBytes(w.dt), w.size)
				}
			})
			require.Equal(t, tc.want.hows, hows)
			require.Equal(t, staged, p.stagingBytes(), "staging holds the largest staged matrix")
			require.Equal(t, tc.want.tied, p.output.off == p.embd.off)
			require.Equal(t, m.embd.Type, p.embd.dt, "the embedding keeps its stored type")
			for _, n := range append([]cudaNorm{p.outNorm}, func() []cudaNorm {
				var ns []cudaNorm
				for _, l := range p.layers {
					ns = append(ns, l.attnNorm, l.ffnNorm)
				}
				return ns
			}()...) {
				require.Equal(t, uint64(4*m.cfg.Dim), n.size)
				offs, sizes = append(offs, n.off), append(sizes, n.size)
			}
			requireDisjoint(t, "weight", offs, sizes, p.total)
		})
	}
}

func TestCUDAUploadFor(t *testing.T) {
	cases := []struct {
		src, dst kernels.DType
		want     cudaUpload
	}{
		{kernels.F32, kernels.F32, cudaUploadCopy},
		{kernels.BF16, kernels.BF16, cudaUploadCopy},
		{kernels.Q8_0, kernels.BF16, cudaUploadDequant},
		{kernels.Q4_0, kernels.BF16, cudaUploadDequant},
		{kernels.Q5_1, kernels.BF16, cudaUploadDequant},
		{kernels.Q2_K, kernels.BF16, cudaUploadDequant},
		{kernels.Q6_K, kernels.BF16, cudaUploadDequant},
		{kernels.Q4_K, kernels.F16, cudaUploadHost},
		{kernels.F32, kernels.BF16, cudaUploadCastF32},
		{kernels.F32, kernels.F16, cudaUploadCastF32},
		{kernels.F16, kernels.BF16, cudaUploadHost},
		{kernels.BF16, kernels.F16, cudaUploadHost},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, cudaUploadFor(tc.src, tc.dst), "%v -> %v", tc.src, tc.dst)
	}
}

// The host conversion path rounds each element exactly as the kernels'
// conversion functions do.
func TestCUDAConvertRows(t *testing.T) {
	vals := make([]float32, 5*64)
	for i := range vals {
		vals[i] = float32(math.Sin(float64(i))) * 3
	}
	for _, src := range []kernels.DType{kernels.F32, kernels.F16, kernels.Q8_0, kernels.BF16} {
		m, err := kernels.Quantize(src, 5, 64, vals)
		require.NoError(t, err)
		for _, to := range []kernels.DType{kernels.BF16, kernels.F16} {
			dst, f32 := make([]uint16, 3*64), make([]float32, 3*64)
			require.NoError(t, cudaConvertRows(dst, m, 1, 4, to, f32))
			for i := range dst {
				v := m.At(1+i/64, i%64)
				want := kernels.F32ToBF16(v)
				if to == kernels.F16 {
					want = kernels.F32ToF16(v)
				}
				require.Equal(t, want, dst[i], "%v -> %v element %d", src, to, i)
			}
		}
		require.ErrorContains(t, cudaConvertRows(make([]uint16, 64), m, 4, 6, kernels.BF16, make([]float32, 128)), "rows [4, 6)")
		require.ErrorContains(t, cudaConvertRows(make([]uint16, 64), m, 0, 1, kernels.F32, make([]float32, 64)), "want bf16 or f16")
	}
}

func TestCUDABufferPlan(t *testing.T) {
	c := gguf.LlamaConfig{Dim: 4096, Layers: 32, Heads: 32, KVHeads: 8, HeadDim: 128, FFN: 14336, Vocab: 128256}
	for _, gemm := range []kernels.DType{kernels.F32, kernels.BF16} {
		b := cudaPlanBuffers(c, 512, 64, 256, gemm, 1<<20, 1<<12, 5000)
		g := cudaElemBytes(gemm)
		offs := []uint64{b.x, b.d, b.xn, b.q, b.att, b.k, b.v, b.gate, b.up, b.h, b.xs, b.logits, b.sampled, b.last, b.pairs, b.oPart, b.mlPart, b.arena}
		sizes := []uint64{4 * 512 * 4096, 4 * 512 * 4096, g * 512 * 4096, 4 * 512 * 4096, 4 * 512 * 4096, 4 * 512 * 1024, 4 * 512 * 1024,
			4 * 512 * 14336, 4 * 512 * 14336, g * 512 * 14336, g * 64 * 4096, 4 * 64 * 128256, 4 * 64, 4 * 256, 8 * 64, 1 << 20, 1 << 12, 4 * 5000}
		if gemm == kernels.F32 {
			require.Equal(t, b.att, b.attG, "f32 GEMMs read the attention output directly")
		} else {
			offs, sizes = append(offs, b.attG), append(sizes, 2*512*4096)
		}
		requireDisjoint(t, "activation "+gemm.String(), offs, sizes, b.total)
		require.Equal(t, uint64(4*5000), b.arenaSize)
	}
}

// The split count follows the batch, the KV heads and the SMs:
// clamp(ceil(2·sms/(batch·kvHeads)), 1, 16), whatever the model's context.
func TestCUDADecodeSplits(t *testing.T) {
	cases := []struct {
		batch, kvHeads, sms int
		want                int
	}{
		{1, 8, 132, 16}, // batch 1 (H100/H200): as many splits as allowed, 128 thread blocks
		{64, 8, 132, 1}, // batch 64: the rows alone fill the SMs
		{4, 4, 132, 16}, // ceil(264/16) = 17, capped
		{8, 8, 132, 5},  // ceil(264/64)
		{2, 8, 108, 14}, // A100: ceil(216/16)
		{1, 8, 16, 4},   // a small device
		{3, 1, 132, 16}, // one KV head
		{256, 8, 0, 1},  // no SM count known
		{33, 8, 132, 1}, // 264 rows·heads already cover 2·132
		{32, 8, 132, 2}, // 256 do not
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, cudaPlanDecodeSplits(tc.batch, tc.kvHeads, tc.sms), "%+v", tc)
	}

	// A 128K-context model at batch 1: 8192 table columns of 16 positions.
	// The plan no longer sees the width, and a 4K-token row is cut into 16
	// busy splits of 16 blocks (16 × 8 KV heads = 128 thread blocks on 132
	// SMs), where the width-based plan gave 16 splits of 512 blocks, the
	// whole row on split 0 (8 thread blocks).
	const maxBlocks, bs = 131072 / 16, 16
	splits := cudaPlanDecodeSplits(1, 8, 132)
	require.Equal(t, 16, splits)
	for s := range splits {
		first, end := kernels.DecodeSplitRange(4096, bs, maxBlocks, splits, s)
		require.Equal(t, [2]int{16 * s, 16 * (s + 1)}, [2]int{first, end}, "4K row, split %d", s)
		first, end = kernels.DecodeSplitRange(131072, bs, maxBlocks, splits, s)
		require.Equal(t, [2]int{512 * s, 512 * (s + 1)}, [2]int{first, end}, "128K row, split %d", s)
	}
	// The runner's plan: a model of 256 and one of 128K positions get the
	// same split counts for their decode graphs (1 … 64 rows of 2 KV heads
	// on 132 SMs), though their tables are 16 and 8192 columns wide.
	for _, ctx := range []int{256, 131072} {
		spec := smallSpec(gguf.TypeF32)
		spec.Context = ctx
		m := loadSynth(t, spec)
		cfg, err := CUDARunnerConfig{Seats: 64, BlockSize: 16, MaxBatchTokens: 64, KVBlocks: 64, KVType: DefaultCUDAKVType}.resolve(m)
		require.NoError(t, err)
		r := &CUDARunner{m: m, cfg: cfg}
		p, err := r.plan(132)
		require.NoError(t, err)
		require.Equal(t, []int{1, 2, 4, 8, 16, 32, 64}, p.sizes)
		require.Equal(t, ctx/16, p.graphMB)
		require.Equal(t, []int{16, 16, 16, 16, 9, 5, 3}, r.splits, "context %d: the same splits whatever the context", ctx)
		// The scratch fits the largest graph's partials: 64 rows × 4 heads × 3 splits.
		o, _ := kernels.DecodeScratchBytes(kernels.DecodeShape{Batch: 64, Heads: 4, Splits: 3}, 16)
		require.GreaterOrEqual(t, r.bufs.mlPart-r.bufs.oPart, o, "context %d: oPart", ctx)
	}
}

func FuzzCUDADecodeSplits(f *testing.F) {
	f.Add(1, 8, 132, 4096)
	f.Add(1, 1, 1, 0)
	f.Add(7, 3, 80, 1000)
	f.Fuzz(func(t *testing.T, batch, kvHeads, sms, ctx int) {
		if batch < 1 || kvHeads < 1 || sms < 0 || ctx < 0 || batch > 1<<12 || kvHeads > 256 || sms > 1<<12 || ctx > 1<<22 {
			return
		}
		n := cudaPlanDecodeSplits(batch, kvHeads, sms)
		require.GreaterOrEqual(t, n, 1)
		require.LessOrEqual(t, n, cudaMaxSplits)
		rows := batch * kvHeads
		if n < cudaMaxSplits {
			require.GreaterOrEqual(t, rows*n, 2*sms, "below the cap, the thread blocks cover the SMs twice")
		}
		if n > 1 {
			require.Less(t, rows*(n-1), 2*sms, "one split fewer would not")
		}
		require.GreaterOrEqual(t, n, cudaPlanDecodeSplits(batch+1, kvHeads, sms), "a larger batch never gets more splits")
		// Whatever the context, the kernel's ranges for this count cover the
		// row exactly, contiguously, within the pages one split stages.
		const bs = 16
		maxBlocks := max(1, (ctx+bs-1)/bs)
		next := 0
		for s := range n {
			first, end := kernels.DecodeSplitRange(ctx, bs, maxBlocks, n, s)
			require.Equal(t, next, first)
			require.LessOrEqual(t, end-first, (maxBlocks+n-1)/n)
			next = end
		}
		require.Equal(t, (ctx+bs-1)/bs, next)
	})
}

// requireLayout checks that the sections of l are disjoint, 16-byte aligned
// and inside l.total.
func requireLayout(t *testing.T, l cudaStepLayout) {
	t.Helper()
	secs := []struct{ off, n int }{{l.tok, l.T}, {l.pos, l.T}, {l.slot, l.T}, {l.seat, l.T}, {l.qStart, l.N}, {l.numQ, l.N},
		{l.ctxLen, l.N}, {l.tables, l.N * l.MB}, {l.gather, l.R}, {l.lastSeat, l.R}}
	end := 0
	for i, s := range secs {
		require.Zero(t, s.off%4, "section %d unaligned", i)
		require.GreaterOrEqual(t, s.off, end, "section %d overlaps", i)
		end = s.off + s.n
	}
	require.LessOrEqual(t, end, l.total)
}

func FuzzCUDAStepLayout(f *testing.F) {
	f.Add(1, 1, 1, 1)
	f.Add(512, 8, 3, 128)
	f.Add(7, 7, 0, 5)
	f.Fuzz(func(t *testing.T, T, N, R, MB int) {
		if T < 1 || N < 1 || R < 0 || MB < 1 || T > 1<<14 || N > T || R > N || MB > 1<<12 {
			return
		}
		l := newCUDAStepLayout(T, N, R, MB)
		requireLayout(t, l)
		// The staging area is sized by the largest arguments; layouts grow with each.
		big := newCUDAStepLayout(T+1, N+1, R+1, MB+1)
		require.GreaterOrEqual(t, big.total, l.total)
	})
}

// cudaTestHost makes a host half with Go-memory staging.
func cudaTestHost(t *testing.T, c step.Capacity, graphs []int, keep bool) *cudaHost {
	t.Helper()
	rows := min(c.Seats, c.MaxBatchTokens)
	staging := make([]int32, cudaStagingElems(c, rows, cudaTableColumns(c)))
	h, err := newCUDAHost(c, graphs, cudaTableColumns(c), keep, staging, make([]int32, 2*rows))
	require.NoError(t, err)
	return h
}

// cudaBatch builds a batch from (seat, first position, tokens, sample,
// start, params) parts with block tables blocks[seat].
type cudaPart struct {
	seat   int32
	first  int32
	toks   []int32
	sample bool
	start  bool
	params *sampling.Params
}

func cudaBatch(bs int32, tables map[int32][]int32, parts ...cudaPart) *step.Batch {
	b := &step.Batch{}
	for _, p := range parts {
		start := int32(len(b.Tokens))
		for j, tk := range p.toks {
			b.Tokens = append(b.Tokens, tk)
			b.Positions = append(b.Positions, p.first+int32(j))
		}
		ctx := p.first + int32(len(p.toks))
		params := p.params
		if params == nil {
			d := sampling.DefaultParams()
			params = &d
		}
		b.Seqs = append(b.Seqs, step.SeqBatch{Seat: p.seat, TokenStart: start, NumTokens: int32(len(p.toks)), ContextLen: ctx,
			BlockTable: tables[p.seat][:min(len(tables[p.seat]), int((ctx+bs-1)/bs))], Sample: p.sample, Start: p.start, Params: params, History: p.toks})
	}
	return b
}

func TestCUDAHostPrepareDecodeGraph(t *testing.T) {
	c := step.Capacity{Seats: 6, KVBlocks: 40, BlockSize: 4, MaxContext: 32, MaxBatchTokens: 16, Vocab: 10}
	h := cudaTestHost(t, c, []int{1, 2, 4}, false)
	tables := map[int32][]int32{0: {5, 6, 7}, 3: {9, 1}, 5: {30, 31, 32}}
	hot := sampling.DefaultParams()
	hot.Temperature = 0.8
	// Three one-token sequences: a decode graph of 4 rows, one padding row.
	b := cudaBatch(4, tables,
		cudaPart{seat: 0, first: 9, toks: []int32{2}, sample: true, start: true},
		cudaPart{seat: 3, first: 4, toks: []int32{7}, sample: false, start: true},
		cudaPart{seat: 5, first: 0, toks: []int32{1}, sample: true, start: true, params: &hot},
	)
	require.NoError(t, h.prepare(b))
	require.Equal(t, 4, h.graph)
	l := h.layout
	require.Equal(t, [4]int{4, 4, 4, cudaTableColumns(c)}, [4]int{l.T, l.N, l.R, l.MB})
	s := h.staging
	require.Equal(t, []int32{2, 7, 1, 0}, s[l.tok:l.tok+4])
	require.Equal(t, []int32{9, 4, 0, 0}, s[l.pos:l.pos+4])
	// Position 9 of seat 0 is block 7 (table[2]) slot 1; padding writes nothing.
	require.Equal(t, []int32{7*4 + 1, 1 * 4, 30 * 4, -1}, s[l.slot:l.slot+4])
	require.Equal(t, []int32{10, 5, 1, 0}, s[l.ctxLen:l.ctxLen+4])
	require.Equal(t, []int32{5, 6, 7, 0, 0, 0, 0, 0}, s[l.tables:l.tables+l.MB])
	require.Equal(t, []int32{0, -1, -1, -1}, s[l.lastSeat:l.lastSeat+4], "only seat 0 is sampled greedily on the device")
	require.Equal(t, []int32{0, 1, 2, -1}, h.rowSeq)
	require.Equal(t, []int32{2}, h.hostRows, "the tempered row is sampled on the host")

	// Finish: row 0 takes the device's argmax, row 2 is drawn on the host.
	var out step.Output
	logits := make([][]float32, 4)
	for j := range logits {
		logits[j] = make([]float32, c.Vocab)
		logits[j][6] = 50 // overwhelming: any draw picks 6
	}
	n, err := h.finish(b, &out, []int32{3, 4, 5, 0}, func(j int) []float32 { return logits[j] })
	require.NoError(t, err)
	require.Equal(t, []int32{3, -1, 6}, out.Tokens)
	require.Equal(t, 1, n)
	require.Equal(t, []int32{5, 6}, h.pairs[:2])
	require.NoError(t, h.checkSeats())

	// The next step may use FutureToken for the sampled seats only.
	next := cudaBatch(4, tables,
		cudaPart{seat: 0, first: 10, toks: []int32{step.FutureToken}, sample: true},
		cudaPart{seat: 5, first: 1, toks: []int32{step.FutureToken}, sample: true},
	)
	require.NoError(t, h.prepare(next))
	require.Equal(t, 2, h.graph)
	require.Equal(t, []int32{step.FutureToken, step.FutureToken}, h.staging[h.layout.tok:h.layout.tok+2], "resolved on the device")
	require.Equal(t, []int32{0, 5}, h.staging[h.layout.seat:h.layout.seat+2])
	bad := cudaBatch(4, tables, cudaPart{seat: 3, first: 5, toks: []int32{step.FutureToken}, sample: true})
	require.ErrorContains(t, h.prepare(bad), "FutureToken at token 0 but the seat sampled nothing")
}

func TestCUDAHostPrepareEager(t *testing.T) {
	c := step.Capacity{Seats: 4, KVBlocks: 40, BlockSize: 4, MaxContext: 32, MaxBatchTokens: 16, Vocab: 10}
	h := cudaTestHost(t, c, []int{1, 2, 4}, true)
	tables := map[int32][]int32{1: {3, 4, 5}, 2: {8, 9}}
	// A prefill chunk (not sampled) and a finished prefill (sampled): eager.
	b := cudaBatch(4, tables,
		cudaPart{seat: 1, first: 0, toks: []int32{1, 2, 3, 4, 5, 6}, sample: false, start: true},
		cudaPart{seat: 2, first: 0, toks: []int32{7, 8, 9}, sample: true, start: true},
	)
	require.NoError(t, h.prepare(b))
	require.Zero(t, h.graph)
	l := h.layout
	require.Equal(t, [4]int{9, 2, 1, 2}, [4]int{l.T, l.N, l.R, l.MB})
	requireLayout(t, l)
	s := h.staging
	require.Equal(t, []int32{12, 13, 14, 15, 16, 17, 32, 33, 34}, s[l.slot:l.slot+9])
	require.Equal(t, []int32{0, 6}, s[l.qStart:l.qStart+2])
	require.Equal(t, []int32{6, 3}, s[l.numQ:l.numQ+2])
	require.Equal(t, []int32{3, 4, 8, 0}, s[l.tables:l.tables+4], "rows are padded to the widest table")
	require.Equal(t, []int32{8}, s[l.gather:l.gather+1], "the sampled row is the last token of seat 2")
	require.Equal(t, []int32{2}, s[l.lastSeat:l.lastSeat+1])
	require.Equal(t, 6, h.maxQ)
	require.Equal(t, []int32{0}, h.hostRows, "kept logits are copied even for device-greedy rows")

	var out step.Output
	row := []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	n, err := h.finish(b, &out, []int32{9}, func(int) []float32 { return slices.Clone(row) })
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, []int32{-1, 9}, out.Tokens)
	require.Nil(t, h.logits(0))
	require.Equal(t, row, h.logits(1))
	require.NoError(t, h.checkSeats())
}

// A bad batch changes nothing: the same errors as the CPU runner.
func TestCUDAHostRejects(t *testing.T) {
	c := step.Capacity{Seats: 2, KVBlocks: 8, BlockSize: 4, MaxContext: 16, MaxBatchTokens: 8, Vocab: 10}
	tables := map[int32][]int32{0: {0, 1, 2, 3}, 1: {4, 5, 6, 7}}
	cases := []struct {
		name string
		b    *step.Batch
		want string
	}{
		{"empty", &step.Batch{}, "at least one of each"},
		{"too many tokens", cudaBatch(4, tables, cudaPart{seat: 0, toks: make([]int32, 9), start: true}), "at most 8"},
		{"seat", &step.Batch{Tokens: []int32{1}, Positions: []int32{0}, Seqs: []step.SeqBatch{{Seat: 5, NumTokens: 1, ContextLen: 1}}}, "seat 5 outside"},
		{"twice", cudaBatch(4, tables, cudaPart{seat: 0, toks: []int32{1}, start: true}, cudaPart{seat: 0, toks: []int32{1}, start: true}), "twice"},
		{"token", cudaBatch(4, tables, cudaPart{seat: 0, toks: []int32{10}, start: true}), "token 10"},
		{"not started", cudaBatch(4, tables, cudaPart{seat: 1, toks: []int32{1}}), "started false"},
		{"context", cudaBatch(4, tables, cudaPart{seat: 0, first: 16, toks: []int32{1}, start: true}), "max context 16"},
		{"num output", func() *step.Batch {
			b := cudaBatch(4, tables, cudaPart{seat: 0, toks: []int32{1, 2}, start: true})
			b.Seqs[0].NumOutput = 3
			return b
		}(), "NumOutput 3 outside [0, 2]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := cudaTestHost(t, c, []int{1, 2}, false)
			require.ErrorContains(t, h.prepare(tc.b), tc.want)
			for i, s := range h.seats {
				require.Equal(t, cudaSeat{}, s, "seat %d changed", i)
			}
			require.NoError(t, h.checkSeats())
		})
	}
}

// Random batches either fail validation or leave staging whose every slot,
// table entry, gather row and seat is in range, for graph and eager steps.
func FuzzCUDAHostPrepare(f *testing.F) {
	f.Add(uint64(1), uint8(3), uint8(2), true)
	f.Add(uint64(99), uint8(1), uint8(9), false)
	f.Add(uint64(7), uint8(6), uint8(1), true)
	f.Fuzz(func(t *testing.T, seed uint64, nseq, maxTok uint8, graphs bool) {
		c := step.Capacity{Seats: 6, KVBlocks: 24, BlockSize: 4, MaxContext: 16, MaxBatchTokens: 12, Vocab: 10}
		var sizes []int
		if graphs {
			sizes = []int{1, 2, 4}
		}
		h := cudaTestHost(t, c, sizes, seed%2 == 0)
		rng := seed
		next := func(n int) int { // xorshift: deterministic per seed
			rng ^= rng << 13
			rng ^= rng >> 7
			rng ^= rng << 17
			return int(rng % uint64(n))
		}
		tables := map[int32][]int32{}
		var parts []cudaPart
		for i := 0; i < int(nseq%7); i++ {
			seat := int32(next(7)) // 6 is out of range on purpose
			tables[seat] = []int32{int32(next(30)), int32(next(24)), int32(next(24)), int32(next(24))}
			n := 1 + next(int(maxTok%5)+1)
			toks := make([]int32, n)
			for j := range toks {
				toks[j] = int32(next(11))
			}
			parts = append(parts, cudaPart{seat: seat, first: int32(next(17)), toks: toks, sample: next(2) == 0, start: true})
		}
		b := &step.Batch{}
		if len(parts) > 0 {
			for _, p := range parts {
				if _, ok := tables[p.seat]; !ok {
					tables[p.seat] = []int32{0}
				}
			}
			b = cudaBatch(4, tables, parts...)
		}
		if err := h.prepare(b); err != nil {
			return
		}
		l := h.layout
		requireLayout(t, l)
		s := h.staging
		for j := 0; j < l.T; j++ {
			sl := s[l.slot+j]
			require.True(t, sl == -1 || (sl >= 0 && int(sl) < c.KVBlocks*c.BlockSize), "slot %d", sl)
			require.True(t, s[l.seat+j] >= 0 && int(s[l.seat+j]) < c.Seats)
		}
		for _, blk := range s[l.tables : l.tables+l.N*l.MB] {
			require.True(t, blk >= 0 && int(blk) < c.KVBlocks, "block %d", blk)
		}
		for j := 0; j < l.N; j++ {
			require.LessOrEqual(t, int(s[l.ctxLen+j]), l.MB*c.BlockSize, "attention stays inside its table row")
		}
		for j := 0; j < l.R; j++ {
			require.True(t, s[l.gather+j] >= 0 && int(s[l.gather+j]) < l.T)
			ls := s[l.lastSeat+j]
			require.True(t, ls == -1 || (ls >= 0 && int(ls) < c.Seats))
		}
		if h.graph > 0 {
			require.Equal(t, len(b.Seqs), len(b.Tokens))
			require.GreaterOrEqual(t, h.graph, len(b.Seqs))
		}
	})
}

func TestCUDADryRunAndPadding(t *testing.T) {
	cases := []step.Capacity{
		{Seats: 4, BlockSize: 16, MaxContext: 2048, MaxBatchTokens: 512, Vocab: 512},
		{Seats: 1, BlockSize: 16, MaxContext: 40, MaxBatchTokens: 100, Vocab: 8}, // more tokens than one sequence holds
		{Seats: 64, BlockSize: 4, MaxContext: 8, MaxBatchTokens: 64, Vocab: 8},
	}
	for _, c := range cases {
		rows := min(c.Seats, c.MaxBatchTokens)
		dry, maxQ := cudaDryRun(c, rows)
		staging := max(cudaStagingElems(c, rows, cudaTableColumns(c)), dry.total)
		s := make([]int32, staging)
		l := cudaFillDryRun(s, c, rows, 3)
		require.Equal(t, dry, l)
		requireLayout(t, l)
		covered := 0
		for q := 0; q < l.N; q++ {
			n := int(s[l.numQ+q])
			require.LessOrEqual(t, n, maxQ)
			require.Equal(t, int32(covered), s[l.qStart+q])
			require.LessOrEqual(t, int(s[l.ctxLen+q]), l.MB*c.BlockSize, "attention stays inside its table row")
			covered += n
		}
		require.Equal(t, c.MaxBatchTokens, covered)
		for j := 0; j < l.T; j++ {
			require.True(t, s[l.slot+j] >= 0 && s[l.slot+j] < int32(3*c.BlockSize), "slot inside the scratch blocks")
		}
		sizes, err := kernels.GraphBatchSizes(rows)
		require.NoError(t, err)
		for _, g := range sizes {
			plain := newCUDAStepLayout(g, g, g, cudaTableColumns(c))
			require.LessOrEqual(t, plain.total, cudaStagingElems(c, rows, cudaTableColumns(c)),
				"staging holds the decode graph of %d rows", g)
			casc := plain.withCascade(kernels.CascadeMaxTiles(g, 1))
			require.LessOrEqual(t, casc.total, cudaStagingElems(c, rows, cudaTableColumns(c)),
				"staging holds the cascade decode graph of %d rows", g)
			require.Equal(t, plain.lastSeat, casc.lastSeat, "the cascade sections come after the plain ones")
		}
		for _, mt := range []int{0, kernels.CascadeMaxTiles(rows, 1)} {
			p := cudaFillPadding(s, rows, cudaTableColumns(c), mt)
			require.Equal(t, mt, p.MT)
			for j := 0; j < rows; j++ {
				require.Equal(t, int32(-1), s[p.slot+j])
				require.Equal(t, int32(0), s[p.ctxLen+j])
				require.Equal(t, int32(-1), s[p.lastSeat+j])
				if mt > 0 {
					require.Equal(t, int32(0), s[p.startBlk+j], "padding rows start at block 0")
				}
			}
			if mt > 0 {
				require.Equal(t, int32(0), s[p.cascNum], "no tiles")
			}
		}
	}
}

func TestCUDAMemoryReport(t *testing.T) {
	m := CUDAMemory{Device: "H200", Total: 140 << 30, Free: 139 << 30, Fraction: 0.9, Weights: 15 << 30, Activations: 1 << 30,
		Reserved: 256 << 20, KVBlocks: 1000, BlockSize: 16, KVBytes: 1000 * 2 << 20, KVType: "bf16", GemmType: "bf16", GraphBatches: []int{1, 2, 4}}
	require.Equal(t, 16000, m.KVTokens())
	s := m.String()
	for _, want := range []string{"1000 blocks × 16 = 16000 tokens", "weights 15.00 GiB", "decode graphs for batch [1 2 4]", "0.90 × 140.00 GiB"} {
		require.Contains(t, s, want)
	}
	p := kernels.KVMemoryPlan{Total: 80 << 30, Free: 80 << 30, Fraction: 0.5, Weights: 1 << 30, Layers: 2, KVHeads: 2, BlockSize: 16, HeadDim: 64, BF16: true}
	n, err := cudaPlanKVBlocks(0, p)
	require.NoError(t, err)
	require.Equal(t, int((39<<30)/p.BlockBytes()), n)
	n, err = cudaPlanKVBlocks(7, p)
	require.NoError(t, err)
	require.Equal(t, 7, n, "a fixed count is used as given")
	p.Weights = 50 << 30
	_, err = cudaPlanKVBlocks(0, p)
	require.ErrorContains(t, err, "no room for the KV cache")
}

// A closed or never-started runner fails Execute and closes again quietly.
func TestCUDARunnerClosed(t *testing.T) {
	c := step.Capacity{Seats: 2, KVBlocks: 8, BlockSize: 4, MaxContext: 16, MaxBatchTokens: 8, Vocab: 10}
	r := &CUDARunner{host: cudaTestHost(t, c, nil, false)}
	require.NoError(t, r.release(), "releasing a runner that holds nothing")
	require.NoError(t, r.Close())
	require.NoError(t, r.Close(), "Close is idempotent")
	require.ErrorIs(t, r.Execute(&step.Batch{}, &step.Output{}), ErrCUDARunnerClosed)
	require.NoError(t, r.Check())
	r.ledger = []cudaAlloc{{name: "weights", p: 1, n: 4}}
	require.ErrorContains(t, r.Check(), "still holds 1 allocations")
}

// Only plain greedy requests are left to the device's argmax; anything the
// sampler would change (penalties, logprobs, temperature) goes to the host.
func TestCUDADeviceGreedy(t *testing.T) {
	cases := []struct {
		name string
		mod  func(p *sampling.Params)
		want bool
	}{
		{"greedy", func(p *sampling.Params) {}, true},
		{"tiny temperature", func(p *sampling.Params) { p.Temperature = sampling.GreedyBelow / 2 }, true},
		{"temperature", func(p *sampling.Params) { p.Temperature = 0.7 }, false},
		{"repetition", func(p *sampling.Params) { p.RepetitionPenalty = 1.1 }, false},
		{"presence", func(p *sampling.Params) { p.PresencePenalty = 0.5 }, false},
		{"frequency", func(p *sampling.Params) { p.FrequencyPenalty = -0.5 }, false},
		{"logprobs", func(p *sampling.Params) { p.Logprobs = true }, false},
		{"top logprobs", func(p *sampling.Params) { p.TopLogprobs = 3 }, false},
		{"top k alone", func(p *sampling.Params) { p.TopK = 5 }, true},
	}
	for _, tc := range cases {
		p := sampling.DefaultParams()
		tc.mod(&p)
		require.Equal(t, tc.want, cudaDeviceGreedy(&p), tc.name)
	}
}

// A steady decode step allocates nothing on the host half (the device half
// is one graph launch through preallocated buffers).
func TestCUDAHostZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	c := step.Capacity{Seats: 4, KVBlocks: 40, BlockSize: 4, MaxContext: 64, MaxBatchTokens: 16, Vocab: 10}
	h := cudaTestHost(t, c, []int{1, 2, 4}, false)
	tables := map[int32][]int32{0: iota32(0, 16), 1: iota32(16, 16), 2: iota32(32, 8)}
	b := cudaBatch(4, tables,
		cudaPart{seat: 0, first: 0, toks: []int32{1}, sample: true, start: true},
		cudaPart{seat: 1, first: 0, toks: []int32{2}, sample: true, start: true},
		cudaPart{seat: 2, first: 0, toks: []int32{3}, sample: true, start: true},
	)
	var out step.Output
	devTok := []int32{4, 5, 6, 0}
	row := func(int) []float32 { return nil }
	step := func() {
		require.NoError(t, h.prepare(b))
		_, err := h.finish(b, &out, devTok, row)
		require.NoError(t, err)
		for i := range b.Seqs {
			sb := &b.Seqs[i]
			sb.Start = false
			sb.ContextLen++
			b.Positions[i] = sb.ContextLen - 1
			b.Tokens[i] = step.FutureToken
			sb.BlockTable = tables[sb.Seat][:(sb.ContextLen+3)/4]
		}
	}
	step()
	require.Zero(t, testing.AllocsPerRun(20, step))
	require.Equal(t, 4, h.graph)
	require.NoError(t, h.checkSeats())
}
