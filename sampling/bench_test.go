package sampling

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// BenchmarkSample measures one Sample call on a realistic logit row
// (Gaussian logits with a few strong tokens, as a language model gives),
// including the copy that restores the row each iteration.
func BenchmarkSample(b *testing.B) {
	for _, vocab := range []int{32000, 128256} {
		r := rand.New(rand.NewPCG(1, 2))
		logits := make([]float32, vocab)
		for i := range logits {
			logits[i] = float32(r.NormFloat64() * 2)
		}
		for i := range 10 {
			logits[r.IntN(vocab)] = 12 - float32(i)
		}
		for _, bc := range []struct {
			name string
			p    Params
		}{
			{"greedy", DefaultParams()},
			{"greedy_logprobs5", Params{TopP: 1, RepetitionPenalty: 1, Logprobs: true, TopLogprobs: 5}},
			{"temp0.8_topp0.9", Params{Temperature: 0.8, TopP: 0.9, RepetitionPenalty: 1}},
			{"temp0.8_topk50", Params{Temperature: 0.8, TopK: 50, TopP: 1, RepetitionPenalty: 1}},
			{"temp1_penalties", Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1.1, FrequencyPenalty: 0.5, PresencePenalty: 0.5}},
		} {
			b.Run(fmt.Sprintf("vocab%d/%s", vocab, bc.name), func(b *testing.B) {
				s, err := New(1, vocab)
				if err != nil {
					b.Fatal(err)
				}
				p := bc.p
				hist := make([]int32, 512)
				for i := range hist {
					hist[i] = int32(r.IntN(vocab))
				}
				if err := s.Start(0, &p, hist); err != nil {
					b.Fatal(err)
				}
				row := make([]float32, vocab)
				c := newChoice()
				// Warm the penalty table past its growth.
				for range 256 {
					copy(row, logits)
					if err := s.Sample(0, row, c); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					copy(row, logits)
					if err := s.Sample(0, row, c); err != nil {
						b.Fatal(err)
					}
				}
				if math.IsNaN(float64(c.Logprob)) {
					b.Fatal("NaN logprob")
				}
			})
		}
	}
}
