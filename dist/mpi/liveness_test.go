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
// through a real allgather every iteration. Rank 0 decodes a long request
// while rank 1's short one retires. Counting retiring requests for
// liveness, both run to the end; with the broken rule rank 1 waits in its
// own queue while rank 0 waits for it in the allgather: a real hang, which
// the watchdog names and ends by aborting the job.
func TestMPILiveness(t *testing.T) {
	mpirunPath(t)
	out, err := runMPI(t, 2, "liveness")
	require.NoError(t, err, "real rule:\n%s", out)
	require.Contains(t, out, "rank 0 finished 24 tokens", out)
	require.Contains(t, out, "rank 1 finished 2 tokens", out)
	require.NotContains(t, out, "watchdog", out)

	start := time.Now()
	out, err = runMPI(t, 2, "liveness", localLivenessEnv+"=1")
	require.Error(t, err, "broken rule: the job must end non-zero:\n%s", out)
	require.Less(t, time.Since(start), mpiDeadline, "the watchdog, not the deadline, ends it:\n%s", out)
	require.Contains(t, out, "adp: watchdog: rank", out)
	require.True(t, strings.Contains(out, "its own queue wait") || strings.Contains(out, "the gather's allgather"),
		"the watchdog names what the rank is stuck in:\n%s", out)
}

// livenessWorker is one process's side of TestMPILiveness.
func livenessWorker(t *testing.T, w *World) {
	vc := clock.NewVirtual(time.Unix(0, 0))
	eng, _, err := rig.NewSim(rig.Config{MaxBatchSize: 2, KVBlocks: 64, BlockSize: 4, MaxBatchTokens: 256, Overlap: true, Seed: 7},
		rig.Sim{Cost: sim.Fixed(time.Millisecond), MaxContext: 128, Vocab: 64}, vc)
	require.NoError(t, err)
	n := 24
	if w.Rank() == 1 {
		n = 2 // finishes first: retiring while rank 0 still decodes
	}
	st, err := eng.Submit(context.Background(), &executor.Request{PromptTokens: []int32{rig.BOS, 5, 6, 7}, MaxTokens: n,
		IgnoreEOS: true, Params: sampling.DefaultParams()})
	require.NoError(t, err)
	broken := os.Getenv(localLivenessEnv) == "1"
	watchdog := realRuleWatchdog
	if broken {
		watchdog = livenessWatchdog
	}
	loop, err := adp.NewProcessLoop(adp.ProcessConfig{Collective: w, Watchdog: watchdog, LocalLiveness: broken,
		OnStuck: func(msg string) {
			fmt.Println(msg)
			w.Abort(2)
		}}, adp.NewEngineRank(eng, nil, nil))
	require.NoError(t, err)
	require.NoError(t, loop.RunUntilIdle(context.Background()))
	d, err := st.Collect(context.Background())
	require.NoError(t, err)
	fmt.Printf("rank %d finished %d tokens\n", w.Rank(), len(d.TokenIDs))
	require.NoError(t, eng.Check())
	require.NoError(t, eng.Close())
}
