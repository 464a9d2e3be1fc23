package sampling

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// Choice is what Sample produced for one sequence.
type Choice struct {
	// Token is the sampled id, in [0, vocab).
	Token int32
	// Logprob is the natural-log probability of Token under the distribution
	// after penalties and temperature and before min_p/top_k/top_p truncation
	// (so it stays comparable across requests with different filters, as
	// OpenAI's logprobs are). Greedy requests (temperature < GreedyBelow) use
	// temperature 1. Filled only when Params.Logprobs or TopLogprobs > 0,
	// otherwise 0.
	Logprob float32
	// TopTokens/TopLogprobs are caller-owned buffers of length at least
	// Params.TopLogprobs (normally MaxTopLogprobs). Sample fills their first
	// Params.TopLogprobs entries with the most likely tokens under the same
	// distribution as Logprob, most likely first, ties by lower id; it never
	// changes their length and leaves later entries untouched. Entries past
	// the vocabulary size (TopLogprobs > vocab) get token -1, logprob -Inf.
	TopTokens   []int32
	TopLogprobs []float32
}

// Sampler holds per-seat sampling state (parameters, RNG, penalty counts) in
// rows indexed by seat, for a fixed vocabulary size.
//
// Concurrency: Start, End, Check and Sample must not run concurrently with
// any other call. SampleWith may run concurrently for distinct seats, each
// call with its own Scratch, while no Start/End/Check/Sample runs.
type Sampler struct {
	vocab int
	seats []seat
	// seedBase and starts derive the seed of requests without one: the n-th
	// unseeded Start uses mix(seedBase, n), so a Sampler replays exactly.
	seedBase uint64
	starts   uint64
	scratch  *Scratch
}

// seat is one seat's state.
type seat struct {
	active bool
	p      Params
	rng    rand.PCG
	// trackPrompt: prompt tokens matter (repetition penalty on);
	// trackOut: generated tokens matter (any penalty on).
	trackPrompt, trackOut bool
	// generated counts Sample calls since Start, plus StartWithOutput's
	// numOutput.
	generated uint64
	// counts is the sparse token → count map the penalties read.
	counts tokenCounts
}

// New makes a Sampler with seats rows for a vocabulary of vocab tokens.
// Memory is O(seats + vocab) up front; each seat's penalty table grows with
// the distinct tokens it sees and keeps its capacity across Start calls.
func New(seats, vocab int) (*Sampler, error) {
	if seats <= 0 {
		return nil, fmt.Errorf("sampling: seats %d must be positive", seats)
	}
	if vocab <= 0 || vocab > math.MaxInt32 {
		return nil, fmt.Errorf("sampling: vocab %d must be in [1, %d]", vocab, math.MaxInt32)
	}
	return &Sampler{vocab: vocab, seats: make([]seat, seats), scratch: NewScratch(vocab)}, nil
}

// Seats is the number of seat rows held.
func (s *Sampler) Seats() int { return len(s.seats) }

// Vocab is the number of logits per row Sample expects.
func (s *Sampler) Vocab() int { return s.vocab }

// SetSeedBase sets the base from which seeds of requests without one are
// derived (default 0), e.g. from a --seed flag. It does not affect active seats.
func (s *Sampler) SetSeedBase(base uint64) { s.seedBase = base }

// Start (re)initialises seat for a new sequence: it validates and copies *p,
// seeds the seat's RNG (p.Seed if p.HasSeed, else the next seed derived from
// the Sampler's base), and records history (the prompt, ids in [0, vocab))
// for the repetition penalty. history is not retained.
func (s *Sampler) Start(seat int32, p *Params, history []int32) error {
	return s.StartWithOutput(seat, p, history, 0)
}

