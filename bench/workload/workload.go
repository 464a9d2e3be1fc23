// Package workload generates the seeded, token-id level traffic of the
// experiment harness: agentic programs with exact shared prefixes (seed 000),
// context-heavy attention-DP traffic (seed 004) and chat traffic with
// log-normal lengths. A workload is a pure function of its config: the same
// config, seed included, gives the same token ids, lengths, waits and
// arrival offsets bit for bit, on every Go release, because every draw
// comes from this package's own stream over PCG-DXSM (whose output the
// standard library specifies) rather than from math/rand's derived methods,
// which may change. Agentic workloads use integer and IEEE arithmetic only,
// so they are identical on every platform too; Poisson arrivals and
// log-normal lengths go through math.Log/Exp/Cos, whose last bit may differ
// between architectures' implementations.
//
// Times are offsets from the experiment's origin (time.Duration, ns
// resolution); the driver adds them to its clock. Token ids are int32 in a
// configured range [TokenMin, TokenMax) that should exclude special tokens
// (BOS, EOS).
package workload

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"time"
)

// Request is one inference call: a prompt and how many tokens to generate.
type Request struct {
	// ID is the request's index in its workload, 0-based.
	ID int
	// Arrival is when the request is submitted, from the experiment origin.
	Arrival time.Duration
	// Prompt holds the input token ids; the workload owns it and callers
	// must not modify it.
	Prompt []int32
	// MaxTokens is the number of tokens to generate (the driver runs with
	// EOS ignored so every request generates exactly this many).
	MaxTokens int
}

// TokenRange is the half-open id range [Min, Max) that prompts draw from.
type TokenRange struct {
	Min, Max int32
}

// The zero TokenRange means [DefaultTokenMin, DefaultTokenMax): it avoids
// ids 0..2 (unknown, BOS, EOS in llama vocabularies) and fits the smallest
// test vocabulary used here (stories260K: 512).
const (
	DefaultTokenMin = 3
	DefaultTokenMax = 512
)

func (r TokenRange) resolved() TokenRange {
	if r == (TokenRange{}) {
		return TokenRange{Min: DefaultTokenMin, Max: DefaultTokenMax}
	}
	return r
}

func (r TokenRange) validate(need int) error {
	if r.Min < 0 || r.Max <= r.Min {
		return fmt.Errorf("workload: token range [%d, %d) is empty or negative", r.Min, r.Max)
	}
	if int64(r.Max)-int64(r.Min) < int64(need) {
		return fmt.Errorf("workload: token range [%d, %d) holds %d ids but %d distinct ones are needed", r.Min, r.Max, int64(r.Max)-int64(r.Min), need)
	}
	return nil
}

// stream is a deterministic random source. Each (seed, purpose, index)
// triple gets its own independent stream, so e.g. program 7's tokens do not
// change when the batch grows from 8 to 32 programs.
type stream struct {
	pcg *rand.PCG
}

// Stream purposes; the values are part of the reproducibility contract.
const (
	purposeFamily   = 1
	purposeProgram  = 2
	purposeDistinct = 3
	purposeRequest  = 4
	purposeArrival  = 5
	purposeSystem   = 6
)

func newStream(seed uint64, purpose, index int) stream {
	// splitmix64 of (purpose, index) decorrelates the second PCG word.
	z := uint64(purpose)<<40 ^ uint64(index) + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return stream{pcg: rand.NewPCG(seed, z)}
}

// uintn is uniform in [0, n) by Lemire's multiply-and-reject; n > 0.
func (s stream) uintn(n uint64) uint64 {
	for {
		hi, lo := bits.Mul64(s.pcg.Uint64(), n)
		// Reject the low words that would bias the high word: those below
		// 2⁶⁴ mod n (lo ≥ n is always fine, and skips the division).
		if lo >= n || lo >= -n%n {
			return hi
		}
	}
}

// float is uniform in [0, 1) with 53 random bits.
func (s stream) float() float64 {
	return float64(s.pcg.Uint64()>>11) * 0x1p-53
}

// normal is a standard normal draw by the Box–Muller transform (one draw
// per two uniforms; simple and exactly reproducible).
func (s stream) normal() float64 {
	u1 := 1 - s.float() // (0, 1]: log is finite
	u2 := s.float()
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

// exponential is an Exp(1) draw.
func (s stream) exponential() float64 {
	return -math.Log(1 - s.float())
}

func (s stream) token(r TokenRange) int32 {
	return r.Min + int32(s.uintn(uint64(r.Max-r.Min)))
}

// tokens appends n tokens drawn from r to dst.
func (s stream) tokens(dst []int32, n int, r TokenRange) []int32 {
	for range n {
		dst = append(dst, s.token(r))
	}
	return dst
}

// distinct returns n distinct ids from r (n ≤ its size), in draw order.
func (s stream) distinct(n int, r TokenRange) []int32 {
	out := make([]int32, 0, n)
	seen := make(map[int32]bool, n)
	for len(out) < n {
		t := s.token(r)
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// jittered is base + U[-j, +j] (integer ns), clamped at 0.
func (s stream) jittered(base, j time.Duration) time.Duration {
	if j <= 0 {
		return max(base, 0)
	}
	d := base + time.Duration(s.uintn(uint64(2*j+1))) - j
	return max(d, 0)
}
