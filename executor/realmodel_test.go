package executor

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/model/gguf"
)

// storyPrompts are eight different prompts for stories260K. Prompts 5 and
// 6 share their first 24 tokens (three full blocks of 8), so whether the
// later one is served from the prefix cache depends on the arrangement;
// the output must not.
func storyPrompts() []string {
	return []string{
		"Once upon a time, there was a dog",
		"The little bird",
		"Lily and Ben were friends. One day they",
		"Tom had a big red ball",
		"Mom said",
		"There was a tree near the house. The tree was very tall and old, and the birds liked to sit on it",
		"There was a tree near the house. The tree was very tall and old, and the cat",
		"The sun was hot. The cat wanted to find a cool place to sleep, so she",
	}
}

// loadStories loads the test model; the caller closes it.
func loadStories(tb testing.TB) *model.Llama {
	tb.Helper()
	path, err := gguf.TestModelPath()
	require.NoError(tb, err)
	m, err := model.LoadLlama(path, model.LlamaOptions{})
	require.NoError(tb, err)
	return m
}

// seededIdx is the index of the seeded temperature sample in
// storyRequests.
const seededIdx = 8

// storyRequests are the eight greedy requests of the arrangement test plus
// a seeded temperature sample (seededIdx). Lengths differ so finishes
// spread over steps; request 3 ends on a stop string and request 4 on a
// stop token (finishes seen only when the step is processed: retiring with
// overlap); the others run to MaxTokens (stories260K's greedy stories do
// not reach EOS this soon), half of them with IgnoreEOS.
func storyRequests(tok Tokenizer) []Request {
	newline := tok.Encode("\n", false)
	prompts := storyPrompts()
	reqs := make([]Request, 0, len(prompts)+1)
	for i, p := range prompts {
		r := Request{Prompt: p, MaxTokens: 16 + 3*i, Params: greedy(), IgnoreEOS: i%2 == 0}
		switch i {
		case 3:
			r.Stop = []string{" his"}
		case 4:
			r.MaxTokens = 40
			r.StopTokenIDs = newline[len(newline)-1:]
		}
		reqs = append(reqs, r)
	}
	seeded := greedy()
	seeded.Temperature, seeded.Seed, seeded.HasSeed = 0.8, 99, true
	return append(reqs, Request{Prompt: "Once upon a time", MaxTokens: 30, Params: seeded})
}

// arrangement is one way of feeding the same requests to the engine.
type arrangement struct {
	name     string
	mbs      int  // MaxBatchSize
	budget   int  // MaxNumBatchedTokens
	kvBlocks int  // runner KV blocks of 8 positions
	every    int  // submit one request every `every` steps; 0: all before the first step
	reverse  bool // submit in reverse order
	preempt  bool // the arrangement must preempt (too few blocks)
	// prefixHit: a request must be served from the prefix cache.
	prefixHit bool
}

// runArrangement runs reqs through a fresh engine on the CPU runner, driven
// by Step, and returns each request's output in reqs order with the
// engine's final metrics.
func runArrangement(t *testing.T, m *model.Llama, a arrangement, ovl bool, reqs []Request) ([]Delta, Metrics) {
	t.Helper()
	seats := testSeats(t, a.mbs, ovl)
	r, err := model.NewCPURunner(m, model.CPURunnerConfig{Seats: seats, KVBlocks: a.kvBlocks, BlockSize: 8,
		MaxBatchTokens: 64, Workers: 1})
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Close()) }()
	eng, err := New(Config{MaxBatchSize: a.mbs, MaxNumBatchedTokens: a.budget, Overlap: ovl}, r, m.Tokenizer())
	require.NoError(t, err)
	defer func() { require.NoError(t, eng.Close()) }()

	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	if a.reverse {
		slices.Reverse(order)
	}
	streams := make([]*Stream, len(reqs))
	next := 0
	for step := 0; ; step++ {
		require.Less(t, step, 5000, "engine did not finish")
		for next < len(order) && step >= next*a.every {
			i := order[next]
			req := reqs[i] // the engine may keep the pointer: one copy per run
			st, err := eng.Submit(context.Background(), &req)
			require.NoError(t, err)
			streams[i] = st
			next++
		}
		progressed, err := eng.Step()
		require.NoError(t, err)
		require.NoError(t, eng.Check())
		if !progressed && next == len(order) {
			break
		}
	}
	require.NoError(t, r.Check()) // idle: nothing in flight on the runner
	out := make([]Delta, len(reqs))
	for i, st := range streams {
		out[i] = readAll(t, st)
	}
	return out, eng.Snapshot()
}

