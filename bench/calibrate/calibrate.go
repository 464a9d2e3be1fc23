// Package calibrate fits the simulated device's cost model (sim.Linear) to
// a real runner, the engine behind `turnstile bench calibrate`: seeded
// traffic covering the shape space (decode batches of every size up to the
// max batch, growing contexts, long chunked prefills) runs through engines
// whose runner is wrapped in a sim.Recorder; sim.Calibrate fits the
// recorded training steps, and the fit is judged on held-out steps from
// traffic of another seed that the fit never saw.
//
// The error of one step is |predicted − measured| / measured, predicted by
// the fitted model's device time (Linear.Device) from the step's shape.
//
// A fit is kept on disk as a Profile (Profile.WriteProfile, ReadProfile),
// which --profile gives the simulated device.
package calibrate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/turnstile-llm/turnstile/bench/rig"
	"github.com/turnstile-llm/turnstile/bench/traffic"
	"github.com/turnstile-llm/turnstile/bench/workload"
	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/internal/stats"
	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/sim"
	"github.com/turnstile-llm/turnstile/step"
)

// Sizes are what one pass's runner must hold.
type Sizes struct {
	Seats, KVBlocks, BlockSize, MaxBatchTokens int
}

// Device is one pass's runner.
type Device struct {
	// Runner executes the steps (the CPU, CUDA or simulated runner).
	Runner step.Runner
	// Tokenizer is the engine's.
	Tokenizer executor.Tokenizer
	// RealTime: the runner takes wall time, so the recorder times it on
	// the real clock and spends it on the pass's virtual clock. Otherwise
	// the runner spends its simulated time on the virtual clock inside
	// Execute (sim.Runner without DeferSpend) and the recorder reads it
	// there.
	RealTime bool
	// Close releases the runner after its pass; nil: nothing to release.
	Close func() error
}

// Factory builds a fresh runner for one pass on the pass's virtual clock.
type Factory func(s Sizes, virt *clock.Virtual) (Device, error)

// simVocab bounds the traffic's token ids: workload's default range, which
// fits the smallest vocabulary in use (stories260K: 512) and leaves 0..2
// (unknown, rig.BOS, rig.EOS) alone.
const simVocab = workload.DefaultTokenMax

// CPU is the factory of the real CPU runner on m with workers cores (0:
// GOMAXPROCS) and a KV cache of type kv (kernels.F32, F16 or BF16). The
// caller keeps m open for the run.
func CPU(m *model.Llama, workers int, kv kernels.DType) Factory {
	return func(s Sizes, _ *clock.Virtual) (Device, error) {
		r, err := model.NewCPURunner(m, model.CPURunnerConfig{Seats: s.Seats, KVBlocks: s.KVBlocks, BlockSize: s.BlockSize,
			MaxBatchTokens: s.MaxBatchTokens, Workers: workers, KVType: kv})
		if err != nil {
			return Device{}, err
		}
		return Device{Runner: r, Tokenizer: m.Tokenizer(), RealTime: true, Close: r.Close}, nil
	}
}

// CUDA is the factory of the CUDA runner for m on device ordinal dev with
// a KV cache of type kv (kernels.F32 or BF16) (wall time; Execute returns
// once the step's tokens are on the host). Each pass
// builds a runner whose KV cache holds exactly the pass's blocks; its first
// steps compile kernels and capture graphs, which Config.Warmup skips.
func CUDA(m *model.Llama, dev int, kv kernels.DType) Factory {
	return func(s Sizes, _ *clock.Virtual) (Device, error) {
		r, err := model.NewCUDARunner(m, model.CUDARunnerConfig{Device: dev, Seats: s.Seats, KVBlocks: s.KVBlocks,
			BlockSize: s.BlockSize, MaxBatchTokens: s.MaxBatchTokens, KVType: kv})
		if err != nil {
			return Device{}, err
		}
		return Device{Runner: r, Tokenizer: m.Tokenizer(), RealTime: true, Close: r.Close}, nil
	}
}

