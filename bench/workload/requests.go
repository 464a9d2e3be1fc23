package workload

import (
	"fmt"
	"math"
	"time"
)

// ContextHeavyConfig describes the attention-DP traffic of seed 004's
// binding cases: prefill-dominant requests (long inputs, outputs of one or a
// few tokens, as a context-only role sees them) offered faster than the
// role can serve, so admission, not arrival, limits the batch. The small
// max batch (e.g. 2 seats per rank) is the engine's setting, not the
// workload's.
type ContextHeavyConfig struct {
	// Seed determines every token id, length and arrival.
	Seed uint64
	// Requests is the number of requests (≥ 1).
	Requests int
	// InputTokens is the nominal input length (ISL, ≥ 1). Each request's
	// length is uniform in [ISL·(1-InputSpread), ISL·(1+InputSpread)],
	// rounded, at least 1; InputSpread in [0, 1), 0 for a fixed ISL.
	InputTokens int
	InputSpread float64
	// OutputTokens is every request's output length (OSL, ≥ 1; 1 for a
	// context-only role).
	OutputTokens int
	// Rate is the Poisson arrival rate in requests per second; 0 submits
	// every request at the origin (saturating).
	Rate float64
	// Tokens is the id range; the zero value means the default range.
	Tokens TokenRange
}

// ContextHeavy generates the requests of c. Prompts are independent token
// streams per request: with ids drawn uniformly, two prompts agreeing on a
// whole KV block (16 tokens) has probability ≈ (1/509)¹⁶ at the default
// range, so there is no prefix reuse to confound the routing measurement.
func ContextHeavy(c ContextHeavyConfig) ([]Request, error) {
	c.Tokens = c.Tokens.resolved()
	switch {
	case c.Requests < 1:
		return nil, fmt.Errorf("workload: context-heavy requests %d < 1", c.Requests)
	case c.InputTokens < 1:
		return nil, fmt.Errorf("workload: context-heavy input tokens %d < 1", c.InputTokens)
	case math.IsNaN(c.InputSpread) || c.InputSpread < 0 || c.InputSpread >= 1:
		return nil, fmt.Errorf("workload: context-heavy input spread %v outside [0, 1)", c.InputSpread)
	case c.OutputTokens < 1:
		return nil, fmt.Errorf("workload: context-heavy output tokens %d < 1", c.OutputTokens)
	case math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate < 0:
		return nil, fmt.Errorf("workload: context-heavy rate %v must be finite and ≥ 0", c.Rate)
	}
	if err := c.Tokens.validate(1); err != nil {
		return nil, err
	}
	arrivals := poissonArrivals(c.Seed, c.Requests, c.Rate)
	out := make([]Request, c.Requests)
	for i := range out {
		s := newStream(c.Seed, purposeRequest, i)
		n := c.InputTokens
		if c.InputSpread > 0 {
			lo := float64(c.InputTokens) * (1 - c.InputSpread)
			hi := float64(c.InputTokens) * (1 + c.InputSpread)
			n = max(1, int(math.Round(lo+(hi-lo)*s.float())))
		}
		out[i] = Request{ID: i, Arrival: arrivals[i], Prompt: s.tokens(make([]int32, 0, n), n, c.Tokens), MaxTokens: c.OutputTokens}
	}
	return out, nil
}

// LogNormal is a length distribution: round(Median · exp(Sigma · Z)) for a
// standard normal Z, clamped to [Min, Max]. Its median is Median and, before
// clamping, its mean is Median · exp(Sigma²/2).
type LogNormal struct {
	Median   float64
	Sigma    float64
	Min, Max int
}

// Chat length defaults. Conversational traces have right-skewed, roughly
// log-normal prompt and reply lengths (a few long pastes, many short turns);
// these parameters give that shape at a scale a CPU runner can serve. They
// are a documented synthetic choice, not a fit to any dataset.
//
//	input:  median 256 tokens, σ 1.0 → mean ≈ 422, P95 ≈ 1,330; clamp [8, 4096]
//	output: median 128 tokens, σ 0.8 → mean ≈ 176, P95 ≈ 477;   clamp [1, 1024]
//
// DefaultChatInput is the input distribution, used when ChatConfig.Input
// is zero.
func DefaultChatInput() LogNormal { return LogNormal{Median: 256, Sigma: 1.0, Min: 8, Max: 4096} }

