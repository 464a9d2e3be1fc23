package agentic

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/bench/campaign"
	"github.com/turnstile-llm/turnstile/bench/progress"
	"github.com/turnstile-llm/turnstile/bench/report"
	"github.com/turnstile-llm/turnstile/bench/rig"
	"github.com/turnstile-llm/turnstile/bench/workload"
	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/internal/stats"
	"github.com/turnstile-llm/turnstile/policy"
	"github.com/turnstile-llm/turnstile/sim"
)

type harness struct {
	eng   *executor.Engine
	clock *clock.Virtual
}

func newRig(t *testing.T, overlap bool) harness {
	t.Helper()
	vc := clock.NewVirtual(time.Unix(0, 0))
	eng, _, err := rig.NewSim(rig.Config{MaxBatchSize: 4, KVBlocks: 256, BlockSize: 16, MaxBatchTokens: 256, Overlap: overlap, Seed: 3},
		rig.Sim{Cost: sim.Fixed(10 * time.Millisecond), MaxContext: 2048, Vocab: workload.DefaultTokenMax}, vc)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close()) })
	return harness{eng: eng, clock: vc}
}

func programs(t *testing.T, share float64) []workload.Program {
	t.Helper()
	progs, err := workload.Agentic(workload.AgenticConfig{
		Seed: 520, Programs: 8, Turns: 3, Share: share, ContextTokens: 256, OutputTokens: 16, ToolTokens: 32,
		ToolWait: time.Second, Jitter: 5 * time.Millisecond, ArrivalGap: 250 * time.Millisecond,
	})
	require.NoError(t, err)
	return progs
}

func TestBatchCompletesAndAudits(t *testing.T) {
	tests := []struct {
		name    string
		share   float64
		overlap bool
	}{
		{"zero sharing", 0, false},
		{"half sharing", 0.5, false},
		{"ninety, overlap", 0.9, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rg := newRig(t, tc.overlap)
			progs := programs(t, tc.share)
			var done []string
			res, err := Run(context.Background(), Batch{Engine: rg.eng, Clock: rg.clock, Programs: progs, SamplingSeed: 100,
				Deadline: 240 * time.Second, CheckEveryStep: true, ProgramDone: func(id string) error { done = append(done, id); return nil }})
			require.NoError(t, err)
			require.ElementsMatch(t, []string{"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"}, done)
			require.Equal(t, 8, res.Completed)
			require.Equal(t, 8*3*16, res.Received)
			require.Equal(t, res.Received, res.EngineGenerated)
			require.Len(t, res.Sharing, 3)
			shared := int(tc.share*256+0.5) * 8
			for turn, s := range res.Sharing {
				require.Equal(t, shared, s.SharedTokens, "turn %d", turn)
				require.Equal(t, 8*(256+turn*(16+32)), s.PromptTokens, "turn %d", turn)
			}
			if tc.share == 0 {
				require.Zero(t, res.FirstTurnCached)
			} else {
				// Programs after the first find the shared prefix's full
				// blocks cached; never more than the shared prefix.
				require.Positive(t, res.FirstTurnCached)
				require.LessOrEqual(t, res.FirstTurnCached, shared)
			}
			for i, p := range progs {
				require.Equal(t, p.Arrival, res.Arrival[i])
				// At least both tool waits lie between arrival and finish.
				require.GreaterOrEqual(t, res.Finish[i]-res.Arrival[i], p.Turns[0].Wait+p.Turns[1].Wait)
			}
			m, err := report.BatchMetrics(res.Arrival, res.Finish)
			require.NoError(t, err)
			require.Equal(t, res.Elapsed.Seconds(), m.BatchSeconds)
			require.LessOrEqual(t, m.P50ProgramSeconds, m.P95ProgramSeconds)
			require.Positive(t, res.Steps)
		})
	}
}

// TestBatchReproducible checks bit-for-bit reproduction, overlap on and
// off: the simulated runner spends each step's time when the engine processes it
// (sim.Config.DeferSpend), so no goroutine interleaving reaches the
// times. A run of 20 repetitions with overlap is the test of that.
func TestBatchReproducible(t *testing.T) {
	for _, overlap := range []bool{false, true} {
		t.Run(fmt.Sprintf("overlap=%v", overlap), func(t *testing.T) {
			reps := 2
			if overlap {
				reps = 20
			}
			var first Result
			for i := range reps {
				rg := newRig(t, overlap)
				res, err := Run(context.Background(), Batch{Engine: rg.eng, Clock: rg.clock, Programs: programs(t, 0.5), SamplingSeed: 100, CheckEveryStep: i == 0})
				require.NoError(t, err)
				if i == 0 {
					first = res
					continue
				}
				require.Equal(t, first, res, "repetition %d", i)
			}
			require.Positive(t, first.FirstTurnCached)
		})
	}
}

