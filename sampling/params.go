package sampling

import (
	"fmt"
	"math"
)

// Params are one request's sampling settings. The zero value is not valid on
// its own: use DefaultParams and override fields.
type Params struct {
	// Temperature scales logits; 0 means greedy (argmax).
	Temperature float32
	// TopK keeps the K most likely tokens (ties with the K-th are kept too);
	// 0 means off. Validate accepts -1 (vLLM's off) and rewrites it to 0.
	TopK int
	// TopP keeps the smallest set whose probability mass reaches TopP; 1 means off. Range (0,1].
	TopP float32
	// MinP drops tokens whose probability is below MinP × the top probability; 0 means off. Range [0,1].
	MinP float32
	// Seed makes sampling reproducible per request; HasSeed false means a seed drawn by the engine.
	Seed    uint64
	HasSeed bool
	// RepetitionPenalty divides positive (multiplies negative) logits of tokens seen in prompt or output; 1 means off. >0.
	RepetitionPenalty float32
	// PresencePenalty subtracts once per distinct generated token; FrequencyPenalty once per occurrence. Range [-2,2].
	PresencePenalty  float32
	FrequencyPenalty float32
	// Logprobs asks for the log-probability of each chosen token; TopLogprobs (0..MaxTopLogprobs) for that many alternatives.
	Logprobs    bool
	TopLogprobs int
}

// MaxTopLogprobs bounds Params.TopLogprobs (OpenAI's limit).
const MaxTopLogprobs = 20

// DefaultParams is greedy decoding with every filter and penalty off.
func DefaultParams() Params {
	return Params{TopP: 1, RepetitionPenalty: 1}
}

// GreedyBelow is the temperature under which sampling is greedy: dividing
// logits by a smaller temperature only overflows float32 without changing
// which token wins, so such requests are decoded as argmax (as vLLM does).
const GreedyBelow = 1e-5

// Validate checks every field against its range and normalises the one
// accepted alias: TopK -1 (vLLM's "off") becomes 0. vocab is the model's
// vocabulary size (> 0); TopK larger than vocab is accepted and means off.
// Errors name the field and the offending value.
func (p *Params) Validate(vocab int) error {
	if p == nil {
		return fmt.Errorf("sampling params: nil")
	}
	if vocab <= 0 {
		return fmt.Errorf("sampling params: vocab %d must be positive", vocab)
	}
	if !finite(p.Temperature) || p.Temperature < 0 {
		return fmt.Errorf("temperature %v: must be a finite number >= 0", p.Temperature)
	}
	if !finite(p.TopP) || p.TopP <= 0 || p.TopP > 1 {
		return fmt.Errorf("top_p %v: must be in (0, 1]", p.TopP)
	}
	if p.TopK < -1 {
		return fmt.Errorf("top_k %d: must be >= 0 (0 or -1 means off)", p.TopK)
	}
	if !finite(p.MinP) || p.MinP < 0 || p.MinP > 1 {
		return fmt.Errorf("min_p %v: must be in [0, 1]", p.MinP)
	}
	if !finite(p.RepetitionPenalty) || p.RepetitionPenalty <= 0 {
		return fmt.Errorf("repetition_penalty %v: must be a finite number > 0 (1 means off)", p.RepetitionPenalty)
	}
	if !finite(p.PresencePenalty) || p.PresencePenalty < -2 || p.PresencePenalty > 2 {
		return fmt.Errorf("presence_penalty %v: must be in [-2, 2]", p.PresencePenalty)
	}
	if !finite(p.FrequencyPenalty) || p.FrequencyPenalty < -2 || p.FrequencyPenalty > 2 {
		return fmt.Errorf("frequency_penalty %v: must be in [-2, 2]", p.FrequencyPenalty)
	}
	if p.TopLogprobs < 0 || p.TopLogprobs > MaxTopLogprobs {
		return fmt.Errorf("top_logprobs %d: must be in [0, %d]", p.TopLogprobs, MaxTopLogprobs)
	}
	if p.TopK == -1 {
		p.TopK = 0
	}
	return nil
}

func finite(f float32) bool {
	return !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0)
}
