package agentic

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/bench/campaign"
	"github.com/turnstile-llm/turnstile/policy"
)

func TestSeed000Arms(t *testing.T) {
	a := Seed000Arms(32)
	arms, err := a.Campaign([]string{"A", "B", "C"})
	require.NoError(t, err)
	require.Equal(t, []campaign.Arm{{Name: "A", Candidates: []string{"a"}}, {Name: "B", Candidates: []string{"b1", "b2", "b3"}},
		{Name: "C", Candidates: []string{"c1", "c2", "c3"}}}, arms)

	for _, tc := range []struct {
		arm, cand string
		check     func(t *testing.T, pc *policy.Config)
	}{
		{"A", "a", func(t *testing.T, pc *policy.Config) {
			require.Equal(t, policy.TokenAccounting, pc.Accounting)
			require.Equal(t, 100, pc.Buffer)
		}},
		{"B", "b1", func(t *testing.T, pc *policy.Config) { require.Equal(t, 256, pc.Reserve) }},
		{"B", "b3", func(t *testing.T, pc *policy.Config) { require.Equal(t, 1024, pc.Reserve) }},
		{"C", "c1", func(t *testing.T, pc *policy.Config) {
			require.Equal(t, policy.PausingAccounting, pc.Accounting)
			require.Equal(t, [3]float64{0.97, 0.90, 0.05}, [3]float64{pc.PauseThreshold, pc.PauseTarget, pc.ResumeHysteresis})
		}},
		{"C", "c3", func(t *testing.T, pc *policy.Config) {
			require.Equal(t, [3]float64{1, 1, 0}, [3]float64{pc.PauseThreshold, pc.PauseTarget, pc.ResumeHysteresis})
		}},
	} {
		pc, err := a.Policy(tc.arm, tc.cand)
		require.NoError(t, err, "%s/%s", tc.arm, tc.cand)
		require.Equal(t, 32, pc.MaxActive)
		tc.check(t, pc)
	}
	for _, bad := range [][2]string{{"A", "b1"}, {"B", "b0"}, {"B", "b4"}, {"C", "cx"}, {"D", "d1"}} {
		_, err := a.Policy(bad[0], bad[1])
		require.Error(t, err, "%v", bad)
		require.Contains(t, err.Error(), bad[1])
	}
	for _, names := range [][]string{{"B", "C"}, {"A", "A"}, {"A", "X"}} {
		_, err := a.Campaign(names)
		require.Error(t, err, "%v", names)
	}

	s := a.Scaled(1.0 / 64)
	require.Equal(t, 2, s.Buffer, "100/64 rounds to 2")
	require.Equal(t, []int{4, 8, 16}, s.Reserves)
	require.Equal(t, a.Thresholds, s.Thresholds)
	require.Equal(t, 256, a.Reserves[0], "scaling copies")
	require.Len(t, a.Describe(), 7)
}