// StartWithOutput is Start for a sequence that already generated tokens
// (resumed after preemption by recompute): the last numOutput tokens of
// history are its output so far and count as generated tokens for the
// presence and frequency penalties, exactly as if this seat had sampled
// them; the tokens before them are the prompt.
func (s *Sampler) StartWithOutput(seat int32, p *Params, history []int32, numOutput int) error {
	st, err := s.seat(seat)
	if err != nil {
		return err
	}
	if p == nil {
		return fmt.Errorf("sampling: start seat %d: nil params", seat)
	}
	if numOutput < 0 || numOutput > len(history) {
		return fmt.Errorf("sampling: start seat %d: %d output tokens in a history of %d", seat, numOutput, len(history))
	}
	cp := *p
	if err := cp.Validate(s.vocab); err != nil {
		return fmt.Errorf("sampling: start seat %d: %w", seat, err)
	}
	for i, tok := range history {
		if tok < 0 || int(tok) >= s.vocab {
			return fmt.Errorf("sampling: start seat %d: history[%d] = %d outside vocab [0, %d)", seat, i, tok, s.vocab)
		}
	}
	seed := cp.Seed
	if !cp.HasSeed {
		seed = mix64(s.seedBase + mix64(s.starts))
		s.starts++
	}
	st.active = true
	st.p = cp
	st.rng.Seed(seed, mix64(seed^0x9e3779b97f4a7c15))
	if cp.Temperature >= GreedyBelow {
		// A non-greedy sample consumes exactly one draw; a sequence resumed
		// after preemption by recompute continues its stream where it was,
		// so a seeded request gives the same tokens preempted or not.
		for range numOutput {
			st.rng.Uint64()
		}
	}
	st.trackPrompt = cp.RepetitionPenalty != 1
	st.trackOut = st.trackPrompt || cp.PresencePenalty != 0 || cp.FrequencyPenalty != 0
	st.generated = uint64(numOutput)
	st.counts.reset()
	prompt, output := history[:len(history)-numOutput], history[len(history)-numOutput:]
	if st.trackPrompt {
		for _, tok := range prompt {
			st.counts.add(tok, false)
		}
	}
	if st.trackOut {
		for _, tok := range output {
			st.counts.add(tok, true)
		}
	}
	return nil
}

// End releases seat's state; the seat must be started again before Sample.
func (s *Sampler) End(seat int32) error {
	st, err := s.seat(seat)
	if err != nil {
		return err
	}
	if !st.active {
		return fmt.Errorf("sampling: end seat %d: not started", seat)
	}
	st.active = false
	st.generated = 0
	st.counts.reset()
	return nil
}

// Sample draws the next token of seat from one row of logits (length vocab),
// using the Sampler's own scratch. See SampleWith.
func (s *Sampler) Sample(seat int32, logits []float32, c *Choice) error {
	return s.SampleWith(seat, logits, c, s.scratch)
}

// SampleUnder is SampleMasked with the Sampler's own scratch.
func (s *Sampler) SampleUnder(seat int32, logits []float32, mask []uint64, c *Choice) error {
	return s.SampleMasked(seat, logits, mask, c, s.scratch)
}

// SampleWith draws the next token of seat from logits (one row, length
// vocab; used as scratch and left modified) into c, using sc as working
// memory. In order it applies the repetition penalty (prompt and output
// tokens), presence/frequency penalties (output tokens), temperature
// (below GreedyBelow: argmax, ties to the lowest id), min_p, top_k and
// top_p, draws with the seat's RNG, and records the token for penalties.
//
// NaN logits count as -Inf. +Inf logits (also after dividing by the
// temperature) count as the largest float32, so tokens at +Inf share the
// mass equally. A row with no logit above -Inf carries no information and is
// treated as uniform. It allocates nothing once the seat's penalty table has
// grown to the sequence's distinct tokens.
func (s *Sampler) SampleWith(seat int32, logits []float32, c *Choice, sc *Scratch) error {
	return s.SampleMasked(seat, logits, nil, c, sc)
}

