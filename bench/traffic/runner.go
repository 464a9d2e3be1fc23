package traffic

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/turnstile-llm/turnstile/bench/campaign"
	"github.com/turnstile-llm/turnstile/bench/report"
	"github.com/turnstile-llm/turnstile/bench/workload"
	"github.com/turnstile-llm/turnstile/internal/clock"
)

// Runner runs campaign rows of request traffic on one engine (e.g. seed
// 004's arms on one rank: BASE charges retiring requests, FIX does not,
// OVLOFF runs without overlap). Each row gets a fresh virtual clock, a
// fresh engine for its arm and candidate, and the workload of its seed.
// Rows count requests where seed 000 counts programs. It satisfies
// campaign.Runner.
type Runner struct {
	// Workload makes the row's requests from its seed (the spec's share is
	// ignored: request traffic has no sharing level).
	Workload func(seed uint64) ([]workload.Request, error)
	// Setup builds the engine of an arm's candidate on clk (its runner
	// must spend step time on clk too) and the KV capacity in tokens.
	Setup func(arm, candidate string, clk *clock.Virtual) (e Engine, capacityTokens int, err error)
	// SamplingSeed, Deadline, CheckEveryStep and StopAtEOS are passed to
	// Run.
	SamplingSeed   uint64
	Deadline       time.Duration
	CheckEveryStep bool
	StopAtEOS      bool
}

// Run runs one row: a run that fails its audit is a FAIL row with the
// reason (no error); an engine or workload error is an error.
func (r Runner) Run(ctx context.Context, s campaign.Spec) (report.Row, error) {
	reqs, err := r.Workload(s.Seed)
	if err != nil {
		return report.Row{}, err
	}
	clk := clock.NewVirtual(time.Unix(0, 0))
	eng, capTokens, err := r.Setup(s.Arm, s.Candidate, clk)
	if err != nil {
		return report.Row{}, fmt.Errorf("traffic: engine for arm %s candidate %s: %w", s.Arm, s.Candidate, err)
	}
	res, err := Drive(ctx, Run{Engine: eng, Clock: clk, Requests: reqs, SamplingSeed: r.SamplingSeed,
		Deadline: r.Deadline, CheckEveryStep: r.CheckEveryStep, StopAtEOS: r.StopAtEOS})
	if c, ok := eng.(interface{ Close() error }); ok {
		if cerr := c.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("traffic: close engine of row %s: %w", s.RowID, cerr)
		}
	}
	row := report.Row{Programs: len(reqs), DP: 1, CapacityTokens: capTokens,
		Workload: workload.RequestsDigest(reqs), Audit: report.Pass}
	var terr *Error
	switch {
	case errors.As(err, &terr):
		row.Audit, row.AuditDetail = report.Fail, terr.Reason
	case err != nil:
		return report.Row{}, err
	}
	row.Completed = res.Completed
	var arr, fin []time.Duration
	for i, f := range res.Finish {
		if f >= 0 {
			arr, fin = append(arr, reqs[i].Arrival), append(fin, f)
		}
	}
	if len(fin) == 0 {
		return row, nil
	}
	m, err := report.BatchMetrics(arr, fin)
	if err != nil {
		return report.Row{}, err
	}
	m.SchedulerPauses, m.SchedulerResumes, m.ForcedResumes, m.PeakActivePrograms = -1, -1, -1, -1
	m.RecomputedTokens, m.ComputedPromptTokens = -1, res.PromptTokens-res.CachedTokens
	m.Preemptions, m.GeneratedTokens, m.GenerationCounterMatches = res.Preemptions, res.Generated, true
	m.Steps = res.Steps
	row.M = &m
	return row, nil
}
