package serveload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/turnstile-llm/turnstile/internal/stats"
)

// The metrics follow vLLM's benchmark_serving definitions, over successful
// requests only:
//
//   - TTFT: from sending the request to its first token-carrying chunk (a
//     choice with non-empty text; a stream whose choices all have empty
//     text counts its first choice).
//   - TPOT, per request with more than one output token:
//     (E2E − TTFT) / (output_tokens − 1), output_tokens from usage. It
//     excludes the first token; a 1-token request has no TPOT.
//   - ITL: the gaps between successive token-carrying chunks of a request,
//     all gaps of all requests pooled (a chunk may carry more than one
//     token, so ITL and TPOT differ when a server batches its chunks).
//   - E2E: from sending the request to the end of its stream ([DONE]).
//   - Request throughput: successes / elapsed; output throughput: output
//     tokens / elapsed.
//   - Goodput: requests per second meeting every SLO given (value ≤ bound);
//     a 1-token request meets a TPOT bound, as in vLLM (its TPOT counts 0).
//
// Each metric reports its mean, median, population standard deviation, p90
// and p99; the percentiles (and the median) are nearest-rank, so each one is
// a measured value (numpy, which vLLM uses, interpolates instead).

// MaxITLSamples bounds the ITL gaps kept for percentiles: past it a
// uniform reservoir sample (Algorithm R) of that many is kept, 8 MiB. The
// count, mean and standard deviation stay exact (running sums).
const MaxITLSamples = 1 << 20

// Dist summarises one metric's samples. Durations are nanoseconds in JSON.
type Dist struct {
	// N is the number of samples (for ITL: every gap, kept or not).
	N      int           `json:"n"`
	Mean   time.Duration `json:"mean_ns"`
	Median time.Duration `json:"median_ns"`
	Std    time.Duration `json:"std_ns"`
	P90    time.Duration `json:"p90_ns"`
	P99    time.Duration `json:"p99_ns"`
}

// distOf summarises xs (nanoseconds); all zero when xs is empty.
func distOf(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	// xs is non-empty and NaN-free, so neither call can fail.
	p, _ := stats.Percentiles(xs, 50, 90, 99)
	mean, _ := stats.Mean(xs)
	ss := 0.0
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return Dist{N: len(xs), Mean: time.Duration(math.Round(mean)), Median: time.Duration(p[0]),
		Std: time.Duration(math.Round(math.Sqrt(ss / float64(len(xs))))), P90: time.Duration(p[1]), P99: time.Duration(p[2])}
}

// SLO is a set of per-request bounds for goodput; a zero field is no bound.
type SLO struct {
	TTFT time.Duration `json:"ttft_ns,omitempty"`
	TPOT time.Duration `json:"tpot_ns,omitempty"`
	E2E  time.Duration `json:"e2e_ns,omitempty"`
}

// IsZero reports whether s bounds nothing.
func (s SLO) IsZero() bool { return s == SLO{} }

// String is s in ParseSLO's format ("" when zero).
func (s SLO) String() string {
	var parts []string
	for _, kv := range []struct {
		k string
		v time.Duration
	}{{"ttft", s.TTFT}, {"tpot", s.TPOT}, {"e2e", s.E2E}} {
		if kv.v > 0 {
			parts = append(parts, kv.k+":"+kv.v.String())
		}
	}
	return strings.Join(parts, ",")
}

// ParseSLO parses "ttft:200ms,tpot:50ms,e2e:2s": comma-separated
// metric:bound pairs, each metric at most once (ttft, tpot, e2e; e2el is
// vLLM's name for e2e). A bound is a Go duration ("200ms", "1.5s") or a
// bare number of milliseconds, as vLLM's --goodput takes ("200"); it must
// be > 0.
func ParseSLO(s string) (SLO, error) {
	var slo SLO
	if strings.TrimSpace(s) == "" {
		return slo, errors.New("empty: want metric:bound pairs such as ttft:200ms,tpot:50ms,e2e:2s")
	}
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return SLO{}, fmt.Errorf("%q: want metric:bound (e.g. ttft:200ms)", part)
		}
		var dst *time.Duration
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "ttft":
			dst = &slo.TTFT
		case "tpot":
			dst = &slo.TPOT
		case "e2e", "e2el":
			dst = &slo.E2E
		default:
			return SLO{}, fmt.Errorf("%q: unknown metric %q (want ttft, tpot or e2e)", part, k)
		}
		if *dst != 0 {
			return SLO{}, fmt.Errorf("%q: %s given twice", part, k)
		}
		d, err := parseBound(strings.TrimSpace(v))
		if err != nil {
			return SLO{}, fmt.Errorf("%q: %w", part, err)
		}
		*dst = d
	}
	return slo, nil
}

