package campaign

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/bench/report"
	"github.com/turnstile-llm/turnstile/internal/stats"
)

// modelRunner computes each row from a closed-form model of the arms, so
// campaign logic can be tested without an engine: batch time is
// base(seed) × zero-sharing factor at share 0, and base / speed(share)
// otherwise. It records the specs it ran and can be told to break rows.
type modelRunner struct {
	zero    map[string]float64 // candidate → zero-sharing batch-time factor
	speed   map[string]float64 // candidate → speed-up at share 0.9 (scaled by share)
	preempt map[string]int     // candidate → preemptions
	fail    map[string]string  // row id → audit failure detail
	errs    map[string]error   // row id → run error
	short   map[string]bool    // row id → one program missing, audit PASS
	ran     []Spec
}

func (m *modelRunner) Run(_ context.Context, s Spec) (report.Row, error) {
	m.ran = append(m.ran, s)
	if err := m.errs[s.RowID]; err != nil {
		return report.Row{}, err
	}
	base := 100 + float64(s.Seed%7)
	bs := base * m.zero[s.Candidate]
	if s.Share > 0 {
		bs = base / (1 + (m.speed[s.Candidate]-1)*s.Share/0.9)
	}
	row := report.Row{Programs: 32, Completed: 32, Audit: report.Pass, M: &report.Metrics{
		BatchSeconds: bs, ProgramsPerSecond: 32 / bs, P50ProgramSeconds: 0.7 * bs, P95ProgramSeconds: 0.99 * bs,
		Preemptions: m.preempt[s.Candidate], GenerationCounterMatches: true, Rank0Share: math.NaN(),
	}}
	if d, ok := m.fail[s.RowID]; ok {
		row.Audit, row.AuditDetail = report.Fail, d
	}
	if m.short[s.RowID] {
		row.Completed = 31
	}
	return row, nil
}

func seed000Runner() *modelRunner {
	return &modelRunner{
		zero:    map[string]float64{"a": 1, "b1": 1.03, "b2": 1.14, "b3": 1.04, "c1": 1.01, "c2": 1.0, "c3": 1.02},
		speed:   map[string]float64{"a": 1, "b1": 1.25, "b2": 1.30, "b3": 1.27, "c1": 0.95, "c2": 1.1, "c3": 0.97},
		preempt: map[string]int{"c2": 3},
	}
}

func seed000Plan() Plan {
	return Plan{
		Reference: "A",
		Arms: []Arm{
			{Name: "A", Candidates: []string{"a"}},
			{Name: "B", Candidates: []string{"b1", "b2", "b3"}},
			{Name: "C", Candidates: []string{"c1", "c2", "c3"}},
		},
		CalibrationShares: []float64{0, 0.9}, CalibrationSeed: 520,
		Shares: []float64{0, 0.5, 0.9}, Blocks: 3, ValidationSeed: 700,
	}
}

