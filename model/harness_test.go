package model

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/step"
)

// tseq is one test sequence driven through a runner by a harness.
type tseq struct {
	seat    int32
	table   []int32 // block ids; must cover every position the test uses
	ctx     int32   // positions already in the cache
	started bool
	params  sampling.Params
	history []int32
}

// part is one sequence's share of a step: its new tokens (FutureToken
// allowed) and whether to sample.
type part struct {
	s      *tseq
	toks   []int32
	sample bool
}

// harness builds batches for a runner and collects the kept logits.
type harness struct {
	tb  testing.TB
	r   *CPURunner
	b   step.Batch
	out step.Output
}

func newHarness(tb testing.TB, r *CPURunner) *harness { return &harness{tb: tb, r: r} }

// newSeq makes a greedy sequence on seat using blocks table.
func newSeq(seat int32, table ...int32) *tseq {
	return &tseq{seat: seat, table: table, params: sampling.DefaultParams()}
}

// build fills h.b from parts and advances nothing.
func (h *harness) build(parts ...part) {
	h.b.Reset()
	bs := int32(h.r.Capacity().BlockSize)
	for _, p := range parts {
		start := int32(len(h.b.Tokens))
		for j, t := range p.toks {
			h.b.Tokens = append(h.b.Tokens, t)
			h.b.Positions = append(h.b.Positions, p.s.ctx+int32(j))
		}
		ctx := p.s.ctx + int32(len(p.toks))
		sb := step.SeqBatch{
			Seat: p.s.seat, TokenStart: start, NumTokens: int32(len(p.toks)), ContextLen: ctx,
			BlockTable: p.s.table[:min(len(p.s.table), int((ctx+bs-1)/bs))], Sample: p.sample,
			Start: !p.s.started, Params: &p.s.params,
		}
		if sb.Start {
			sb.History = p.s.history
			if sb.History == nil {
				sb.History = p.toks
			}
		}
		h.b.Seqs = append(h.b.Seqs, sb)
	}
}

// step runs one batch of parts and returns the sampled tokens and a copy
// of each part's logits (nil when not sampled).
func (h *harness) step(parts ...part) ([]int32, [][]float32) {
	h.tb.Helper()
	h.build(parts...)
	require.NoError(h.tb, h.r.Execute(&h.b, &h.out))
	require.NoError(h.tb, h.r.Check())
	toks := make([]int32, len(parts))
	logits := make([][]float32, len(parts))
	for i, p := range parts {
		p.s.started = true
		p.s.ctx += int32(len(p.toks))
		toks[i] = h.out.Tokens[i]
		if l := h.r.Logits(i); l != nil {
			logits[i] = append([]float32(nil), l...)
		}
		if !p.sample {
			require.Equal(h.tb, int32(-1), toks[i])
		}
	}
	return toks, logits
}

// iota32 returns [from, from+n).
func iota32(from, n int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = int32(from + i)
	}
	return s
}

// loadStories loads the real stories260K test model.
func loadStories(tb testing.TB) *Llama {
	tb.Helper()
	path, err := gguf.TestModelPath()
	require.NoError(tb, err)
	m, err := LoadLlama(path, LlamaOptions{})
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, m.Close()) })
	return m
}

// newTestRunner builds a runner and closes it when the test ends.
func newTestRunner(tb testing.TB, m *Llama, cfg CPURunnerConfig) *CPURunner {
	tb.Helper()
	r, err := NewCPURunner(m, cfg)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, r.Close()) })
	return r
}

// newExactRunner is newTestRunner with float32 activations in every
// MatMul (kernels.Workers.SetExact), so the runner differs from the Go
// reference by float32 summation only.
func newExactRunner(tb testing.TB, m *Llama, cfg CPURunnerConfig) *CPURunner {
	tb.Helper()
	r := newTestRunner(tb, m, cfg)
	r.pool.SetExact(true)
	r.serial.SetExact(true)
	return r
}