func TestBatchFailures(t *testing.T) {
	rg := newRig(t, false)
	res, err := Run(context.Background(), Batch{Engine: rg.eng, Clock: rg.clock, Programs: programs(t, 0.5), SamplingSeed: 100, Deadline: 2 * time.Second})
	var aerr *Error
	require.True(t, errors.As(err, &aerr), "%v", err)
	require.Contains(t, aerr.Reason, "deadline 2s passed with 0 of 8 programs completed")
	require.Less(t, res.Completed, 8)

	rg = newRig(t, false)
	_, err = Run(context.Background(), Batch{Engine: rg.eng, Clock: rg.clock, Programs: programs(t, 0.5), SamplingSeed: 1, MaxSteps: 5})
	require.ErrorContains(t, err, "5 steps without completing")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Run(ctx, Batch{Engine: rg.eng, Clock: rg.clock, Programs: programs(t, 0.5)})
	require.ErrorIs(t, err, context.Canceled)

	_, err = Run(context.Background(), Batch{Engine: rg.eng, Clock: rg.clock})
	require.ErrorContains(t, err, "no programs")
	_, err = Run(context.Background(), Batch{Programs: programs(t, 0.5)})
	require.ErrorContains(t, err, "needs an engine and a virtual clock")
}

// TestCampaignEndToEnd runs a small seed-000-shaped campaign on the
// simulated device: arms differ by max batch size, B has two candidates to
// calibrate; then every output is written and read back.
func TestCampaignEndToEnd(t *testing.T) {
	mbs := map[string]int{"a": 2, "b3": 3, "b4": 4}
	run := Runner{
		Workload: workload.AgenticConfig{Programs: 8, Turns: 2, ContextTokens: 64, OutputTokens: 8, ToolTokens: 16,
			ToolWait: 500 * time.Millisecond, Jitter: time.Millisecond},
		Setup: func(arm, cand string, clk *clock.Virtual) (Setup, error) {
			n, ok := mbs[cand]
			if !ok {
				return Setup{}, fmt.Errorf("unknown candidate %q", cand)
			}
			eng, capTokens, err := rig.NewSim(rig.Config{MaxBatchSize: n, KVBlocks: 256, BlockSize: 16, MaxBatchTokens: 128, Seed: 3},
				rig.Sim{Cost: sim.Fixed(20 * time.Millisecond), MaxContext: 1024, Vocab: workload.DefaultTokenMax}, clk)
			return Setup{Engine: eng, CapacityTokens: capTokens, Measure: func(m *report.Metrics) { m.PeakActivePrograms = n }}, err
		},
		SamplingSeed: 9, Deadline: 240 * time.Second, CheckEveryStep: true,
	}
	plan := campaign.Plan{
		Reference:         "A",
		Arms:              []campaign.Arm{{Name: "A", Candidates: []string{"a"}}, {Name: "B", Candidates: []string{"b3", "b4"}}},
		CalibrationShares: []float64{0, 0.9}, CalibrationSeed: 520,
		Shares: []float64{0, 0.9}, Blocks: 2, ValidationSeed: 700,
	}
	// The commands' wiring: each row is written to the CSV as it completes
	// and the progress bar redrawn.
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "rows.csv"))
	require.NoError(t, err)
	defer f.Close()
	csvw, err := report.NewCSVWriter(f)
	require.NoError(t, err)
	var bar bytes.Buffer
	fixed := time.Unix(0, 0)
	pb, err := progress.New(&bar, plan.Rows(), func() time.Time { return fixed })
	require.NoError(t, err)
	res, err := campaign.Run(context.Background(), plan, run, func(row report.Row, done, _ int) error {
		if err := csvw.Write(&row); err != nil {
			return err
		}
		return pb.Update(done, row.RowID)
	})
	require.NoError(t, err)
	require.NoError(t, pb.Done())
	require.Len(t, res.Rows, plan.Rows())
	require.Contains(t, bar.String(), "] 14/14 100% 0s elapsed, ETA 0s  val_s90_b1_A")
	written, err := os.ReadFile(filepath.Join(dir, "rows.csv"))
	require.NoError(t, err)
	back, err := report.ReadCSV(bytes.NewReader(written))
	require.NoError(t, err)
	require.Len(t, back, plan.Rows())
	require.True(t, res.Gates["B/b3"].Eligible, res.Gates["B/b3"].Reason)
	require.Equal(t, "b4", res.Frozen["B"], "the larger batch is faster at high sharing")
	for _, row := range res.Rows {
		require.Equal(t, report.Pass, row.Audit, row.RowID)
		require.Equal(t, 8, row.Completed)
		require.True(t, row.M.GenerationCounterMatches)
		require.Equal(t, mbs[row.Candidate], row.M.PeakActivePrograms, "the arm's own measurements reach the row")
		require.Equal(t, 256*16, row.CapacityTokens)
		require.Len(t, row.M.TurnShares, 2)
		require.InDelta(t, row.Share, row.M.TurnShares[0], 0.5/64, "turn 0 realises the requested share")
		require.LessOrEqual(t, row.M.TurnShares[1], row.M.TurnShares[0])
	}
	comps, err := report.Compare(res.Rows, campaign.Validation, "B", "A", report.Throughput, stats.Bootstrap{Seed: stats.DefaultSeed})
	require.NoError(t, err)
	require.Len(t, comps, 2)
	for _, c := range comps {
		require.Greater(t, c.Ratio.Point, 1.0, "share %v: a larger batch completes programs sooner", c.Share)
	}

	var csvBuf, jsonBuf, mdBuf, pngBuf bytes.Buffer
	require.NoError(t, report.WriteCSV(&csvBuf, res.Rows))
	sum := res.Summary("test", comps)
	require.Equal(t, "b4", sum.Frozen["B"])
	require.NoError(t, report.WriteJSON(&jsonBuf, sum))
	require.NoError(t, report.WriteMarkdown(&mdBuf, sum, res.Rows))
	require.NoError(t, report.ThroughputPlot(&pngBuf, comps, 320, 200))
	require.Equal(t, string(written), csvBuf.String(), "incremental and whole-file CSV agree")
	for name, b := range map[string][]byte{"all.csv": csvBuf.Bytes(), "summary.json": jsonBuf.Bytes(), "table.md": mdBuf.Bytes(), "throughput.png": pngBuf.Bytes()} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
		require.NotEmpty(t, b, name)
	}
}

