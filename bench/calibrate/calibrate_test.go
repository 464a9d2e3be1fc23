package calibrate

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/sim"
)

// truth is the built-in profile as a recorder sees it: device time only.
func truth() sim.Linear {
	l := sim.H200Llama3_8B(false)
	l.HostFixed, l.HostPerSeq = 0, 0
	return l
}

// TestRunRecoversSimModel: on the simulated device priced by a known model
// the fit gives the model back and predicts the held-out steps to the
// nanosecond rounding of step times.
func TestRunRecoversSimModel(t *testing.T) {
	want := truth()
	res, err := Run(context.Background(), Config{Device: Sim(want, 1024), MaxBatchSize: 4, MaxContext: 1024, Requests: 24, Seed: 3})
	require.NoError(t, err)
	require.InEpsilon(t, want.Fixed, res.Linear.Fixed, 1e-6)
	require.InEpsilon(t, want.PerPrefillToken, res.Linear.PerPrefillToken, 1e-6)
	require.InEpsilon(t, want.PerDecodeSeq, res.Linear.PerDecodeSeq, 1e-4)
	require.InEpsilon(t, want.PerContextToken, res.Linear.PerContextToken, 1e-3)
	require.InDelta(t, 1, res.Fit.R2, 1e-9)

	require.Equal(t, len(res.HeldOut), res.HeldOutAll.Samples)
	require.Equal(t, res.HeldOutAll.Samples, res.HeldOutPrefill.Samples+res.HeldOutDecode.Samples)
	require.Positive(t, res.HeldOutPrefill.Samples)
	require.Positive(t, res.HeldOutDecode.Samples)
	require.Equal(t, len(res.Train), res.TrainAll.Samples)
	for _, e := range []Errors{res.HeldOutAll, res.HeldOutPrefill, res.HeldOutDecode, res.TrainAll} {
		require.Less(t, e.P90, 1e-6, "only the nanosecond rounding of step times is left")
		require.LessOrEqual(t, e.Median, e.P90)
	}
}

// TestRunRecoversSharedPairs: with cascade groups on, the shared-prefix
// families put groups of varying size and shared length into decode steps,
// and the fit recovers the shared pair's price of either built-in profile
// (they differ in it) beside every other term.
func TestRunRecoversSharedPairs(t *testing.T) {
	for _, name := range sim.BuiltInProfiles() {
		t.Run(name, func(t *testing.T) {
			want, err := sim.BuiltIn(name, false)
			require.NoError(t, err)
			want.HostFixed, want.HostPerSeq = 0, 0
			const mbs, maxCtx = 8, 1024
			res, err := Run(context.Background(), Config{Device: Sim(want, maxCtx), MaxBatchSize: mbs, MaxContext: maxCtx, Requests: 64,
				Seed: 5, CascadeMinBlocks: 2})
			require.NoError(t, err)
			sizes, runs := map[int]bool{}, map[int]bool{}
			for _, s := range res.Train {
				if s.Shape.SharedPairs > 0 && s.Shape.DecodeSeqs > 0 {
					runs[s.Shape.SharedPairs] = true
					sizes[s.Shape.DecodeSeqs] = true
				}
			}
			require.Greater(t, len(runs), 4, "shared pairs vary")
			require.Greater(t, len(sizes), 2, "decode steps with groups vary in size")
			require.InEpsilon(t, want.PerSharedPair, res.Linear.PerSharedPair, 1e-3)
			require.InEpsilon(t, want.PerContextToken, res.Linear.PerContextToken, 1e-3)
			require.InEpsilon(t, want.Fixed, res.Linear.Fixed, 1e-5)
			require.InEpsilon(t, want.PerDecodeSeq, res.Linear.PerDecodeSeq, 1e-3)
			require.Less(t, res.HeldOutAll.P90, 1e-6, "only the nanosecond rounding of step times is left")
		})
	}
}

// TestRunCoversShapes: the traffic reaches every decode batch size up to
// the max, prefill and decode-only steps, and long contexts; the held-out
// traffic is not the training traffic.
func TestRunCoversShapes(t *testing.T) {
	const mbs, maxCtx = 5, 512
	res, err := Run(context.Background(), Config{Device: Sim(truth(), maxCtx), MaxBatchSize: mbs, MaxContext: maxCtx, Requests: 16, Seed: 9})
	require.NoError(t, err)
	decodes := map[int]bool{}
	var longest, widest int
	for _, s := range res.Train {
		if !IsPrefill(s.Shape) {
			decodes[s.Shape.DecodeSeqs] = true
		}
		longest = max(longest, s.Shape.ContextTokens/max(1, s.Shape.Seqs))
		widest = max(widest, s.Shape.PrefillTokens)
	}
	for b := 1; b <= mbs; b++ {
		require.True(t, decodes[b], "no decode-only step of %d sequences", b)
	}
	require.Greater(t, longest, maxCtx/4, "contexts grow")
	require.Equal(t, 256, widest, "long prompts prefill in full chunks")

	same := len(res.Train) == len(res.HeldOut)
	for i := 0; same && i < len(res.Train); i++ {
		same = res.Train[i] == res.HeldOut[i]
	}
	require.False(t, same, "held-out traffic repeats the training traffic")
}

