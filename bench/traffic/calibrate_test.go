package traffic

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/bench/rig"
	"github.com/turnstile-llm/turnstile/bench/workload"
	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/seatpool"
	"github.com/turnstile-llm/turnstile/sim"
	"github.com/turnstile-llm/turnstile/step"
)

// TestCalibrateRecoversCostModel is `turnstile bench calibrate` on the
// simulated device: chat traffic through the engine on a runner priced by
// a known cost model, every step recorded, and the least-squares fit must
// give the model back (to the nanosecond rounding of step times).
func TestCalibrateRecoversCostModel(t *testing.T) {
	truth := sim.H200Llama3_8B(false)
	truth.HostFixed, truth.HostPerSeq = 0, 0 // device time only: what a recorder sees
	vc := clock.NewVirtual(time.Unix(0, 0))
	const mbs = 8
	seats, err := seatpool.Seats(seatpool.Sizing{MaxBatchSize: mbs})
	require.NoError(t, err)
	dev, err := sim.New(sim.Config{
		Capacity: step.Capacity{Seats: seats, KVBlocks: 512, BlockSize: 16, MaxContext: 4096, MaxBatchTokens: 256, Vocab: workload.DefaultTokenMax},
		Cost:     truth, Clock: vc, Seed: 3, EOS: 2, TokenMin: workload.DefaultTokenMin, TokenMax: workload.DefaultTokenMax,
	})
	require.NoError(t, err)
	rec, err := sim.NewRecorder(dev, vc)
	require.NoError(t, err)
	tok, err := sim.NewTokenizer(workload.DefaultTokenMax, rig.BOS, rig.EOS)
	require.NoError(t, err)
	eng, err := executor.New(executor.Config{MaxBatchSize: mbs, Clock: vc, Model: "bench", Seed: 1}, rec, tok)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close()) })
	reqs, err := workload.Chat(workload.ChatConfig{Seed: 8, Requests: 30, Rate: 40,
		Input: workload.LogNormal{Median: 96, Sigma: 1, Min: 4, Max: 1024}, Output: workload.LogNormal{Median: 12, Sigma: 0.7, Min: 1, Max: 64}})
	require.NoError(t, err)
	_, err = Drive(context.Background(), Run{Engine: eng, Clock: vc, Requests: reqs, SamplingSeed: 1})
	require.NoError(t, err)

	samples := rec.Samples()
	require.Greater(t, len(samples), 50)
	got, fit, err := sim.Calibrate(samples)
	require.NoError(t, err)
	require.InEpsilon(t, truth.Fixed, got.Fixed, 1e-6)
	require.InEpsilon(t, truth.PerPrefillToken, got.PerPrefillToken, 1e-6)
	require.InEpsilon(t, truth.PerDecodeSeq, got.PerDecodeSeq, 1e-4)
	require.InEpsilon(t, truth.PerContextToken, got.PerContextToken, 1e-3)
	require.Less(t, fit.MaxAbs, 1e-9, "residuals are the nanosecond rounding of step times")
}
