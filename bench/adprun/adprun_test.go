package adprun

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/bench/campaign"
	"github.com/turnstile-llm/turnstile/bench/report"
	"github.com/turnstile-llm/turnstile/internal/stats"
)

// small is a quick row configuration: short prompts, few requests.
func small(dp, late int, rank0Late bool) Config {
	c := DefaultConfig(dp)
	c.RequestsPerRank, c.InputTokens, c.Late, c.RankZeroLate = 40, 256, late, rank0Late
	return c
}

// TestCampaignLadder runs every arm for k late ranks and checks the rows
// against seed 004's ladder: every row passes its audit, BASE's rank-0
// share is on the rung predicted for k and rank 0's lateness, FIX and
// OVLOFF route identically per rank, and FIX/BASE throughput is near
// 2dp/(2dp − k).
func TestCampaignLadder(t *testing.T) {
	for _, tc := range []struct {
		dp, late  int
		rank0Late bool
	}{{2, 0, false}, {2, 1, false}, {2, 1, true}, {2, AllLate, false}, {4, 1, false}, {4, 2, true}} {
		t.Run(fmt.Sprintf("dp=%d/late=%d/rank0=%v", tc.dp, tc.late, tc.rank0Late), func(t *testing.T) {
			c := small(tc.dp, tc.late, tc.rank0Late)
			var seen []string
			res, err := Campaign(context.Background(), c, Plan(Arms(), 2, 11), func(r report.Row, done, total int) error {
				seen = append(seen, r.RowID)
				require.Equal(t, 6, total)
				return nil
			})
			require.NoError(t, err)
			require.Len(t, res.Rows, 6)
			require.Equal(t, seen[0], res.Rows[0].RowID)
			for _, r := range res.Rows {
				require.Equal(t, report.Pass, r.Audit, "%s: %s", r.RowID, r.AuditDetail)
				require.True(t, strings.HasPrefix(r.RowID, fmt.Sprintf("dp%d_", tc.dp)), r.RowID)
				require.Equal(t, c.Requests(), r.Completed)
				require.Equal(t, tc.dp, r.DP)
				require.Len(t, r.M.RankRouted, tc.dp)
				require.True(t, r.M.GenerationCounterMatches)
				require.Positive(t, r.M.Steps)
			}
			a, err := Analyse(res.Rows, c, stats.Bootstrap{Seed: 3, Resamples: 200})
			require.NoError(t, err)
			require.Len(t, a.Shares, 6)
			for _, s := range a.Shares {
				require.True(t, s.OnRung, "%s block %d: share %d/%d, nearest %s, predicted %s", s.Arm, s.Block, s.Rank0, s.Routed, s.Nearest, s.Rung)
			}
			require.Len(t, a.Routing, 2)
			for _, r := range a.Routing {
				require.True(t, r.Equal, "block %d: FIX %v OVLOFF %v", r.Block, r.FIX, r.OVLOFF)
			}
			base, ok := a.Ratio(BASE)
			require.True(t, ok)
			if c.K() < tc.dp {
				require.InEpsilon(t, PredictedGain(tc.dp, c.K()), base.Ratio.Point, 0.06, "FIX/BASE")
			} else {
				// No healthy rank sets the iteration's time: BASE's half
				// batches (or full-then-empty iterations) cost about half,
				// so it loses only per-step fixed costs, far below 2×.
				require.GreaterOrEqual(t, base.Ratio.Point, 0.99, "FIX/BASE")
				require.Less(t, base.Ratio.Point, 0.75*PredictedGain(tc.dp, c.K()), "FIX/BASE")
			}
			off, ok := a.Ratio(OVLOFF)
			require.True(t, ok)
			require.InEpsilon(t, 1, off.Ratio.Point, 0.02, "FIX runs at OVLOFF's rate")
		})
	}
}

// TestRowsReproduce: the same spec gives the same row, bit for bit.
func TestRowsReproduce(t *testing.T) {
	c := small(2, 1, false)
	for _, arm := range Arms() {
		s := campaign.Spec{Stage: campaign.Validation, Arm: arm, Seed: 5}
		a, err := Runner{Config: c}.Run(context.Background(), s)
		require.NoError(t, err)
		b, err := Runner{Config: c}.Run(context.Background(), s)
		require.NoError(t, err)
		require.Equal(t, a.M.BatchSeconds, b.M.BatchSeconds, arm)
		require.Equal(t, a.M.RankRouted, b.M.RankRouted, arm)
		require.Equal(t, a.Workload, b.Workload, arm)
	}
}

