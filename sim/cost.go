package sim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/turnstile-llm/turnstile/internal/stats"
)

// Linear is the simulated device's cost model: the time of one step is
//
//	device = Fixed + PerPrefillToken·PrefillTokens + PerDecodeSeq·DecodeSeqs
//	         + PerContextToken·ContextTokens + PerPrefillPair·PrefillPairs
//	         + PerSharedPair·SharedPairs
//	host   = HostFixed + HostPerSeq·Seqs            (planning the next step)
//	step   = device + host        without overlap
//	       = max(device, host)    with Overlap: the host plans step n+1
//	                              while the device runs step n
//
// All coefficients are in seconds (per unit); a step's time is rounded to
// the nanosecond and never negative. Fitted profiles come from Calibrate;
// the built-in profiles (BuiltIn) are in h200.go.
type Linear struct {
	Fixed           float64 `json:"fixed_s"`
	PerPrefillToken float64 `json:"per_prefill_token_s"`
	PerDecodeSeq    float64 `json:"per_decode_seq_s"`
	PerContextToken float64 `json:"per_context_token_s"`
	PerPrefillPair  float64 `json:"per_prefill_pair_s"`
	PerSharedPair   float64 `json:"per_shared_pair_s"`
	HostFixed       float64 `json:"host_fixed_s"`
	HostPerSeq      float64 `json:"host_per_seq_s"`
	// Overlap hides host planning behind device time (see above).
	Overlap bool `json:"overlap"`
}

// Device is the device time of a step, in seconds.
func (l Linear) Device(s StepShape) float64 {
	return l.Fixed + l.PerPrefillToken*float64(s.PrefillTokens) + l.PerDecodeSeq*float64(s.DecodeSeqs) +
		l.PerContextToken*float64(s.ContextTokens) + l.PerPrefillPair*float64(s.PrefillPairs) +
		l.PerSharedPair*float64(s.SharedPairs)
}

// Host is the host planning time of a step, in seconds.
func (l Linear) Host(s StepShape) float64 {
	return l.HostFixed + l.HostPerSeq*float64(s.Seqs)
}

// StepTime implements CostModel.
func (l Linear) StepTime(s StepShape) time.Duration {
	d, h := l.Device(s), l.Host(s)
	t := d + h
	if l.Overlap {
		t = math.Max(d, h)
	}
	if !(t > 0) { // also NaN
		return 0
	}
	return time.Duration(math.Round(t * 1e9))
}

// Validate refuses negative or non-finite coefficients, naming the field.
func (l Linear) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"fixed", l.Fixed}, {"per prefill token", l.PerPrefillToken}, {"per decode sequence", l.PerDecodeSeq},
		{"per context token", l.PerContextToken}, {"per prefill pair", l.PerPrefillPair}, {"per shared pair", l.PerSharedPair}, {"host fixed", l.HostFixed}, {"host per sequence", l.HostPerSeq}} {
		if !(f.v >= 0) || math.IsInf(f.v, 0) {
			return fmt.Errorf("sim: cost coefficient %s is %v; want finite and ≥ 0", f.name, f.v)
		}
	}
	return nil
}

// Sample is one measured step for calibration: its shape and the time it
// took on the device (host planning excluded).
type Sample struct {
	Shape StepShape
	Time  time.Duration
}

