package executor

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/sim"
	"github.com/turnstile-llm/turnstile/step"
)

// groupRecorder is a sim runner that records the groups of every step.
type groupRecorder struct {
	*sim.Runner
	groups, members int
	maxShared       int32
}

func (g *groupRecorder) Execute(b *step.Batch, out *step.Output) error {
	for _, gr := range b.Groups {
		g.groups++
		g.members += int(gr.Count)
		g.maxShared = max(g.maxShared, gr.SharedBlocks)
	}
	return g.Runner.Execute(b, out)
}

// TestCascadeGroupsFromSharedPrefix: requests whose prompts share a cached
// prefix run in groups over the shared blocks (found from kvpool's block
// tables), the metrics count them, and the tokens equal those of the same
// requests with grouping off (the simulated runner's output reads its KV
// back through the tables, so a wrong table would show).
func TestCascadeGroupsFromSharedPrefix(t *testing.T) {
	run := func(minBlocks int, ovl bool) ([][]int32, *groupRecorder, Metrics) {
		s := newSetup(t, opts{overlap: ovl, bs: 4, mbs: 4})
		rec := &groupRecorder{Runner: s.runner}
		eng, err := New(Config{MaxBatchSize: 4, Overlap: ovl, Clock: s.clock, Model: "test", Seed: 1,
			CascadeMinBlocks: minBlocks}, rec, newByteTokenizer())
		require.NoError(t, err)
		s.eng = eng
		p := greedy()
		p.Seed, p.HasSeed = 9, true
		prefix := "a shared system prompt of some length, long enough for blocks: "
		first, err := eng.Submit(context.Background(), &Request{Prompt: prefix + "zero", MaxTokens: 4, Params: p})
		require.NoError(t, err)
		s.drive(t, 200) // caches the prefix's blocks
		var streams []*Stream
		for _, q := range []string{"one", "two", "three", "four"} {
			st, err := eng.Submit(context.Background(), &Request{Prompt: prefix + q, MaxTokens: 12, Params: p})
			require.NoError(t, err)
			streams = append(streams, st)
		}
		s.drive(t, 400)
		out := [][]int32{readAll(t, first).TokenIDs}
		for _, st := range streams {
			out = append(out, readAll(t, st).TokenIDs)
		}
		m := eng.Snapshot()
		require.NoError(t, eng.Close())
		return out, rec, m
	}
	for _, ovl := range []bool{false, true} {
		plain, recOff, mOff := run(0, ovl)
		require.Zero(t, recOff.groups, "grouping off")
		require.Zero(t, mOff.CascadeGroups)
		grouped, rec, m := run(2, ovl)
		require.Equal(t, plain, grouped, "overlap %v: grouping changes no token", ovl)
		require.Positive(t, rec.groups, "overlap %v", ovl)
		// 64-byte prefix + BOS: 16 full blocks of 4 are shared.
		require.EqualValues(t, 16, rec.maxShared)
		require.Equal(t, uint64(rec.groups), m.CascadeGroups)
		require.Positive(t, m.CascadeSharedReads)
	}
}

func TestCascadeMinBlocksRefusesNegative(t *testing.T) {
	s := newSetup(t, opts{})
	_, err := New(Config{MaxBatchSize: 4, CascadeMinBlocks: -1}, s.runner, newByteTokenizer())
	require.ErrorContains(t, err, "CascadeMinBlocks must be >= 0, got -1")
}
