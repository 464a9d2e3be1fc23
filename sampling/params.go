package sampling

// Params are one request's sampling settings. The zero value is not valid on
// its own: use DefaultParams and override fields.
type Params struct {
	// Temperature scales logits; 0 means greedy (argmax).
	Temperature float32
	// TopK keeps the K most likely tokens; 0 (or <0 after validation: refused) means off.
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
