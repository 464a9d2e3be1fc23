package mpi

// The attention-DP deployment on real MPI processes and the real model:
// the same request sequence placed and answered as in one process, and
// seed 004's ladder (BASE, FIX, OVLOFF) on real ranks.

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/adp"
	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/sampling"
)

// deployRequests is the request sequence of TestMPIDeploymentMatchesOneProcess:
// different prompts and lengths, more than the ranks hold at once, so some
// wait in the queue and placement depends on the gathered load.
func deployRequests() []*executor.Request {
	prompts := []string{"Once upon a time", "The cat", "Lily went", "Tom had a dog", "One day, a bird", "The sun was",
		"A little boy", "She saw a", "They played"}
	var out []*executor.Request
	for i, p := range prompts {
		out = append(out, &executor.Request{Prompt: p, MaxTokens: 4 + (i*7)%13, IgnoreEOS: true, Params: sampling.DefaultParams()})
	}
	return out
}

// rankEngine is one rank's engine on stories260K: max batch 2, its own KV
// cache, one kernel worker; its MLP sharded across mlp when set.
func rankEngine(tb testing.TB, m *model.Llama, overlap, charge bool, mlp model.MLPComm) (*executor.Engine, *model.CPURunner) {
	tb.Helper()
	cfg := executor.Config{MaxBatchSize: 2, Overlap: overlap, Ablation: executor.Ablation{ChargeRetiring: charge}, Model: "stories260K"}
	seats, err := cfg.DeriveSeats()
	require.NoError(tb, err)
	r, err := model.NewCPURunner(m, model.CPURunnerConfig{Seats: seats, KVBlocks: 256, BlockSize: 16, MaxBatchTokens: 1024,
		Workers: 1, MLP: mlp})
	require.NoError(tb, err)
	e, err := executor.New(cfg, r, m.Tokenizer())
	require.NoError(tb, err)
	return e, r
}

func loadStories(tb testing.TB) *model.Llama {
	tb.Helper()
	path, err := gguf.TestModelPath()
	require.NoError(tb, err)
	m, err := model.LoadLlama(path, model.LlamaOptions{MaxContext: 512})
	require.NoError(tb, err)
	return m
}

// placedLine is how a request's placement and output are reported.
func placedLine(i int, h *adp.Handle, d executor.Delta) string {
	return fmt.Sprintf("request %d rank %d finish %s tokens %v", i, h.Rank(), d.FinishReason, d.TokenIDs)
}

var placedRe = regexp.MustCompile(`(?m)^request \d+ rank .*$`)

// runDeployment submits reqs at process 0 before the first iteration, steps
// d until idle and reports every request's placement and output.
func runDeployment(tb testing.TB, d *adp.Deployment, reqs []*executor.Request) []string {
	tb.Helper()
	var hs []*adp.Handle
	if proc, _ := d.Process(); proc == 0 {
		for _, r := range reqs {
			h, err := d.Submit(context.Background(), r)
			require.NoError(tb, err)
			hs = append(hs, h)
		}
	}
	for {
		idle, err := d.Step()
		require.NoError(tb, err)
		if idle {
			break
		}
	}
	var lines []string
	for i, h := range hs {
		st, err := h.Wait(context.Background())
		require.NoError(tb, err)
		dl, err := st.ReadAll(context.Background())
		require.NoError(tb, err)
		lines = append(lines, placedLine(i, h, dl))
	}
	require.NoError(tb, d.Check())
	return lines
}

// TestMPIDeploymentMatchesOneProcess: np MPI processes, one rank each with
// the MLP sharded across them, place the same request sequence as one
// process with np ranks (whole MLP each) and give every request the same
// greedy tokens; every process checks its placements against the others'
// (VerifyPlacement).
func TestMPIDeploymentMatchesOneProcess(t *testing.T) {
	mpirunPath(t)
	m := loadStories(t)
	defer m.Close()
	for _, np := range []int{2, 4} {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			var ranks []adp.Rank
			for range np {
				e, r := rankEngine(t, m, true, false, nil)
				defer r.Close()
				defer e.Close()
				ranks = append(ranks, adp.NewEngineRank(e, nil, nil))
			}
			d, err := adp.New(adp.Config{}, ranks)
			require.NoError(t, err)
			want := runDeployment(t, d, deployRequests())
			require.NoError(t, d.Close())

			out, err := runMPI(t, np, "deploy")
			require.NoError(t, err, out)
			got := placedRe.FindAllString(out, -1)
			require.Equal(t, want, got, "placements and greedy tokens:\n%s", out)
			used := map[string]bool{}
			for _, l := range got {
				used[strings.Fields(l)[3]] = true
			}
			require.Greater(t, len(used), 1, "the sequence spreads over the ranks")
		})
	}
}

