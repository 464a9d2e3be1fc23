package sim

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLinearStepTime(t *testing.T) {
	l := Linear{Fixed: 1e-3, PerPrefillToken: 1e-5, PerDecodeSeq: 2e-5, PerContextToken: 1e-8, HostFixed: 5e-4, HostPerSeq: 1e-5}
	ov := l
	ov.Overlap = true
	tests := []struct {
		name  string
		model Linear
		shape StepShape
		want  time.Duration
	}{
		// device 1 ms + 100·10 µs + 0 + 1000·10 ns = 2.01 ms; host 0.5 ms + 1·10 µs.
		{"prefill serial", l, StepShape{Seqs: 1, PrefillTokens: 100, ContextTokens: 1000}, 2520 * time.Microsecond},
		{"prefill overlapped", ov, StepShape{Seqs: 1, PrefillTokens: 100, ContextTokens: 1000}, 2010 * time.Microsecond},
		// device 1 ms + 8·20 µs + 8000·10 ns = 1.24 ms; host 0.5 + 0.08 ms.
		{"decode serial", l, StepShape{Seqs: 8, DecodeSeqs: 8, ContextTokens: 8000}, 1820 * time.Microsecond},
		{"decode overlapped", ov, StepShape{Seqs: 8, DecodeSeqs: 8, ContextTokens: 8000}, 1240 * time.Microsecond},
		// Host-bound: with overlap the host time is what shows.
		{"host bound", Linear{Fixed: 1e-4, HostFixed: 3e-4, Overlap: true}, StepShape{}, 300 * time.Microsecond},
		{"empty", Linear{}, StepShape{Seqs: 3}, 0},
		{"negative clamps", Linear{Fixed: -1}, StepShape{}, 0},
		{"NaN clamps", Linear{Fixed: math.NaN()}, StepShape{}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.model.StepTime(tc.shape))
		})
	}
	var _ CostModel = Linear{}
}

func TestH200Llama3_8B(t *testing.T) {
	p := H200Llama3_8B(false)
	require.NoError(t, p.Validate())
	// The doc comment's hand figures.
	require.InEpsilon(t, 4.482e-3, p.Fixed, 1e-3)
	require.InEpsilon(t, 27.06e-6, p.PerPrefillToken, 1e-3)
	require.InEpsilon(t, 27.06e-6, p.PerDecodeSeq, 1e-3)
	require.InEpsilon(t, 34.13e-9, p.PerContextToken, 1e-3)
	require.InEpsilon(t, 0.8835e-9, p.PerPrefillPair, 1e-3)
	require.Equal(t, p.PerPrefillPair, p.PerSharedPair, "a shared pair is a prefill pair's FLOP")
	// KV bytes per token: 2·32·8·128·2 = 128 KiB.
	require.InEpsilon(t, 131072/(0.8*4.8e12), p.PerContextToken, 1e-12)
	decode := StepShape{Seqs: 32, DecodeSeqs: 32, ContextTokens: 32 * 2048}
	require.InEpsilon(t, 7.585e-3, p.Device(decode), 1e-3)
	prefill := StepShape{Seqs: 1, PrefillTokens: 8192, ContextTokens: 8192}
	require.InEpsilon(t, 226.46e-3, p.Device(prefill), 1e-3)
	require.True(t, H200Llama3_8B(true).Overlap)
	require.Less(t, H200Llama3_8B(true).StepTime(decode), p.StepTime(decode), "overlap hides host time")
}

// anchorTime is the anchor run (AnchorSteps) priced by l, in seconds.
func anchorTime(l Linear) float64 {
	total := 0.0
	for _, s := range AnchorSteps() {
		total += l.StepTime(s).Seconds()
	}
	return total
}

func TestAnchorSteps(t *testing.T) {
	steps := AnchorSteps()
	require.Len(t, steps, 128, "one prefill step samples the first token, 127 decode steps the rest")
	require.Equal(t, StepShape{Seqs: 8, PrefillTokens: 256, ContextTokens: 256, PrefillPairs: 8 * 528}, steps[0])
	require.Equal(t, StepShape{Seqs: 8, DecodeSeqs: 8, ContextTokens: 8 * 33}, steps[1])
	require.Equal(t, StepShape{Seqs: 8, DecodeSeqs: 8, ContextTokens: 8 * 159}, steps[127])
}