func TestConfigErrors(t *testing.T) {
	ok := DefaultConfig(2)
	for _, tc := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.DP = 0 }, "dp 0"},
		{func(c *Config) { c.MaxBatchSize = 0 }, "max batch size 0"},
		{func(c *Config) { c.RequestsPerRank = -3 }, "requests per rank -3"},
		{func(c *Config) { c.InputTokens = 0 }, "input tokens 0"},
		{func(c *Config) { c.InputSpread = 1 }, "input spread 1"},
		{func(c *Config) { c.OutputTokens = 0 }, "output tokens 0"},
		{func(c *Config) { c.Late = 3 }, "late ranks 3"},
		{func(c *Config) { c.Late = -2 }, "late ranks -2"},
		{func(c *Config) { c.MaxIterations = -1 }, "max iterations -1"},
	} {
		c := ok
		tc.mut(&c)
		require.ErrorContains(t, c.Validate(), tc.want)
		_, err := Runner{Config: c}.Run(context.Background(), campaign.Spec{Arm: FIX})
		require.ErrorContains(t, err, tc.want)
	}
	require.NoError(t, ok.Validate())
	_, err := Runner{Config: small(2, 0, false)}.Run(context.Background(), campaign.Spec{Arm: "FAST"})
	require.ErrorContains(t, err, `unknown arm "FAST"`)
}

func TestLadderArithmetic(t *testing.T) {
	for _, tc := range []struct {
		arm       string
		dp, k     int
		rank0Late bool
		num, den  int
	}{
		{BASE, 2, 0, false, 1, 2}, {BASE, 2, 1, false, 2, 3}, {BASE, 2, 1, true, 1, 3}, {BASE, 2, 2, true, 1, 2},
		{BASE, 4, 1, false, 2, 7}, {BASE, 4, 1, true, 1, 7}, {FIX, 4, 1, true, 1, 4}, {OVLOFF, 4, 3, false, 1, 4},
	} {
		num, den := Rung(tc.arm, tc.dp, tc.k, tc.rank0Late)
		require.Equal(t, [2]int{tc.num, tc.den}, [2]int{num, den}, "%+v", tc)
	}
	require.InDelta(t, 4.0/3, PredictedGain(2, 1), 1e-12)
	require.InDelta(t, 8.0/7, PredictedGain(4, 1), 1e-12)
	require.InDelta(t, 2.0, PredictedGain(4, 4), 1e-12)
	c := DefaultConfig(4)
	c.Late = 2
	require.Equal(t, []bool{false, false, true, true}, []bool{c.LateRank(0), c.LateRank(1), c.LateRank(2), c.LateRank(3)})
	c.RankZeroLate = true
	require.Equal(t, []bool{true, true, false, false}, []bool{c.LateRank(0), c.LateRank(1), c.LateRank(2), c.LateRank(3)})
	c.Late = AllLate
	require.Equal(t, 4, c.K())
}

// TestOutputs: the summary JSON and markdown hold the per-dp analysis and
// the goal line.
func TestOutputs(t *testing.T) {
	c := small(2, 1, false)
	res, err := Campaign(context.Background(), c, Plan([]string{BASE, FIX}, 1, 1), nil)
	require.NoError(t, err)
	a, err := Analyse(res.Rows, c, stats.Bootstrap{Seed: 1, Resamples: 100})
	require.NoError(t, err)
	line := GoalLine(&a)
	require.Regexp(t, `^dp=2 FIX/BASE \+\d+\.\d% \[\+\d+\.\d%, \+\d+\.\d%\] \(seed \+27\.3%, predicted \+33\.3% for k=1\)$`, line)
	s := Summary{Summary: report.Summarise("test", res.Rows, nil), DP: []Analysis{a}}
	var js bytes.Buffer
	require.NoError(t, WriteJSON(&js, s))
	var back map[string]any
	require.NoError(t, json.Unmarshal(js.Bytes(), &back))
	require.EqualValues(t, 2, back["rows"])
	require.Len(t, back["dp"], 1)
	var md bytes.Buffer
	require.NoError(t, WriteMarkdown(&md, "bench adp", res.Rows, []Analysis{a}))
	require.Contains(t, md.String(), line)
	require.Contains(t, md.String(), "| BASE | 0 |")
	require.NotContains(t, md.String(), "FIX == OVLOFF", "no OVLOFF arm ran")
}
