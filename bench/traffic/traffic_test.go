package traffic

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/bench/campaign"
	"github.com/turnstile-llm/turnstile/bench/report"
	"github.com/turnstile-llm/turnstile/bench/rig"
	"github.com/turnstile-llm/turnstile/bench/workload"
	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/internal/stats"
	"github.com/turnstile-llm/turnstile/sim"
)

func newEngine(t *testing.T, mbs int) (*executor.Engine, *clock.Virtual) {
	t.Helper()
	vc := clock.NewVirtual(time.Unix(0, 0))
	eng, _, err := rig.NewSim(rig.Config{MaxBatchSize: mbs, KVBlocks: 512, BlockSize: 16, MaxBatchTokens: 512, Seed: 3},
		rig.Sim{Cost: sim.Fixed(5 * time.Millisecond), MaxContext: 4096, Vocab: workload.DefaultTokenMax}, vc)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close()) })
	return eng, vc
}

func TestDrive(t *testing.T) {
	chat, err := workload.Chat(workload.ChatConfig{Seed: 5, Requests: 40, Rate: 20, SystemTokens: 32,
		Input: workload.LogNormal{Median: 64, Sigma: 0.8, Min: 4, Max: 512}, Output: workload.LogNormal{Median: 16, Sigma: 0.5, Min: 1, Max: 64}})
	require.NoError(t, err)
	heavy, err := workload.ContextHeavy(workload.ContextHeavyConfig{Seed: 4, Requests: 12, InputTokens: 1024, OutputTokens: 1})
	require.NoError(t, err)
	tests := []struct {
		name string
		reqs []workload.Request
		mbs  int
	}{
		{"chat", chat, 8},
		{"context heavy, small batch", heavy, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var results [2]Result
			for i := range results {
				eng, vc := newEngine(t, tc.mbs)
				res, err := Drive(context.Background(), Run{Engine: eng, Clock: vc, Requests: tc.reqs, SamplingSeed: 7, CheckEveryStep: true})
				require.NoError(t, err)
				results[i] = res
			}
			res := results[0]
			require.Equal(t, res, results[1], "same seed, same bits")
			require.Equal(t, len(tc.reqs), res.Completed)
			gen, prompt := 0, 0
			for i, r := range tc.reqs {
				gen += r.MaxTokens
				prompt += len(r.Prompt)
				require.GreaterOrEqual(t, res.FirstToken[i], r.Arrival, "request %d", i)
				require.GreaterOrEqual(t, res.Finish[i], res.FirstToken[i], "request %d", i)
			}
			require.Equal(t, gen, res.Generated)
			require.Equal(t, prompt, res.PromptTokens)
			require.Positive(t, res.RequestsPerSecond())
			require.Greater(t, res.TokensPerSecond(), res.RequestsPerSecond())
			require.Positive(t, res.Steps)
		})
	}
}

func TestDriveSharedSystemPromptHitsCache(t *testing.T) {
	reqs, err := workload.Chat(workload.ChatConfig{Seed: 5, Requests: 10, Rate: 2, SystemTokens: 64,
		Input: workload.LogNormal{Median: 64, Sigma: 0.5, Min: 4, Max: 256}, Output: workload.LogNormal{Median: 8, Min: 8, Max: 8}})
	require.NoError(t, err)
	eng, vc := newEngine(t, 4)
	res, err := Drive(context.Background(), Run{Engine: eng, Clock: vc, Requests: reqs})
	require.NoError(t, err)
	// Requests arrive ~0.5 s apart and the first finishes long before the
	// next arrives, so the 4 full blocks of the system prompt are cached
	// for every later request.
	require.GreaterOrEqual(t, res.CachedTokens, 9*64)
}