func TestH200Llama3_8BMeasured(t *testing.T) {
	m, roof := H200Llama3_8BMeasured(true), H200Llama3_8B(true)
	require.NoError(t, m.Validate())
	// The doc comment's figures.
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"fixed", m.Fixed, 6.424e-3},
		{"per prefill token", m.PerPrefillToken, 22.55e-6},
		{"per decode seq", m.PerDecodeSeq, 2e-6},
		{"per context token", m.PerContextToken, 34.13e-9},
		{"per prefill pair", m.PerPrefillPair, 0.7085e-9},
		{"per shared pair", m.PerSharedPair, 0.7085e-9},
		{"prefill 1.2× faster than roofline", roof.PerPrefillToken / m.PerPrefillToken, 1.2},
		{"weight stream ≈ 2.5 TB/s", 16.06e9 / m.Fixed, 2.5e12},
	} {
		require.InEpsilon(t, c.want, c.got, 2e-3, c.name)
	}

	// The anchor: vLLM's latency_llama8B_tp1 on H200, 833.421 ms. With
	// overlap the host hides; without it the host adds ~2.5%.
	require.InEpsilon(t, AnchorLatency, anchorTime(m), 1e-6)
	serial := H200Llama3_8BMeasured(false)
	require.InEpsilon(t, AnchorLatency, anchorTime(serial), 0.03)
	require.Greater(t, anchorTime(serial), anchorTime(m))
	// The roofline profile is ~27% fast on the anchor: what the measured
	// profile corrects.
	require.InEpsilon(t, 0.6115, anchorTime(roof), 1e-3)

	// The linear layers are flat across small decode batches: 64
	// sequences cost ≤ 3% more than 1 at no context, where the roofline's
	// per-sequence FLOP adds 38%.
	flat := func(l Linear) float64 {
		return l.Device(StepShape{Seqs: 64, DecodeSeqs: 64}) / l.Device(StepShape{Seqs: 1, DecodeSeqs: 1})
	}
	require.Less(t, flat(m), 1.03)
	require.Greater(t, flat(roof), 1.3)
}

func TestBuiltIn(t *testing.T) {
	tests := []struct {
		name    string
		overlap bool
		want    Linear
		wantErr string
	}{
		{ProfileH200Roofline, true, H200Llama3_8B(true), ""},
		{ProfileH200Roofline, false, H200Llama3_8B(false), ""},
		{ProfileH200Measured, true, H200Llama3_8BMeasured(true), ""},
		{"h100", false, Linear{}, `no built-in profile "h100"; want h200-roofline or h200-measured`},
		{"", false, Linear{}, `no built-in profile ""`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := BuiltIn(tc.name, tc.overlap)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.False(t, IsBuiltIn(tc.name))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.True(t, IsBuiltIn(tc.name))
		})
	}
}

func TestLinearValidate(t *testing.T) {
	require.NoError(t, Linear{}.Validate())
	require.ErrorContains(t, Linear{PerDecodeSeq: -1}.Validate(), "per decode sequence is -1")
	require.ErrorContains(t, Linear{HostPerSeq: math.Inf(1)}.Validate(), "host per sequence is +Inf")
	require.ErrorContains(t, Linear{Fixed: math.NaN()}.Validate(), "fixed is NaN")
}

// shapes spans every term: prefill chunks, decode batches, contexts.
func shapes() []StepShape {
	var out []StepShape
	for _, prefill := range []int{0, 64, 512, 2048} {
		for _, decode := range []int{0, 1, 8, 32} {
			for _, ctxPer := range []int{128, 1024, 4096} {
				if prefill == 0 && decode == 0 {
					continue
				}
				seqs := decode
				if prefill > 0 {
					seqs++
				}
				// The prefilling sequence's chunk ends at ctxPer + prefill.
				l := ctxPer + prefill
				out = append(out, StepShape{Seqs: seqs, PrefillTokens: prefill, DecodeSeqs: decode, ContextTokens: decode*ctxPer + min(prefill, 1)*l,
					PrefillPairs: prefill*l - prefill*(prefill-1)/2})
			}
		}
	}
	return out
}

func TestCalibrate(t *testing.T) {
	truth := H200Llama3_8B(false)
	truth.HostFixed, truth.HostPerSeq = 0, 0
	var exact, noisy []Sample
	for i, s := range shapes() {
		d := truth.Device(s)
		exact = append(exact, Sample{Shape: s, Time: time.Duration(math.Round(d * 1e9))})
		// ±1% deterministic noise, zero mean over each group of 4.
		noise := 0.01 * float64(i%4*2-3) / 3
		noisy = append(noisy, Sample{Shape: s, Time: time.Duration(math.Round(d * (1 + noise) * 1e9))})
	}
	got, fit, err := Calibrate(exact)
	require.NoError(t, err)
	require.InEpsilon(t, truth.Fixed, got.Fixed, 1e-5)
	require.InEpsilon(t, truth.PerPrefillToken, got.PerPrefillToken, 1e-5)
	require.InEpsilon(t, truth.PerDecodeSeq, got.PerDecodeSeq, 1e-5)
	require.InEpsilon(t, truth.PerContextToken, got.PerContextToken, 1e-4)
	require.InEpsilon(t, truth.PerPrefillPair, got.PerPrefillPair, 1e-4)
	require.Less(t, fit.RMS, 1e-9, "exact samples are fitted to ns rounding")
	require.Len(t, fit.Coef, 6)
	require.Zero(t, got.PerSharedPair, "no sample has shared pairs: the term is not fitted")

	got, fit, err = Calibrate(noisy)
	require.NoError(t, err)
	require.InEpsilon(t, truth.PerPrefillToken, got.PerPrefillToken, 0.02)
	require.LessOrEqual(t, fit.MaxRel, 0.02, "±1% noise leaves ≤ 2% relative residuals when relative error is what is fitted")
	require.Greater(t, fit.R2, 0.99)
	require.NoError(t, got.Validate())
}

