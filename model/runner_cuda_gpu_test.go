package model

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/cuda"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/step"
)

// These tests run the CUDA runner on a GPU: against the CPU runner on the
// real stories260K model, and for decode throughput on a Llama-3-8B-shaped
// model. Without a driver, a device, NVRTC or cuBLASLt they skip, saying
// which; scripts/gpu-check.sh runs them (pattern CUDARunner, benchmark
// CUDADecode8B) on a GPU machine.

// cudaRunnerOrSkip builds a CUDA runner, closed (and checked) when the test ends.
func cudaRunnerOrSkip(tb testing.TB, m *Llama, cfg CUDARunnerConfig) *CUDARunner {
	tb.Helper()
	drv, err := cuda.LoadDriver()
	if err != nil {
		tb.Skipf("no CUDA driver, skipping CUDA runner test: %v", err)
	}
	n, err := drv.DeviceCount()
	drv.Close()
	if err != nil || n == 0 {
		tb.Skipf("no CUDA device (count %d), skipping CUDA runner test: %v", n, err)
	}
	nv, err := cuda.LoadNVRTC()
	if err != nil {
		tb.Skipf("no NVRTC, skipping CUDA runner test: %v", err)
	}
	nv.Close()
	lt, err := cuda.LoadCublasLt()
	if err != nil {
		tb.Skipf("no cuBLASLt, skipping CUDA runner test: %v", err)
	}
	lt.Close()
	r, err := NewCUDARunner(m, cfg)
	require.NoError(tb, err)
	require.NoError(tb, r.Check())
	tb.Cleanup(func() {
		require.NoError(tb, r.Close())
		require.NoError(tb, r.Check())
	})
	return r
}

// cudaRunner is what the comparison drives on both runners.
type cudaPairRunner interface {
	Execute(b *step.Batch, out *step.Output) error
	Check() error
	Logits(i int) []float32
}

// cudaLockstep executes b on the CPU runner and the CUDA runner and requires
// the same tokens and logits within tol (relative to each row's scale).
func cudaLockstep(t *testing.T, step int, cpu, gpu cudaPairRunner, b *step.Batch, tol float64) (cpuOut, gpuOut step.Output) {
	t.Helper()
	require.NoError(t, cpu.Execute(b, &cpuOut), "CPU step %d", step)
	require.NoError(t, cpu.Check())
	require.NoError(t, gpu.Execute(b, &gpuOut), "CUDA step %d", step)
	require.NoError(t, gpu.Check())
	for i := range b.Seqs {
		lc, lg := cpu.Logits(i), gpu.Logits(i)
		require.Equal(t, lc == nil, lg == nil, "step %d seq %d: logits kept on one runner only", step, i)
		if lc != nil {
			e := relErr(lg, lc)
			require.LessOrEqual(t, e, tol, "step %d seq %d (seat %d): CUDA logits differ from the CPU's by %.3g of the row's scale", step, i, b.Seqs[i].Seat, e)
		}
		require.Equal(t, cpuOut.Tokens[i], gpuOut.Tokens[i], "step %d seq %d (seat %d): CUDA sampled %d, CPU %d (CPU top-2 margin %.4g)",
			step, i, b.Seqs[i].Seat, gpuOut.Tokens[i], cpuOut.Tokens[i], cudaTop2Margin(lc))
	}
	return cpuOut, gpuOut
}

// cudaTop2Margin is the gap between the two largest logits (a near tie
// explains a greedy divergence).
func cudaTop2Margin(x []float32) float64 {
	a, b := math.Inf(-1), math.Inf(-1)
	for _, v := range x {
		f := float64(v)
		if f > a {
			a, b = f, a
		} else if f > b {
			b = f
		}
	}
	return a - b
}

// cudaGreedyConfig is the CUDA runner of the greedy comparison: f32 KV and
// (stories260K being f32) f32 GEMMs, so it can match the CPU token for token.
func cudaGreedyConfig(noGraphs bool) CUDARunnerConfig {
	return CUDARunnerConfig{Seats: 2, BlockSize: 16, MaxBatchTokens: 64, KVBlocks: 64, KVF32: true, KeepLogits: true, NoGraphs: noGraphs}
}