func TestCampaignSeed000Shape(t *testing.T) {
	m := seed000Runner()
	p := seed000Plan()
	var seen []int
	res, err := Run(context.Background(), p, m, func(row report.Row, done, total int) error {
		require.Equal(t, p.Rows(), total)
		seen = append(seen, done)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 7*2+3*3*3, p.Rows())
	require.Len(t, res.Rows, p.Rows())
	require.Len(t, seen, p.Rows())
	require.Equal(t, p.Rows(), seen[len(seen)-1])

	// b2 is fastest at high sharing but fails the zero-sharing gate; c2
	// preempts. Selection then takes the fastest eligible.
	require.Equal(t, map[string]string{"A": "a", "B": "b3", "C": "c3"}, res.Frozen)
	require.False(t, res.Gates["B/b2"].Eligible)
	require.Contains(t, res.Gates["B/b2"].Reason, "zero-sharing batch time")
	require.Contains(t, res.Gates["B/b2"].Reason, "1.1400×")
	require.False(t, res.Gates["C/c2"].Eligible)
	require.Equal(t, "3 preemptions at share 0", res.Gates["C/c2"].Reason)
	for _, k := range []string{"B/b1", "B/b3", "C/c1", "C/c3"} {
		require.True(t, res.Gates[k].Eligible, k)
	}

	// Calibration first, all on the calibration seed; then validation on
	// held-out seeds with the frozen candidates and rotated arm order.
	for i, s := range m.ran[:14] {
		require.Equal(t, Calibration, s.Stage, i)
		require.Equal(t, uint64(520), s.Seed)
	}
	require.Equal(t, "cal_B_b2_s90", m.ran[9].RowID)
	val := m.ran[14:]
	require.Equal(t, []string{"A", "B", "C", "B", "C", "A", "C", "A", "B"}, arms(val[:9]))
	for _, s := range val {
		require.Equal(t, Validation, s.Stage)
		require.Equal(t, uint64(700+s.Block), s.Seed)
		require.Equal(t, res.Frozen[s.Arm], s.Candidate)
	}
	require.Equal(t, "val_s50_b1_C", val[13].RowID)
	for i, row := range res.Rows {
		require.Equal(t, m.ran[i].RowID, row.RowID, "rows carry their spec")
		require.Equal(t, report.Pass, row.Audit)
	}

	// The rows feed the paired comparison directly: B/A at 0.9 is b3's 1.27.
	comps, err := report.Compare(res.Rows, Validation, "B", "A", report.Throughput, stats.Bootstrap{Seed: 1})
	require.NoError(t, err)
	require.Len(t, comps, 3)
	require.InEpsilon(t, 1.27, comps[2].Ratio.Point, 1e-12)
	require.InEpsilon(t, 1/1.04, comps[0].Ratio.Point, 1e-12)

	// Held-out margin: B's zero-sharing P95 is 1.04× A's (within 1.05), C's
	// 1.02×; with a 1.03 margin B fails.
	var p95 []report.Comparison
	for _, arm := range []string{"B", "C"} {
		c, err := report.Compare(res.Rows, Validation, arm, "A", report.P95, stats.Bootstrap{Seed: 1})
		require.NoError(t, err)
		p95 = append(p95, c...)
	}
	gates := Gate{}.HeldOut(p95, 0)
	require.Len(t, gates, 2)
	require.True(t, gates["validation/B/p95"].Eligible, gates["validation/B/p95"].Reason)
	require.True(t, gates["validation/C/p95"].Eligible)
	gates = Gate{MaxRatio: 1.03}.HeldOut(p95, 0)
	require.False(t, gates["validation/B/p95"].Eligible)
	require.Equal(t, "B/A p95 ratio interval 1.040–1.040 exceeds 1.03 at share 0", gates["validation/B/p95"].Reason)

	sum := res.Summary("seed000", comps)
	require.Equal(t, res.Frozen, sum.Frozen)
	require.Equal(t, res.Gates, sum.Gates)
	require.Equal(t, p.Rows(), sum.Passed)
}

func arms(specs []Spec) []string {
	var out []string
	for _, s := range specs {
		out = append(out, s.Arm)
	}
	return out
}

func TestCampaignFailuresStopAndAreKept(t *testing.T) {
	tests := []struct {
		name       string
		edit       func(*modelRunner)
		rows       int // rows run, the failed one included
		wantErr    string
		lastDetail string
	}{
		{"audit failure", func(m *modelRunner) { m.fail = map[string]string{"val_s50_b1_B": "leaked 2 blocks"} },
			14 + 9 + 3 + 1, "row val_s50_b1_B failed (leaked 2 blocks)", "leaked 2 blocks"},
		{"run error", func(m *modelRunner) { m.errs = map[string]error{"cal_A_a_s0": errors.New("router gone")} },
			1, "row cal_A_a_s0 failed (run error: router gone)", "run error: router gone"},
		{"missing program", func(m *modelRunner) { m.short = map[string]bool{"val_s0_b0_C": true} },
			14 + 3, "completed 31 of 32 programs", "completed 31 of 32 programs (0 failed client-side)"},
		{"fail without detail", func(m *modelRunner) { m.fail = map[string]string{"cal_C_c1_s0": ""} },
			5, `audit "FAIL" without detail`, `runner reported audit "FAIL" without detail`},
		{"no eligible candidate", func(m *modelRunner) { m.zero["b1"], m.zero["b3"] = 1.2, 1.3 },
			14, "no candidate of arm B passed", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := seed000Runner()
			tc.edit(m)
			res, err := Run(context.Background(), seed000Plan(), m, nil)
			require.ErrorContains(t, err, tc.wantErr)
			require.Len(t, res.Rows, tc.rows)
			require.Len(t, m.ran, tc.rows, "nothing runs after a failure")
			if tc.lastDetail != "" {
				last := res.Rows[len(res.Rows)-1]
				require.Equal(t, report.Fail, last.Audit)
				require.Equal(t, tc.lastDetail, last.AuditDetail)
			}
		})
	}
}

