package model

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/step"
)

// invarianceTol is the batch-invariance bound: a sequence's logits may
// differ from its logits computed alone only by float32 summation order.
const invarianceTol = 1e-5

var storyPrompts = []string{
	"Once upon a time",
	"The little dog ran to the park and",
	"Lily and Ben were friends. One day they",
	"Tom had a big red ball",
	"Mom said",
	"There was a tree near the house. The tree was very tall and old, and the birds liked to sit on it",
	"Sue",
	"The sun was hot. The cat wanted to find a cool place to sleep, so she",
}

func encodeAll(m *Llama, texts []string) [][]int32 {
	out := make([][]int32, len(texts))
	for i, s := range texts {
		out[i] = m.Tokenizer().Encode(s, true)
	}
	return out
}

func TestStoriesGreedyFromBOS(t *testing.T) {
	m := loadStories(t)
	r := newTestRunner(t, m, CPURunnerConfig{Seats: 2, KVBlocks: 16, BlockSize: 16, MaxBatchTokens: 64})
	tok := m.Tokenizer()
	h := newHarness(t, r)
	s := newSeq(0, iota32(0, 16)...)
	next, _ := h.step(part{s, []int32{tok.BOS()}, true})
	gen := []int32{next[0]}
	for len(gen) < 40 {
		next, _ = h.step(part{s, []int32{step.FutureToken}, true})
		gen = append(gen, next[0])
	}
	text := tok.Decode(gen)
	require.True(t, strings.HasPrefix(text, "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."), "generated %q", text)
}

// TestBatchInvariance: eight prompts prefilled in one batch and then decoded
// together give the logits each gives alone.
func TestBatchInvariance(t *testing.T) {
	m := loadStories(t)
	prompts := encodeAll(m, storyPrompts)
	cfg := CPURunnerConfig{Seats: 8, KVBlocks: 64, BlockSize: 8, MaxBatchTokens: 256, KeepLogits: true}
	const decode = 4

	// Together: blocks interleaved between sequences.
	r := newTestRunner(t, m, cfg)
	h := newHarness(t, r)
	seqs := make([]*tseq, len(prompts))
	parts := make([]part, len(prompts))
	for i := range prompts {
		seqs[i] = newSeq(int32(i))
		for j := 0; j < 8; j++ {
			seqs[i].table = append(seqs[i].table, int32(j*8+i))
		}
		parts[i] = part{seqs[i], prompts[i], true}
	}
	toks, logits := h.step(parts...)
	together := [][][]float32{logits}
	fed := [][]int32{toks}
	for d := 0; d < decode; d++ {
		for i := range parts {
			parts[i].toks = []int32{step.FutureToken}
		}
		toks, logits = h.step(parts...)
		together = append(together, logits)
		fed = append(fed, toks)
	}

	// Alone: each on a fresh runner, fed the tokens the batch sampled.
	for i, p := range prompts {
		r := newTestRunner(t, m, cfg)
		h := newHarness(t, r)
		s := newSeq(3, iota32(0, 8)...)
		_, alone := h.step(part{s, p, true})
		require.Less(t, relErr(alone[0], together[0][i]), invarianceTol, "prompt %d prefill", i)
		for d := 0; d < decode; d++ {
			_, alone = h.step(part{s, []int32{fed[d][i]}, true})
			require.Less(t, relErr(alone[0], together[d+1][i]), invarianceTol, "prompt %d decode %d", i, d)
		}
	}
}

// TestChunkedPrefill: a prompt prefilled in chunks of 7 tokens (sampling
// only after the last) gives the one-shot logits, and so does the decode
// step after it.
func TestChunkedPrefill(t *testing.T) {
	m := loadStories(t)
	prompt := encodeAll(m, storyPrompts[5:6])[0]
	prompt = append(prompt, encodeAll(m, storyPrompts[2:3])[0][1:]...)
	require.Greater(t, len(prompt), 30)
	cfg := CPURunnerConfig{Seats: 2, KVBlocks: 32, BlockSize: 4, MaxBatchTokens: 128, KeepLogits: true}

	r1 := newTestRunner(t, m, cfg)
	h1 := newHarness(t, r1)
	s1 := newSeq(0, iota32(0, 32)...)
	tok1, one := h1.step(part{s1, prompt, true})
	_, oneNext := h1.step(part{s1, []int32{step.FutureToken}, true})

	r2 := newTestRunner(t, m, cfg)
	h2 := newHarness(t, r2)
	s2 := newSeq(1, iota32(0, 32)...)
	s2.history = prompt
	var chunked [][]float32
	var tok2 []int32
	for at := 0; at < len(prompt); at += 7 {
		end := min(at+7, len(prompt))
		tok2, chunked = h2.step(part{s2, prompt[at:end], end == len(prompt)})
	}
	_, chunkedNext := h2.step(part{s2, []int32{step.FutureToken}, true})
	require.Equal(t, tok1, tok2)
	require.Less(t, relErr(chunked[0], one[0]), invarianceTol)
	require.Less(t, relErr(chunkedNext[0], oneNext[0]), invarianceTol)
}