func TestCalibrateSharedPairs(t *testing.T) {
	// Steps whose decode sequences share a run in groups of 2..decode
	// members and 256..4096 tokens, beside steps without groups: the fit
	// recovers every term, the shared pair's among them.
	for _, truth := range []Linear{H200Llama3_8B(false), H200Llama3_8BMeasured(false)} {
		truth.HostFixed, truth.HostPerSeq = 0, 0
		var samples []Sample
		add := func(s StepShape) {
			samples = append(samples, Sample{Shape: s, Time: time.Duration(math.Round(truth.Device(s) * 1e9))})
		}
		for _, s := range shapes() {
			add(s)
		}
		for _, decode := range []int{2, 8, 32} {
			for _, members := range []int{2, decode} {
				for _, shared := range []int{256, 1024, 4096} {
					tail := 100 + shared/8
					// One group of members sharing shared tokens; each
					// member and every other sequence also has a tail.
					add(StepShape{Seqs: decode, DecodeSeqs: decode, ContextTokens: shared + decode*tail + (decode-members)*shared,
						SharedPairs: members * shared})
				}
			}
		}
		got, _, err := Calibrate(samples)
		require.NoError(t, err)
		require.InEpsilon(t, truth.PerSharedPair, got.PerSharedPair, 1e-3)
		require.InEpsilon(t, truth.PerContextToken, got.PerContextToken, 1e-3)
		require.InEpsilon(t, truth.Fixed, got.Fixed, 1e-4)
		require.InEpsilon(t, truth.PerDecodeSeq, got.PerDecodeSeq, 1e-3)
	}
}

func TestCalibrateClampsNegative(t *testing.T) {
	// Time depends on prefill only; the decode and context columns carry
	// noise anti-correlated with them, so plain least squares would price
	// them below zero. Calibrate fixes them at 0 and refits.
	var samples []Sample
	for i := range 40 {
		s := StepShape{Seqs: 1 + i%5, PrefillTokens: 100 * (1 + i%7), DecodeSeqs: i % 5, ContextTokens: 1000 * (i % 3),
			PrefillPairs: 5000 * (1 + i%11)}
		d := 1e-3 + 1e-5*float64(s.PrefillTokens) - 1e-6*float64(s.DecodeSeqs) - 1e-9*float64(s.ContextTokens)
		samples = append(samples, Sample{Shape: s, Time: time.Duration(math.Round(d * 1e9))})
	}
	got, fit, err := Calibrate(samples)
	require.NoError(t, err)
	require.NoError(t, got.Validate())
	require.Zero(t, got.PerDecodeSeq)
	require.Zero(t, got.PerContextToken)
	require.Zero(t, fit.Coef[2])
	require.Positive(t, got.PerPrefillToken)
	require.Positive(t, fit.RMS, "the clamped model no longer fits exactly")
}

func TestCalibrateErrors(t *testing.T) {
	_, _, err := Calibrate(nil)
	require.ErrorContains(t, err, "no samples")
	_, _, err = Calibrate([]Sample{{Shape: StepShape{PrefillTokens: 1}, Time: -1}})
	require.ErrorContains(t, err, "sample 0 took -1ns")
	_, _, err = Calibrate([]Sample{{Shape: StepShape{PrefillTokens: 1}, Time: 0}})
	require.ErrorContains(t, err, "sample 0 took 0s; want > 0")
	// Decode never varies: its column is all zero.
	var flat []Sample
	for i := range 10 {
		flat = append(flat, Sample{Shape: StepShape{Seqs: 1, PrefillTokens: 10 * (i + 1), ContextTokens: 7 * (i + 1) * (i + 2),
			PrefillPairs: 3 * (i + 1) * (i + 1) * (i + 1)}, Time: time.Duration(1000 + i*i)})
	}
	_, _, err = Calibrate(flat)
	require.ErrorContains(t, err, "column 2 is linearly dependent")
	require.ErrorContains(t, err, "per decode sequence")
}