// Calibrate fits the device coefficients of a Linear model to measured
// steps (time ≈ Fixed + PerPrefillToken·prefill + PerDecodeSeq·decode +
// PerContextToken·context + PerPrefillPair·prefill pairs) by least squares
// on relative error: each step's equation is divided by its measured time,
// so the fit minimises Σ((predicted − measured)/measured)². Plain least
// squares on seconds lets the few long prefill steps set every coefficient
// and misprices the many short decode steps, and a simulation needs each
// step's time right in proportion. A coefficient that comes out negative
// (noise on a small effect) is fixed at 0 and the rest refitted, one term
// at a time starting with the one whose negative price removes the most
// time over the samples, so the model never prices work below free. The
// returned fit is over the final model with residuals in seconds (RMS,
// MaxAbs, MaxRel, R² of the unweighted times). Host coefficients and
// Overlap are left zero for the caller to set.
//
// Every sample must have taken a positive time. The samples must vary
// every term (e.g. steps with and without prefill, with different decode
// counts, contexts and chunk lengths); a term that never varies
// independently is an error naming it. The shared-pair term is fitted only
// when some sample has shared pairs (traffic with groups).
func Calibrate(samples []Sample) (Linear, stats.Fit, error) {
	if len(samples) == 0 {
		return Linear{}, stats.Fit{}, fmt.Errorf("sim: calibrate: no samples")
	}
	names := []string{"fixed", "per prefill token", "per decode sequence", "per context token", "per prefill pair", "per shared pair"}
	row := func(s StepShape) []float64 {
		return []float64{1, float64(s.PrefillTokens), float64(s.DecodeSeqs), float64(s.ContextTokens), float64(s.PrefillPairs),
			float64(s.SharedPairs)}
	}
	y := make([]float64, len(samples))
	for i, s := range samples {
		if s.Time <= 0 {
			return Linear{}, stats.Fit{}, fmt.Errorf("sim: calibrate: sample %d took %v; want > 0", i, s.Time)
		}
		y[i] = s.Time.Seconds()
	}
	ones := make([]float64, len(samples))
	for i := range ones {
		ones[i] = 1
	}
	active := []int{0, 1, 2, 3, 4}
	// Shared pairs exist only where the traffic had groups (cascade
	// attention); without any, the term is not fitted and stays 0.
	if slices.ContainsFunc(samples, func(s Sample) bool { return s.Shape.SharedPairs > 0 }) {
		active = append(active, 5)
	}
	for {
		x := make([][]float64, len(samples))  // unweighted, for contributions and the reported fit
		xw := make([][]float64, len(samples)) // each row divided by its time
		for i, s := range samples {
			full := row(s.Shape)
			x[i] = make([]float64, len(active))
			xw[i] = make([]float64, len(active))
			for j, c := range active {
				x[i][j] = full[c]
				xw[i][j] = full[c] / y[i]
			}
		}
		fit, err := stats.LeastSquares(xw, ones)
		if err != nil {
			return Linear{}, stats.Fit{}, fmt.Errorf("sim: calibrate over terms %v: %w", pick(names, active), err)
		}
		// Drop the term whose negative price removes the most time over
		// the samples (coefficients differ in unit, contributions do not).
		worst, worstSum := -1, 0.0
		for j, v := range fit.Coef {
			sum := 0.0
			for i := range x {
				sum += v * x[i][j]
			}
			if v < 0 && (worst < 0 || sum < worstSum) {
				worst, worstSum = j, sum
			}
		}
		if worst < 0 {
			coef := make([]float64, len(names))
			for j, c := range active {
				coef[c] = fit.Coef[j]
			}
			return Linear{Fixed: coef[0], PerPrefillToken: coef[1], PerDecodeSeq: coef[2], PerContextToken: coef[3],
				PerPrefillPair: coef[4], PerSharedPair: coef[5]}, secondsFit(x, y, fit.Coef, coef), nil
		}
		active = slices.Delete(active, worst, worst+1)
		if len(active) == 0 {
			return Linear{}, stats.Fit{}, fmt.Errorf("sim: calibrate: every coefficient fitted negative")
		}
	}
}

// secondsFit reports the fit of coefficients c (over x's columns) to y in
// seconds; full is every term's coefficient, zeros included.
func secondsFit(x [][]float64, y, c, full []float64) stats.Fit {
	f := stats.Fit{Coef: full, Residuals: make([]float64, len(y))}
	mean := 0.0
	for _, v := range y {
		mean += v / float64(len(y))
	}
	var ss, tot float64
	for i, row := range x {
		pred := 0.0
		for j, v := range row {
			pred += c[j] * v
		}
		r := y[i] - pred
		f.Residuals[i] = r
		ss += r * r
		tot += (y[i] - mean) * (y[i] - mean)
		f.MaxAbs = math.Max(f.MaxAbs, math.Abs(r))
		f.MaxRel = math.Max(f.MaxRel, math.Abs(r)/y[i])
	}
	f.RMS = math.Sqrt(ss / float64(len(y)))
	switch {
	case tot > 0:
		f.R2 = 1 - ss/tot
	case ss <= 1e-30:
		f.R2 = 1
	}
	return f
}

func pick(names []string, idx []int) []string {
	out := make([]string, len(idx))
	for i, j := range idx {
		out[i] = names[j]
	}
	return out
}
