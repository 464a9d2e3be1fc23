package rig

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/sim"
)

// The simulated runner and the recorder spend their time where the engine
// looks for it (a type assertion in executor.New, so a rename would
// otherwise go unnoticed).
var (
	_ executor.StepSpender = (*sim.Runner)(nil)
	_ executor.StepSpender = (*sim.Recorder)(nil)
)

func small() (Config, Sim) {
	return Config{MaxBatchSize: 4, KVBlocks: 64, BlockSize: 16, MaxBatchTokens: 256, Seed: 1},
		Sim{Cost: sim.H200Llama3_8B(false), MaxContext: 512, Vocab: 512}
}

func TestNewSim(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Config, *Sim)
		wantErr string
	}{
		{"plain", func(*Config, *Sim) {}, ""},
		{"overlap, charging", func(c *Config, _ *Sim) { c.Overlap, c.Ablation.ChargeRetiring = true, true }, ""},
		{"eos", func(_ *Config, d *Sim) { d.EOSAfter = 3 }, ""},
		{"tiny vocab", func(_ *Config, d *Sim) { d.Vocab = 3 }, "vocab 3 leaves no ids"},
		{"no batch", func(c *Config, _ *Sim) { c.MaxBatchSize = 0 }, "seats for max batch 0"},
		{"no blocks", func(c *Config, _ *Sim) { c.KVBlocks = 0 }, "rig: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, dev := small()
			tc.edit(&c, &dev)
			vc := clock.NewVirtual(time.Unix(0, 0))
			eng, capTokens, err := NewSim(c, dev, vc)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			defer func() { require.NoError(t, eng.Close()) }()
			require.Equal(t, 64*16, capTokens)
			p := sampling.DefaultParams()
			st, err := eng.Submit(context.Background(), &executor.Request{PromptTokens: []int32{5, 6, 7, 8}, MaxTokens: 5, Params: p})
			require.NoError(t, err)
			for range 100 {
				progressed, err := eng.Step()
				require.NoError(t, err)
				require.NoError(t, eng.Check())
				if !progressed {
					break
				}
			}
			d, ok, err := st.TryRecv()
			require.NoError(t, err)
			require.True(t, ok)
			want := 5
			if dev.EOSAfter > 0 {
				want = dev.EOSAfter
			}
			require.Equal(t, want, d.Usage.Completion)
			for _, id := range d.TokenIDs {
				require.True(t, id >= TokenMin && id < int32(dev.Vocab) || id == EOS, "token %d", id)
			}
			// The step cost went on the virtual clock: one step per
			// generated token, each at least the H200 profile's 4.48 ms
			// weight stream.
			require.GreaterOrEqual(t, vc.Elapsed(), time.Duration(want)*4480*time.Microsecond)
		})
	}
}
