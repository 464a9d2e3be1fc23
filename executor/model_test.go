package executor

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/model"
)

// TestRealModelOverlapOnOff runs stories260K on the CPU runner through the
// engine: greedy (and a seeded temperature sample) give identical tokens
// with overlap on and off, and the greedy story from BOS is the known one.
func TestRealModelOverlapOnOff(t *testing.T) {
	m := loadStories(t)
	defer m.Close()
	tok := m.Tokenizer()

	seeded := greedy()
	seeded.Temperature, seeded.Seed, seeded.HasSeed = 0.8, 1234, true
	reqs := []Request{
		{PromptTokens: []int32{tok.BOS()}, MaxTokens: 40, Params: greedy()},
		{Prompt: "Once upon a time, there was a dog", MaxTokens: 30, Params: greedy()},
		{Prompt: "The little bird", MaxTokens: 30, Params: seeded},
		{Prompt: "Once upon a time, there was a cat", MaxTokens: 25, Params: greedy(), Stop: []string{"."}},
	}
	var got [2][]Delta
	for mode, ovl := range []bool{false, true} {
		const mbs = 4
		seats := testSeats(t, mbs, ovl)
		r, err := model.NewCPURunner(m, model.CPURunnerConfig{Seats: seats, KVBlocks: 64, BlockSize: 16, MaxBatchTokens: 64, Workers: 1})
		require.NoError(t, err)
		eng, err := New(Config{MaxBatchSize: mbs, Overlap: ovl, MaxNumBatchedTokens: 24}, r, tok)
		require.NoError(t, err)
		var streams []*Stream
		for i := range reqs {
			st, err := eng.Submit(context.Background(), &reqs[i])
			require.NoError(t, err)
			streams = append(streams, st)
		}
		for range 500 {
			progressed, err := eng.Step()
			require.NoError(t, err)
			require.NoError(t, eng.Check())
			if !progressed {
				break
			}
		}
		require.NoError(t, r.Check()) // idle now: nothing in flight on the runner
		for _, st := range streams {
			got[mode] = append(got[mode], readAll(t, st))
		}
		require.NoError(t, eng.Close())
		require.NoError(t, r.Close())
	}
	require.Equal(t, got[0], got[1], "overlap must not change output")
	require.Contains(t, got[0][0].Text, "Once upon a time, there was a little girl named Lily.")
	// After a BOS-only prompt the space prefix's leading space is stripped,
	// exactly as the tokenizer's own decoder does.
	require.Equal(t, tok.Decode(got[0][0].TokenIDs), got[0][0].Text)
	require.True(t, strings.HasPrefix(got[0][0].Text, "Once upon"), "got %q", got[0][0].Text)
	require.Equal(t, FinishStop, got[0][3].FinishReason)
	require.NotContains(t, got[0][3].Text, ".")
	t.Logf("greedy from BOS: %q", got[0][0].Text)
}
