// Package campaign runs an experiment as seed 000 did: arms × paired
// blocks, each block one run of every arm on the same workload seed, in
// stages — calibration of each tuned arm's candidates against the
// reference arm, eligibility gates, selection and freezing of one candidate
// per arm, then held-out validation on fresh seeds that calibration never
// saw. Every row is audited; the first failed row stops the campaign, and
// it is kept, never rerun or replaced.
//
// The campaign does not know what a run is: a Runner (the bench commands
// wire the engine on the simulated or a real device) executes one Spec and
// returns its row.
package campaign

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/turnstile-llm/turnstile/bench/report"
)

// Stage names.
const (
	Calibration = "calibration"
	Validation  = "validation"
)

// Arm is one arm and the parameter candidates it may run with.
type Arm struct {
	// Name is the arm's name in rows (A, B, C; BASE, FIX, OVLOFF).
	Name string
	// Candidates name the arm's parameter sets; the Runner knows what
	// they mean. One candidate means nothing to select (it is still gated
	// when calibration runs); none is an error.
	Candidates []string
}

// Plan is a whole campaign.
type Plan struct {
	// Reference is the arm every other is compared with (seed 000's A);
	// it must be one of Arms and have exactly one candidate.
	Reference string
	// Arms lists every arm, reference included, in run order.
	Arms []Arm
	// CalibrationShares are the sharing levels calibration runs at, e.g.
	// {0, 0.9}: the first is the zero-sharing level the gates read, the
	// last the level candidates are selected on. Empty skips calibration
	// (every arm must then have one candidate).
	CalibrationShares []float64
	// CalibrationSeed is the workload seed of every calibration row.
	CalibrationSeed uint64
	// Shares are the validation sharing levels.
	Shares []float64
	// Blocks is the number of validation blocks per sharing level (≥ 1).
	Blocks int
	// ShareBlocks, when set, gives the blocks of each validation share
	// instead (parallel to Shares, each ≥ 1): seed 000 ran 12 primary
	// blocks at 90% and 3 secondary ones at 0% and 50%.
	ShareBlocks []int
	// ValidationSeed: block b of every share runs workload seed
	// ValidationSeed + b; none may equal CalibrationSeed (held out).
	ValidationSeed uint64
	// Gate is the eligibility rule applied to calibrated candidates.
	Gate Gate
}

// Gate is seed 000's eligibility rule: at zero sharing (the first
// calibration share) a candidate's batch time and P95 may be at most
// MaxRatio × the reference's; at every calibration share it must complete
// every program, its generation counter must match the tokens received,
// and, unless AllowPreemptions, it must record no preemptions.
type Gate struct {
	// MaxRatio is the zero-sharing margin, e.g. 1.05; 0 means 1.05.
	MaxRatio         float64
	AllowPreemptions bool
}

// Spec is one run for the Runner.
type Spec struct {
	Stage     string
	Arm       string
	Candidate string
	Block     int
	Seed      uint64
	Share     float64
	// RowID names the row: e.g. "cal_b2_s90", "val_s90_b3_B".
	RowID string
}

// Runner executes one run and returns its row, audited: Audit is
// report.Pass only if every program completed and the accounting audits
// (no leaked seats or blocks, invariants held) passed. An error means the
// run could not be carried out; the campaign records it as a failed row.
// The Runner fills the row's measurements and workload fields; the
// campaign overwrites Stage, Arm, Candidate, Block, Seed, Share and RowID
// from the Spec.
type Runner interface {
	Run(ctx context.Context, s Spec) (report.Row, error)
}

// Result is what a campaign produced, also when it stopped early.
type Result struct {
	// Rows are every row run, in order, failures included.
	Rows []report.Row
	// Frozen maps each arm to its selected candidate.
	Frozen map[string]string
	// Gates holds each calibrated candidate's gate outcome, keyed
	// "arm/candidate".
	Gates map[string]report.GateResult
}

// Summary is the JSON summary of the result: row counts, failures, the
// frozen candidates and gate outcomes, and comps.
func (r Result) Summary(campaign string, comps []report.Comparison) report.Summary {
	s := report.Summarise(campaign, r.Rows, comps)
	s.Frozen, s.Gates = r.Frozen, r.Gates
	return s
}