// cudaGreedyScenario prefills "Once upon a time" in chunks of 4 (eager
// steps; a one-token chunk is a decode graph) and decodes steps tokens with
// FutureToken on gpu and on a CPU runner in lockstep. It returns the text.
func cudaGreedyScenario(t *testing.T, m *Llama, gpu cudaPairRunner, steps int) []int32 {
	const bs, blocks = 16, 64
	cpu := newTestRunner(t, m, CPURunnerConfig{Seats: 2, KVBlocks: blocks, BlockSize: bs, MaxBatchTokens: 64, KeepLogits: true})
	prompt := m.Tokenizer().Encode("Once upon a time", true)
	table := iota32(0, blocks)
	params := sampling.DefaultParams()
	var text []int32
	pos := int32(0)
	for i := 0; i < len(prompt); i += 4 {
		chunk := prompt[i:min(len(prompt), i+4)]
		last := i+4 >= len(prompt)
		b := &step.Batch{Tokens: chunk, Positions: iota32(int(pos), len(chunk))}
		pos += int32(len(chunk))
		b.Seqs = []step.SeqBatch{{Seat: 0, NumTokens: int32(len(chunk)), ContextLen: pos, BlockTable: table[:(pos+bs-1)/bs],
			Sample: last, Start: i == 0, Params: &params, History: prompt}}
		out, _ := cudaLockstep(t, i, cpu, gpu, b, 1e-3)
		if last {
			text = append(text, out.Tokens[0])
		}
	}
	for s := 0; s < steps; s++ {
		pos++
		b := &step.Batch{Tokens: []int32{step.FutureToken}, Positions: []int32{pos - 1},
			Seqs: []step.SeqBatch{{Seat: 0, NumTokens: 1, ContextLen: pos, BlockTable: table[:(pos+bs-1)/bs], Sample: true}}}
		out, _ := cudaLockstep(t, 100+s, cpu, gpu, b, 1e-3)
		text = append(text, out.Tokens[0])
	}
	return text
}

// stories260K greedy text on the CUDA runner is the CPU runner's, token for
// token, with graph replays and with eager decode.
func TestCUDARunnerGreedyMatchesCPU(t *testing.T) {
	m := loadStories(t)
	for _, noGraphs := range []bool{false, true} {
		t.Run(fmt.Sprintf("graphs=%v", !noGraphs), func(t *testing.T) {
			gpu := cudaRunnerOrSkip(t, m, cudaGreedyConfig(noGraphs))
			text := cudaGreedyScenario(t, m, gpu, 200)
			t.Logf("RESULT cuda greedy stories260K (graphs %v): %d tokens identical to the CPU runner's: %q", !noGraphs, len(text), m.Tokenizer().Decode(text))
		})
	}
}

// cudaBatchConfig is the CUDA runner of the mixed-batch comparison.
func cudaBatchConfig() CUDARunnerConfig {
	return CUDARunnerConfig{Seats: 4, BlockSize: 16, MaxBatchTokens: 32, KVBlocks: 64, KVF32: true, KeepLogits: true}
}

// cudaBatchScenario drives gpu and a CPU runner in lockstep through chunked
// prefill beside decode (eager), a fork by block copy, seats sampled on the
// host (repetition penalty, seeded temperature), and padded decode graphs.
func cudaBatchScenario(t *testing.T, m *Llama, gpu cudaPairRunner) {
	const bs, blocks = 16, 64
	cpu := newTestRunner(t, m, CPURunnerConfig{Seats: 4, KVBlocks: blocks, BlockSize: bs, MaxBatchTokens: 32, KeepLogits: true})
	greedy, penal, hot := sampling.DefaultParams(), sampling.DefaultParams(), sampling.DefaultParams()
	penal.RepetitionPenalty = 1.3
	hot.Temperature, hot.Seed, hot.HasSeed = 0.9, 5, true
	tables := [][]int32{iota32(0, 16), iota32(16, 16), iota32(32, 16), iota32(48, 16)}
	ctx := make([]int32, 4)
	seq := func(b *step.Batch, seat int32, toks []int32, sample, start bool, p *sampling.Params) {
		start0 := int32(len(b.Tokens))
		for j, tk := range toks {
			b.Tokens = append(b.Tokens, tk)
			b.Positions = append(b.Positions, ctx[seat]+int32(j))
		}
		ctx[seat] += int32(len(toks))
		b.Seqs = append(b.Seqs, step.SeqBatch{Seat: seat, TokenStart: start0, NumTokens: int32(len(toks)), ContextLen: ctx[seat],
			BlockTable: tables[seat][:(ctx[seat]+bs-1)/bs], Sample: sample, Start: start, Params: p, History: toks})
	}
	// Step 0: seat 0 prefills and samples; seat 1 prefills a first chunk.
	b := &step.Batch{}
	seq(b, 0, []int32{1, 400, 401, 402, 403}, true, true, &greedy)
	seq(b, 1, iota32(100, 7), false, true, &penal)
	cudaLockstep(t, 0, cpu, gpu, b, 1e-3)
	// Step 1: seat 0 decodes (FutureToken) beside seat 1's last chunk.
	b = &step.Batch{}
	seq(b, 0, []int32{step.FutureToken}, true, false, nil)
	seq(b, 1, iota32(107, 3), true, false, nil)
	out, _ := cudaLockstep(t, 1, cpu, gpu, b, 1e-3)
	// Step 2: seat 2 starts with a one-token prompt beside two decodes:
	// three one-token sequences, a decode graph padded to 4 rows.
	b = &step.Batch{}
	seq(b, 0, []int32{step.FutureToken}, true, false, nil)
	seq(b, 1, []int32{step.FutureToken}, true, false, nil)
	seq(b, 2, []int32{out.Tokens[0]}, true, true, &hot)
	cudaLockstep(t, 2, cpu, gpu, b, 1e-3)
	for s := 3; s < 40; s++ {
		b = &step.Batch{}
		for seat := int32(0); seat < 3; seat++ {
			seq(b, seat, []int32{step.FutureToken}, true, false, nil)
		}
		switch {
		case s == 20: // seat 3 joins with a one-token prompt: a full graph of 4
			seq(b, 3, []int32{1}, true, true, &greedy)
		case s > 20:
			seq(b, 3, []int32{step.FutureToken}, true, false, nil)
		}
		cudaLockstep(t, s, cpu, gpu, b, 1e-3)
	}
}