// TestPrefixReuse: a sequence that starts on another sequence's cached
// full blocks and computes only its suffix gets the logits of computing the
// whole prompt itself.
func TestPrefixReuse(t *testing.T) {
	m := loadStories(t)
	base := encodeAll(m, storyPrompts[5:6])[0]
	const bs, shared = 8, 2 // two full blocks shared
	require.Greater(t, len(base), shared*bs)
	suffix := encodeAll(m, storyPrompts[7:8])[0][1:]
	prompt := append(append([]int32(nil), base[:shared*bs]...), suffix...)
	cfg := CPURunnerConfig{Seats: 4, KVBlocks: 32, BlockSize: bs, MaxBatchTokens: 128, KeepLogits: true}

	r := newTestRunner(t, m, cfg)
	h := newHarness(t, r)
	owner := newSeq(0, 10, 11, 12, 13, 14)
	h.step(part{owner, base, true})
	reuse := newSeq(1, 10, 11, 20, 21, 22, 23)
	reuse.ctx, reuse.history = shared*bs, prompt
	_, got := h.step(part{reuse, prompt[shared*bs:], true})

	fresh := newTestRunner(t, m, cfg)
	hf := newHarness(t, fresh)
	_, want := hf.step(part{newSeq(2, iota32(0, 6)...), prompt, true})
	require.Less(t, relErr(got[0], want[0]), invarianceTol)
}

// TestShuffledBlockTable: where the blocks are does not change the result.
func TestShuffledBlockTable(t *testing.T) {
	m := loadStories(t)
	prompt := encodeAll(m, storyPrompts[5:6])[0]
	cfg := CPURunnerConfig{Seats: 2, KVBlocks: 64, BlockSize: 4, MaxBatchTokens: 64, KeepLogits: true}
	n := (len(prompt) + 8 + 3) / 4
	rng := rand.New(rand.NewPCG(3, 4))
	shuffled := rng.Perm(64)[:n]
	var results [2][][]float32
	for i, table := range [][]int32{iota32(0, n), toInt32(shuffled)} {
		r := newTestRunner(t, m, cfg)
		h := newHarness(t, r)
		s := newSeq(1, table...)
		_, l := h.step(part{s, prompt, true})
		results[i] = append(results[i], l[0])
		for d := 0; d < 8; d++ {
			_, l = h.step(part{s, []int32{step.FutureToken}, true})
			results[i] = append(results[i], l[0])
		}
	}
	for d := range results[0] {
		require.Less(t, relErr(results[1][d], results[0][d]), invarianceTol, "step %d", d)
	}
}

func toInt32(s []int) []int32 {
	out := make([]int32, len(s))
	for i, v := range s {
		out[i] = int32(v)
	}
	return out
}

// TestFutureToken: a decode step fed FutureToken computes what the same
// step fed the seat's previous sample explicitly computes.
func TestFutureToken(t *testing.T) {
	m := loadStories(t)
	prompt := encodeAll(m, storyPrompts[1:2])[0]
	cfg := CPURunnerConfig{Seats: 2, KVBlocks: 16, BlockSize: 8, MaxBatchTokens: 64, KeepLogits: true}
	var logits [2][]float32
	var next [2]int32
	for i := range 2 {
		r := newTestRunner(t, m, cfg)
		h := newHarness(t, r)
		s := newSeq(1, iota32(0, 8)...)
		sampled, _ := h.step(part{s, prompt, true})
		feed := sampled[0]
		if i == 0 {
			feed = step.FutureToken
		}
		tok, l := h.step(part{s, []int32{feed}, true})
		logits[i], next[i] = l[0], tok[0]
	}
	require.Equal(t, logits[1], logits[0])
	require.Equal(t, next[1], next[0])
}