// Observer is told about each row as it completes (to write it at once,
// so a crash loses nothing, and to draw progress); done counts rows so far
// of total. An error from it stops the campaign.
type Observer func(row report.Row, done, total int) error

// blocks is the number of validation blocks at Shares[k].
func (p Plan) blocks(k int) int {
	if p.ShareBlocks != nil {
		return p.ShareBlocks[k]
	}
	return p.Blocks
}

func (p Plan) validate() error {
	if len(p.Shares) == 0 {
		return fmt.Errorf("campaign: no validation shares")
	}
	if p.ShareBlocks != nil && len(p.ShareBlocks) != len(p.Shares) {
		return fmt.Errorf("campaign: %d share block counts for %d shares", len(p.ShareBlocks), len(p.Shares))
	}
	most := 0
	for k, s := range p.Shares {
		if p.blocks(k) < 1 {
			return fmt.Errorf("campaign: blocks %d < 1 at share %v", p.blocks(k), s)
		}
		most = max(most, p.blocks(k))
	}
	names := map[string]bool{}
	for _, a := range p.Arms {
		if a.Name == "" || names[a.Name] {
			return fmt.Errorf("campaign: arm name %q empty or repeated", a.Name)
		}
		names[a.Name] = true
		if len(a.Candidates) == 0 {
			return fmt.Errorf("campaign: arm %s has no candidates", a.Name)
		}
		if len(p.CalibrationShares) == 0 && len(a.Candidates) > 1 {
			return fmt.Errorf("campaign: arm %s has %d candidates but no calibration shares to choose among them", a.Name, len(a.Candidates))
		}
		if a.Name == p.Reference && len(a.Candidates) != 1 {
			return fmt.Errorf("campaign: reference arm %s has %d candidates, want 1", a.Name, len(a.Candidates))
		}
	}
	if !names[p.Reference] {
		return fmt.Errorf("campaign: reference arm %q is not among the arms", p.Reference)
	}
	for _, s := range slices.Concat(p.Shares, p.CalibrationShares) {
		if math.IsNaN(s) || s < 0 || s > 1 {
			return fmt.Errorf("campaign: share %v outside [0, 1]", s)
		}
	}
	if len(p.CalibrationShares) > 0 && p.CalibrationSeed >= p.ValidationSeed && p.CalibrationSeed < p.ValidationSeed+uint64(most) {
		return fmt.Errorf("campaign: calibration seed %d is among the validation seeds %d..%d; validation must be held out",
			p.CalibrationSeed, p.ValidationSeed, p.ValidationSeed+uint64(most)-1)
	}
	if p.Gate.MaxRatio < 0 || math.IsNaN(p.Gate.MaxRatio) {
		return fmt.Errorf("campaign: gate ratio %v < 0", p.Gate.MaxRatio)
	}
	return nil
}

// Rows is the number of rows the plan runs if nothing fails.
func (p Plan) Rows() int {
	cal := 0
	if len(p.CalibrationShares) > 0 {
		per := 0
		for _, a := range p.Arms {
			per += len(a.Candidates)
		}
		cal = per * len(p.CalibrationShares)
	}
	val := 0
	for k := range p.Shares {
		val += p.blocks(k) * len(p.Arms)
	}
	return cal + val
}

