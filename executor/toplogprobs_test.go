package executor

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/sampling"
)

// TestRealModelTopLogprobs runs stories260K through the engine with top
// alternatives requested: under greedy the first alternative is the chosen
// token with the chosen token's log-probability; alternatives are ≤ 0 and
// sorted descending; a sampled request's chosen token is among its
// alternatives or less likely than all of them; a request without
// TopLogprobs gets none.
func TestRealModelTopLogprobs(t *testing.T) {
	m := loadStories(t)
	defer m.Close()
	tok := m.Tokenizer()

	withTop := func(p sampling.Params, n int) sampling.Params {
		p.Logprobs, p.TopLogprobs = true, n
		return p
	}
	seeded := greedy()
	seeded.Temperature, seeded.Seed, seeded.HasSeed = 0.9, 7, true
	reqs := []Request{
		{Prompt: "Once upon a time", MaxTokens: 20, Params: withTop(greedy(), 5)},
		{Prompt: "The little bird", MaxTokens: 20, Params: withTop(seeded, sampling.MaxTopLogprobs)},
		{Prompt: "Once upon a time", MaxTokens: 20, Params: greedy()},
		{Prompt: "Once upon a time", MaxTokens: 20, Params: withTop(greedy(), 1)},
		{Prompt: "Once upon a time", MaxTokens: 20, Params: withTop(greedy(), 1)}, // drained incrementally
	}
	const mbs = 5
	seats := testSeats(t, mbs, true)
	r, err := model.NewCPURunner(m, model.CPURunnerConfig{Seats: seats, KVBlocks: 64, BlockSize: 16, MaxBatchTokens: 64, Workers: 1})
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Close()) }()
	eng, err := New(Config{MaxBatchSize: mbs, Overlap: true, MaxNumBatchedTokens: 24}, r, tok)
	require.NoError(t, err)
	defer func() { require.NoError(t, eng.Close()) }()
	var streams []*Stream
	for i := range reqs {
		st, err := eng.Submit(context.Background(), &reqs[i])
		require.NoError(t, err)
		streams = append(streams, st)
	}
	// Drain one stream incrementally while stepping, to prove coalesced
	// deltas concatenate to the same output as ReadAll.
	var inc Delta
	for range 500 {
		progressed, err := eng.Step()
		require.NoError(t, err)
		require.NoError(t, eng.Check())
		if d, ok, _ := streams[4].TryRecv(); ok {
			require.Len(t, d.TopLogprobs, len(d.TokenIDs))
			inc.TokenIDs = append(inc.TokenIDs, d.TokenIDs...)
			inc.Logprobs = append(inc.Logprobs, d.Logprobs...)
			inc.TopLogprobs = append(inc.TopLogprobs, d.TopLogprobs...)
		}
		if !progressed {
			break
		}
	}
	var got []Delta
	for _, st := range streams[:4] {
		got = append(got, readAll(t, st))
	}
	got = append(got, inc)

	for i, d := range got {
		n := reqs[i].Params.TopLogprobs
		if n == 0 {
			require.Nil(t, d.TopLogprobs, "request %d asked for no alternatives", i)
			continue
		}
		require.Len(t, d.TokenIDs, reqs[i].MaxTokens, "request %d", i)
		require.Len(t, d.Logprobs, len(d.TokenIDs), "request %d", i)
		require.Len(t, d.TopLogprobs, len(d.TokenIDs), "request %d", i)
		for k, alts := range d.TopLogprobs {
			require.Len(t, alts, n, "request %d token %d", i, k)
			found := false
			for a, alt := range alts {
				require.LessOrEqual(t, alt.Logprob, float32(0), "request %d token %d alt %d", i, k, a)
				require.True(t, alt.Token >= 0 && int(alt.Token) < tok.VocabSize(), "request %d token %d alt %d: id %d", i, k, a, alt.Token)
				if a > 0 {
					require.LessOrEqual(t, alt.Logprob, alts[a-1].Logprob, "request %d token %d: alternatives not sorted", i, k)
				}
				if alt.Token == d.TokenIDs[k] {
					found = true
					require.InDelta(t, alt.Logprob, d.Logprobs[k], 1e-5, "request %d token %d", i, k)
				}
			}
			if !found {
				require.Less(t, d.Logprobs[k], alts[len(alts)-1].Logprob, "request %d token %d: chosen token missing from the top", i, k)
			}
			if reqs[i].Params.Temperature < sampling.GreedyBelow {
				require.Equal(t, d.TokenIDs[k], alts[0].Token, "request %d token %d: greedy picks the top alternative", i, k)
				require.InDelta(t, d.Logprobs[k], alts[0].Logprob, 1e-5)
			}
		}
	}
	// The same greedy prompt with and without alternatives, and with 1 or 5,
	// chooses the same tokens; the 1-alternative lists are the 5-lists' heads.
	require.Equal(t, got[0].TokenIDs, got[2].TokenIDs)
	require.Equal(t, got[0].TokenIDs, got[3].TokenIDs)
	// Batch shape (chunking, prefix hits) moves float sums by a few ulps, so
	// log-probabilities of equal requests agree closely, not bitwise.
	require.Equal(t, got[3].TokenIDs, got[4].TokenIDs)
	for k := range got[3].TopLogprobs {
		require.Equal(t, got[0].TopLogprobs[k][0].Token, got[3].TopLogprobs[k][0].Token)
		require.InDelta(t, got[0].TopLogprobs[k][0].Logprob, got[3].TopLogprobs[k][0].Logprob, 1e-4)
		require.InDelta(t, got[3].Logprobs[k], got[4].Logprobs[k], 1e-4)
		require.Equal(t, got[3].TopLogprobs[k][0].Token, got[4].TopLogprobs[k][0].Token)
		require.InDelta(t, got[3].TopLogprobs[k][0].Logprob, got[4].TopLogprobs[k][0].Logprob, 1e-4)
	}
}

// TestStreamTopLogprobs drives a stream directly: alternatives come back
// per token, padding past the vocabulary is dropped, and a stream that
// keeps none allocates none.
func TestStreamTopLogprobs(t *testing.T) {
	ninf := float32(math.Inf(-1))
	tests := []struct {
		name   string
		top    int
		ids    [][]int32
		lps    [][]float32
		want   [][]TokenLogprob
		wantLP bool
	}{
		{name: "none", top: 0, ids: [][]int32{nil, nil}, lps: [][]float32{nil, nil}},
		{name: "two", top: 2, wantLP: true,
			ids:  [][]int32{{4, 9}, {1, 2}},
			lps:  [][]float32{{-0.1, -2}, {-0.5, -0.9}},
			want: [][]TokenLogprob{{{4, -0.1}, {9, -2}}, {{1, -0.5}, {2, -0.9}}}},
		{name: "padding dropped", top: 3, wantLP: true,
			ids:  [][]int32{{0, 1, -1}},
			lps:  [][]float32{{-0.2, -1.7, ninf}},
			want: [][]TokenLogprob{{{0, -0.2}, {1, -1.7}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStream(sampling.Params{TopLogprobs: tc.top})
			for k := range tc.ids {
				s.push([]byte("x"), int32(k), -0.5, tc.ids[k], tc.lps[k])
			}
			d, ok, err := s.TryRecv()
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, tc.want, d.TopLogprobs)
			require.Equal(t, tc.wantLP, d.Logprobs != nil, "alternatives imply logprobs")
			if tc.top == 0 {
				require.Nil(t, s.tops)
			}
			_, ok, err = s.TryRecv()
			require.NoError(t, err)
			require.False(t, ok, "the delta drained the buffers")
		})
	}
}