// TestZeroAllocs: steady-state decode and prefill steps allocate nothing.
func TestZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	m := loadStories(t)
	r := newTestRunner(t, m, CPURunnerConfig{Seats: 4, KVBlocks: 64, BlockSize: 16, MaxBatchTokens: 64, KeepLogits: true})
	h := newHarness(t, r)
	prompts := encodeAll(m, storyPrompts[:4])
	seqs := make([]*tseq, 4)
	parts := make([]part, 4)
	for i := range seqs {
		seqs[i] = newSeq(int32(i), iota32(i*16, 16)...)
		seqs[i].params.Temperature = 0.8
		parts[i] = part{seqs[i], prompts[i], true}
	}
	h.step(parts...)
	for i := range parts {
		parts[i].toks = []int32{step.FutureToken}
	}
	h.step(parts...) // warm the sampler's penalty tables and kernel scratch
	h.build(parts...)
	for i := range h.b.Seqs {
		h.b.Seqs[i].BlockTable = seqs[i].table
	}
	allocs := testing.AllocsPerRun(20, func() {
		for i := range h.b.Seqs {
			h.b.Seqs[i].Start = false
		}
		require.NoError(t, r.Execute(&h.b, &h.out))
		for i := range h.b.Seqs {
			h.b.Seqs[i].ContextLen++
			h.b.Positions[i]++
		}
	})
	require.Zero(t, allocs)
	// A prefill chunk continuing seat 3 too.
	s := seqs[3]
	s.ctx = h.b.Seqs[3].ContextLen - 1
	h.build(part{s, prompts[0], true})
	h.b.Seqs[0].Start, h.b.Seqs[0].BlockTable = false, s.table
	n := int32(len(prompts[0]))
	allocs = testing.AllocsPerRun(2, func() {
		require.NoError(t, r.Execute(&h.b, &h.out))
		h.b.Seqs[0].ContextLen += n
		for i := range h.b.Positions {
			h.b.Positions[i] += n
		}
	})
	require.Zero(t, allocs)
}

func TestCapacity(t *testing.T) {
	m := loadStories(t)
	r := newTestRunner(t, m, CPURunnerConfig{Seats: 3, KVBlocks: 20, BlockSize: 16, MaxBatchTokens: 100})
	require.Equal(t, step.Capacity{Seats: 3, KVBlocks: 20, BlockSize: 16, MaxContext: 2048, MaxBatchTokens: 100, Vocab: 512}, r.Capacity())
	require.NoError(t, r.Close())
	require.NoError(t, r.Close())
	var out step.Output
	require.ErrorIs(t, r.Execute(&step.Batch{}, &out), ErrRunnerClosed)
}

func TestNewCPURunnerErrors(t *testing.T) {
	m := loadStories(t)
	good := CPURunnerConfig{Seats: 2, KVBlocks: 4, BlockSize: 16, MaxBatchTokens: 16}
	for _, tc := range []struct {
		mut  func(*CPURunnerConfig)
		want string
	}{
		{func(c *CPURunnerConfig) { c.Seats = 0 }, "Seats = 0"},
		{func(c *CPURunnerConfig) { c.KVBlocks = -3 }, "KVBlocks = -3"},
		{func(c *CPURunnerConfig) { c.BlockSize = 0 }, "BlockSize = 0"},
		{func(c *CPURunnerConfig) { c.MaxBatchTokens = 0 }, "MaxBatchTokens = 0"},
		{func(c *CPURunnerConfig) { c.Workers = -1 }, "Workers = -1"},
		{func(c *CPURunnerConfig) { c.KVType = kernels.Q8_0 }, "KVType: kernels: Q8_0 is not a KV cache type"},
		{func(c *CPURunnerConfig) { c.KVBlocks, c.BlockSize = 1<<30, 1<<30 }, "too large"},
	} {
		cfg := good
		tc.mut(&cfg)
		_, err := NewCPURunner(m, cfg)
		require.ErrorContains(t, err, tc.want)
	}
	_, err := NewCPURunner(nil, good)
	require.Error(t, err)
}

func TestLoadLlamaErrors(t *testing.T) {
	_, err := LoadLlama("/nonexistent/model.gguf", LlamaOptions{})
	require.ErrorContains(t, err, "/nonexistent/model.gguf")
	path := writeSynth(t, t.TempDir(), smallSpec(gguf.TypeF32))
	_, err = LoadLlama(path, LlamaOptions{MaxContext: 100000})
	require.ErrorContains(t, err, "MaxContext 100000")
	m, err := LoadLlama(path, LlamaOptions{MaxContext: 100})
	require.NoError(t, err)
	require.Equal(t, 100, m.MaxContext())
	require.NoError(t, m.Close())
	partial := smallSpec(gguf.TypeF32)
	partial.RopeDim = 8
	_, err = LoadLlama(writeSynth(t, t.TempDir(), partial), LlamaOptions{})
	require.ErrorContains(t, err, "dimension_count = 8")
}

