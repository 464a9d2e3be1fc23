package adp

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/sampling"
)

// runCPULadder runs seed 004's context-only traffic (one output token per
// request, max batch 2, everything queued up front) on dp ranks, each an
// engine over its own CPU runner of stories260K with one kernel worker, on
// the wall clock. It returns requests per second, the per-rank routed counts
// and rank 0's last logged share while the queue was saturated.
func runCPULadder(tb testing.TB, m *model.Llama, dp, total int, md mode) (float64, []uint64, [2]int) {
	tb.Helper()
	var ranks []Rank
	var engines []*executor.Engine
	chains := &Chains{}
	for range dp {
		seats := 2
		if md.overlap {
			seats = 4
		}
		r, err := model.NewCPURunner(m, model.CPURunnerConfig{Seats: seats, KVBlocks: 64, BlockSize: 16, MaxBatchTokens: 128, Workers: 1})
		require.NoError(tb, err)
		tb.Cleanup(func() { r.Close() })
		e, err := executor.New(executor.Config{MaxBatchSize: 2, Overlap: md.overlap, Ablation: executor.Ablation{ChargeRetiring: md.charge}, Model: "stories260K"}, r, m.Tokenizer())
		require.NoError(tb, err)
		engines = append(engines, e)
		ranks = append(ranks, NewEngineRank(e, nil, chains))
	}
	d, err := New(Config{Ablation: Ablation{Engine: executor.Ablation{ChargeRetiring: md.charge}}}, ranks)
	require.NoError(tb, err)
	tok := m.Tokenizer()
	start := time.Now()
	for i := range total {
		_, err := d.Submit(context.Background(), &executor.Request{
			PromptTokens: tok.Encode(fmt.Sprintf("Once upon a time, story number %d began in a small town.", i), true),
			MaxTokens:    1, Params: sampling.DefaultParams()})
		require.NoError(tb, err)
	}
	var share [2]int
	for it := 0; ; it++ {
		require.Less(tb, it, 100*total, "stepped %d times waiting for the deployment to drain", it)
		q := d.Snapshot().Queued
		idle, err := d.Step()
		require.NoError(tb, err)
		if q >= 2*dp {
			share = routedShare(d)
		}
		if idle {
			break
		}
	}
	elapsed := time.Since(start)
	var per []uint64
	for _, r := range d.Snapshot().Ranks {
		per = append(per, r.Routed)
	}
	require.NoError(tb, d.Close())
	for _, e := range engines {
		require.NoError(tb, e.Check())
		require.NoError(tb, e.Close())
	}
	return float64(total) / elapsed.Seconds(), per, share
}

func loadStories(tb testing.TB) *model.Llama {
	tb.Helper()
	path, err := gguf.TestModelPath()
	require.NoError(tb, err)
	m, err := model.LoadLlama(path, model.LlamaOptions{MaxContext: 512})
	require.NoError(tb, err)
	tb.Cleanup(func() { m.Close() })
	return m
}

// TestCPULadder: on the real CPU runner, rank 0's share is on one of seed
// 004's rungs under every arm, and FIX routes exactly as OVLOFF does.
func TestCPULadder(t *testing.T) {
	m := loadStories(t)
	routed := map[string][]uint64{}
	for _, md := range []mode{modeBASE, modeFIX, modeOVLOFF} {
		_, per, share := runCPULadder(t, m, 2, 24, md)
		require.True(t, onRung(2, share[0], share[1]), "%s: share %d/%d", md.name, share[0], share[1])
		routed[md.name] = per
	}
	require.Equal(t, routed["OVLOFF"], routed["FIX"], "FIX's per-rank counts equal OVLOFF's")
}

// BenchmarkCPULadder is seed 004's ladder at dp=2 on the CPU runner with
// stories260K (one kernel worker per rank): requests per wall second and
// rank 0's routing share for each arm, side by side.
func BenchmarkCPULadder(b *testing.B) {
	m := loadStories(b)
	const dp, total = 2, 400
	rates := map[string]float64{}
	shares := map[string]float64{}
	for b.Loop() {
		for _, md := range []mode{modeFIX, modeBASE, modeOVLOFF} {
			rate, per, _ := runCPULadder(b, m, dp, total, md)
			rates[md.name] = rate
			shares[md.name] = float64(per[0]) / float64(total)
		}
	}
	for name, r := range rates {
		b.ReportMetric(r, name+"-req/s")
		b.ReportMetric(100*shares[name], name+"-rank0-%")
	}
	b.ReportMetric(100*(rates["FIX"]/rates["BASE"]-1), "FIXgain-%")
}
