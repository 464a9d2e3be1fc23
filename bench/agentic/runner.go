package agentic

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/turnstile-llm/turnstile/bench/campaign"
	"github.com/turnstile-llm/turnstile/bench/report"
	"github.com/turnstile-llm/turnstile/bench/workload"
	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
)

// Runner runs campaign rows of agentic batches: each row gets a fresh
// virtual clock and a fresh engine for its arm and candidate, and the
// workload of its seed and sharing level. It satisfies campaign.Runner.
type Runner struct {
	// Workload returns the workload of a row (Seed and Share set from the
	// spec by the Runner afterwards).
	Workload workload.AgenticConfig
	// Setup builds the engine of an arm's candidate on clk (its runner
	// must spend step time on clk too).
	Setup func(arm, candidate string, clk *clock.Virtual) (Setup, error)
	// SamplingSeed is the base of the programs' sampling seeds.
	SamplingSeed uint64
	// Deadline bounds each batch in virtual time (seed 000: 240 s).
	Deadline time.Duration
	// CheckEveryStep is passed to Batch.CheckEveryStep.
	CheckEveryStep bool
}

// Setup is one row's engine and the hooks of its arm.
type Setup struct {
	Engine Engine
	// CapacityTokens is the KV capacity in tokens, recorded in the row.
	CapacityTokens int
	// ProgramDone is passed to Batch.ProgramDone (program-level
	// admission releases finished programs there); may be nil.
	ProgramDone func(programID string) error
	// Measure, when set, adds the arm's own measurements to the row's
	// metrics after the batch (scheduler pauses and resumes, forced
	// resumes, peak active programs from program-level admission).
	Measure func(m *report.Metrics)
}

// EngineSetup is the Setup of an executor engine: with a program policy
// (executor.Config.Programs) finished programs are released through
// Engine.ReleaseProgram and the row records the policy's pauses, resumes,
// forced resumes and peak ACTIVE programs; without one they stay
// unmeasured.
func EngineSetup(eng *executor.Engine, capacityTokens int) Setup {
	s := Setup{Engine: eng, CapacityTokens: capacityTokens}
	if states, _, _ := eng.ProgramStates(); states == nil {
		return s
	}
	s.ProgramDone = func(id string) error {
		found, err := eng.ReleaseProgram(id)
		if err == nil && !found {
			err = fmt.Errorf("program %s unknown to the engine", id)
		}
		return err
	}
	s.Measure = func(m *report.Metrics) {
		pm := eng.Snapshot().Programs
		if pm.Pauses <= math.MaxInt32 && pm.Resumes <= math.MaxInt32 && pm.ForcedResumes <= math.MaxInt32 {
			m.SchedulerPauses, m.SchedulerResumes, m.ForcedResumes = int(pm.Pauses), int(pm.Resumes), int(pm.ForcedResumes)
		}
		m.PeakActivePrograms = pm.PeakActive
	}
	return s
}

// Run runs one row. A batch that fails its audit is returned as a FAIL row
// with the reason (and no error); an engine or workload error is an error.
func (r Runner) Run(ctx context.Context, s campaign.Spec) (report.Row, error) {
	cfg := r.Workload
	cfg.Seed, cfg.Share = s.Seed, s.Share
	progs, err := workload.Agentic(cfg)
	if err != nil {
		return report.Row{}, err
	}
	clk := clock.NewVirtual(time.Unix(0, 0))
	setup, err := r.Setup(s.Arm, s.Candidate, clk)
	if err != nil {
		return report.Row{}, fmt.Errorf("agentic: engine for arm %s candidate %s: %w", s.Arm, s.Candidate, err)
	}
	row := report.Row{
		Programs: len(progs), Phase: cfg.ArrivalGap.Seconds(), ToolWait: cfg.ToolWait.Seconds(),
		JitterMS: float64(cfg.Jitter) / float64(time.Millisecond), DP: 1, CapacityTokens: setup.CapacityTokens,
		Workload: workload.Digest(progs), Audit: report.Pass,
	}
	res, err := Run(ctx, Batch{Engine: setup.Engine, Clock: clk, Programs: progs, SamplingSeed: r.SamplingSeed,
		Deadline: r.Deadline, CheckEveryStep: r.CheckEveryStep, ProgramDone: setup.ProgramDone})
	if c, ok := setup.Engine.(interface{ Close() error }); ok {
		if cerr := c.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("agentic: close engine of row %s: %w", s.RowID, cerr)
		}
	}
	var aerr *Error
	switch {
	case errors.As(err, &aerr):
		row.Audit, row.AuditDetail = report.Fail, aerr.Reason
	case err != nil:
		return report.Row{}, err
	}
	row.Completed = res.Completed
	if res.Completed == 0 {
		return row, nil
	}
	var arr, fin []time.Duration
	for i := range res.Finish {
		if res.Finish[i] >= 0 {
			arr, fin = append(arr, res.Arrival[i]), append(fin, res.Finish[i])
		}
	}
	m, err := report.BatchMetrics(arr, fin)
	if err != nil {
		return report.Row{}, err
	}
	// Counters only program-level admission knows stay unmeasured unless
	// the arm's Measure fills them.
	m.SchedulerPauses, m.SchedulerResumes, m.ForcedResumes, m.PeakActivePrograms = -1, -1, -1, -1
	m.RecomputedTokens = -1 // the engine does not count recomputed tokens yet
	m.FirstTurnCachedTokens = res.FirstTurnCached
	m.Preemptions = res.Preemptions
	m.GeneratedTokens = res.EngineGenerated
	m.GenerationCounterMatches = res.EngineGenerated == res.Received
	m.ComputedPromptTokens = res.ComputedPrompt
	m.Steps = res.Steps
	for _, sh := range res.Sharing {
		m.TurnShares = append(m.TurnShares, sh.Ratio)
	}
	if setup.Measure != nil {
		setup.Measure(&m)
	}
	row.M = &m
	return row, nil
}
