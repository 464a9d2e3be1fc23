package agentic

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/bench/report"
)

func TestPresetNamed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		wantErr string
	}{
		{PresetSeed000, ""},
		{PresetSmall, ""},
		{"huge", `--preset "huge": want seed000 or small`},
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
		})
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