// parseBound is a duration or a bare number of milliseconds, > 0.
func parseBound(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		ms, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil || math.IsNaN(ms) || math.IsInf(ms, 0) {
			return 0, fmt.Errorf("bound %q: want a duration (200ms) or milliseconds (200)", v)
		}
		d = time.Duration(ms * float64(time.Millisecond))
	}
	if d <= 0 {
		return 0, fmt.Errorf("bound %q: must be > 0", v)
	}
	return d, nil
}

// sample is one successful request's measurements.
type sample struct {
	ttft, e2e time.Duration
	tokens    int // usage.completion_tokens, >= 1
}

// tpot is s's time per output token after the first; ok is false for a
// 1-token request.
func (s sample) tpot() (time.Duration, bool) {
	if s.tokens <= 1 {
		return 0, false
	}
	return (s.e2e - s.ttft) / time.Duration(s.tokens-1), true
}

// meets reports whether s is within every bound of slo.
func (s sample) meets(slo SLO) bool {
	if slo.TTFT > 0 && s.ttft > slo.TTFT {
		return false
	}
	if slo.E2E > 0 && s.e2e > slo.E2E {
		return false
	}
	if t, ok := s.tpot(); ok && slo.TPOT > 0 && t > slo.TPOT {
		return false
	}
	return true
}

// metrics are the per-request distributions of a run.
type metrics struct {
	ttft, tpot, e2e Dist
	met             int // samples meeting the SLO (all of them when it is zero)
}

// summarize computes the TTFT, TPOT and E2E distributions of samples and
// how many meet slo.
func summarize(samples []sample, slo SLO) metrics {
	ttft := make([]float64, 0, len(samples))
	e2e := make([]float64, 0, len(samples))
	var tpot []float64
	var m metrics
	for _, s := range samples {
		ttft = append(ttft, float64(s.ttft))
		e2e = append(e2e, float64(s.e2e))
		if t, ok := s.tpot(); ok {
			tpot = append(tpot, float64(t))
		}
		if s.meets(slo) {
			m.met++
		}
	}
	m.ttft, m.tpot, m.e2e = distOf(ttft), distOf(tpot), distOf(e2e)
	return m
}

// reservoir pools ITL gaps from all requests under a lock: an exact count,
// mean and variance (Welford) and at most max kept gaps for percentiles, a
// uniform sample of all once more arrive (Algorithm R).
type reservoir struct {
	mu       sync.Mutex
	max      int
	kept     []float64
	n        int64
	mean, m2 float64
	rng      *rand.Rand
}

func newReservoir(max int, seed uint64) *reservoir {
	return &reservoir{max: max, rng: rand.New(rand.NewPCG(seed, 0x17ec))}
}

// add pools one request's gaps.
func (r *reservoir) add(gaps []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range gaps {
		x := float64(g)
		r.n++
		d := x - r.mean
		r.mean += d / float64(r.n)
		r.m2 += d * (x - r.mean)
		if len(r.kept) < r.max {
			r.kept = append(r.kept, x)
		} else if j := r.rng.Int64N(r.n); j < int64(r.max) {
			r.kept[j] = x
		}
	}
}

// dist summarises the pooled gaps: percentiles of the kept ones, the count,
// mean and standard deviation of all.
func (r *reservoir) dist() Dist {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := distOf(r.kept)
	if r.n > 0 {
		d.N, d.Mean = int(r.n), time.Duration(math.Round(r.mean))
		d.Std = time.Duration(math.Round(math.Sqrt(r.m2 / float64(r.n))))
	}
	return d
}

// poissonGap is the wait before the next arrival of a Poisson process of
// rate requests/s: an exponential draw of mean 1/rate.
func poissonGap(rng *rand.Rand, rate float64) time.Duration {
	return time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
}
