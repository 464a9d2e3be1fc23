package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/turnstile-llm/turnstile/bench/agentic"
	"github.com/turnstile-llm/turnstile/bench/calibrate"
	"github.com/turnstile-llm/turnstile/bench/campaign"
	"github.com/turnstile-llm/turnstile/bench/report"
	"github.com/turnstile-llm/turnstile/bench/rig"
	"github.com/turnstile-llm/turnstile/bench/workload"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/internal/stats"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/sim"
)

// Presets of `turnstile bench agentic`: the workload, engine and arm
// parameters of a campaign. Flags given explicitly override them.
const (
	presetSeed000 = "seed000" // seed 000 at its scale, for the simulated device
	presetSmall   = "small"   // 1/64 of its token lengths, for the CPU runner and stories260K
)

// agenticPreset holds every parameter a preset sets.
type agenticPreset struct {
	context, output, tool       int
	toolWait, jitter, phase     time.Duration
	deadline                    time.Duration
	blockSize, kvBlocks         int
	maxBatchTokens, maxContext  int
	scale                       float64 // of seed 000's token lengths (arm buffers and reserves follow)
	calibrationSeed, validation uint64
}

// presetNamed returns a preset: seed000 is the study's batch — 32 programs whose turn-0
// context (16,384 tokens) makes arm A admit 28 of 32 at 468,736 KV tokens
// (28 × 16,484 ≤ 468,736 < 29 × 16,484), 256 output tokens per turn, 1 s
// tool waits with 5 ms jitter, a 240 s deadline, seeds 520 (calibration)
// and 700.. (validation). Two parameters the seed does not state are
// inferred from its rows: every program starts at the origin (under B its
// P50, P95 and batch time are equal, which staggered arrivals cannot
// produce), and tool outputs are 384 tokens (the seed saw no preemption in
// any row; with 512, A's 28 programs outgrow the physically full pool in
// mid-turn and every arm preempts at zero sharing). small divides the token
// lengths and the KV capacity by 64 so the same admission arithmetic holds
// (A admits 28: 28 × 258 ≤ 7,312 < 29 × 258) within stories260K's 512-token
// context, and divides times by 30, about the ratio of a stories260K step
// on two CPU cores to an 8B step on an H200.
func presetNamed(name string) (agenticPreset, bool) {
	p, ok := map[string]agenticPreset{
		presetSeed000: {context: 16384, output: 256, tool: 384, toolWait: time.Second, jitter: 5 * time.Millisecond,
			phase: 0, deadline: 240 * time.Second, blockSize: 16, kvBlocks: 29296,
			maxBatchTokens: 8192, maxContext: 32768, scale: 1, calibrationSeed: 520, validation: 700},
		presetSmall: {context: 256, output: 4, tool: 6, toolWait: time.Second / 30, jitter: 5 * time.Millisecond / 30,
			phase: 0, deadline: 240 * time.Second / 30, blockSize: 16, kvBlocks: 457,
			maxBatchTokens: 512, maxContext: 512, scale: 1.0 / 64, calibrationSeed: 520, validation: 700},
	}[name]
	return p, ok
}

// benchAgenticOptions are the flags of `turnstile bench agentic`.
type benchAgenticOptions struct {
	arms            []string
	shares          []float64
	programs, turns int
	runners         []string
	preset          string
	p               agenticPreset
	blocks          int // at the last (primary) share
	secondary       int // at every other share
	calibrate       bool
	samplingSeed    uint64
	bootSeed        uint64
	profile         string        // sim cost profile from `bench calibrate`; "" = built-in H200
	stepFixed       time.Duration // overrides the sim cost model's fixed time per step; 0 = keep
	noOverlap       bool
	model           string
	workers         int
	out             string
	checkEveryStep  bool
}

