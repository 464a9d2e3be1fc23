package adp

import (
	"context"
	"fmt"
	"testing"

	"github.com/turnstile-llm/turnstile/internal/testwait"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/sampling"
)

// earlyRun is what runEarlyLadder measured.
type earlyRun struct {
	iterations uint64
	routed     []uint64
	retiring   []uint64 // per rank: gathers at which it held a retiring request
	share      [2]int   // rank 0's last logged share while the queue saturated
}

// runEarlyLadder runs the context-only ladder (max batch 2, one output
// token, a saturated queue) on real engines whose late ranks are late(i)
// and the rest early (EngineRank.SetEarly), checking the deployment's and
// every engine's accounting after every iteration.
func runEarlyLadder(t *testing.T, dp int, m mode, late func(int) bool) earlyRun {
	t.Helper()
	ranks, ers, _ := engineRanks(t, dp, executor.Config{MaxBatchSize: 2, Overlap: m.overlap, Ablation: executor.Ablation{ChargeRetiring: m.charge}}, 0)
	for i, er := range ers {
		er.SetEarly(!late(i))
		require.Equal(t, !late(i), er.Early())
	}
	d, err := New(Config{Ablation: Ablation{Engine: executor.Ablation{ChargeRetiring: m.charge}}}, ranks)
	require.NoError(t, err)
	total := 100 * dp
	hs := make([]*Handle, total)
	for i := range hs {
		hs[i], err = d.Submit(context.Background(), &executor.Request{
			PromptTokens: []int32{256, int32(32 + i%90), 40, 41, 42, 43, 44}, MaxTokens: 1, Params: sampling.DefaultParams()})
		require.NoError(t, err)
	}
	var run earlyRun
	for it := 0; ; it++ {
		require.Less(t, it, 10*total, "the deployment must drain")
		q := d.Snapshot().Queued
		idle, err := d.Step()
		require.NoError(t, err)
		require.NoError(t, d.Check())
		for _, er := range ers {
			require.NoError(t, er.Engine().Check())
		}
		if q >= 2*dp {
			run.share = routedShare(d)
		}
		if idle {
			break
		}
	}
	for _, h := range hs {
		s, err := h.Wait(testwait.Ctx(t))
		require.NoError(t, err, "waiting for a request's handle")
		out, err := s.ReadAll(testwait.Ctx(t))
		require.NoError(t, err, "reading a request's stream")
		require.Equal(t, executor.FinishLength, out.FinishReason)
	}
	snap := d.Snapshot()
	run.iterations = snap.Iterations
	for _, r := range snap.Ranks {
		run.routed = append(run.routed, r.Routed)
		run.retiring = append(run.retiring, r.GathersRetiring)
	}
	require.NoError(t, d.Close())
	for i, er := range ers {
		em := er.Engine().Snapshot()
		require.Zero(t, em.Running+em.Waiting+em.Retiring+em.SeatsLive+em.SeatsRetiring+em.KVBlocksUsed, "rank %d idle at the end", i)
		require.NoError(t, er.Engine().Close())
	}
	return run
}

// TestEngineEarlyLadder: on real engines with k late ranks (the first k or
// the last k) and the rest early, BASE's rank-0 share lands on the rung
// seed 004 predicts for k and whether rank 0 is late, and BASE needs
// 2dp/(2dp−k) of FIX's iterations; FIX and OVLOFF route identically (per
// rank, to the request) at share 1/dp; early ranks never show a retiring
// request at a gather, late ones do under overlap.
func TestEngineEarlyLadder(t *testing.T) {
	for _, dp := range []int{2, 4} {
		for _, k := range []int{0, 1, dp - 1, dp} {
			for _, first := range []bool{true, false} {
				if (k == 0 || k == dp) && first {
					continue // which ranks are late does not matter
				}
				if dp == 2 && k == dp-1 {
					continue // the same as k = 1
				}
				late := lateRanks(dp, k, first)
				name := fmt.Sprintf("dp=%d/k=%d/first=%v", dp, k, first)
				runs := map[string]earlyRun{}
				for _, m := range []mode{modeBASE, modeFIX, modeOVLOFF} {
					t.Run(name+"/"+m.name, func(t *testing.T) {
						run := runEarlyLadder(t, dp, m, late)
						runs[m.name] = run
						num, den := 1, dp
						if m.charge && k > 0 {
							num, den = 2, 2*dp-k
							if late(0) {
								num = 1
							}
						}
						a, b := run.share[0], run.share[1]
						require.NotZero(t, b, "the queue saturated the ranks")
						require.LessOrEqual(t, abs(a*den-b*num), den+num*k, "rank-0 share %d/%d, want the rung %d/%d", a, b, num, den)
						for i, g := range run.retiring {
							if m.overlap && late(i) {
								require.Positive(t, g, "rank %d is late", i)
							} else {
								require.Zero(t, g, "rank %d: nothing retiring at any gather", i)
							}
						}
					})
				}
				require.Equal(t, runs["OVLOFF"].routed, runs["FIX"].routed, "%s: FIX's per-rank counts equal OVLOFF's", name)
				want := float64(2*dp) / float64(2*dp-k)
				got := float64(runs["BASE"].iterations) / float64(runs["FIX"].iterations)
				require.InEpsilon(t, want, got, 0.05, "%s: BASE/FIX iterations %d/%d", name, runs["BASE"].iterations, runs["FIX"].iterations)
			}
		}
	}
}