// TestRealModelArrangements: on stories260K, every request's tokens and
// text are identical however the requests arrive (together, staggered,
// reversed, one at a time), however they are batched (batch size, token
// budget and so chunked prefill, prefix-cache hits, recompute preemption)
// and with overlap on or off. The runner's batch invariance (package
// model) is what makes this hold exactly for greedy decoding; the seeded
// sample holds because its sampler state is per seat and seeded per
// request, and a request resumed after recompute preemption continues its
// random stream (sampling.Sampler.StartWithOutput skips the draws its
// generated tokens consumed).
func TestRealModelArrangements(t *testing.T) {
	m := loadStories(t)
	defer m.Close()
	reqs := storyRequests(m.Tokenizer())
	arrangements := []arrangement{
		{name: "alone", mbs: 1, budget: 64, kvBlocks: 64, prefixHit: true},
		{name: "together", mbs: 16, budget: 64, kvBlocks: 128},
		{name: "together/chunked", mbs: 3, budget: 10, kvBlocks: 128},
		{name: "every-step", mbs: 16, budget: 64, kvBlocks: 128, every: 1},
		{name: "every-5-steps/reversed", mbs: 4, budget: 24, kvBlocks: 128, every: 5, reverse: true},
		{name: "tight-kv", mbs: 8, budget: 64, kvBlocks: 16, preempt: true},
	}
	var ref []Delta
	refName := ""
	for _, a := range arrangements {
		for _, ovl := range []bool{false, true} {
			name := fmt.Sprintf("%s/overlap=%v", a.name, ovl)
			got, met := runArrangement(t, m, a, ovl, reqs)
			require.Equal(t, uint64(len(reqs)), met.Finished, name)
			if a.preempt {
				require.Positive(t, met.Preemptions, "%s: the arrangement must preempt", name)
			}
			if a.prefixHit {
				require.Positive(t, met.PrefixHitTokens, "%s: prompts 5 and 6 must share cached blocks", name)
			}
			t.Logf("%s: %d steps, %d preemptions, %d prefix-hit tokens", name, met.Steps, met.Preemptions, met.PrefixHitTokens)
			if ref == nil {
				ref, refName = got, name
				continue
			}
			for i := range reqs {
				want, have := ref[i], got[i]
				require.Equal(t, want.TokenIDs, have.TokenIDs, "request %d (%q): %s vs %s", i, reqs[i].Prompt, name, refName)
				require.Equal(t, want.Text, have.Text, "request %d: %s vs %s", i, name, refName)
				require.Equal(t, want.FinishReason, have.FinishReason, "request %d: %s vs %s", i, name, refName)
				// Only CachedPrompt may differ: prefix-cache hits depend on
				// which request came first.
				require.Equal(t, want.Usage.Prompt, have.Usage.Prompt, "request %d: %s", i, name)
				require.Equal(t, want.Usage.Completion, have.Usage.Completion, "request %d: %s", i, name)
			}
		}
	}
	// The requests exercise what they claim: a stop-string finish, a
	// stop-token finish, and runs to max tokens.
	require.Equal(t, FinishStop, ref[3].FinishReason)
	require.NotEmpty(t, ref[3].Text)
	require.NotContains(t, ref[3].Text, " his")
	require.Equal(t, FinishStop, ref[4].FinishReason)
	require.Less(t, ref[4].Usage.Completion, reqs[4].MaxTokens)
	require.NotContains(t, ref[4].Text, "\n")
	require.Equal(t, FinishLength, ref[0].FinishReason)
	require.Len(t, ref[0].TokenIDs, reqs[0].MaxTokens)
	for i := range reqs {
		t.Logf("%d %s %q", i, ref[i].FinishReason, ref[i].Text)
	}
}