func TestCUDARunnerBatchesMatchCPU(t *testing.T) {
	m := loadStories(t)
	cudaBatchScenario(t, m, cudaRunnerOrSkip(t, m, cudaBatchConfig()))
}

// The default bf16 KV cache on stories260K: logits stay close to the f32
// CPU runner's.
func TestCUDARunnerBF16Cache(t *testing.T) {
	m := loadStories(t)
	gpu := cudaRunnerOrSkip(t, m, CUDARunnerConfig{Seats: 1, BlockSize: 16, MaxBatchTokens: 16, KVBlocks: 8, KeepLogits: true})
	agree, worst := cudaFollowCPU(t, m, gpu, 120, 0.05)
	t.Logf("RESULT cuda bf16 KV stories260K: %d/120 greedy tokens equal to the f32 CPU runner's, worst logits error %.3g", agree, worst)
}

// The memory plan on a real device: the KV cache fills the budget the
// fraction leaves, and an impossible fraction fails naming the numbers.
func TestCUDARunnerMemoryPlan(t *testing.T) {
	m := loadStories(t)
	r := cudaRunnerOrSkip(t, m, CUDARunnerConfig{Seats: 8, BlockSize: 16, MaxBatchTokens: 256, GPUMemoryFraction: 0.05})
	mem := r.Memory()
	c := r.Capacity()
	require.Equal(t, c.KVBlocks, mem.KVBlocks)
	require.Positive(t, mem.KVBlocks)
	budget := uint64(0.05 * float64(mem.Total))
	used := (mem.Total - mem.Free) + mem.Weights + mem.Activations + mem.Reserved + mem.KVBytes
	require.LessOrEqual(t, used, budget, "plan %s exceeds the budget", mem)
	require.Greater(t, used+mem.KVBytes/uint64(mem.KVBlocks), budget, "one more block would not fit")
	require.Equal(t, []int{1, 2, 4, 8}, mem.GraphBatches)
	t.Logf("RESULT %s", mem)
	_, err := NewCUDARunner(m, CUDARunnerConfig{Seats: 8, BlockSize: 16, MaxBatchTokens: 256, GPUMemoryFraction: 1e-9})
	require.ErrorContains(t, err, "no room for the KV cache")
}

// cudaMemSink is an io.Writer into a preallocated byte slice.
type cudaMemSink struct{ b []byte }

func (s *cudaMemSink) Write(p []byte) (int, error) {
	s.b = append(s.b, p...)
	return len(p), nil
}