// deployWorker is one process of TestMPIDeploymentMatchesOneProcess.
func deployWorker(t *testing.T, w *World) {
	m := loadStories(t)
	defer m.Close()
	mlp, err := w.Dup()
	require.NoError(t, err)
	defer mlp.Close()
	e, r := rankEngine(t, m, true, false, mlp)
	defer r.Close()
	defer e.Close()
	d, err := adp.New(adp.Config{Comm: w, VerifyPlacement: true, Dummies: []func() error{r.DummyStep}},
		[]adp.Rank{adp.NewEngineRank(e, r.DummyStep, nil)})
	require.NoError(t, err)
	for _, l := range runDeployment(t, d, deployRequests()) {
		fmt.Println(l)
	}
	require.NoError(t, d.Close())
	require.NoError(t, e.Check())
}

// Ladder traffic: context-heavy requests (long prompts, one output token)
// offered at once, as seed 004's context role; each rank holds two.
const (
	ladderPerRank = 24
	ladderPrompt  = 300 // tokens, ± 10%
)

// ladderRequests is the context-heavy traffic of np ranks.
func ladderRequests(np int, vocab int) []*executor.Request {
	var out []*executor.Request
	for i := range np * ladderPerRank {
		n := ladderPrompt - ladderPrompt/10 + (i*37)%(ladderPrompt/5)
		toks := make([]int32, n)
		toks[0] = 1 // BOS
		for k := 1; k < n; k++ {
			toks[k] = int32(3 + (i*131+k*17)%(vocab-3))
		}
		p := sampling.DefaultParams()
		out = append(out, &executor.Request{PromptTokens: toks, MaxTokens: 1, IgnoreEOS: true, Params: p})
	}
	return out
}

// ladderArms are seed 004's arms: overlap and whether retiring requests are
// charged (in the gather and in each engine).
var ladderArms = []struct {
	name            string
	overlap, charge bool
}{{"BASE", true, true}, {"FIX", true, false}, {"OVLOFF", false, false}}

var ladderRe = regexp.MustCompile(`(?m)^arm (\w+) np (\d+) routed \[([\d ]+)\] placements (\S+) wall (\S+) requests (\d+)$`)

// TestMPILadder runs the ladder on real MPI ranks: BASE, FIX and OVLOFF on
// the same context-heavy traffic. FIX routes exactly as OVLOFF, request by
// request (retiring requests are left out of the load), and every arm
// completes every request. Routing shares and wall-clock throughput are
// logged, not asserted (they are timing on a shared machine).
func TestMPILadder(t *testing.T) {
	mpirunPath(t)
	out, err := runMPI(t, 2, "ladder")
	require.NoError(t, err, out)
	arms := map[string][]string{}
	for _, m := range ladderRe.FindAllStringSubmatch(out, -1) {
		arms[m[1]] = m
		wall, err := time.ParseDuration(m[5])
		require.NoError(t, err)
		n, _ := strconv.Atoi(m[6])
		routed := strings.Fields(m[3])
		r0, _ := strconv.Atoi(routed[0])
		t.Logf("arm %-6s routed %v (rank 0 share %.3f), %d requests in %v: %.1f req/s",
			m[1], routed, float64(r0)/float64(n), n, wall, float64(n)/wall.Seconds())
	}
	require.Len(t, arms, 3, out)
	require.Equal(t, arms["OVLOFF"][4], arms["FIX"][4], "FIX places every request where OVLOFF does")
}

// ladderWorker is one process of TestMPILadder: each arm on fresh engines.
func ladderWorker(t *testing.T, w *World) {
	m := loadStories(t)
	defer m.Close()
	mlp, err := w.Dup()
	require.NoError(t, err)
	defer mlp.Close()
	for _, arm := range ladderArms {
		e, r := rankEngine(t, m, arm.overlap, arm.charge, mlp)
		er := adp.NewEngineRank(e, r.DummyStep, nil)
		// Seed 004's k = 1: one late rank (its finishing requests are
		// retiring at the next gather), rank 0 healthy. Which ranks are
		// late on a real deployment is timing; this pins it.
		er.SetEarly(w.Rank() != w.Size()-1)
		d, err := adp.New(adp.Config{Comm: w, Ablation: adp.Ablation{Engine: executor.Ablation{ChargeRetiring: arm.charge}}, VerifyPlacement: true},
			[]adp.Rank{er})
		require.NoError(t, err)
		reqs := ladderRequests(w.Size(), m.Config().Vocab)
		require.NoError(t, w.Barrier())
		start := time.Now()
		lines := runDeployment(t, d, reqs)
		wall := time.Since(start)
		if w.Rank() == 0 {
			var placed []string
			for _, l := range lines {
				f := strings.Fields(l)
				require.Equal(t, "length", f[5], l)
				placed = append(placed, f[3])
			}
			snap := d.Snapshot()
			var routed []string
			for _, rm := range snap.Ranks {
				routed = append(routed, strconv.FormatUint(rm.Routed, 10))
			}
			fmt.Printf("arm %s np %d routed [%s] placements %s wall %v requests %d\n", arm.name, w.Size(),
				strings.Join(routed, " "), strings.Join(placed, ","), wall, len(lines))
		}
		require.NoError(t, d.Close())
		require.NoError(t, e.Check())
		require.NoError(t, e.Close())
		require.NoError(t, r.Close())
	}
}