// Sim is the factory of the simulated device priced by cost (device time
// only: a Linear's host terms are not what a recorder sees), holding
// maxContext positions per sequence.
func Sim(cost sim.CostModel, maxContext int) Factory {
	return func(s Sizes, virt *clock.Virtual) (Device, error) {
		r, err := sim.New(sim.Config{
			Capacity: step.Capacity{Seats: s.Seats, KVBlocks: s.KVBlocks, BlockSize: s.BlockSize, MaxContext: maxContext,
				MaxBatchTokens: s.MaxBatchTokens, Vocab: simVocab},
			Cost: cost, Clock: virt, Seed: 1, EOS: rig.EOS, TokenMin: workload.DefaultTokenMin, TokenMax: simVocab,
		})
		if err != nil {
			return Device{}, err
		}
		tok, err := sim.NewTokenizer(simVocab, rig.BOS, rig.EOS)
		if err != nil {
			return Device{}, err
		}
		return Device{Runner: r, Tokenizer: tok}, nil
	}
}

// Config is one calibration.
type Config struct {
	// Device builds each pass's runner.
	Device Factory
	// MaxBatchSize is the largest engine batch; decode passes run batches
	// of 1, 2, 4, … up to it.
	MaxBatchSize int
	// MaxBatchTokens is the step's token budget (longer prompts prefill in
	// chunks); BlockSize the KV block size. 0: 256 and 16.
	MaxBatchTokens, BlockSize int
	// MaxContext bounds prompt + output of every request (≤ the runner's
	// context); prompts of the prefill-heavy pass are around half of it.
	MaxContext int
	// Requests is the number of requests of each set (training and
	// held-out), spread over the passes; a pass gets at least its batch
	// size, so small values are rounded up.
	Requests int
	// Seed seeds the training traffic; the held-out traffic uses
	// Seed + HeldOutSeedOffset.
	Seed uint64
	// Warmup is the number of steps at the start of every pass that are
	// run but not recorded (a fresh runner's first steps touch cold
	// memory); 0: none.
	Warmup int
	// CascadeMinBlocks is the engine's grouping threshold
	// (executor.Config): with it > 0 and MaxBatchSize ≥ 2 one more pass
	// runs families of requests sharing prefixes, so decode steps carry
	// groups and the fit prices shared pairs; 0: no groups, and the
	// shared-pair term is not fitted.
	CascadeMinBlocks int
}

// HeldOutSeedOffset separates the held-out traffic's seed from the
// training seed.
const HeldOutSeedOffset = 1_000_003

// Errors summarises the relative step-time errors of one class of steps.
type Errors struct {
	// Samples is the number of steps in the class.
	Samples int `json:"samples"`
	// Median and P90 of |predicted − measured| / measured (nearest rank;
	// 0 when the class is empty).
	Median float64 `json:"median_rel_err"`
	P90    float64 `json:"p90_rel_err"`
}

// Result is a calibration.
type Result struct {
	// Linear is the fitted device model (host terms zero).
	Linear sim.Linear
	// Fit is sim.Calibrate's fit over the training steps (residuals in
	// seconds, R²).
	Fit stats.Fit
	// Train and HeldOut are the recorded steps of each set.
	Train, HeldOut []sim.Sample
	// HeldOutAll, HeldOutPrefill and HeldOutDecode are the held-out
	// errors over every step, steps with prefill tokens and decode-only
	// steps; TrainAll is the in-sample error, for comparison.
	HeldOutAll, HeldOutPrefill, HeldOutDecode, TrainAll Errors
	// Noise is the measurement's own repeatability over every recorded
	// step (NoiseFloor): no model of the shape can predict better than it.
	Noise Errors
}

// pass is one traffic run on a fresh engine.
type pass struct {
	name string
	mbs  int
	reqs func(seed uint64, n int) ([]workload.Request, error)
	// share of the set's requests.
	share float64
	// shared: the pass's traffic is shared-prefix families (families),
	// not reqs.
	shared bool
}

