package adp

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/sim"
	"github.com/turnstile-llm/turnstile/step"
)

// frontendEngines builds dp engines on simulated runners for a Frontend.
func frontendEngines(t *testing.T, dp int) []*executor.Engine {
	t.Helper()
	return frontendEnginesOverlap(t, dp, true)
}

// frontendEnginesOverlap is frontendEngines with the engines' overlap set.
func frontendEnginesOverlap(t *testing.T, dp int, overlap bool) []*executor.Engine {
	t.Helper()
	seats := 2 // MaxBatchSize; twice that with overlap (one step in flight)
	if overlap {
		seats = 4
	}
	var out []*executor.Engine
	for range dp {
		vc := clock.NewVirtual(time.Unix(0, 0))
		r, err := sim.New(sim.Config{
			Capacity: step.Capacity{Seats: seats, KVBlocks: 64, BlockSize: 4, MaxContext: 128, MaxBatchTokens: 256, Vocab: 258},
			Clock:    vc, Cost: sim.Fixed(stepTime), Seed: 7, EOS: 257, TokenMin: 32, TokenMax: 127,
		})
		require.NoError(t, err)
		e, err := executor.New(executor.Config{MaxBatchSize: 2, Overlap: overlap, Clock: vc, Model: "m"}, r, byteTok{})
		require.NoError(t, err)
		out = append(out, e)
	}
	return out
}

func TestNewFrontendRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		engines []*executor.Engine
		wantErr string
	}{
		{"none", nil, "adp: 0 engines: want 1 to 64"},
		{"too many", make([]*executor.Engine, MaxRanks+1), "adp: 65 engines: want 1 to 64"},
		{"nil engine", []*executor.Engine{nil}, "adp: engine 0 is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewFrontend(Config{}, tc.engines)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// TestFrontend: requests submitted through the Frontend run on the ranks,
// the merged snapshot counts every rank's work, and the accounting checks
// out after the loop stops.
func TestFrontend(t *testing.T) {
	engines := frontendEngines(t, 2)
	f, err := NewFrontend(Config{}, engines)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()

	const n, tokens = 6, 5
	for i := range n {
		p := sampling.DefaultParams()
		p.Seed, p.HasSeed = uint64(i), true
		st, err := f.Submit(ctx, &executor.Request{Prompt: "hello", MaxTokens: tokens, IgnoreEOS: true, Params: p})
		require.NoError(t, err)
		d, err := st.ReadAll(ctx)
		require.NoError(t, err)
		require.Len(t, d.TokenIDs, tokens, "request %d", i)
	}
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("the Frontend's Run did not return within a minute of its context ending")
	}
	require.NoError(t, f.Check())

	m := f.Snapshot()
	require.Equal(t, uint64(n*tokens), m.GeneratedTokens, "the merged snapshot counts both ranks")
	ranks := f.RankSnapshots()
	require.Len(t, ranks, 2)
	require.Equal(t, m.GeneratedTokens, ranks[0].GeneratedTokens+ranks[1].GeneratedTokens)

	states, _, _ := f.ProgramStates()
	require.Nil(t, states, "no program policy")
	_, err = f.ReleaseProgram("p")
	require.ErrorIs(t, err, executor.ErrNoPrograms)
}