// Run carries out the plan. It returns the result so far and an error when
// a row fails (audit FAIL or Runner error), when no candidate of an arm is
// eligible, when ctx ends or when obs fails; rows already run are always in
// the result.
func Run(ctx context.Context, p Plan, r Runner, obs Observer) (Result, error) {
	res := Result{Frozen: map[string]string{}, Gates: map[string]report.GateResult{}}
	if err := p.validate(); err != nil {
		return res, err
	}
	if p.Gate.MaxRatio == 0 {
		p.Gate.MaxRatio = 1.05
	}
	total := p.Rows()
	run := func(s Spec) (report.Row, error) {
		if err := ctx.Err(); err != nil {
			return report.Row{}, fmt.Errorf("campaign: stopped before %s: %w", s.RowID, err)
		}
		row, err := r.Run(ctx, s)
		row.Stage, row.Arm, row.Candidate, row.Block, row.Seed, row.Share, row.RowID = s.Stage, s.Arm, s.Candidate, s.Block, s.Seed, s.Share, s.RowID
		if err != nil {
			row.Audit, row.AuditDetail, row.M = report.Fail, "run error: "+err.Error(), nil
		} else if aerr := audit(&row); aerr != nil {
			row.Audit = report.Fail
			row.AuditDetail = joinDetail(row.AuditDetail, aerr.Error())
		}
		res.Rows = append(res.Rows, row)
		if obs != nil {
			if oerr := obs(row, len(res.Rows), total); oerr != nil {
				return row, fmt.Errorf("campaign: after row %s: %w", s.RowID, oerr)
			}
		}
		if row.Audit != report.Pass {
			return row, fmt.Errorf("campaign: row %s failed (%s); campaign stopped, row kept", s.RowID, row.AuditDetail)
		}
		return row, nil
	}

	if len(p.CalibrationShares) > 0 {
		if err := calibrate(p, run, &res); err != nil {
			return res, err
		}
	} else {
		for _, a := range p.Arms {
			res.Frozen[a.Name] = a.Candidates[0]
		}
	}
	for k, share := range p.Shares {
		for b := range p.blocks(k) {
			// Rotate the arm order from block to block so no arm always
			// runs first (warm caches, thermal state on real devices).
			for i := range p.Arms {
				a := p.Arms[(i+b)%len(p.Arms)]
				s := Spec{Stage: Validation, Arm: a.Name, Candidate: res.Frozen[a.Name], Block: b,
					Seed: p.ValidationSeed + uint64(b), Share: share,
					RowID: fmt.Sprintf("val_s%s_b%d_%s", pct(share), b, a.Name)}
				if _, err := run(s); err != nil {
					return res, err
				}
			}
		}
	}
	return res, nil
}

// calibrate runs every candidate at every calibration share (block k is
// share k: the reference and every candidate on CalibrationSeed), gates
// them and freezes one candidate per arm.
func calibrate(p Plan, run func(Spec) (report.Row, error), res *Result) error {
	type key struct {
		arm, cand string
		share     int
	}
	rows := map[key]report.Row{}
	for k, share := range p.CalibrationShares {
		for _, a := range p.Arms {
			for _, c := range a.Candidates {
				s := Spec{Stage: Calibration, Arm: a.Name, Candidate: c, Block: k, Seed: p.CalibrationSeed, Share: share,
					RowID: fmt.Sprintf("cal_%s_%s_s%s", a.Name, c, pct(share))}
				row, err := run(s)
				if err != nil {
					return err
				}
				rows[key{a.Name, c, k}] = row
			}
		}
	}
	var ref report.Row // the reference at zero sharing
	for _, a := range p.Arms {
		if a.Name == p.Reference {
			ref = rows[key{a.Name, a.Candidates[0], 0}]
		}
	}
	last := len(p.CalibrationShares) - 1
	for _, a := range p.Arms {
		if a.Name == p.Reference {
			res.Frozen[a.Name] = a.Candidates[0]
			continue
		}
		best, bestTP := "", math.Inf(-1)
		for _, c := range a.Candidates {
			var cand []report.Row
			for k := range p.CalibrationShares {
				cand = append(cand, rows[key{a.Name, c, k}])
			}
			g := p.Gate.check(cand, ref)
			res.Gates[a.Name+"/"+c] = g
			// Select the fastest eligible at the last (high-sharing) level;
			// ties keep the earlier-listed candidate.
			if tp := cand[last].M.ProgramsPerSecond; g.Eligible && tp > bestTP {
				best, bestTP = c, tp
			}
		}
		if best == "" {
			return fmt.Errorf("campaign: no candidate of arm %s passed the eligibility gate (%v)", a.Name, a.Candidates)
		}
		res.Frozen[a.Name] = best
	}
	return nil
}