func TestCampaignShareBlocks(t *testing.T) {
	// Seed 000's split: 3 blocks at 0% and 50%, 12 primary blocks at 90%.
	p := seed000Plan()
	p.ShareBlocks = []int{3, 3, 12}
	m := seed000Runner()
	res, err := Run(context.Background(), p, m, nil)
	require.NoError(t, err)
	require.Equal(t, 14+18*3, p.Rows())
	require.Len(t, res.Rows, p.Rows())
	comps, err := report.Compare(res.Rows, Validation, "B", "A", report.Throughput, stats.Bootstrap{Seed: 1})
	require.NoError(t, err)
	require.Equal(t, []int{3, 3, 12}, []int{comps[0].Ratio.Blocks, comps[1].Ratio.Blocks, comps[2].Ratio.Blocks})
	last := res.Rows[len(res.Rows)-1]
	require.Equal(t, uint64(711), last.Seed)
}

func TestCampaignWithoutCalibration(t *testing.T) {
	// Seed 004's shape: three arms, one candidate each, no calibration.
	m := &modelRunner{zero: map[string]float64{"base": 1.2, "fix": 1, "ovloff": 1.01}}
	p := Plan{
		Reference: "FIX",
		Arms:      []Arm{{Name: "BASE", Candidates: []string{"base"}}, {Name: "FIX", Candidates: []string{"fix"}}, {Name: "OVLOFF", Candidates: []string{"ovloff"}}},
		Shares:    []float64{0}, Blocks: 3, ValidationSeed: 1,
	}
	res, err := Run(context.Background(), p, m, nil)
	require.NoError(t, err)
	require.Len(t, res.Rows, 9)
	require.Equal(t, map[string]string{"BASE": "base", "FIX": "fix", "OVLOFF": "ovloff"}, res.Frozen)
	require.Empty(t, res.Gates)
	comps, err := report.Compare(res.Rows, Validation, "BASE", "FIX", report.Throughput, stats.Bootstrap{Seed: 1})
	require.NoError(t, err)
	require.InEpsilon(t, 1/1.2, comps[0].Ratio.Point, 1e-12)
}

func TestCampaignStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	m := seed000Runner()
	res, err := Run(ctx, seed000Plan(), m, func(_ report.Row, done, _ int) error {
		if done == 3 {
			cancel()
		}
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "stopped before cal_B_b3_s0")
	require.Len(t, res.Rows, 3)

	m = seed000Runner()
	res, err = Run(context.Background(), seed000Plan(), m, func(report.Row, int, int) error { return errors.New("disk full") })
	require.ErrorContains(t, err, "after row cal_A_a_s0: disk full")
	require.Len(t, res.Rows, 1)
}

func TestPlanValidation(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Plan)
		wantErr string
	}{
		{"no blocks", func(p *Plan) { p.Blocks = 0 }, "blocks 0 < 1 at share 0"},
		{"share blocks length", func(p *Plan) { p.ShareBlocks = []int{1, 2} }, "2 share block counts for 3 shares"},
		{"share blocks zero", func(p *Plan) { p.ShareBlocks = []int{1, 0, 2} }, "blocks 0 < 1 at share 0.5"},
		{"seed not held out by the longest share", func(p *Plan) { p.ShareBlocks = []int{1, 1, 30}; p.CalibrationSeed = 720 }, "among the validation seeds 700..729"},
		{"no shares", func(p *Plan) { p.Shares = nil }, "no validation shares"},
		{"repeated arm", func(p *Plan) { p.Arms[2].Name = "B" }, `arm name "B" empty or repeated`},
		{"no candidates", func(p *Plan) { p.Arms[1].Candidates = nil }, "arm B has no candidates"},
		{"reference candidates", func(p *Plan) { p.Arms[0].Candidates = []string{"a", "a2"} }, "reference arm A has 2 candidates"},
		{"unknown reference", func(p *Plan) { p.Reference = "Z" }, `reference arm "Z" is not among`},
		{"share", func(p *Plan) { p.Shares = []float64{1.5} }, "share 1.5 outside"},
		{"seed not held out", func(p *Plan) { p.CalibrationSeed = 701 }, "calibration seed 701 is among the validation seeds 700..702"},
		{"candidates without calibration", func(p *Plan) { p.CalibrationShares = nil }, "arm B has 3 candidates but no calibration shares"},
		{"gate", func(p *Plan) { p.Gate.MaxRatio = -1 }, "gate ratio -1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := seed000Plan()
			tc.edit(&p)
			m := seed000Runner()
			_, err := Run(context.Background(), p, m, nil)
			require.ErrorContains(t, err, tc.wantErr)
			require.Empty(t, m.ran)
		})
	}
}