// TestRunCPU calibrates the real CPU runner on stories260K briefly. The
// error is wall-clock timing on a shared machine, so only its sanity is
// asserted, not the 10% goal.
func TestRunCPU(t *testing.T) {
	path, err := gguf.TestModelPath()
	require.NoError(t, err)
	m, err := model.LoadLlama(path, model.LlamaOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	res, err := Run(context.Background(), Config{Device: CPU(m, 1, kernels.F32), MaxBatchSize: 2, MaxBatchTokens: 64, MaxContext: 256,
		Requests: 8, Seed: 1, Warmup: 2})
	require.NoError(t, err)
	require.Greater(t, len(res.Train), 50)
	require.Greater(t, len(res.HeldOut), 50)
	require.NoError(t, res.Linear.Validate(), "coefficients finite and non-negative")
	require.Positive(t, res.Linear.Device(sim.StepShape{Seqs: 1, DecodeSeqs: 1, ContextTokens: 100}))
	for _, e := range []Errors{res.HeldOutAll, res.HeldOutPrefill, res.HeldOutDecode} {
		require.Positive(t, e.Samples)
		require.False(t, math.IsNaN(e.Median) || math.IsInf(e.P90, 0))
	}
	for _, s := range append(res.Train, res.HeldOut...) {
		require.Positive(t, s.Time)
	}
}

func TestRunRefusesBadConfig(t *testing.T) {
	ok := Config{Device: Sim(truth(), 1024), MaxBatchSize: 2, MaxContext: 1024, Requests: 8}
	for _, tc := range []struct {
		name string
		edit func(c *Config)
		want string
	}{
		{"no device", func(c *Config) { c.Device = nil }, "no device factory"},
		{"batch", func(c *Config) { c.MaxBatchSize = 0 }, "max batch size 0"},
		{"tokens", func(c *Config) { c.MaxBatchTokens = -1 }, "max batch tokens -1"},
		{"block", func(c *Config) { c.BlockSize = -16 }, "block size -16"},
		{"context", func(c *Config) { c.MaxContext = 10 }, "max context 10"},
		{"requests", func(c *Config) { c.Requests = 3 }, "3 requests per set"},
		{"warmup", func(c *Config) { c.Warmup = -1 }, "warmup -1"},
		{"context beyond the device", func(c *Config) { c.MaxContext = 2048 }, "max context 2048 exceeds the runner's 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			_, err := Run(context.Background(), c)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestRelErrors(t *testing.T) {
	l := sim.Linear{Fixed: 1, PerDecodeSeq: 1} // 1 s + 1 s per decode sequence
	samples := []sim.Sample{
		{Shape: sim.StepShape{Seqs: 1, DecodeSeqs: 1}, Time: 2 * time.Second},           // exact
		{Shape: sim.StepShape{Seqs: 1, DecodeSeqs: 1}, Time: 4 * time.Second},           // |2-4|/4
		{Shape: sim.StepShape{Seqs: 1, PrefillTokens: 9}, Time: 500 * time.Millisecond}, // |1-0.5|/0.5
	}
	for _, tc := range []struct {
		name string
		keep func(sim.StepShape) bool
		want Errors
	}{
		{"all", nil, Errors{Samples: 3, Median: 0.5, P90: 1}},
		{"prefill", IsPrefill, Errors{Samples: 1, Median: 1, P90: 1}},
		{"decode", func(s sim.StepShape) bool { return !IsPrefill(s) }, Errors{Samples: 2, Median: 0, P90: 0.5}},
		{"none", func(sim.StepShape) bool { return false }, Errors{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RelErrors(l, samples, tc.keep)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	_, err := RelErrors(l, []sim.Sample{{Shape: sim.StepShape{Seqs: 1, DecodeSeqs: 1}}}, nil)
	require.ErrorContains(t, err, "took 0s")
}

// TestNoiseFloor checks the repeatability measure by hand: one group of 5
// decode steps of the same shape (times 90, 95, 100, 110, 120 µs; median
// 100) deviates 10, 5, 0, 10, 20% → median 10%; a group of 4 is too small to
// count, and prefill steps are left out.
func TestNoiseFloor(t *testing.T) {
	shape := sim.StepShape{Seqs: 2, DecodeSeqs: 2, ContextTokens: 200}
	var samples []sim.Sample
	for _, us := range []int{90, 95, 100, 110, 120} {
		samples = append(samples, sim.Sample{Shape: shape, Time: time.Duration(us) * time.Microsecond})
	}
	other := sim.StepShape{Seqs: 1, DecodeSeqs: 1, ContextTokens: 900}
	for _, us := range []int{1, 50, 50, 500} {
		samples = append(samples, sim.Sample{Shape: other, Time: time.Duration(us) * time.Microsecond})
	}
	samples = append(samples, sim.Sample{Shape: sim.StepShape{Seqs: 1, PrefillTokens: 10, ContextTokens: 10}, Time: time.Second})
	e, err := NoiseFloor(samples)
	require.NoError(t, err)
	require.Equal(t, 5, e.Samples)
	require.InDelta(t, 0.10, e.Median, 1e-12)
	require.InDelta(t, 0.20, e.P90, 1e-12)

	e, err = NoiseFloor(samples[5:])
	require.NoError(t, err)
	require.Zero(t, e.Samples, "no group is large enough")
	_, err = NoiseFloor([]sim.Sample{{Shape: shape}})
	require.ErrorContains(t, err, "noise needs positive times")
}