func (c Config) resolved() (Config, error) {
	if c.MaxBatchTokens == 0 {
		c.MaxBatchTokens = 256
	}
	if c.BlockSize == 0 {
		c.BlockSize = 16
	}
	switch {
	case c.Device == nil:
		return c, fmt.Errorf("calibrate: no device factory")
	case c.MaxBatchSize < 1:
		return c, fmt.Errorf("calibrate: max batch size %d, want ≥ 1", c.MaxBatchSize)
	case c.MaxBatchTokens < 1:
		return c, fmt.Errorf("calibrate: max batch tokens %d, want ≥ 1", c.MaxBatchTokens)
	case c.BlockSize < 1:
		return c, fmt.Errorf("calibrate: block size %d, want ≥ 1", c.BlockSize)
	case c.MaxContext < 64:
		return c, fmt.Errorf("calibrate: max context %d, want ≥ 64", c.MaxContext)
	case c.Requests < 8:
		return c, fmt.Errorf("calibrate: %d requests per set, want ≥ 8 to cover every pass", c.Requests)
	case c.Warmup < 0:
		return c, fmt.Errorf("calibrate: warmup %d steps, want ≥ 0", c.Warmup)
	case c.CascadeMinBlocks < 0:
		return c, fmt.Errorf("calibrate: cascade min blocks %d, want ≥ 0", c.CascadeMinBlocks)
	}
	return c, nil
}

// passes is the traffic of one set: chat at every decode batch size
// (short prompts, outputs long enough that decode dominates), long outputs
// at the max batch (contexts grow to a quarter of MaxContext and beyond),
// context-heavy prefill (prompts around half of MaxContext, two output
// tokens) at the max batch, and, with cascade groups on, shared-prefix
// families at the max batch (a quarter more requests). Every pass submits
// its requests at once, so the engine's batch, not arrival timing, shapes
// the steps and the mix does not depend on how fast the device is.
func (c Config) passes() []pass {
	maxCtx := c.MaxContext
	chat := func(in, out workload.LogNormal) func(seed uint64, n int) ([]workload.Request, error) {
		return func(seed uint64, n int) ([]workload.Request, error) {
			return workload.Chat(workload.ChatConfig{Seed: seed, Requests: n, Input: in, Output: out})
		}
	}
	short := workload.LogNormal{Median: float64(maxCtx) / 32, Sigma: 1, Min: 2, Max: maxCtx / 4}
	var ps []pass
	var sizes []int
	for b := 1; b < c.MaxBatchSize; b *= 2 {
		sizes = append(sizes, b)
	}
	sizes = append(sizes, c.MaxBatchSize)
	for _, b := range sizes {
		ps = append(ps, pass{name: fmt.Sprintf("chat batch %d", b), mbs: b, share: 0.5 / float64(len(sizes)),
			reqs: chat(short, workload.LogNormal{Median: float64(maxCtx) / 32, Sigma: 0.8, Min: 1, Max: maxCtx / 4})})
	}
	ps = append(ps, pass{name: "long outputs", mbs: c.MaxBatchSize, share: 0.25,
		reqs: chat(short, workload.LogNormal{Median: float64(maxCtx) / 4, Sigma: 0.5, Min: 1, Max: maxCtx / 2})})
	ps = append(ps, pass{name: "context heavy", mbs: c.MaxBatchSize, share: 0.25,
		reqs: func(seed uint64, n int) ([]workload.Request, error) {
			return workload.ContextHeavy(workload.ContextHeavyConfig{Seed: seed, Requests: n, InputTokens: maxCtx / 2,
				InputSpread: 0.9, OutputTokens: 2})
		}})
	if c.CascadeMinBlocks > 0 && c.MaxBatchSize >= 2 {
		ps = append(ps, pass{name: "shared prefixes", mbs: c.MaxBatchSize, share: 0.25, shared: true})
	}
	return ps
}

