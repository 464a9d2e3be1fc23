package workload

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestContextHeavy(t *testing.T) {
	tests := []struct {
		name string
		cfg  ContextHeavyConfig
	}{
		{"saturating fixed ISL", ContextHeavyConfig{Seed: 4, Requests: 64, InputTokens: 2048, OutputTokens: 1}},
		{"spread and rate", ContextHeavyConfig{Seed: 4, Requests: 2000, InputTokens: 64, InputSpread: 0.25, OutputTokens: 8, Rate: 50}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ContextHeavy(tc.cfg)
			require.NoError(t, err)
			b, err := ContextHeavy(tc.cfg)
			require.NoError(t, err)
			require.Equal(t, RequestsDigest(a), RequestsDigest(b), "same seed, same bits")
			require.Equal(t, a[:5], b[:5])
			require.Len(t, a, tc.cfg.Requests)
			lo := int(math.Floor(float64(tc.cfg.InputTokens) * (1 - tc.cfg.InputSpread)))
			hi := int(math.Ceil(float64(tc.cfg.InputTokens) * (1 + tc.cfg.InputSpread)))
			var lens []int
			for i, r := range a {
				require.Equal(t, i, r.ID)
				require.Equal(t, tc.cfg.OutputTokens, r.MaxTokens)
				require.GreaterOrEqual(t, len(r.Prompt), lo)
				require.LessOrEqual(t, len(r.Prompt), hi)
				lens = append(lens, len(r.Prompt))
				if i > 0 {
					require.GreaterOrEqual(t, r.Arrival, a[i-1].Arrival)
					require.NotEqual(t, a[i-1].Prompt[:16], r.Prompt[:16], "no block-sized reuse")
				}
			}
			last := a[len(a)-1].Arrival
			if tc.cfg.Rate == 0 {
				require.Zero(t, last)
				require.Equal(t, slices.Min(lens), slices.Max(lens))
			} else {
				// 2000 exponential gaps: the mean gap has a relative s.e. of
				// 1/√2000 ≈ 2.2%, so ±10% is > 4 s.e.
				mean := last.Seconds() / float64(len(a))
				require.InEpsilon(t, 1/tc.cfg.Rate, mean, 0.10)
				require.Less(t, slices.Min(lens), slices.Max(lens))
			}
			other := tc.cfg
			other.Seed++
			c, err := ContextHeavy(other)
			require.NoError(t, err)
			require.NotEqual(t, RequestsDigest(a), RequestsDigest(c))
		})
	}
}

func TestContextHeavyErrors(t *testing.T) {
	ok := ContextHeavyConfig{Requests: 1, InputTokens: 1, OutputTokens: 1}
	tests := []struct {
		name    string
		edit    func(*ContextHeavyConfig)
		wantErr string
	}{
		{"requests", func(c *ContextHeavyConfig) { c.Requests = 0 }, "requests 0 < 1"},
		{"input", func(c *ContextHeavyConfig) { c.InputTokens = -1 }, "input tokens -1"},
		{"spread", func(c *ContextHeavyConfig) { c.InputSpread = 1 }, "spread 1 outside"},
		{"output", func(c *ContextHeavyConfig) { c.OutputTokens = 0 }, "output tokens 0"},
		{"rate", func(c *ContextHeavyConfig) { c.Rate = math.Inf(1) }, "rate +Inf"},
		{"tokens", func(c *ContextHeavyConfig) { c.Tokens = TokenRange{Min: -1, Max: 4} }, "[-1, 4)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.edit(&cfg)
			_, err := ContextHeavy(cfg)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestChat(t *testing.T) {
	cfg := ChatConfig{Seed: 11, Requests: 4000, Rate: 20, SystemTokens: 32}
	a, err := Chat(cfg)
	require.NoError(t, err)
	b, err := Chat(cfg)
	require.NoError(t, err)
	require.Equal(t, RequestsDigest(a), RequestsDigest(b), "same seed, same bits")
	require.Equal(t, a[:5], b[:5])
	in, out := DefaultChatInput(), DefaultChatOutput()
	var inLens, outLens []float64
	for _, r := range a {
		n := len(r.Prompt) - 32
		if !slices.Equal(a[0].Prompt[:32], r.Prompt[:32]) || n < in.Min || n > in.Max || r.MaxTokens < out.Min || r.MaxTokens > out.Max {
			require.Failf(t, "request out of spec", "request %d: system prompt %v, input %d, output %d", r.ID, r.Prompt[:32], n, r.MaxTokens)
		}
		inLens = append(inLens, float64(n))
		outLens = append(outLens, float64(r.MaxTokens))
	}
	// The empirical median of 4000 log-normal draws has a relative s.e. of
	// about σ·√(π/2)/√4000 ≈ 2% (σ = 1), so ±10% is > 4 s.e.
	slices.Sort(inLens)
	slices.Sort(outLens)
	require.InEpsilon(t, in.Median, inLens[len(inLens)/2], 0.10)
	require.InEpsilon(t, out.Median, outLens[len(outLens)/2], 0.10)
	// Right skew: mean above median, as documented (≈ 422 and 176).
	meanIn, meanOut := 0.0, 0.0
	for i := range inLens {
		meanIn += inLens[i] / float64(len(inLens))
		meanOut += outLens[i] / float64(len(outLens))
	}
	require.InEpsilon(t, 422, meanIn, 0.10)
	require.InEpsilon(t, 176, meanOut, 0.10)
	require.InEpsilon(t, 1/cfg.Rate, a[len(a)-1].Arrival.Seconds()/float64(len(a)), 0.10)

	fixed, err := Chat(ChatConfig{Seed: 1, Requests: 3, Input: LogNormal{Median: 40, Min: 1, Max: 100}, Output: LogNormal{Median: 7, Min: 1, Max: 7}})
	require.NoError(t, err)
	for _, r := range fixed {
		require.Len(t, r.Prompt, 40, "σ = 0 gives the median")
		require.Equal(t, 7, r.MaxTokens)
		require.Equal(t, time.Duration(0), r.Arrival)
	}
}

func TestChatErrors(t *testing.T) {
	tests := []struct {
		name    string
		cfg     ChatConfig
		wantErr string
	}{
		{"requests", ChatConfig{}, "requests 0 < 1"},
		{"rate", ChatConfig{Requests: 1, Rate: -1}, "rate -1"},
		{"system", ChatConfig{Requests: 1, SystemTokens: -2}, "system tokens -2"},
		{"input min", ChatConfig{Requests: 1, Input: LogNormal{Median: 5, Min: 0, Max: 3}}, "input length distribution"},
		{"output sigma", ChatConfig{Requests: 1, Output: LogNormal{Median: 5, Sigma: -1, Min: 1, Max: 3}}, "output length distribution"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Chat(tc.cfg)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// TestStreamUniform checks the Lemire draw covers a small range evenly:
// 60,000 draws over 6 values, each count within 5% of 10,000 (s.e. ≈ 0.9%).
func TestStreamUniform(t *testing.T) {
	s := newStream(1, purposeRequest, 0)
	counts := make([]int, 6)
	for range 60000 {
		counts[s.uintn(6)]++
	}
	for v, c := range counts {
		require.InEpsilon(t, 10000, c, 0.05, "value %d", v)
	}
	d := newStream(2, purposeDistinct, 0).distinct(509, TokenRange{Min: 3, Max: 512})
	slices.Sort(d)
	require.Equal(t, int32(3), d[0])
	require.Equal(t, int32(511), d[508])
	require.Len(t, slices.Compact(d), 509)
}