// BenchmarkEndToEnd: generated tokens per second on stories260K with the
// CPU runner, through Engine.Run on its own goroutine with a real clock, at
// 1, 8 and 64 concurrent requests, overlap on vs off side by side. Each of
// conc clients submits requests back to back (closed loop); one op is one
// request of 64 generated tokens (IgnoreEOS, greedy), so every arm does
// the same work. Reported: tok/s (generated tokens over wall time) and
// idle% (the runner's idle share between steps, Metrics.IdleFraction over
// the timed window), and steps/op. The fixed op count keeps the arms'
// work equal and lets every client stay busy:
//
//	go test -run '^$' -bench EndToEnd -benchtime=512x -count=5 ./executor/
func BenchmarkEndToEnd(b *testing.B) {
	const maxTokens = 64
	m := loadStories(b)
	defer m.Close()
	for _, conc := range []int{1, 8, 64} {
		for _, ovl := range []bool{true, false} {
			onOff := map[bool]string{true: "on", false: "off"}[ovl]
			b.Run(fmt.Sprintf("conc=%d/overlap=%s", conc, onOff), func(b *testing.B) {
				benchEndToEnd(b, m, conc, ovl, maxTokens)
			})
		}
	}
}

func benchEndToEnd(b *testing.B, m *model.Llama, conc int, ovl bool, maxTokens int) {
	seats := testSeats(b, conc, ovl)
	// Longest prompt plus output is under 96 tokens: 6 blocks of 16.
	r, err := model.NewCPURunner(m, model.CPURunnerConfig{Seats: seats, KVBlocks: 8 * seats, BlockSize: 16,
		MaxBatchTokens: 512})
	require.NoError(b, err)
	defer func() { require.NoError(b, r.Close()) }()
	eng, err := New(Config{MaxBatchSize: conc, Overlap: ovl, Clock: clock.Real{}}, r, m.Tokenizer())
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- eng.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(b, <-runErr)
	}()

	prompts := storyPrompts()
	one := func(i int) error {
		st, err := eng.Submit(ctx, &Request{Prompt: prompts[i%len(prompts)], MaxTokens: maxTokens,
			IgnoreEOS: true, Params: greedy()})
		if err != nil {
			return fmt.Errorf("submit %d: %w", i, err)
		}
		d, err := st.ReadAll(ctx)
		if err != nil {
			return fmt.Errorf("read %d: %w", i, err)
		}
		if len(d.TokenIDs) != maxTokens {
			return fmt.Errorf("request %d: %d tokens, want %d", i, len(d.TokenIDs), maxTokens)
		}
		return nil
	}
	// clients runs n requests on conc closed-loop clients.
	clients := func(n int) error {
		var (
			nextReq atomic.Int64
			wg      sync.WaitGroup
			errs    = make(chan error, conc)
		)
		for range conc {
			wg.Go(func() {
				for {
					i := int(nextReq.Add(1)) - 1
					if i >= n {
						return
					}
					if err := one(i); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		return <-errs // nil when closed and empty
	}
	require.NoError(b, clients(conc)) // warm up: one round at full concurrency

	before := eng.Snapshot()
	start := time.Now()
	b.ResetTimer()
	require.NoError(b, clients(b.N))
	b.StopTimer()
	elapsed := time.Since(start)
	after := eng.Snapshot()
	gen := b.N * maxTokens // each checked by one
	busy, idle := after.RunnerBusy-before.RunnerBusy, after.RunnerIdle-before.RunnerIdle
	b.ReportMetric(float64(gen)/elapsed.Seconds(), "tok/s")
	if busy+idle > 0 {
		b.ReportMetric(100*float64(idle)/float64(busy+idle), "idle%")
	}
	b.ReportMetric(float64(after.Steps-before.Steps)/float64(b.N), "steps/op")
}