func TestDriveFailures(t *testing.T) {
	reqs, err := workload.ContextHeavy(workload.ContextHeavyConfig{Seed: 4, Requests: 12, InputTokens: 1024, OutputTokens: 4})
	require.NoError(t, err)
	eng, vc := newEngine(t, 2)
	_, err = Drive(context.Background(), Run{Engine: eng, Clock: vc, Requests: reqs, Deadline: 20 * time.Millisecond})
	var terr *Error
	require.True(t, errors.As(err, &terr), "%v", err)
	require.Contains(t, terr.Reason, "deadline 20ms passed")

	eng, vc = newEngine(t, 2)
	_, err = Drive(context.Background(), Run{Engine: eng, Clock: vc, Requests: reqs, MaxSteps: 3})
	require.ErrorContains(t, err, "3 steps without completing")

	_, err = Drive(context.Background(), Run{Engine: eng, Clock: vc})
	require.ErrorContains(t, err, "no requests")
	_, err = Drive(context.Background(), Run{Requests: reqs})
	require.ErrorContains(t, err, "needs an engine and a virtual clock")
	bad := []workload.Request{{Arrival: -1, Prompt: []int32{5}, MaxTokens: 1}}
	_, err = Drive(context.Background(), Run{Engine: eng, Clock: vc, Requests: bad})
	require.ErrorContains(t, err, "request 0 arrives at -1ns")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Drive(ctx, Run{Engine: eng, Clock: vc, Requests: reqs})
	require.ErrorIs(t, err, context.Canceled)
}

// TestSeed004ArmsOnOneRank runs seed 004's three arms as a campaign on one
// engine with a two-seat batch and saturating context-heavy traffic whose
// requests end at EOS after their first token (a finish the engine learns
// only when it processes the step, so requests retire under overlap):
// BASE (retiring requests charged, overlap on), FIX (not charged) and
// OVLOFF (overlap off). It checks the harness, not the mechanism: every
// row drains and passes its audit, arms of a block are paired on one
// workload, and the comparisons pair whole blocks.
func TestSeed004ArmsOnOneRank(t *testing.T) {
	run := Runner{
		Workload: func(seed uint64) ([]workload.Request, error) {
			return workload.ContextHeavy(workload.ContextHeavyConfig{Seed: seed, Requests: 24, InputTokens: 256, OutputTokens: 4})
		},
		Setup: func(arm, _ string, clk *clock.Virtual) (Engine, int, error) {
			return rig.NewSim(rig.Config{MaxBatchSize: 2, KVBlocks: 256, BlockSize: 16, MaxBatchTokens: 512,
				Overlap: arm != "OVLOFF", Ablation: executor.Ablation{ChargeRetiring: arm == "BASE"}, Seed: 3},
				rig.Sim{Cost: sim.Fixed(10 * time.Millisecond), MaxContext: 1024, Vocab: workload.DefaultTokenMax, EOSAfter: 1}, clk)
		},
		CheckEveryStep: true, StopAtEOS: true,
	}
	plan := campaign.Plan{
		Reference: "FIX",
		Arms: []campaign.Arm{{Name: "BASE", Candidates: []string{"base"}}, {Name: "FIX", Candidates: []string{"fix"}},
			{Name: "OVLOFF", Candidates: []string{"ovloff"}}},
		Shares: []float64{0}, Blocks: 2, ValidationSeed: 40,
	}
	res, err := campaign.Run(context.Background(), plan, run, nil)
	require.NoError(t, err)
	require.Len(t, res.Rows, 6)
	digest := map[int]string{}
	for _, row := range res.Rows {
		require.Equal(t, report.Pass, row.Audit, row.RowID)
		require.Equal(t, 24, row.Completed)
		require.Equal(t, 24, row.M.GeneratedTokens, "one EOS token each")
		require.Positive(t, row.M.Steps)
		// Pairing: every arm of a block ran the same workload, blocks differ.
		if d, ok := digest[row.Block]; ok {
			require.Equal(t, d, row.Workload, row.RowID)
		}
		digest[row.Block] = row.Workload
	}
	require.NotEqual(t, digest[0], digest[1])
	for _, arm := range []string{"BASE", "OVLOFF"} {
		comps, err := report.Compare(res.Rows, campaign.Validation, arm, "FIX", report.Throughput, stats.Bootstrap{Seed: 1})
		require.NoError(t, err)
		require.Len(t, comps, 1)
		require.Equal(t, []int{0, 1}, comps[0].BlockIDs)
	}
}