// Run calibrates: for each pass it runs the training traffic and then the
// held-out traffic (interleaved, so slow drift of a real device affects
// both sets alike), fits the training steps and measures the held-out
// error.
func Run(ctx context.Context, c Config) (Result, error) {
	c, err := c.resolved()
	if err != nil {
		return Result{}, err
	}
	var res Result
	for i, p := range c.passes() {
		// At least a full batch, or the pass never reaches its batch size.
		n := max(p.mbs, int(math.Round(p.share*float64(c.Requests))))
		for _, set := range []struct {
			seed uint64
			into *[]sim.Sample
		}{{c.Seed, &res.Train}, {c.Seed + HeldOutSeedOffset, &res.HeldOut}} {
			// Each pass has its own stream of seeds within the set.
			samples, err := c.runPass(ctx, p, set.seed+uint64(i)*7919, n)
			if err != nil {
				return Result{}, fmt.Errorf("calibrate: pass %q (seed %d): %w", p.name, set.seed, err)
			}
			*set.into = append(*set.into, samples...)
		}
	}
	res.Linear, res.Fit, err = sim.Calibrate(res.Train)
	if err != nil {
		return Result{}, fmt.Errorf("calibrate: fit over %d training steps: %w", len(res.Train), err)
	}
	if res.TrainAll, err = RelErrors(res.Linear, res.Train, nil); err != nil {
		return Result{}, err
	}
	for _, cl := range []struct {
		into *Errors
		keep func(sim.StepShape) bool
	}{{&res.HeldOutAll, nil}, {&res.HeldOutPrefill, IsPrefill}, {&res.HeldOutDecode, func(s sim.StepShape) bool { return !IsPrefill(s) }}} {
		if *cl.into, err = RelErrors(res.Linear, res.HeldOut, cl.keep); err != nil {
			return Result{}, err
		}
	}
	if res.Noise, err = NoiseFloor(slices.Concat(res.Train, res.HeldOut)); err != nil {
		return Result{}, err
	}
	return res, nil
}

// noiseBucket is the context-per-sequence width (tokens) within which
// decode steps count as the same shape for NoiseFloor.
const noiseBucket = 16

// noiseMinGroup is the fewest steps a shape group needs to count.
const noiseMinGroup = 5

// NoiseFloor is how far measured steps of the same shape stray from each
// other: decode-only steps are grouped by decode sequences and context per
// sequence (in buckets of 16 tokens); over groups of at least 5 steps it
// reports the median and P90 of |time − group median| / group median. It
// is the error a perfect model of the shape would still make, so a fit
// error near it is measurement noise (a shared machine, timer and
// scheduler jitter), not model error. Samples with no time are an error.
func NoiseFloor(samples []sim.Sample) (Errors, error) {
	type key struct{ decode, ctxBucket int }
	groups := map[key][]float64{}
	for i, s := range samples {
		if IsPrefill(s.Shape) || s.Shape.DecodeSeqs == 0 {
			continue
		}
		t := s.Time.Seconds()
		if !(t > 0) {
			return Errors{}, fmt.Errorf("calibrate: step %d (%+v) took %v; noise needs positive times", i, s.Shape, s.Time)
		}
		k := key{s.Shape.DecodeSeqs, s.Shape.ContextTokens / s.Shape.DecodeSeqs / noiseBucket}
		groups[k] = append(groups[k], t)
	}
	var dev []float64
	for _, ts := range groups {
		if len(ts) < noiseMinGroup {
			continue
		}
		m, err := stats.Percentiles(ts, 50)
		if err != nil {
			return Errors{}, fmt.Errorf("calibrate: %w", err)
		}
		for _, t := range ts {
			dev = append(dev, math.Abs(t-m[0])/m[0])
		}
	}
	return summarise(dev)
}

// summarise is the count, median and P90 of relative errors rel (zero
// Errors when there are none).
func summarise(rel []float64) (Errors, error) {
	if len(rel) == 0 {
		return Errors{}, nil
	}
	ps, err := stats.Percentiles(rel, 50, 90)
	if err != nil {
		return Errors{}, fmt.Errorf("calibrate: %w", err)
	}
	return Errors{Samples: len(rel), Median: ps[0], P90: ps[1]}, nil
}