// check applies the gate to one candidate's calibration rows (one per
// calibration share, first is zero sharing) against the reference's
// zero-sharing row. All rows have passed their audit, so M is set.
func (g Gate) check(cand []report.Row, ref report.Row) report.GateResult {
	zero := cand[0].M
	if r := zero.BatchSeconds / ref.M.BatchSeconds; r > g.MaxRatio {
		return report.GateResult{Reason: fmt.Sprintf("zero-sharing batch time %.4g s is %.4f× the reference's %.4g s (limit %.2f×)", zero.BatchSeconds, r, ref.M.BatchSeconds, g.MaxRatio)}
	}
	if r := zero.P95ProgramSeconds / ref.M.P95ProgramSeconds; r > g.MaxRatio {
		return report.GateResult{Reason: fmt.Sprintf("zero-sharing P95 %.4g s is %.4f× the reference's %.4g s (limit %.2f×)", zero.P95ProgramSeconds, r, ref.M.P95ProgramSeconds, g.MaxRatio)}
	}
	for _, row := range cand {
		switch {
		case !g.AllowPreemptions && row.M.Preemptions > 0:
			return report.GateResult{Reason: fmt.Sprintf("%d preemptions at share %v", row.M.Preemptions, row.Share)}
		case !row.M.GenerationCounterMatches:
			return report.GateResult{Reason: fmt.Sprintf("generation counter does not match streamed tokens at share %v", row.Share)}
		}
	}
	return report.GateResult{Eligible: true, Reason: "passed"}
}

// HeldOut applies the gate's margin to validation comparisons, as seed 000
// predeclared it: at the zero-sharing level, the upper end of each arm's
// P95 and batch-time ratio interval against the reference must not exceed
// MaxRatio (0 means 1.05). It returns one result per comparison checked,
// keyed "validation/<num>/<metric>"; comparisons of other shares or
// metrics are ignored.
func (g Gate) HeldOut(comps []report.Comparison, zeroShare float64) map[string]report.GateResult {
	if g.MaxRatio == 0 {
		g.MaxRatio = 1.05
	}
	out := map[string]report.GateResult{}
	for _, c := range comps {
		if c.Stage != Validation || c.Share != zeroShare || (c.Metric != report.P95 && c.Metric != report.BatchTime) {
			continue
		}
		key := Validation + "/" + c.Num + "/" + string(c.Metric)
		if c.Ratio.Hi > g.MaxRatio {
			out[key] = report.GateResult{Reason: fmt.Sprintf("%s/%s %s ratio interval %.3f–%.3f exceeds %.2f at share %v",
				c.Num, c.Den, c.Metric, c.Ratio.Lo, c.Ratio.Hi, g.MaxRatio, c.Share)}
			continue
		}
		out[key] = report.GateResult{Eligible: true, Reason: fmt.Sprintf("%s/%s %s ratio interval %.3f–%.3f within %.2f",
			c.Num, c.Den, c.Metric, c.Ratio.Lo, c.Ratio.Hi, g.MaxRatio)}
	}
	return out
}

// audit applies the campaign's own checks on top of the Runner's: a PASS
// row must have measurements, complete every program, and hold finite,
// positive batch metrics.
func audit(r *report.Row) error {
	if r.Audit != report.Pass {
		if r.AuditDetail == "" {
			return fmt.Errorf("runner reported audit %q without detail", r.Audit)
		}
		return nil // already failed, with the runner's reason
	}
	switch {
	case r.M == nil:
		return fmt.Errorf("passed without measurements")
	case r.Completed != r.Programs || r.ClientFailed != 0:
		return fmt.Errorf("completed %d of %d programs (%d failed client-side)", r.Completed, r.Programs, r.ClientFailed)
	}
	for _, m := range []struct {
		name string
		v    float64
	}{{"batch_seconds", r.M.BatchSeconds}, {"programs_per_second", r.M.ProgramsPerSecond},
		{"p50_program_seconds", r.M.P50ProgramSeconds}, {"p95_program_seconds", r.M.P95ProgramSeconds}} {
		if !(m.v > 0) || math.IsInf(m.v, 0) {
			return fmt.Errorf("%s is %v", m.name, m.v)
		}
	}
	return nil
}

func joinDetail(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// pct writes a share as a whole percent for row ids: 0.9 → "90".
func pct(share float64) string {
	return strconv.FormatFloat(math.Round(share*1000)/10, 'f', -1, 64)
}