// SampleMasked is SampleWith for a constrained sequence: only the tokens
// whose bit is set in mask ((vocab+63)/64 words, token t at bit t%64 of
// word t/64) can be drawn. The mask applies first, before penalties,
// temperature and truncation, so every sampling mode and the reported
// logprobs see the constrained distribution. A nil mask constrains
// nothing; a mask that allows no token is an error (nothing can be drawn).
func (s *Sampler) SampleMasked(seat int32, logits []float32, mask []uint64, c *Choice, sc *Scratch) error {
	st, err := s.seat(seat)
	if err != nil {
		return err
	}
	if !st.active {
		return fmt.Errorf("sampling: sample seat %d: not started", seat)
	}
	if len(logits) != s.vocab {
		return fmt.Errorf("sampling: sample seat %d: %d logits, want vocab %d", seat, len(logits), s.vocab)
	}
	if sc == nil || len(sc.w) != s.vocab {
		return fmt.Errorf("sampling: sample seat %d: scratch not made for vocab %d", seat, s.vocab)
	}
	if c == nil {
		return fmt.Errorf("sampling: sample seat %d: nil choice", seat)
	}
	if mask != nil {
		if err := applyMask(logits, mask); err != nil {
			return fmt.Errorf("sampling: sample seat %d: %w", seat, err)
		}
	}
	p := &st.p
	if n := p.TopLogprobs; len(c.TopTokens) < n || len(c.TopLogprobs) < n {
		return fmt.Errorf("sampling: sample seat %d: top_logprobs %d but buffers hold %d tokens, %d logprobs",
			seat, n, len(c.TopTokens), len(c.TopLogprobs))
	}

	if st.trackOut {
		st.applyPenalties(logits)
	}
	greedy := p.Temperature < GreedyBelow
	scale := float32(1)
	if !greedy {
		scale = 1 / p.Temperature
	}
	m, arg := prepare(logits, scale)
	wantLP := p.Logprobs || p.TopLogprobs > 0

	var tok int32
	var logZ float64 // log Σ exp(x - m) over the whole row
	if greedy {
		tok = arg
		if wantLP {
			logZ = math.Log(sumExp(logits, m))
		}
	} else {
		var z float64
		tok, z = sc.draw(logits, m, p, &st.rng)
		logZ = math.Log(z)
	}

	c.Token = tok
	c.Logprob = 0
	if wantLP {
		c.Logprob = float32(float64(logits[tok]-m) - logZ)
	}
	if n := p.TopLogprobs; n > 0 {
		k := min(n, s.vocab)
		topN(logits, c.TopTokens[:k], c.TopLogprobs[:k])
		for i := range k {
			c.TopLogprobs[i] = float32(float64(c.TopLogprobs[i]-m) - logZ)
		}
		for i := k; i < n; i++ { // asked for more alternatives than exist
			c.TopTokens[i], c.TopLogprobs[i] = -1, float32(math.Inf(-1))
		}
	}
	st.generated++
	if st.trackOut {
		st.counts.add(tok, true)
	}
	return nil
}

// applyMask sets the logits of the tokens mask does not allow to -Inf.
func applyMask(logits []float32, mask []uint64) error {
	if len(mask) != (len(logits)+63)/64 {
		return fmt.Errorf("mask has %d words, vocab %d needs %d", len(mask), len(logits), (len(logits)+63)/64)
	}
	neg := float32(math.Inf(-1))
	any := false
	for w, bits := range mask {
		base := w * 64
		end := min(base+64, len(logits))
		if bits == ^uint64(0) && end-base == 64 {
			any = true
			continue
		}
		for i := base; i < end; i++ {
			if bits&(1<<(i-base)) == 0 {
				logits[i] = neg
			} else {
				any = true
			}
		}
	}
	if !any {
		return errors.New("the mask allows no token")
	}
	return nil
}