// IsPrefill says whether a step carries prefill tokens (the rest are
// decode-only).
func IsPrefill(s sim.StepShape) bool { return s.PrefillTokens > 0 }

// RelErrors is the median and P90 of |l.Device(shape) − time| / time over
// the samples keep accepts (nil: all). A sample that took no time is an
// error (its relative error is undefined).
func RelErrors(l sim.Linear, samples []sim.Sample, keep func(sim.StepShape) bool) (Errors, error) {
	var rel []float64
	for i, s := range samples {
		if keep != nil && !keep(s.Shape) {
			continue
		}
		t := s.Time.Seconds()
		if !(t > 0) {
			return Errors{}, fmt.Errorf("calibrate: step %d (%+v) took %v; relative error needs a positive time", i, s.Shape, s.Time)
		}
		rel = append(rel, math.Abs(l.Device(s.Shape)-t)/t)
	}
	return summarise(rel)
}

// runPass runs n requests of p's traffic on a fresh engine and returns the
// recorded steps after the warm-up.
func (c Config) runPass(ctx context.Context, p pass, seed uint64, n int) (samples []sim.Sample, err error) {
	var reqs, prime []workload.Request
	extraBlocks := 0 // cached prefixes kept beside the seats' blocks
	if p.shared {
		ft, err := families(seed, n, p.mbs, c.MaxContext, c.BlockSize)
		if err != nil {
			return nil, err
		}
		reqs, prime, extraBlocks = ft.members, ft.prime, ft.prefixTokens/c.BlockSize+len(ft.prime)
	} else if reqs, err = p.reqs(seed, n); err != nil {
		return nil, err
	}
	longest := 0
	for i := range reqs {
		r := &reqs[i]
		// Keep every request within MaxContext: trim the output first,
		// then the prompt (at least one prompt and one output token).
		r.MaxTokens = max(1, min(r.MaxTokens, c.MaxContext/2))
		if len(r.Prompt)+r.MaxTokens > c.MaxContext {
			r.Prompt = r.Prompt[:max(1, c.MaxContext-r.MaxTokens)]
		}
		longest = max(longest, len(r.Prompt)+r.MaxTokens)
	}
	seats, err := executor.Config{MaxBatchSize: p.mbs}.DeriveSeats()
	if err != nil {
		return nil, err
	}
	perSeq := (longest + c.BlockSize - 1) / c.BlockSize
	sizes := Sizes{Seats: seats, KVBlocks: seats*(perSeq+1) + extraBlocks, BlockSize: c.BlockSize, MaxBatchTokens: c.MaxBatchTokens}
	virt := clock.NewVirtual(time.Unix(0, 0))
	dev, err := c.Device(sizes, virt)
	if err != nil {
		return nil, fmt.Errorf("device: %w", err)
	}
	if dev.Close != nil {
		defer func() { err = errors.Join(err, dev.Close()) }()
	}
	if got := dev.Runner.Capacity().MaxContext; got < c.MaxContext {
		return nil, fmt.Errorf("max context %d exceeds the runner's %d", c.MaxContext, got)
	}
	timer := clock.Clock(virt)
	if dev.RealTime {
		timer = clock.Real{}
	}
	rec, err := sim.NewRecorder(dev.Runner, timer)
	if err != nil {
		return nil, err
	}
	if dev.RealTime {
		rec.SpendOn(virt)
	}
	eng, err := executor.New(executor.Config{MaxBatchSize: p.mbs, Clock: virt, Model: "calibrate", Seed: seed,
		CascadeMinBlocks: c.CascadeMinBlocks}, rec, dev.Tokenizer)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, eng.Close()) }()
	// Primers first and to completion: their prefixes stay cached for the
	// members (see familyTraffic).
	for _, rs := range [][]workload.Request{prime, reqs} {
		if len(rs) == 0 {
			continue
		}
		if _, err := traffic.Drive(ctx, traffic.Run{Engine: eng, Clock: virt, Requests: rs, SamplingSeed: seed}); err != nil {
			return nil, err
		}
	}
	all := rec.Samples()
	return all[min(c.Warmup, len(all)):], nil
}