// TestBadBatches: every malformed batch is refused with an error naming the
// offending value, and the runner is unchanged: the valid batch still runs.
func TestBadBatches(t *testing.T) {
	m := loadStories(t)
	cfg := CPURunnerConfig{Seats: 4, KVBlocks: 8, BlockSize: 4, MaxBatchTokens: 16}
	r := newTestRunner(t, m, cfg)
	h := newHarness(t, r)
	a := newSeq(0, 0, 1, 2)
	h.step(part{a, []int32{1, 50, 60}, false}) // seat 0 holds 3 positions, sampled nothing
	b := newSeq(1, 3, 4)
	h.step(part{b, []int32{1, 70}, true}) // seat 1 holds 2 positions and a sample

	// valid: a continues with 2 tokens, b decodes its future token.
	valid := func() *step.Batch {
		return &step.Batch{
			Tokens:    []int32{5, 6, step.FutureToken},
			Positions: []int32{3, 4, 2},
			Seqs: []step.SeqBatch{
				{Seat: 0, TokenStart: 0, NumTokens: 2, ContextLen: 5, BlockTable: []int32{0, 1}, Sample: true},
				{Seat: 1, TokenStart: 2, NumTokens: 1, ContextLen: 3, BlockTable: []int32{3}, Sample: true},
			},
		}
	}
	p := sampling.DefaultParams()
	bad := p
	bad.TopP = 2
	for _, tc := range []struct {
		name string
		mut  func(*step.Batch)
		want string
	}{
		{"no tokens", func(b *step.Batch) { b.Tokens, b.Positions, b.Seqs = nil, nil, nil }, "0 tokens"},
		{"zero NumTokens", func(b *step.Batch) { b.Seqs[1].NumTokens = 0 }, "NumTokens = 0"},
		{"token above vocab", func(b *step.Batch) { b.Tokens[1] = 512 }, "token 512"},
		{"negative token", func(b *step.Batch) { b.Tokens[0] = -7 }, "token -7"},
		{"future token without sample", func(b *step.Batch) { b.Tokens[0] = step.FutureToken }, "FutureToken"},
		{"seat out of range", func(b *step.Batch) { b.Seqs[1].Seat = 4 }, "seat 4"},
		{"negative seat", func(b *step.Batch) { b.Seqs[0].Seat = -1 }, "seat -1"},
		{"seat twice", func(b *step.Batch) { b.Seqs[1].Seat = 0 }, "seat 0 appears twice"},
		{"block out of range", func(b *step.Batch) { b.Seqs[0].BlockTable = []int32{0, 8} }, "block 8"},
		{"negative block", func(b *step.Batch) { b.Seqs[1].BlockTable = []int32{-2} }, "block -2"},
		{"short block table", func(b *step.Batch) { b.Seqs[0].BlockTable = []int32{0} }, "needs 2"},
		{"position at context", func(b *step.Batch) {
			b.Positions[2], b.Seqs[1].ContextLen = 2048, 2049
		}, "context length 2049"},
		{"wrong position", func(b *step.Batch) { b.Positions[1] = 9 }, "position 9"},
		{"positions length", func(b *step.Batch) { b.Positions = b.Positions[:2] }, "2 positions"},
		{"gap in tokens", func(b *step.Batch) { b.Seqs[1].TokenStart = 1 }, "tokens [1, 2)"},
		{"uncovered token", func(b *step.Batch) { b.Tokens, b.Positions = append(b.Tokens, 3), append(b.Positions, 3) }, "cover 3 of the batch's 4"},
		{"too many tokens", func(b *step.Batch) {
			b.Tokens = make([]int32, 17)
			b.Positions = make([]int32, 17)
		}, "17 tokens"},
		{"discontinuous seat", func(b *step.Batch) { b.Seqs[1].ContextLen, b.Positions[2] = 4, 3 }, "seat holds 2 positions"},
		{"unstarted seat", func(b *step.Batch) { b.Seqs[1].Seat = 2 }, "seat 2"},
		{"start without params", func(b *step.Batch) { b.Seqs[0].Start = true }, "without Params"},
		{"bad params", func(b *step.Batch) { b.Seqs[0].Start, b.Seqs[0].Params = true, &bad }, "2"},
		{"bad history", func(b *step.Batch) {
			b.Seqs[0].Start, b.Seqs[0].Params, b.Seqs[0].History = true, &p, []int32{1, 9999}
		}, "history token 9999"},
		{"num output beyond history", func(b *step.Batch) {
			b.Seqs[0].Start, b.Seqs[0].Params, b.Seqs[0].History, b.Seqs[0].NumOutput = true, &p, []int32{1, 2}, 3
		}, "NumOutput 3 outside [0, 2]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := valid()
			tc.mut(b)
			var out step.Output
			err := r.Execute(b, &out)
			require.ErrorContains(t, err, tc.want)
			require.NoError(t, r.Check())
		})
	}
	var out step.Output
	require.NoError(t, r.Execute(valid(), &out))
	require.NoError(t, r.Check())
	require.Len(t, out.Tokens, 2)
}