// instantRank is a rank whose requests finish as soon as they are placed,
// so a benchmark times the deployment's own iteration: the gather, the
// bulletin's broadcast, routing, handing off and the output's way back.
type instantRank struct{}

func (instantRank) Step() (bool, error) { return false, nil }
func (instantRank) State(s *adp.RankState) {
	*s = adp.RankState{Capacity: 2, Hits: s.Hits[:0], Resident: s.Resident[:0]}
}
func (instantRank) Match(*adp.RankState, []*executor.Request, adp.Needs) {}
func (instantRank) Submit(_ context.Context, q *executor.Request) (adp.Stream, error) {
	st := executor.NewRelayStream(q.Params)
	if err := st.Relay(executor.Delta{Text: "x", TokenIDs: []int32{7}, FinishReason: executor.FinishLength,
		Usage: executor.Usage{Prompt: len(q.PromptTokens), Completion: 1}}); err != nil {
		return nil, err
	}
	return st, nil
}

// stepRequests are the two requests process 0 submits before each
// benchmarked iteration (one per rank of two).
func stepRequests() []*executor.Request {
	p := sampling.DefaultParams()
	return []*executor.Request{{PromptTokens: make([]int32, 64), MaxTokens: 1, Params: p},
		{PromptTokens: make([]int32, 96), MaxTokens: 1, Params: p}}
}

// deploymentIteration submits (on process 0) two requests and runs one
// iteration of d.
func deploymentIteration(d *adp.Deployment, reqs []*executor.Request) error {
	if proc, _ := d.Process(); proc == 0 {
		for _, r := range reqs {
			if _, err := d.Submit(context.Background(), r); err != nil {
				return err
			}
		}
	}
	idle, err := d.Step()
	if err == nil && idle {
		err = fmt.Errorf("an iteration with requests queued was idle")
	}
	return err
}

// BenchmarkDeploymentStep: one iteration of the deployment loop across 2
// and 4 MPI processes (one rank each; 4 oversubscribes a 2-core machine)
// with two requests placed per iteration: the gather (one allgather), the
// bulletin's broadcast (two), routing, the hand-off, and the previous
// iteration's output gathered back to process 0. The ranks do no work, so
// this is the deployment's own cost; local is one process with two ranks
// (adp.Local: the same loop, every collective a copy).
func BenchmarkDeploymentStep(b *testing.B) {
	mpirunPath(b)
	b.Run("local", func(b *testing.B) {
		d, err := adp.New(adp.Config{}, []adp.Rank{instantRank{}, instantRank{}})
		require.NoError(b, err)
		reqs := stepRequests()
		b.ReportAllocs()
		for b.Loop() {
			if err := deploymentIteration(d, reqs); err != nil {
				b.Fatal(err)
			}
		}
		require.NoError(b, d.Close())
	})
	for _, np := range []int{2, 4} {
		var res map[string]float64
		b.Run(fmt.Sprintf("np%d", np), func(b *testing.B) {
			if res == nil {
				res = runBench(b, np, "bench-step", benchAllgatherIters)
			}
			ns, ok := res["step"]
			require.True(b, ok, "rank 0 reported no step figure: %v", res)
			b.ReportMetric(ns, "ns/op")
			b.ReportMetric(ns/1e3, "us/iteration")
		})
	}
}

// benchStepWorker times one deployment iteration on this process.
func benchStepWorker(t *testing.T, w *World) {
	d, err := adp.New(adp.Config{Comm: w}, []adp.Rank{instantRank{}})
	require.NoError(t, err)
	reqs := stepRequests()
	ns := timeIters(t, w, iters(t), func() error { return deploymentIteration(d, reqs) })
	if w.Rank() == 0 {
		fmt.Printf("bench step %.1f\n", ns)
	}
	require.NoError(t, d.Close())
}