// cudaZeroLlama builds a llama model of shape c with every matrix zero in
// type typ (norms one, f32) in memory: weights whose values do not matter,
// for throughput. Tensors of one size share one zero buffer until written.
func cudaZeroLlama(tb testing.TB, c gguf.LlamaConfig, typ gguf.GGMLType, maxContext int) *Llama {
	tb.Helper()
	w := gguf.NewWriter()
	tokens := make([]string, c.Vocab)
	for i := range tokens {
		tokens[i] = fmt.Sprintf("t%d", i)
	}
	tokens[0], tokens[1], tokens[2] = "<unk>", "<s>", "</s>"
	for _, kv := range []struct {
		k string
		v any
	}{
		{"general.architecture", "llama"},
		{"llama.context_length", uint32(c.ContextLength)},
		{"llama.embedding_length", uint32(c.Dim)},
		{"llama.block_count", uint32(c.Layers)},
		{"llama.feed_forward_length", uint32(c.FFN)},
		{"llama.attention.head_count", uint32(c.Heads)},
		{"llama.attention.head_count_kv", uint32(c.KVHeads)},
		{"llama.rope.freq_base", c.RopeTheta},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.bos_token_id", uint32(1)},
		{"tokenizer.ggml.eos_token_id", uint32(2)},
	} {
		require.NoError(tb, w.Set(kv.k, kv.v))
	}
	zeros := map[uint64][]byte{}
	var total uint64
	mat := func(name string, in, out int) {
		n, err := typ.RowBytes(uint64(in))
		require.NoError(tb, err)
		n *= uint64(out)
		if zeros[n] == nil {
			zeros[n] = make([]byte, n)
		}
		total += n
		require.NoError(tb, w.AddTensor(name, typ, []uint64{uint64(in), uint64(out)}, zeros[n]))
	}
	ones := make([]float32, c.Dim)
	for i := range ones {
		ones[i] = 1
	}
	norm := func(name string) {
		total += uint64(4 * c.Dim)
		require.NoError(tb, w.AddTensor(name, gguf.TypeF32, []uint64{uint64(c.Dim)}, cudaF32Bytes(ones)))
	}
	qd, kvd := c.Dim, c.Dim/c.Heads*c.KVHeads
	mat("token_embd.weight", c.Dim, c.Vocab)
	norm("output_norm.weight")
	mat("output.weight", c.Dim, c.Vocab)
	for i := 0; i < c.Layers; i++ {
		norm(gguf.LayerTensor(i, "attn_norm"))
		mat(gguf.LayerTensor(i, "attn_q"), c.Dim, qd)
		mat(gguf.LayerTensor(i, "attn_k"), c.Dim, kvd)
		mat(gguf.LayerTensor(i, "attn_v"), c.Dim, kvd)
		mat(gguf.LayerTensor(i, "attn_output"), qd, c.Dim)
		norm(gguf.LayerTensor(i, "ffn_norm"))
		mat(gguf.LayerTensor(i, "ffn_gate"), c.Dim, c.FFN)
		mat(gguf.LayerTensor(i, "ffn_up"), c.Dim, c.FFN)
		mat(gguf.LayerTensor(i, "ffn_down"), c.FFN, c.Dim)
	}
	sink := &cudaMemSink{b: make([]byte, 0, total+64<<20)}
	_, err := w.WriteTo(sink)
	require.NoError(tb, err)
	f, err := gguf.Parse(sink.b)
	require.NoError(tb, err)
	m, err := NewLlama(f, LlamaOptions{MaxContext: maxContext})
	require.NoError(tb, err)
	return m
}

// cudaCopyBandwidth measures the device's memory bandwidth (bytes read and
// written per second) with device-to-device copies of 1 GiB, best of five.
func cudaCopyBandwidth(tb testing.TB, r *CUDARunner) float64 {
	const n = 1 << 30
	best := math.Inf(1)
	require.NoError(tb, r.dev.Do(func(c cuda.Ctx) error {
		a, err := c.Alloc(n)
		if err != nil {
			return err
		}
		defer c.Free(a)
		b, err := c.Alloc(n)
		if err != nil {
			return err
		}
		defer c.Free(b)
		e0, err := c.NewEvent(true)
		if err != nil {
			return err
		}
		defer c.DestroyEvent(e0)
		e1, err := c.NewEvent(true)
		if err != nil {
			return err
		}
		defer c.DestroyEvent(e1)
		for range 5 {
			if err := c.Record(e0, r.stream); err != nil {
				return err
			}
			if err := c.CopyDtoDAsync(b, a, n, r.stream); err != nil {
				return err
			}
			if err := c.Record(e1, r.stream); err != nil {
				return err
			}
			if err := c.EventSync(e1); err != nil {
				return err
			}
			ms, err := c.Elapsed(e0, e1)
			if err != nil {
				return err
			}
			best = min(best, float64(ms)/1e3)
		}
		return nil
	}))
	return 2 * n / best
}

