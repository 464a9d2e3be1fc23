package calibrate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"

	"github.com/turnstile-llm/turnstile/sim"
)

// Profile is a calibration written to disk: the fitted device model of one
// runner with what it was fitted on and how well it predicts held-out
// steps. Times are seconds; errors are fractions (0.1 = 10%).
type Profile struct {
	// Model names the model (its file's base name); Runner is cpu, cuda
	// or sim; Workers is the CPU runner's cores (0: GOMAXPROCS, or not a
	// CPU runner).
	Model   string `json:"model"`
	Runner  string `json:"runner"`
	Workers int    `json:"workers"`
	// MaxBatchSize, Requests (per set) and Seed (training traffic) are the
	// calibration's settings.
	MaxBatchSize int    `json:"max_batch_size"`
	Requests     int    `json:"requests"`
	Seed         uint64 `json:"seed"`
	// Linear is the fitted device model (host terms zero).
	Linear sim.Linear `json:"linear"`
	// TrainSamples and HeldOutSamples count recorded steps.
	TrainSamples   int `json:"train_samples"`
	HeldOutSamples int `json:"held_out_samples"`
	// MedianRelErr and P90RelErr are over every held-out step;
	// HeldOutPrefill and HeldOutDecode split them by class.
	MedianRelErr   float64 `json:"median_rel_err"`
	P90RelErr      float64 `json:"p90_rel_err"`
	HeldOutPrefill Errors  `json:"held_out_prefill"`
	HeldOutDecode  Errors  `json:"held_out_decode"`
	// R2 and RMS (seconds) are the least-squares fit's over the training
	// steps.
	R2  float64 `json:"r2"`
	RMS float64 `json:"rms_s"`
}

// Profile is r as a profile of the named model on the named runner; the
// caller fills in the calibration's settings.
func (r Result) Profile(model, runner string, workers int) Profile {
	return Profile{Model: model, Runner: runner, Workers: workers, Linear: r.Linear,
		TrainSamples: len(r.Train), HeldOutSamples: len(r.HeldOut),
		MedianRelErr: r.HeldOutAll.Median, P90RelErr: r.HeldOutAll.P90,
		HeldOutPrefill: r.HeldOutPrefill, HeldOutDecode: r.HeldOutDecode,
		R2: r.Fit.R2, RMS: r.Fit.RMS}
}

// Validate checks every field, naming the first bad one by its JSON name.
func (p Profile) Validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("calibrate: profile field %s = %v: want %s", field, v, want)
	}
	frac := func(v float64) bool { return v >= 0 && !math.IsInf(v, 0) } // also refuses NaN
	switch {
	case p.Model == "":
		return bad("model", `""`, "a model name")
	case p.Runner != "cpu" && p.Runner != "cuda" && p.Runner != "sim":
		return bad("runner", fmt.Sprintf("%q", p.Runner), "cpu, cuda or sim")
	case p.Workers < 0:
		return bad("workers", p.Workers, "≥ 0")
	case p.MaxBatchSize < 1:
		return bad("max_batch_size", p.MaxBatchSize, "≥ 1")
	case p.Requests < 1:
		return bad("requests", p.Requests, "≥ 1")
	case p.TrainSamples < 1:
		return bad("train_samples", p.TrainSamples, "≥ 1")
	case p.HeldOutSamples < 1:
		return bad("held_out_samples", p.HeldOutSamples, "≥ 1")
	case !frac(p.MedianRelErr):
		return bad("median_rel_err", p.MedianRelErr, "finite and ≥ 0")
	case !frac(p.P90RelErr) || p.P90RelErr < p.MedianRelErr:
		return bad("p90_rel_err", p.P90RelErr, "finite and ≥ median_rel_err")
	case math.IsNaN(p.R2) || p.R2 > 1:
		return bad("r2", p.R2, "a number ≤ 1")
	case !frac(p.RMS):
		return bad("rms_s", p.RMS, "finite and ≥ 0")
	}
	for _, c := range []struct {
		name string
		e    Errors
	}{{"held_out_prefill", p.HeldOutPrefill}, {"held_out_decode", p.HeldOutDecode}} {
		switch {
		case c.e.Samples < 0:
			return bad(c.name+".samples", c.e.Samples, "≥ 0")
		case !frac(c.e.Median):
			return bad(c.name+".median_rel_err", c.e.Median, "finite and ≥ 0")
		case !frac(c.e.P90) || c.e.P90 < c.e.Median:
			return bad(c.name+".p90_rel_err", c.e.P90, "finite and ≥ its median_rel_err")
		}
	}
	if n := p.HeldOutPrefill.Samples + p.HeldOutDecode.Samples; n != p.HeldOutSamples {
		return bad("held_out_samples", p.HeldOutSamples, fmt.Sprintf("held_out_prefill.samples + held_out_decode.samples = %d", n))
	}
	if err := p.Linear.Validate(); err != nil {
		return fmt.Errorf("calibrate: profile field linear: %w", err)
	}
	return nil
}

// WriteProfile validates p and writes it to path as indented JSON.
func (p Profile) WriteProfile(path string) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return writeJSON(path, p)
}

// writeJSON writes p to path as indented JSON without validating it.
func writeJSON(path string, p Profile) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("calibrate: encode profile: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("calibrate: write profile: %w", err)
	}
	return nil
}

// ReadProfile reads and validates a profile written by WriteProfile; an
// unknown field, a malformed file or an invalid value is an error naming
// the path and the field.
func ReadProfile(path string) (Profile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Profile{}, fmt.Errorf("calibrate: read profile: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var p Profile
	if err := dec.Decode(&p); err != nil {
		return Profile{}, fmt.Errorf("calibrate: profile %s: %w", path, err)
	}
	if dec.More() {
		return Profile{}, fmt.Errorf("calibrate: profile %s: data after the profile object", path)
	}
	if err := p.Validate(); err != nil {
		return Profile{}, fmt.Errorf("%w (in %s)", err, path)
	}
	return p, nil
}
