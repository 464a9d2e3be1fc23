package executor

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/sampling"
)

// TestRelayStream: deltas relayed from another process read back as the
// engine's own would, coalesced, with the finish and usage last; what
// cannot be a stream's output is refused.
func TestRelayStream(t *testing.T) {
	p := sampling.DefaultParams()
	p.TopLogprobs = 2
	s := NewRelayStream(p)
	require.NoError(t, s.Relay(Delta{Text: "ab", TokenIDs: []int32{1, 2}, Logprobs: []float32{-1, -2},
		TopLogprobs: [][]TokenLogprob{{{Token: 1, Logprob: -1}, {Token: 3, Logprob: -3}}, {{Token: 2, Logprob: -2}}}}))
	require.NoError(t, s.Relay(Delta{Text: "c", TokenIDs: []int32{4}, Logprobs: []float32{-4},
		TopLogprobs:  [][]TokenLogprob{{{Token: 4, Logprob: -4}, {Token: 5, Logprob: -5}}},
		FinishReason: FinishLength, Usage: Usage{Prompt: 2, Completion: 3}}))
	require.ErrorContains(t, s.Relay(Delta{Text: "late"}), "after the stream's finish")
	d, err := s.ReadAll(context.Background())
	require.NoError(t, err)
	require.Equal(t, "abc", d.Text)
	require.Equal(t, []int32{1, 2, 4}, d.TokenIDs)
	require.Equal(t, []float32{-1, -2, -4}, d.Logprobs)
	require.Equal(t, [][]TokenLogprob{{{1, -1}, {3, -3}}, {{2, -2}}, {{4, -4}, {5, -5}}}, d.TopLogprobs)
	require.Equal(t, FinishLength, d.FinishReason)
	require.Equal(t, Usage{Prompt: 2, Completion: 3}, d.Usage)

	s = NewRelayStream(p)
	require.ErrorContains(t, s.Relay(Delta{TokenIDs: []int32{1}}), "0 logprobs for 1 tokens")
	require.ErrorContains(t, s.Relay(Delta{TokenIDs: []int32{1}, Logprobs: []float32{0}}), "0 top-logprob rows for 1 tokens")
}

// TestStreamEnded: Ended closes when the finish is recorded, before the
// consumer reads anything, and not before.
func TestStreamEnded(t *testing.T) {
	s := NewRelayStream(sampling.DefaultParams())
	require.NoError(t, s.Relay(Delta{Text: "a", TokenIDs: []int32{1}}))
	select {
	case <-s.Ended():
		t.Fatal("Ended closed before the finish")
	default:
	}
	require.NoError(t, s.Relay(Delta{Text: "b", TokenIDs: []int32{2}, FinishReason: FinishStop}))
	select {
	case <-s.Ended():
	default:
		t.Fatal("Ended still open after the finish, with nothing read")
	}
	d, err := s.ReadAll(context.Background())
	require.NoError(t, err)
	require.Equal(t, "ab", d.Text)
}