// Check verifies every seat's bookkeeping: inactive seats hold nothing, each
// active seat's penalty table indexes every entry exactly once, and its
// output counts sum to the number of tokens sampled since Start.
func (s *Sampler) Check() error {
	if len(s.scratch.w) != s.vocab {
		return fmt.Errorf("sampling: scratch sized %d, vocab %d", len(s.scratch.w), s.vocab)
	}
	for i := range s.seats {
		st := &s.seats[i]
		if !st.active {
			if st.generated != 0 || len(st.counts.ents) != 0 {
				return fmt.Errorf("sampling: inactive seat %d holds %d generated, %d tracked tokens",
					i, st.generated, len(st.counts.ents))
			}
			continue
		}
		out, err := st.counts.check(s.vocab)
		if err != nil {
			return fmt.Errorf("sampling: seat %d: %w", i, err)
		}
		want := uint64(0)
		if st.trackOut {
			want = st.generated
		}
		if out != want {
			return fmt.Errorf("sampling: seat %d: output counts sum to %d, want %d (generated %d, tracking %v)",
				i, out, want, st.generated, st.trackOut)
		}
		if !st.trackPrompt {
			for _, e := range st.counts.ents {
				if e.prompt {
					return fmt.Errorf("sampling: seat %d: token %d marked as prompt without repetition penalty", i, e.tok)
				}
			}
		}
	}
	return nil
}

func (s *Sampler) seat(seat int32) (*seat, error) {
	if seat < 0 || int(seat) >= len(s.seats) {
		return nil, fmt.Errorf("sampling: seat %d outside [0, %d)", seat, len(s.seats))
	}
	return &s.seats[seat], nil
}

// applyPenalties rewrites the logits of every tracked token, vLLM's way:
// repetition divides positive (multiplies negative) logits of tokens seen in
// prompt or output; frequency subtracts per output occurrence, presence once
// per distinct output token.
func (st *seat) applyPenalties(x []float32) {
	rep, pres, freq := st.p.RepetitionPenalty, st.p.PresencePenalty, st.p.FrequencyPenalty
	for _, e := range st.counts.ents {
		v := x[e.tok]
		if rep != 1 {
			if v > 0 {
				v /= rep
			} else {
				v *= rep
			}
		}
		if e.out > 0 {
			v -= freq*float32(e.out) + pres
		}
		x[e.tok] = v
	}
}

// prepare scales x in place, maps NaN to -Inf and ±overflow to ±MaxFloat32,
// and returns the maximum and its lowest index. A row with every entry -Inf
// is replaced by zeros (uniform).
func prepare(x []float32, scale float32) (float32, int32) {
	m, arg := float32(math.Inf(-1)), int32(0)
	for i, v := range x {
		v *= scale
		if v != v {
			v = float32(math.Inf(-1))
		} else if v > math.MaxFloat32 {
			v = math.MaxFloat32
		}
		x[i] = v
		if v > m {
			m, arg = v, int32(i)
		}
	}
	if math.IsInf(float64(m), -1) {
		clear(x)
		m = 0
	}
	return m, arg
}

func sumExp(x []float32, m float32) float64 {
	var z float64
	for _, v := range x {
		z += float64(expNeg(v - m))
	}
	return z
}

// topN fills toks/lps (same length n) with the n largest entries of x,
// largest first, ties by lower index; lps holds the raw x values.
func topN(x []float32, toks []int32, lps []float32) {
	n := len(toks)
	k := 0 // entries filled
	for i, v := range x {
		if k == n && !(v > lps[n-1]) {
			continue
		}
		// Insert after every entry >= v, so equal values keep index order.
		j := k
		if k < n {
			k++
		} else {
			j = n - 1
		}
		for j > 0 && lps[j-1] < v {
			toks[j], lps[j] = toks[j-1], lps[j-1]
			j--
		}
		toks[j], lps[j] = int32(i), v
	}
}

// mix64 is SplitMix64's finaliser: spreads consecutive integers over the
// whole seed space.
func mix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// uniform returns a float64 in [0, 1) from 53 random bits.
func uniform(r *rand.PCG) float64 {
	return float64(r.Uint64()>>11) * (1.0 / (1 << 53))
}