// DefaultChatOutput is the chat output-length distribution used when
// ChatConfig.Output is zero.
func DefaultChatOutput() LogNormal { return LogNormal{Median: 128, Sigma: 0.8, Min: 1, Max: 1024} }

func (d LogNormal) validate(name string) error {
	if !(d.Median > 0) || math.IsInf(d.Median, 0) || math.IsNaN(d.Sigma) || d.Sigma < 0 || math.IsInf(d.Sigma, 0) || d.Min < 1 || d.Max < d.Min {
		return fmt.Errorf("workload: chat %s length distribution %+v needs median > 0, σ ≥ 0 and 1 ≤ min ≤ max", name, d)
	}
	return nil
}

func (d LogNormal) draw(s stream) int {
	v := math.Round(d.Median * math.Exp(d.Sigma*s.normal()))
	return int(math.Min(math.Max(v, float64(d.Min)), float64(d.Max)))
}

// ChatConfig describes chat traffic: Poisson arrivals, log-normal input and
// output lengths, and an optional system prompt shared by every request.
type ChatConfig struct {
	// Seed determines every token id, length and arrival.
	Seed uint64
	// Requests is the number of requests (≥ 1).
	Requests int
	// Rate is the Poisson arrival rate in requests per second; 0 submits
	// every request at the origin.
	Rate float64
	// Input and Output are the length distributions; zero values mean
	// DefaultChatInput and DefaultChatOutput.
	Input, Output LogNormal
	// SystemTokens is the length of a system prompt prepended to every
	// request (0: none); it counts on top of the drawn input length.
	SystemTokens int
	// Tokens is the id range; the zero value means the default range.
	Tokens TokenRange
}

// Chat generates the requests of c.
func Chat(c ChatConfig) ([]Request, error) {
	c.Tokens = c.Tokens.resolved()
	if c.Input == (LogNormal{}) {
		c.Input = DefaultChatInput()
	}
	if c.Output == (LogNormal{}) {
		c.Output = DefaultChatOutput()
	}
	switch {
	case c.Requests < 1:
		return nil, fmt.Errorf("workload: chat requests %d < 1", c.Requests)
	case math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate < 0:
		return nil, fmt.Errorf("workload: chat rate %v must be finite and ≥ 0", c.Rate)
	case c.SystemTokens < 0:
		return nil, fmt.Errorf("workload: chat system tokens %d < 0", c.SystemTokens)
	}
	if err := c.Input.validate("input"); err != nil {
		return nil, err
	}
	if err := c.Output.validate("output"); err != nil {
		return nil, err
	}
	if err := c.Tokens.validate(1); err != nil {
		return nil, err
	}
	system := newStream(c.Seed, purposeSystem, 0).tokens(nil, c.SystemTokens, c.Tokens)
	arrivals := poissonArrivals(c.Seed, c.Requests, c.Rate)
	out := make([]Request, c.Requests)
	for i := range out {
		s := newStream(c.Seed, purposeRequest, i)
		in, outLen := c.Input.draw(s), c.Output.draw(s)
		prompt := append(make([]int32, 0, len(system)+in), system...)
		out[i] = Request{ID: i, Arrival: arrivals[i], Prompt: s.tokens(prompt, in, c.Tokens), MaxTokens: outLen}
	}
	return out, nil
}

// poissonArrivals returns n arrival offsets of a Poisson process of rate
// per second (exponential gaps, the first gap included), or all zero when
// rate is 0.
func poissonArrivals(seed uint64, n int, rate float64) []time.Duration {
	out := make([]time.Duration, n)
	if rate == 0 {
		return out
	}
	s := newStream(seed, purposeArrival, 0)
	t := 0.0
	for i := range out {
		t += s.exponential() / rate
		out[i] = time.Duration(math.Round(t * 1e9))
	}
	return out
}

// RequestsDigest is a hex SHA-256 of the requests' every id, arrival, length and
// token, for reproducibility checks and for recording which workload a row
// ran.
func RequestsDigest(reqs []Request) string {
	progs := make([]Program, len(reqs))
	for i, r := range reqs {
		progs[i] = Program{ID: r.ID, Arrival: r.Arrival, Prompt: r.Prompt, Turns: []Turn{{MaxTokens: r.MaxTokens}}}
	}
	return Digest(progs)
}