// Decode throughput of a Llama-3-8B-shaped model (BF16 weights, bf16 KV) at
// batch 1 and 64, contexts 512..1023, against the roofline of streaming the
// weights (and the KV cache) once per step at the measured copy bandwidth.
func BenchmarkCUDADecode8B(b *testing.B) {
	c := gguf.LlamaConfig{Dim: 4096, Layers: 32, Heads: 32, KVHeads: 8, FFN: 14336, Vocab: 128256, ContextLength: 8192, RopeTheta: 500000}
	const bs, ctx0, window, seats = 16, 512, 512, 64
	// Skip before building 16 GB of weights where no GPU is present.
	cudaRunnerOrSkip(b, loadStories(b), CUDARunnerConfig{Seats: 1, BlockSize: bs, MaxBatchTokens: 1, KVBlocks: 1, NoGraphs: true})
	t0 := time.Now()
	m := cudaZeroLlama(b, c, gguf.TypeBF16, 2048)
	per := (ctx0 + window + bs - 1) / bs
	r := cudaRunnerOrSkip(b, m, CUDARunnerConfig{Seats: seats, BlockSize: bs, MaxBatchTokens: seats, KVBlocks: seats * per})
	b.Logf("8B-shaped model built and loaded in %v: %s", time.Since(t0).Round(time.Millisecond), r.Memory())
	// Decode attends to positions it never wrote: make them zeros, not
	// whatever bits the allocation held.
	require.NoError(b, r.dev.Do(func(c cuda.Ctx) error {
		if err := c.MemsetD8Async(r.kvMem, 0, r.mem.KVBytes, r.stream); err != nil {
			return err
		}
		return c.Sync(r.stream)
	}))
	bw := cudaCopyBandwidth(b, r)
	weights := float64(m.WeightBytes())
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			p := sampling.DefaultParams()
			bt := &step.Batch{}
			for i := 0; i < batch; i++ {
				bt.Tokens = append(bt.Tokens, int32(i+3))
				bt.Positions = append(bt.Positions, ctx0)
				bt.Seqs = append(bt.Seqs, step.SeqBatch{Seat: int32(i), TokenStart: int32(i), NumTokens: 1, ContextLen: ctx0 + 1,
					BlockTable: iota32(i*per, per), Sample: true, Start: true, Params: &p})
			}
			var out step.Output
			step := func() {
				if err := r.Execute(bt, &out); err != nil {
					b.Fatal(err)
				}
				restart := bt.Seqs[0].ContextLen >= ctx0+window
				for i := range bt.Seqs {
					sb := &bt.Seqs[i]
					sb.Start = restart
					if restart {
						sb.ContextLen = ctx0 + 1
						bt.Tokens[i] = int32(i + 3)
					} else {
						sb.ContextLen++
						bt.Tokens[i] = step.FutureToken
					}
					bt.Positions[i] = sb.ContextLen - 1
				}
			}
			step()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				step()
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			tps := float64(batch) / sec
			kv := float64(batch) * (ctx0 + window/2) * float64(c.Layers) * 2 * float64(c.KVHeads*c.Dim/c.Heads) * 2
			roofW := float64(batch) * bw / weights
			roofWKV := float64(batch) * bw / (weights + kv)
			b.ReportMetric(tps, "tok/s")
			b.ReportMetric(sec*1e3, "ms/step")
			b.ReportMetric(100*tps/roofWKV, "%roofline")
			b.Logf("RESULT cuda decode 8B bf16 batch %d: %.0f tok/s, %.3f ms/step; roofline at %.0f GB/s: %.0f tok/s (weights %.2f GB) or %.0f tok/s with the KV cache (%.2f GB): %.0f%%",
				batch, tps, sec*1e3, bw/1e9, roofW, weights/1e9, roofWKV, kv/1e9, 100*tps/roofWKV)
		})
	}
}

// The zero-weight builder behind BenchmarkCUDADecode8B, on a small shape:
// it loads as a llama whose weight plan is all bf16 copies.
func TestCUDAZeroLlama(t *testing.T) {
	c := gguf.LlamaConfig{Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFN: 96, Vocab: 300, ContextLength: 512, RopeTheta: 500000}
	m := cudaZeroLlama(t, c, gguf.TypeBF16, 256)
	got := m.Config()
	require.Equal(t, [6]int{64, 2, 4, 2, 16, 300}, [6]int{got.Dim, got.Layers, got.Heads, got.KVHeads, got.HeadDim, got.Vocab})
	require.Equal(t, 256, m.MaxContext())
	require.Equal(t, int64(2*(300*64+2*(64*64*2+64*32*2+3*64*96))), m.WeightBytes())
	p, err := cudaPlanWeights(m)
	require.NoError(t, err)
	require.Equal(t, m.embd.Type, p.gemm)
	p.each(func(w *cudaWeight) { require.Equal(t, cudaUploadCopy, w.how) })
}
