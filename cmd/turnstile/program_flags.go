package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/turnstile-llm/turnstile/policy"
)

// programFlags are the program policy's parameters, part of the engine
// configuration (engineFlags.admission chooses the accounting). Those not
// given on the command line (set) take the accounting's defaults
// (policy.DefaultConfig); the policy validates them
// (policy.Config.Validate).
type programFlags struct {
	maxActive                                     int // 0: --max-batch-size
	buffer, reserve                               int
	actingWeight                                  float64
	pauseThreshold, pauseTarget, resumeHysteresis float64
	agingTau, forcedResume, lease                 time.Duration
	set                                           map[string]bool
}

// admissionDefaultWhy is the rule --admission's default follows, with the
// measurements behind it (docs/experiments.md, "Choosing serve's default
// admission"), for the flag's help.
const admissionDefaultWhy = "blocks is the default because, with its 512-token reserve, it matched or beat tokens without sharing and " +
	"was far better with it: in bench agentic --calibrate=false on the simulated H200 (seed 000's and the tool-loop workloads) B/A " +
	"throughput was 1.024–1.025 and P95 0.976–0.977 at 0% sharing, 1.575–1.788 and 0.560–0.635 at 90%, and on the CPU runner, " +
	"scaled down, throughput 0.98–1.12 (a tie within its noise) at 0% and 1.55–1.71 at 90% (docs/experiments.md)"

// newProgramFlags holds the default accounting's defaults (defaultAdmission),
// which the flags' help shows.
func newProgramFlags() programFlags {
	acc, err := policy.ParseAccounting(defaultAdmission)
	if err != nil {
		panic(err) // defaultAdmission is a constant
	}
	d := policy.DefaultConfig(acc, 1)
	return programFlags{buffer: d.Buffer, reserve: d.Reserve, actingWeight: d.ActingTokenWeight, pauseThreshold: d.PauseThreshold,
		pauseTarget: d.PauseTarget, resumeHysteresis: d.ResumeHysteresis, agingTau: d.AgingTau, forcedResume: d.ForcedResume, lease: d.Lease}
}

// programParam is one program policy flag: its name, its value as given,
// and how it sets the policy's configuration.
type programParam struct {
	name, value string
	apply       func(*policy.Config)
}

// params lists the program policy flags in the order they are applied (a
// threshold before the target and hysteresis it bounds).
func (p *programFlags) params() []programParam {
	return []programParam{
		{"max-active-programs", strconv.Itoa(p.maxActive), func(c *policy.Config) { c.MaxActive = p.maxActive }},
		{"admission-buffer", strconv.Itoa(p.buffer), func(c *policy.Config) { c.Buffer = p.buffer }},
		{"admission-reserve", strconv.Itoa(p.reserve), func(c *policy.Config) { c.Reserve = p.reserve }},
		{"acting-token-weight", fmt.Sprint(p.actingWeight), func(c *policy.Config) { c.ActingTokenWeight = p.actingWeight }},
		{"pause-threshold", fmt.Sprint(p.pauseThreshold), func(c *policy.Config) { c.PauseThreshold = p.pauseThreshold }},
		{"pause-target", fmt.Sprint(p.pauseTarget), func(c *policy.Config) { c.PauseTarget = p.pauseTarget }},
		{"resume-hysteresis", fmt.Sprint(p.resumeHysteresis), func(c *policy.Config) { c.ResumeHysteresis = p.resumeHysteresis }},
		{"aging-tau", p.agingTau.String(), func(c *policy.Config) { c.AgingTau = p.agingTau }},
		{"forced-resume", p.forcedResume.String(), func(c *policy.Config) { c.ForcedResume = p.forcedResume }},
		{"program-lease", p.lease.String(), func(c *policy.Config) { c.Lease = p.lease }},
	}
}

// registerPrograms adds --admission and the program policy's parameters
// to f (flagPrograms).
func (e *engineFlags) registerPrograms(f *pflag.FlagSet) {
	f.StringVar(&e.admission, "admission", e.admission, "program admission for requests with a program id: tokens (each program's tokens + a buffer), blocks (distinct shared KV blocks + a growth reserve), pausing (tokens with pause thresholds), or none; A, B and C name the first three too. "+admissionDefaultWhy)
	p := &e.programs
	f.IntVar(&p.maxActive, "max-active-programs", p.maxActive, "most programs ACTIVE at once; the others' turns wait (default: --max-batch-size)")
	f.IntVar(&p.buffer, "admission-buffer", p.buffer, "tokens charged per ACTIVE program under tokens and pausing")
	f.IntVar(&p.reserve, "admission-reserve", p.reserve, "tokens charged per ACTIVE program under blocks (growth headroom)")
	f.Float64Var(&p.actingWeight, "acting-token-weight", p.actingWeight, "weight of a program's tokens between turns under tokens and pausing, in [0, 1]")
	f.Float64Var(&p.pauseThreshold, "pause-threshold", p.pauseThreshold, "pause programs when used exceeds this fraction of the KV capacity (pausing's default: 0.95)")
	f.Float64Var(&p.pauseTarget, "pause-target", p.pauseTarget, "pause down to this fraction of the KV capacity (pausing's default: 0.80)")
	f.Float64Var(&p.resumeHysteresis, "resume-hysteresis", p.resumeHysteresis, "resume while used + estimate <= threshold - this (pausing's default: 0.10)")
	f.DurationVar(&p.agingTau, "aging-tau", p.agingTau, "aging of waiting programs: effective size = tokens / (1 + wait/tau); 0 disables")
	f.DurationVar(&p.forcedResume, "forced-resume", p.forcedResume, "resume a waiting turn after this long even if it does not fit")
	f.DurationVar(&p.lease, "program-lease", p.lease, "end a program after this long without a turn (with --admission none, the server forgets its id then)")
}

// validatePrograms normalizes --admission and checks the program policy
// the flags ask for.
func (e *engineFlags) validatePrograms() error {
	// The accounting names are policy's; the CLI adds only "none" and that
	// an empty value means the default (defaultAdmission).
	if strings.TrimSpace(e.admission) == "" {
		e.admission = defaultAdmission
	} else if strings.EqualFold(strings.TrimSpace(e.admission), "none") {
		e.admission = "none"
	} else if a, err := policy.ParseAccounting(e.admission); err != nil {
		return fmt.Errorf("--admission %q: must be tokens, blocks or pausing (or none): %w", e.admission, err)
	} else {
		e.admission = a.String()
	}
	_, err := e.programPolicy()
	return err
}

// programPolicy is the program policy the flags ask for (nil: none): the
// accounting's defaults with the parameters given on the command line. The policy
// validates them (policy.Config.Validate, the one statement of its rules);
// each given flag is applied and validated in turn, so an error names the
// flag that made the configuration invalid. MaxActive is
// --max-active-programs, by default --max-batch-size (one step's
// sequences).
func (e *engineFlags) programPolicy() (*policy.Config, error) {
	if e.admission == "none" {
		return nil, nil
	}
	acc, err := policy.ParseAccounting(e.admission)
	if err != nil {
		return nil, fmt.Errorf("--admission: %w", err)
	}
	// At most --max-batch-size ACTIVE programs (what the sizing report
	// says): one step's sequences. 1 here once held every program but the
	// first waiting behind it.
	c := policy.DefaultConfig(acc, e.maxBatchSize)
	for _, p := range e.programs.params() {
		if !e.programs.set[p.name] {
			continue
		}
		p.apply(&c)
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("--%s %s: %w", p.name, p.value, err)
		}
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("--admission %s: %w", e.admission, err)
	}
	return &c, nil
}