// TestPolicyArms runs one batch under program-level admission, arms A and
// B, through EngineSetup: finished programs are released and the policy's
// pauses and resumes reach the row.
func TestPolicyArms(t *testing.T) {
	for _, arm := range []policy.Accounting{policy.TokenAccounting, policy.BlockAccounting} {
		t.Run(arm.String(), func(t *testing.T) {
			pc := policy.DefaultConfig(arm, 4)
			pc.Reserve = 64
			run := Runner{
				Workload: workload.AgenticConfig{Programs: 8, Turns: 2, ContextTokens: 256, OutputTokens: 8, ToolTokens: 16,
					ToolWait: 200 * time.Millisecond, ArrivalGap: 50 * time.Millisecond},
				Setup: func(_, _ string, clk *clock.Virtual) (Setup, error) {
					eng, capTokens, err := rig.NewSim(rig.Config{MaxBatchSize: 4, KVBlocks: 128, BlockSize: 16, MaxBatchTokens: 256, Seed: 3, Programs: &pc},
						rig.Sim{Cost: sim.Fixed(10 * time.Millisecond), MaxContext: 1024, Vocab: workload.DefaultTokenMax}, clk)
					if err != nil {
						return Setup{}, err
					}
					return EngineSetup(eng, capTokens), nil
				},
				Deadline: 240 * time.Second, CheckEveryStep: true,
			}
			row, err := run.Run(context.Background(), campaign.Spec{Stage: campaign.Validation, Arm: arm.String(), Seed: 700, Share: 0.9, RowID: "p"})
			require.NoError(t, err)
			require.Equal(t, report.Pass, row.Audit, row.AuditDetail)
			require.Equal(t, 8, row.Completed)
			require.GreaterOrEqual(t, row.M.SchedulerPauses, 0, "measured")
			require.GreaterOrEqual(t, row.M.SchedulerResumes, 0, "measured")
			require.Zero(t, row.M.ForcedResumes)
			require.Positive(t, row.M.PeakActivePrograms)
			require.LessOrEqual(t, row.M.PeakActivePrograms, 4, "never more ACTIVE programs than the batch")
			t.Logf("arm %s: batch %.3f s, pauses %d, resumes %d", arm, row.M.BatchSeconds, row.M.SchedulerPauses, row.M.SchedulerResumes)
		})
	}
}
