package agentic

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/bench/report"
	"github.com/turnstile-llm/turnstile/bench/workload"
)

func TestPresetNamed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		wantErr string
	}{
		{PresetSeed000, ""},
		{PresetSmall, ""},
		{PresetToolLoop, ""},
		{PresetToolLoopSmall, ""},
		{"huge", `--preset "huge": want one of seed000, small, tool-loop, tool-loop-small`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PresetNamed(tc.name)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			// A admits 28 of 32 programs at every scale: 28 × (context +
			// scaled buffer) ≤ capacity < 29 × (context + scaled buffer).
			per := p.ContextTokens + Seed000Arms(32).Scaled(p.Scale).Buffer
			capacity := p.KVBlocks * p.BlockSize
			require.LessOrEqual(t, 28*per, capacity)
			require.Less(t, capacity, 29*per)
			// A program's last turn fits the engine's context.
			require.LessOrEqual(t, p.ContextTokens+p.Turns*p.OutputTokens+(p.Turns-1)*p.ToolTokens, p.MaxContext)
		})
	}
}

// TestToolLoopPresets checks the tool-loop workload's shape: many short
// turns (8–12 turns of 32–64 appended tool tokens and 16–32 output tokens
// at full scale) over a shared prefix, the small preset 1/16 of it.
func TestToolLoopPresets(t *testing.T) {
	p, err := PresetNamed(PresetToolLoop)
	require.NoError(t, err)
	require.GreaterOrEqual(t, p.Turns, 8)
	require.LessOrEqual(t, p.Turns, 12)
	require.GreaterOrEqual(t, p.ToolTokens, 32)
	require.LessOrEqual(t, p.ToolTokens, 64)
	require.GreaterOrEqual(t, p.OutputTokens, 16)
	require.LessOrEqual(t, p.OutputTokens, 32)
	require.Equal(t, 1.0, p.Scale)
	// A turn adds little to a program: its growth is a small part of the
	// context the shared prefix comes from.
	require.Less(t, p.Turns*p.OutputTokens+(p.Turns-1)*p.ToolTokens, p.ContextTokens/4)

	s, err := PresetNamed(PresetToolLoopSmall)
	require.NoError(t, err)
	require.Equal(t, p.Turns, s.Turns)
	require.Equal(t, p.ContextTokens/16, s.ContextTokens)
	require.Equal(t, 1.0/16, s.Scale)
	require.Equal(t, p.ToolWait/30, s.ToolWait)
	for _, preset := range []Preset{p, s} {
		_, err := workload.Agentic(workload.AgenticConfig{Programs: 32, Turns: preset.Turns, Share: 0.9, ContextTokens: preset.ContextTokens,
			OutputTokens: preset.OutputTokens, ToolTokens: preset.ToolTokens, ToolWait: preset.ToolWait, Jitter: preset.Jitter})
		require.NoError(t, err)
	}
}

func TestSeed000Goals(t *testing.T) {
	for _, tc := range []struct {
		metric report.Metric
		ratio  float64
		want   bool
	}{
		{report.Throughput, 1.30, true}, {report.Throughput, 1.29, false},
		{report.P95, 0.80, true}, {report.P95, 0.81, false},
		{report.P50, 1.05, true}, {report.P50, 1.06, false},
	} {
		var g Goal
		for _, x := range Seed000Goals() {
			if x.Metric == tc.metric {
				g = x
			}
		}
		require.Equal(t, tc.want, g.Met(tc.ratio), "%s %g", tc.metric, tc.ratio)
	}
}