func newBenchAgenticCmd() *cobra.Command {
	o := benchAgenticOptions{}
	var (
		shares, arms, runners []string
		p                     agenticPreset
	)
	cmd := &cobra.Command{
		Use:   "agentic [--arms A,B,C] [--share 0,0.5,0.9] [--programs 32] [--turns 3] [--runner sim|cpu|sim,cpu] [--out DIR]",
		Short: "Seed 000's A/B/C program-admission campaign on the simulated device or the CPU runner",
		Long: "agentic runs seed 000's campaign: arms A (Σ tokens + buffer), B (distinct blocks + growth reserve) and\n" +
			"C (A with pause/resume thresholds) on paired blocks of agentic programs. Calibration runs every B and C\n" +
			"candidate on seed 520 at zero and the highest sharing, gates them (zero-sharing batch time and P95 ≤ 1.05 × A,\n" +
			"no preemptions, counters match) and freezes the fastest eligible one; validation then runs held-out seeds\n" +
			"700.. with --blocks paired blocks at the highest share and --secondary-blocks at the others. Ratios are\n" +
			"geometric means of paired batch ratios with 10,000-resample bootstrap intervals over whole blocks.\n\n" +
			"--runner sim runs the simulated device on a virtual clock (the built-in H200 Llama-3-8B profile, or a\n" +
			"profile fitted by `turnstile bench calibrate --out`); --runner cpu runs the real CPU runner on stories260K,\n" +
			"its measured step times spent on the virtual clock (tool waits cost no wall time); --runner sim,cpu runs\n" +
			"both on the same workload and prints the simulator's prediction beside the CPU measurement.\n" +
			"Presets: seed000 (the study's scale; default for sim) and small (1/64 of the token lengths, default when\n" +
			"the CPU runner is used). Rows are written to DIR/<runner>/rows.csv as they complete.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.arms = arms
			o.runners = runners
			var err error
			if o.shares, err = parseShares(shares); err != nil {
				return err
			}
			if err := o.resolvePreset(cmd, p); err != nil {
				return err
			}
			if err := o.validate(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBenchAgentic(ctx, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&arms, "arms", []string{"A", "B", "C"}, "arms to run (A is the reference and required)")
	f.StringSliceVar(&shares, "share", []string{"0", "0.5", "0.9"}, "validation sharing levels in [0, 1]; the last is primary")
	f.IntVar(&o.programs, "programs", 32, "programs per batch")
	f.IntVar(&o.turns, "turns", 3, "inference calls per program")
	f.StringSliceVar(&runners, "runner", []string{"sim"}, "sim, cpu, or sim,cpu (prediction beside measurement)")
	f.StringVar(&o.preset, "preset", "", "seed000 or small (default: seed000 for sim, small with cpu)")
	f.IntVar(&p.context, "context-tokens", 0, "turn-0 prompt tokens (default: the preset's)")
	f.IntVar(&p.output, "output-tokens", 0, "tokens generated per turn")
	f.IntVar(&p.tool, "tool-tokens", 0, "tool-output tokens appended after each non-final turn")
	f.DurationVar(&p.toolWait, "tool-wait", 0, "tool latency between turns (virtual time)")
	f.DurationVar(&p.jitter, "jitter", 0, "tool-wait jitter, uniform ±")
	f.DurationVar(&p.phase, "phase", 0, "arrival gap between programs")
	f.DurationVar(&p.deadline, "deadline", 0, "per-batch deadline in virtual time")
	f.IntVar(&p.kvBlocks, "kv-blocks", 0, "KV blocks (capacity = blocks × block size)")
	f.IntVar(&p.blockSize, "block-size", 0, "KV block size in tokens")
	f.IntVar(&p.maxBatchTokens, "max-num-batched-tokens", 0, "token budget of one step")
	f.IntVar(&o.blocks, "blocks", 12, "paired validation blocks at the primary (last) share")
	f.IntVar(&o.secondary, "secondary-blocks", 3, "paired validation blocks at every other share")
	f.BoolVar(&o.calibrate, "calibrate", true, "calibrate B's and C's candidates before validation (else b2 and c2 are used)")
	f.Uint64Var(&o.samplingSeed, "sampling-seed", 1, "base of the programs' sampling seeds")
	f.Uint64Var(&o.bootSeed, "bootstrap-seed", stats.DefaultSeed, "seed of the bootstrap resampling")
	f.StringVar(&o.profile, "profile", "", "sim cost profile JSON from `turnstile bench calibrate --out` (default: built-in H200 Llama-3-8B)")
	f.DurationVar(&o.stepFixed, "step-fixed", 0, "override the sim cost model's fixed time per step (e.g. 9ms: an eager-mode GPU's launch overhead; 0: keep)")
	f.BoolVar(&o.noOverlap, "no-overlap", false, "run the engines without the overlap scheduler")
	f.StringVar(&o.model, "model", defaultModelPath(), "GGUF model for --runner cpu")
	f.IntVar(&o.workers, "workers", 0, "cores the CPU kernels use (0: GOMAXPROCS)")
	f.StringVar(&o.out, "out", "out/bench-agentic", "directory for rows.csv, summary.json, table.md and throughput.png (\"\": none)")
	f.BoolVar(&o.checkEveryStep, "check-every-step", false, "run the engine's accounting check after every step (slow; always after every row)")
	return cmd
}

// parseShares parses the --share list.
func parseShares(in []string) ([]float64, error) {
	var out []float64
	for _, s := range in {
		var v float64
		if _, err := fmt.Sscanf(strings.TrimSpace(s), "%g", &v); err != nil || math.IsNaN(v) || v < 0 || v > 1 {
			return nil, fmt.Errorf("--share %q: want numbers in [0, 1]", s)
		}
		if slices.Contains(out, v) {
			return nil, fmt.Errorf("--share %v listed twice", v)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("--share: no sharing levels")
	}
	return out, nil
}

// resolvePreset fills o.p from the preset and the flags set explicitly.
func (o *benchAgenticOptions) resolvePreset(cmd *cobra.Command, flags agenticPreset) error {
	if o.preset == "" {
		o.preset = presetSeed000
		if slices.Contains(o.runners, "cpu") {
			o.preset = presetSmall
		}
	}
	p, ok := presetNamed(o.preset)
	if !ok {
		return fmt.Errorf("--preset %q: want %s or %s", o.preset, presetSeed000, presetSmall)
	}
	set := cmd.Flags().Changed
	for _, f := range []struct {
		name     string
		dst, src any
	}{
		{"context-tokens", &p.context, flags.context}, {"output-tokens", &p.output, flags.output},
		{"tool-tokens", &p.tool, flags.tool}, {"tool-wait", &p.toolWait, flags.toolWait},
		{"jitter", &p.jitter, flags.jitter}, {"phase", &p.phase, flags.phase}, {"deadline", &p.deadline, flags.deadline},
		{"kv-blocks", &p.kvBlocks, flags.kvBlocks}, {"block-size", &p.blockSize, flags.blockSize},
		{"max-num-batched-tokens", &p.maxBatchTokens, flags.maxBatchTokens},
	} {
		if !set(f.name) {
			continue
		}
		switch d := f.dst.(type) {
		case *int:
			*d = f.src.(int)
		case *time.Duration:
			*d = f.src.(time.Duration)
		}
	}
	o.p = p
	return nil
}

func (o *benchAgenticOptions) validate() error {
	p := o.p
	for _, r := range o.runners {
		if r != "sim" && r != "cpu" {
			return fmt.Errorf("--runner %q: want sim, cpu or sim,cpu", r)
		}
	}
	if len(o.runners) == 0 || len(o.runners) > 2 || len(o.runners) == 2 && o.runners[0] == o.runners[1] {
		return fmt.Errorf("--runner %v: want sim, cpu or sim,cpu", o.runners)
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"--programs", o.programs}, {"--turns", o.turns}, {"--context-tokens", p.context}, {"--output-tokens", p.output},
		{"--kv-blocks", p.kvBlocks}, {"--block-size", p.blockSize}, {"--max-num-batched-tokens", p.maxBatchTokens},
		{"--blocks", o.blocks}, {"--secondary-blocks", o.secondary}} {
		if c.v < 1 {
			return fmt.Errorf("%s %d: must be ≥ 1", c.name, c.v)
		}
	}
	if o.turns > 1 && p.tool < 1 {
		return fmt.Errorf("--tool-tokens %d: must be ≥ 1 with %d turns", p.tool, o.turns)
	}
	for _, c := range []struct {
		name string
		v    time.Duration
	}{{"--tool-wait", p.toolWait}, {"--jitter", p.jitter}, {"--phase", p.phase}} {
		if c.v < 0 {
			return fmt.Errorf("%s %v: must be ≥ 0", c.name, c.v)
		}
	}
	if p.deadline <= 0 {
		return fmt.Errorf("--deadline %v: must be > 0", p.deadline)
	}
	if o.workers < 0 {
		return fmt.Errorf("--workers %d: must be ≥ 0", o.workers)
	}
	if o.stepFixed < 0 {
		return fmt.Errorf("--step-fixed %v: must be ≥ 0", o.stepFixed)
	}
	if need := p.context + o.turns*p.output + (o.turns-1)*p.tool; need > p.maxContext && o.preset == presetSeed000 {
		return fmt.Errorf("a program reaches %d tokens, past the engine's %d-token context", need, p.maxContext)
	}
	return nil
}

// agenticRun is one runner's campaign outcome.
type agenticRun struct {
	runner string
	res    campaign.Result
	comps  []report.Comparison
	err    error
}

func runBenchAgentic(ctx context.Context, o benchAgenticOptions, out, errOut io.Writer) error {
	armSet := agentic.Seed000Arms(o.programs).Scaled(o.p.scale)
	campArms, err := armSet.Campaign(o.arms)
	if err != nil {
		return fmt.Errorf("--arms: %w", err)
	}
	if !o.calibrate {
		for i := range campArms {
			if len(campArms[i].Candidates) > 1 {
				campArms[i].Candidates = campArms[i].Candidates[1:2] // the seed's middle candidate
			}
		}
	}
	primary := len(o.shares) - 1
	plan := campaign.Plan{Reference: "A", Arms: campArms, Shares: o.shares, ValidationSeed: o.p.validation,
		CalibrationSeed: o.p.calibrationSeed}
	for k := range o.shares {
		plan.ShareBlocks = append(plan.ShareBlocks, map[bool]int{true: o.blocks, false: o.secondary}[k == primary])
	}
	if o.calibrate {
		plan.CalibrationShares = []float64{0, o.shares[primary]}
		if o.shares[primary] == 0 {
			plan.CalibrationShares = []float64{0}
		}
	}
	wl := workload.AgenticConfig{Programs: o.programs, Turns: o.turns, ContextTokens: o.p.context, OutputTokens: o.p.output,
		ToolTokens: o.p.tool, ToolWait: o.p.toolWait, Jitter: o.p.jitter, ArrivalGap: o.p.phase}
	if o.turns == 1 {
		wl.ToolTokens = 0
	}

	var llama *model.Llama
	if slices.Contains(o.runners, "cpu") {
		if llama, err = model.LoadLlama(o.model, model.LlamaOptions{}); err != nil {
			return fmt.Errorf("bench agentic: --model %s: %w", o.model, err)
		}
		if maxCtx := llama.Config().ContextLength; maxCtx < o.p.maxContext {
			o.p.maxContext = maxCtx
		}
		if need := o.p.context + o.turns*o.p.output + (o.turns-1)*o.p.tool; need > o.p.maxContext {
			return fmt.Errorf("a program reaches %d tokens, past the model's %d-token context: lower --context-tokens", need, o.p.maxContext)
		}
		if v := llama.Config().Vocab; v < workload.DefaultTokenMax {
			return fmt.Errorf("--model %s: vocabulary %d is smaller than the workload's token range [%d, %d)",
				o.model, v, workload.DefaultTokenMin, workload.DefaultTokenMax)
		}
	}
	cost, costName, err := o.simCost()
	if err != nil {
		return err
	}
	if err := o.printHeader(out, plan, armSet, costName); err != nil {
		return err
	}

	var runs []agenticRun
	for _, r := range o.runners {
		setup := o.setup(r, armSet, cost, llama)
		run := agentic.Runner{Workload: wl, Setup: setup, SamplingSeed: o.samplingSeed, Deadline: o.p.deadline,
			CheckEveryStep: o.checkEveryStep}
		ar := o.runCampaign(ctx, r, plan, run, errOut)
		runs = append(runs, ar)
		if err := o.writeOutputs(ar, armSet, out); err != nil {
			return err
		}
		if ar.err != nil {
			return fmt.Errorf("bench agentic: runner %s: %w", r, ar.err)
		}
	}
	if len(runs) == 2 {
		return printPrediction(out, runs[0], runs[1])
	}
	return nil
}

// simCost is the simulated device's cost model: the profile's, or the
// built-in H200 Llama-3-8B one.
func (o *benchAgenticOptions) simCost() (sim.Linear, string, error) {
	l, name := sim.H200Llama3_8B(!o.noOverlap), "built-in H200 Llama-3-8B"
	if o.profile != "" {
		prof, err := calibrate.ReadProfile(o.profile)
		if err != nil {
			return sim.Linear{}, "", fmt.Errorf("--profile: %w", err)
		}
		l, name = prof.Linear, fmt.Sprintf("fitted %s (%s runner, %s)", o.profile, prof.Runner, prof.Model)
		l.Overlap = !o.noOverlap
	}
	if o.stepFixed > 0 {
		name += fmt.Sprintf(", fixed %v per step instead of %v", o.stepFixed, time.Duration(l.Fixed*1e9).Round(time.Microsecond))
		l.Fixed = o.stepFixed.Seconds()
	}
	return l, name, nil
}

// setup builds a row's engine on runner r for an arm's candidate.
func (o *benchAgenticOptions) setup(r string, arms agentic.Arms, cost sim.Linear, llama *model.Llama) func(arm, cand string, clk *clock.Virtual) (agentic.Setup, error) {
	return func(arm, cand string, clk *clock.Virtual) (agentic.Setup, error) {
		pc, err := arms.Policy(arm, cand)
		if err != nil {
			return agentic.Setup{}, err
		}
		c := rig.Config{MaxBatchSize: o.programs, KVBlocks: o.p.kvBlocks, BlockSize: o.p.blockSize,
			MaxBatchTokens: o.p.maxBatchTokens, Overlap: !o.noOverlap, Seed: 3, Programs: pc}
		if r == "sim" {
			eng, capTokens, err := rig.NewSim(c, rig.Sim{Cost: cost, MaxContext: o.p.maxContext, Vocab: workload.DefaultTokenMax}, clk)
			if err != nil {
				return agentic.Setup{}, err
			}
			return agentic.EngineSetup(eng, capTokens), nil
		}
		eng, _, capTokens, err := rig.NewCPU(c, rig.CPU{Model: llama, Workers: o.workers}, clk)
		if err != nil {
			return agentic.Setup{}, err
		}
		s := agentic.EngineSetup(eng.Engine, capTokens)
		s.Engine = eng // closing the row's engine closes its CPU runner too
		return s, nil
	}
}

// runCampaign runs the plan on one runner, writing each row to
// DIR/<runner>/rows.csv as it completes and drawing progress on errOut.
func (o *benchAgenticOptions) runCampaign(ctx context.Context, runner string, plan campaign.Plan, run agentic.Runner, errOut io.Writer) agenticRun {
	ar := agenticRun{runner: runner}
	dir := ""
	if o.out != "" {
		dir = filepath.Join(o.out, runner)
	}
	log, err := openRowLog(dir, plan.Rows(), errOut)
	if err != nil {
		ar.err = err
		return ar
	}
	ar.res, ar.err = campaign.Run(ctx, plan, run, func(row report.Row, done, _ int) error {
		return log.row(&row, done, runner+" "+row.RowID)
	})
	if err := log.Close(); err != nil && ar.err == nil {
		ar.err = err
	}
	boot := stats.Bootstrap{Seed: o.bootSeed}
	for _, a := range plan.Arms {
		if a.Name == plan.Reference {
			continue
		}
		for _, m := range []report.Metric{report.Throughput, report.P50, report.P95, report.BatchTime} {
			c, err := report.Compare(ar.res.Rows, campaign.Validation, a.Name, plan.Reference, m, boot)
			if err != nil {
				if ar.err == nil {
					ar.err = err
				}
				continue
			}
			ar.comps = append(ar.comps, c...)
		}
	}
	return ar
}

func (o *benchAgenticOptions) printHeader(out io.Writer, plan campaign.Plan, arms agentic.Arms, costName string) error {
	p := o.p
	_, err := fmt.Fprintf(out, "bench agentic: preset %s, runner %s, %d programs × %d turns, context %d, output %d, tool %d tokens; "+
		"tool wait %v ± %v, phase %v, deadline %v; KV %d tokens (%d × %d), max batch %d, step budget %d tokens, overlap %v\n"+
		"  sim cost: %s\n  plan: %d rows; calibration at %v (seed %d), validation at %v with %v blocks (seeds %d..)\n",
		o.preset, strings.Join(o.runners, ","), o.programs, o.turns, p.context, p.output, p.tool, p.toolWait, p.jitter, p.phase,
		p.deadline, p.kvBlocks*p.blockSize, p.kvBlocks, p.blockSize, o.programs, p.maxBatchTokens, !o.noOverlap,
		costName, plan.Rows(), plan.CalibrationShares, plan.CalibrationSeed, plan.Shares, plan.ShareBlocks, plan.ValidationSeed)
	if err != nil {
		return err
	}
	desc := arms.Describe()
	for _, a := range plan.Arms {
		for _, c := range a.Candidates {
			if _, err := fmt.Fprintf(out, "  %s/%s: %s\n", a.Name, c, desc[c]); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeOutputs writes one runner's summary, markdown and plot, and prints
// its comparisons and the seed's goals.
func (o *benchAgenticOptions) writeOutputs(ar agenticRun, arms agentic.Arms, out io.Writer) error {
	name := fmt.Sprintf("bench agentic runner=%s preset=%s programs=%d turns=%d", ar.runner, o.preset, o.programs, o.turns)
	sum := ar.res.Summary(name, ar.comps)
	held := campaign.Gate{}.HeldOut(ar.comps, 0)
	if len(held) > 0 && sum.Gates == nil {
		sum.Gates = map[string]report.GateResult{}
	}
	for k, g := range held {
		sum.Gates[k] = g
	}
	if o.out != "" {
		dir := filepath.Join(o.out, ar.runner)
		files := map[string]func(io.Writer) error{
			"summary.json": func(w io.Writer) error { return report.WriteJSON(w, sum) },
			"table.md":     func(w io.Writer) error { return report.WriteMarkdown(w, sum, ar.res.Rows) },
		}
		var tp []report.Comparison
		for _, c := range ar.comps {
			if c.Metric == report.Throughput {
				tp = append(tp, c)
			}
		}
		if len(tp) > 0 {
			files["throughput.png"] = func(w io.Writer) error { return report.ThroughputPlot(w, tp, report.PlotWidth, report.PlotHeight) }
		}
		for fn, write := range files {
			if err := writeFile(filepath.Join(dir, fn), write); err != nil {
				return err
			}
		}
	}
	return printAgentic(out, ar, sum, o.shares[len(o.shares)-1], o.programs)
}

// printAgentic prints a runner's frozen candidates, gates, comparisons,
// admission peaks and the seed's goals at the primary share.
func printAgentic(out io.Writer, ar agenticRun, sum report.Summary, primary float64, programs int) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "\n== runner %s: %d rows, %d passed, %d failed\n", ar.runner, sum.Rows, sum.Passed, sum.Failed)
	for _, f := range sum.Failures {
		fmt.Fprintf(w, "  FAILED %s\n", f)
	}
	keys := make([]string, 0, len(sum.Gates))
	for k := range sum.Gates {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		g := sum.Gates[k]
		fmt.Fprintf(w, "  gate %s\t%s\t%s\n", k, map[bool]string{true: "eligible", false: "REJECTED"}[g.Eligible], g.Reason)
	}
	frozen := make([]string, 0, len(sum.Frozen))
	for a, c := range sum.Frozen {
		frozen = append(frozen, a+"="+c)
	}
	slices.Sort(frozen)
	fmt.Fprintf(w, "  frozen: %s\n\n", strings.Join(frozen, " "))
	fmt.Fprintf(w, "share\tratio\tmetric\tgeo-mean\t95%% interval\tblocks\n")
	for _, c := range ar.comps {
		fmt.Fprintf(w, "%.2f\t%s/%s\t%s\t%.3f\t%.3f–%.3f\t%d\n", c.Share, c.Num, c.Den, c.Metric, c.Ratio.Point, c.Ratio.Lo, c.Ratio.Hi, len(c.BlockIDs))
	}
	// Peak ACTIVE programs per arm and share (validation, max over blocks).
	peaks := map[string]map[float64]int{}
	for _, r := range ar.res.Rows {
		if r.Stage != campaign.Validation || r.M == nil {
			continue
		}
		if peaks[r.Arm] == nil {
			peaks[r.Arm] = map[float64]int{}
		}
		peaks[r.Arm][r.Share] = max(peaks[r.Arm][r.Share], r.M.PeakActivePrograms)
	}
	fmt.Fprintf(w, "\npeak ACTIVE programs of %d (validation, most over blocks):\n", programs)
	for _, a := range sortedKeys(peaks) {
		var parts []string
		for _, s := range sortedKeys(peaks[a]) {
			parts = append(parts, fmt.Sprintf("%.2f: %d", s, peaks[a][s]))
		}
		fmt.Fprintf(w, "  %s\t%s\n", a, strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "\nseed 000's goals at share %.2f (B/A):\n", primary)
	goals := []struct {
		m     report.Metric
		limit float64
		above bool
	}{{report.Throughput, 1.30, true}, {report.P95, 0.80, false}, {report.P50, 1.05, false}}
	for _, g := range goals {
		for _, c := range ar.comps {
			if c.Num != "B" || c.Share != primary || c.Metric != g.m {
				continue
			}
			ok := c.Ratio.Point <= g.limit
			rel := "≤"
			if g.above {
				ok, rel = c.Ratio.Point >= g.limit, "≥"
			}
			fmt.Fprintf(w, "  %s\t%.3f [%.3f–%.3f]\tgoal %s %.2f\t%s\n", g.m, c.Ratio.Point, c.Ratio.Lo, c.Ratio.Hi, rel, g.limit,
				map[bool]string{true: "met", false: "MISSED"}[ok])
		}
	}
	return w.Flush()
}

// printPrediction prints the simulator's ratios beside the CPU runner's on
// the same workload: the ratio of ratios says how far the simulator's
// arm comparisons can be trusted.
func printPrediction(out io.Writer, simRun, cpuRun agenticRun) error {
	if simRun.runner != "sim" {
		simRun, cpuRun = cpuRun, simRun
	}
	type key struct {
		share float64
		num   string
		m     report.Metric
	}
	simBy := map[key]report.Comparison{}
	for _, c := range simRun.comps {
		simBy[key{c.Share, c.Num, c.Metric}] = c
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "\n== simulator prediction vs CPU measurement (same workloads, paired ratios vs A)\n")
	// Each runner calibrates on its own: a different frozen candidate is a
	// different arm, and its ratios are not a prediction of the other's.
	for _, a := range sortedKeys(cpuRun.res.Frozen) {
		if sc, cc := simRun.res.Frozen[a], cpuRun.res.Frozen[a]; sc != cc {
			fmt.Fprintf(w, "note: calibration froze %s=%s on sim and %s=%s on cpu\n", a, sc, a, cc)
		}
	}
	fmt.Fprintf(w, "share\tratio\tmetric\tsim\tcpu [95%%]\tcpu/sim\n")
	for _, c := range cpuRun.comps {
		s, ok := simBy[key{c.Share, c.Num, c.Metric}]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "%.2f\t%s/%s\t%s\t%.3f\t%.3f [%.3f–%.3f]\t%.3f\n", c.Share, c.Num, c.Den, c.Metric, s.Ratio.Point,
			c.Ratio.Point, c.Ratio.Lo, c.Ratio.Hi, c.Ratio.Point/s.Ratio.Point)
	}
	return w.Flush()
}

func sortedKeys[K string | float64, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