// TestLogprobsOutput: logprobs and top alternatives land in the Output row
// of their sequence, and a sequence that does not sample gets token -1.
func TestLogprobsOutput(t *testing.T) {
	m := loadStories(t)
	r := newTestRunner(t, m, CPURunnerConfig{Seats: 3, KVBlocks: 16, BlockSize: 8, MaxBatchTokens: 64, KeepLogits: true})
	h := newHarness(t, r)
	prompts := encodeAll(m, storyPrompts[:3])
	a, b, c := newSeq(0, 0, 1), newSeq(1, 2, 3), newSeq(2, 4, 5)
	b.params.Logprobs, b.params.TopLogprobs = true, 3
	toks, logits := h.step(part{a, prompts[0], false}, part{b, prompts[1], true}, part{c, prompts[2], true})
	require.Equal(t, int32(-1), toks[0])
	require.Nil(t, logits[0])
	require.Nil(t, r.Logits(0))
	require.Nil(t, r.Logits(3))
	top := h.out.TopTokens[sampling.MaxTopLogprobs : sampling.MaxTopLogprobs+3]
	lps := h.out.TopLogprobs[sampling.MaxTopLogprobs : sampling.MaxTopLogprobs+3]
	require.Equal(t, toks[1], top[0], "greedy picks the most likely token")
	require.Equal(t, kernelsArgmax(logits[1]), toks[1])
	require.Less(t, h.out.Logprobs[1], float32(0))
	require.Equal(t, lps[0], h.out.Logprobs[1])
	require.GreaterOrEqual(t, lps[0], lps[1])
	require.GreaterOrEqual(t, lps[1], lps[2])
	require.Zero(t, h.out.Logprobs[2], "no logprobs requested")
	require.Equal(t, kernelsArgmax(logits[2]), toks[2])
}

func kernelsArgmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// TestWorkerCountInvariance: the number of cores splits work into different
// tiles but must not change the result.
func TestWorkerCountInvariance(t *testing.T) {
	m := loadSynth(t, smallSpec(gguf.TypeF32, gguf.TypeQ8_0))
	prompts := [][]int32{iota32(3, 37), iota32(20, 9)}
	var results [2][][]float32
	for wi, workers := range []int{1, 3} {
		r := newTestRunner(t, m, CPURunnerConfig{Seats: 2, KVBlocks: 16, BlockSize: 8, MaxBatchTokens: 64, Workers: workers, KeepLogits: true})
		h := newHarness(t, r)
		a, b := newSeq(0, iota32(0, 8)...), newSeq(1, iota32(8, 8)...)
		_, l := h.step(part{a, prompts[0], true}, part{b, prompts[1], true})
		results[wi] = append(results[wi], l...)
		for range 3 {
			_, l = h.step(part{a, []int32{step.FutureToken}, true}, part{b, []int32{step.FutureToken}, true})
			results[wi] = append(results[wi], l...)
		}
	}
	for i := range results[0] {
		require.Less(t, relErr(results[1][i], results[0][i]), invarianceTol, "row %d", i)
	}
}

// TestMaxContextBoundary: the last position of the context is accepted, the
// next one is refused naming it.
func TestMaxContextBoundary(t *testing.T) {
	path := writeSynth(t, t.TempDir(), smallSpec(gguf.TypeF16))
	m, err := LoadLlama(path, LlamaOptions{MaxContext: 12})
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()
	r := newTestRunner(t, m, CPURunnerConfig{Seats: 1, KVBlocks: 4, BlockSize: 4, MaxBatchTokens: 16})
	require.Equal(t, 12, r.Capacity().MaxContext)
	h := newHarness(t, r)
	s := newSeq(0, 0, 1, 2, 3)
	h.step(part{s, iota32(1, 11), true})
	h.step(part{s, []int32{step.FutureToken}, true}) // position 11: the last one
	h.build(part{s, []int32{step.FutureToken}, true})
	var out step.Output
	require.ErrorContains(t, r.Execute(&h.b, &out), "context length 13")
	require.NoError(t, r.Check())
}

// runner is the contract the executor consumes (it defines its own
// interface; model may not import executor).
var _ interface {
	Execute(*step.Batch, *step.Output) error
	Capacity() step.Capacity
} = (*CPURunner)(nil)
