package mpi

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/adp"
	"github.com/turnstile-llm/turnstile/bench/rig"
	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/sim"
)

// localLivenessEnv selects the broken liveness rule in the liveness worker.
const localLivenessEnv = "TURNSTILE_LOCAL_LIVENESS"

// livenessWatchdog bounds one iteration of the liveness worker under the
// broken rule, where it is expected to fire; under the real rule the bound
// is generous (it only turns a hang into a failure, never a timing check).
const (
	livenessWatchdog = 3 * time.Second
	realRuleWatchdog = 30 * time.Second
)

// TestMPILiveness: two MPI processes, one rank each, step in lockstep
// through real collectives every iteration (the gather's allgather, the
// bulletin's broadcast, the output gather). Process 0 takes both requests:
// rank 0 decodes the long one while rank 1's short one retires. Counting
// retiring requests for liveness, both run to the end; with the broken
// rule process 1 waits in its own queue while process 0 waits for it in
// the allgather: a real hang, which the watchdog names and ends by
// aborting the job.
func TestMPILiveness(t *testing.T) {
	mpirunPath(t)
	out, err := runMPI(t, 2, "liveness")
	require.NoError(t, err, "real rule:\n%s", out)
	require.Contains(t, out, "request 0 on rank 0 finished 24 tokens", out)
	require.Contains(t, out, "request 1 on rank 1 finished 2 tokens", out)
	require.NotContains(t, out, "watchdog", out)

	start := time.Now()
	out, err = runMPI(t, 2, "liveness", localLivenessEnv+"=1")
	require.Error(t, err, "broken rule: the job must end non-zero:\n%s", out)
	require.Less(t, time.Since(start), mpiDeadline, "the watchdog, not the deadline, ends it:\n%s", out)
	require.Contains(t, out, "adp: watchdog: process", out)
	require.True(t, strings.Contains(out, "its own queue wait") || strings.Contains(out, "the gather's allgather"),
		"the watchdog names what the process is stuck in:\n%s", out)
}

// livenessWorker is one process's side of TestMPILiveness.
func livenessWorker(t *testing.T, w *World) {
	vc := clock.NewVirtual(time.Unix(0, 0))
	eng, _, err := rig.NewSim(rig.Config{MaxBatchSize: 2, KVBlocks: 64, BlockSize: 4, MaxBatchTokens: 256, Overlap: true, Seed: 7},
		rig.Sim{Cost: sim.Fixed(time.Millisecond), MaxContext: 128, Vocab: 64}, vc)
	require.NoError(t, err)
	broken := os.Getenv(localLivenessEnv) == "1"
	watchdog := realRuleWatchdog
	if broken {
		watchdog = livenessWatchdog
	}
	d, err := adp.New(adp.Config{Comm: w, Watchdog: watchdog, Ablation: adp.Ablation{LocalLiveness: broken}, VerifyPlacement: true,
		OnStuck: func(msg string) {
			fmt.Println(msg)
			w.Abort(2)
		}}, []adp.Rank{adp.NewEngineRank(eng, nil, nil)})
	require.NoError(t, err)
	var hs []*adp.Handle
	if w.Rank() == 0 {
		for _, n := range []int{24, 2} { // the second lands on rank 1, finishes first and retires
			h, err := d.Submit(context.Background(), &executor.Request{PromptTokens: []int32{rig.BOS, 5, 6, 7}, MaxTokens: n,
				IgnoreEOS: true, Params: sampling.DefaultParams()})
			require.NoError(t, err)
			hs = append(hs, h)
		}
	}
	for {
		idle, err := d.Step()
		require.NoError(t, err)
		if idle {
			break
		}
	}
	for i, h := range hs {
		st, err := h.Wait(context.Background())
		require.NoError(t, err)
		dl, err := st.ReadAll(context.Background())
		require.NoError(t, err)
		fmt.Printf("request %d on rank %d finished %d tokens\n", i, h.Rank(), len(dl.TokenIDs))
	}
	require.NoError(t, d.Check())
	require.NoError(t, d.Close())
	require.NoError(t, eng.Check())
	require.NoError(t, eng.Close())
}
