package traffic

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/bench/rig"
	"github.com/turnstile-llm/turnstile/bench/workload"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/sim"
)

// TestMeasuredProfileAnchor runs the measured profile's anchor, vLLM's
// latency_llama8B_tp1 (8 prompts of 32 tokens, 128 output tokens each, all
// at once), through the engine on the simulated device: the engine's own
// steps, not sim.AnchorSteps, must come to the benchmark's 833.4 ms, and
// the roofline profile's to its ~612 ms.
func TestMeasuredProfileAnchor(t *testing.T) {
	tests := []struct {
		name    string
		cost    sim.Linear
		overlap bool
		want    time.Duration
		tol     float64
	}{
		{"measured, overlap", sim.H200Llama3_8BMeasured(true), true, time.Duration(sim.AnchorLatency * 1e9), 0.02},
		{"measured, serial", sim.H200Llama3_8BMeasured(false), false, time.Duration(sim.AnchorLatency * 1e9), 0.04},
		{"roofline, overlap", sim.H200Llama3_8B(true), true, 612 * time.Millisecond, 0.02},
	}
	reqs := make([]workload.Request, sim.AnchorBatch)
	for i := range reqs {
		prompt := make([]int32, sim.AnchorInput)
		for j := range prompt {
			prompt[j] = int32(workload.DefaultTokenMin + (i*sim.AnchorInput+j)%100)
		}
		reqs[i] = workload.Request{ID: i, Prompt: prompt, MaxTokens: sim.AnchorOutput}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vc := clock.NewVirtual(time.Unix(0, 0))
			eng, _, err := rig.NewSim(rig.Config{MaxBatchSize: sim.AnchorBatch, KVBlocks: 256, BlockSize: 16, MaxBatchTokens: 512,
				Overlap: tc.overlap, Seed: 3}, rig.Sim{Cost: tc.cost, MaxContext: 512, Vocab: workload.DefaultTokenMax}, vc)
			require.NoError(t, err)
			defer func() { require.NoError(t, eng.Close()) }()
			res, err := Drive(context.Background(), Run{Engine: eng, Clock: vc, Requests: reqs, SamplingSeed: 1})
			require.NoError(t, err)
			require.Equal(t, sim.AnchorBatch, res.Completed)
			require.Equal(t, sim.AnchorBatch*sim.AnchorOutput, res.Generated)
			t.Logf("elapsed %v over %d steps", res.Elapsed, res.Steps)
			require.InEpsilon(t, tc.want.Seconds(), res.Elapsed.Seconds(), tc.tol, "elapsed %v over %d steps", res.Elapsed, res.Steps)
		})
	}
}
