package rig_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/bench/rig"
	"github.com/turnstile-llm/turnstile/bench/traffic"
	"github.com/turnstile-llm/turnstile/bench/workload"
	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/step"
)

func loadStories(t *testing.T) *model.Llama {
	t.Helper()
	path, err := gguf.TestModelPath()
	require.NoError(t, err)
	m, err := model.LoadLlama(path, model.LlamaOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return m
}

func config(overlap bool) rig.Config {
	return rig.Config{MaxBatchSize: 4, KVBlocks: 256, BlockSize: 16, MaxBatchTokens: 128, Overlap: overlap, Seed: 7}
}

func cpu(m *model.Llama) rig.CPU { return rig.CPU{Model: m, Workers: 1} }

func chat(t *testing.T) []workload.Request {
	t.Helper()
	// Rate 0: every request arrives at the origin, so the virtual clock
	// moves only by the steps the recorder spends.
	reqs, err := workload.Chat(workload.ChatConfig{Seed: 5, Requests: 6,
		Input: workload.LogNormal{Median: 40, Sigma: 0.8, Min: 4, Max: 300}, Output: workload.LogNormal{Median: 10, Sigma: 0.5, Min: 1, Max: 30}})
	require.NoError(t, err)
	return reqs
}

// TestDriveSpendsMeasuredTime: traffic through the real runner on virtual
// time advances the clock by exactly the measured step times, and the
// engine's and the runner's accounting stay clean.
func TestDriveSpendsMeasuredTime(t *testing.T) {
	m := loadStories(t)
	for _, overlap := range []bool{false, true} {
		t.Run(map[bool]string{false: "serial", true: "overlap"}[overlap], func(t *testing.T) {
			vc := clock.NewVirtual(time.Unix(0, 0))
			origin := vc.Now()
			eng, rec, capTokens, err := rig.NewCPU(config(overlap), cpu(m), vc)
			require.NoError(t, err)
			require.Equal(t, 256*16, capTokens)
			reqs := chat(t)
			res, err := traffic.Drive(context.Background(), traffic.Run{Engine: eng, Clock: vc, Requests: reqs, SamplingSeed: 1, CheckEveryStep: true})
			require.NoError(t, err)
			require.Equal(t, len(reqs), res.Completed)
			require.NoError(t, eng.Check())
			require.NoError(t, eng.Runner().Check())

			samples := rec.Samples()
			require.NotEmpty(t, samples)
			var sum time.Duration
			for _, s := range samples {
				require.Positive(t, s.Time)
				sum += s.Time
			}
			require.Equal(t, sum, vc.Now().Sub(origin), "virtual time is the sum of measured steps")
			require.LessOrEqual(t, res.Elapsed, sum)
			require.NoError(t, eng.Close())
			require.NoError(t, eng.Close(), "Close is idempotent")
			require.Error(t, eng.Runner().Execute(&step.Batch{}, &step.Output{}), "the runner is closed with the engine")
		})
	}
}

// generate runs reqs greedily to completion and returns each request's
// tokens.
func generate(t *testing.T, m *model.Llama, reqs []workload.Request) [][]int32 {
	t.Helper()
	vc := clock.NewVirtual(time.Unix(0, 0))
	eng, _, _, err := rig.NewCPU(config(false), cpu(m), vc)
	require.NoError(t, err)
	defer func() { require.NoError(t, eng.Close()) }()
	streams := make([]*executor.Stream, len(reqs))
	for i, r := range reqs {
		streams[i], err = eng.Submit(context.Background(), &executor.Request{PromptTokens: r.Prompt, MaxTokens: r.MaxTokens,
			Params: sampling.DefaultParams(), IgnoreEOS: true})
		require.NoError(t, err)
	}
	out := make([][]int32, len(reqs))
	done := 0
	for steps := 0; done < len(reqs); steps++ {
		require.Less(t, steps, 10_000, "livelock")
		_, err := eng.Step()
		require.NoError(t, err)
		for i, st := range streams {
			if st == nil {
				continue
			}
			fin, err := rig.Drain(st, func(d *executor.Delta) { out[i] = append(out[i], d.TokenIDs...) })
			require.NoError(t, err)
			if fin != nil {
				streams[i] = nil
				done++
			}
		}
	}
	require.NoError(t, rig.Settle(eng))
	require.NoError(t, eng.Check())
	return out
}

// TestGreedyDeterministic: the same requests give the same tokens on a
// second engine (the recorder changes timing only).
func TestGreedyDeterministic(t *testing.T) {
	m := loadStories(t)
	reqs := chat(t)
	first := generate(t, m, reqs)
	for i, r := range reqs {
		require.Len(t, first[i], r.MaxTokens, "request %d", i)
	}
	require.Equal(t, first, generate(t, m, reqs))
}

func TestNewCPURefusesBadConfig(t *testing.T) {
	m := loadStories(t)
	vc := clock.NewVirtual(time.Unix(0, 0))
	for _, tc := range []struct {
		name string
		c    rig.Config
		d    rig.CPU
		virt *clock.Virtual
		want string
	}{
		{"no model", rig.Config{MaxBatchSize: 1, KVBlocks: 8, BlockSize: 16, MaxBatchTokens: 16}, rig.CPU{}, vc, "no model"},
		{"no clock", config(false), cpu(m), nil, "no virtual clock"},
		{"no batch", rig.Config{KVBlocks: 8, BlockSize: 16, MaxBatchTokens: 16}, rig.CPU{Model: m}, vc, "max batch 0"},
		{"no KV", rig.Config{MaxBatchSize: 1, BlockSize: 16, MaxBatchTokens: 16}, rig.CPU{Model: m}, vc, "KVBlocks = 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := rig.NewCPU(tc.c, tc.d, tc.virt)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
