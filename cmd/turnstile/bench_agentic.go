package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/turnstile-llm/turnstile/bench/agentic"
	"github.com/turnstile-llm/turnstile/bench/campaign"
	"github.com/turnstile-llm/turnstile/bench/report"
	"github.com/turnstile-llm/turnstile/bench/rig"
	"github.com/turnstile-llm/turnstile/bench/workload"
	"github.com/turnstile-llm/turnstile/cuda"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/internal/stats"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/sim"
)

// benchAgenticOptions are the flags of `turnstile bench agentic`.
type benchAgenticOptions struct {
	// engineFlags: --model (the CPU runner's), --device (sim, cpu or a list
	// of both), --block-size and --max-num-batched-tokens (0: the
	// preset's), --workers and --no-overlap; commandFlags: --out and
	// --profile.
	engineFlags
	commandFlags
	arms            []string
	shares          []float64
	programs, turns int
	devices         []string // --device as a list (sim, cpu)
	preset          string
	p               agentic.Preset
	blocks          int // at the last (primary) share
	secondary       int // at every other share
	calibrate       bool
	samplingSeed    uint64
	bootSeed        uint64
	stepFixed       time.Duration // overrides the sim cost model's fixed time per step; 0 = keep
	checkEveryStep  bool
}

// The engine and command flags bench agentic registers.
const (
	benchAgenticEngineFlags  = flagModel | flagDevice | flagBlockSize | flagCascade | flagMaxBatched | flagKVDtype | flagWorkers | flagNoOverlap
	benchAgenticCommandFlags = flagOut | flagProfile
)

func newBenchAgenticCmd() *cobra.Command {
	o := benchAgenticOptions{engineFlags: defaultEngineFlags(), commandFlags: defaultCommandFlags(), programs: 32, turns: 0, blocks: 12, secondary: 3, calibrate: true,
		samplingSeed: 1, bootSeed: stats.DefaultSeed}
	o.dev.device, o.out = simDevice, "out/bench-agentic"
	o.blockSize, o.maxBatched = 0, 0 // the preset's
	var (
		shares, arms []string
		p            agentic.Preset
	)
	cmd := &cobra.Command{
		Use:   "agentic [--arms A,B,C] [--share 0,0.5,0.9] [--programs 32] [--turns N] [--preset NAME] [--device sim|cpu|sim,cpu] [--out DIR]",
		Short: "Seed 000's A/B/C program-admission campaign on the simulated device or the CPU runner",
		Long: "agentic runs seed 000's campaign: arms A (Σ tokens + buffer), B (distinct blocks + growth reserve) and\n" +
			"C (A with pause/resume thresholds) on paired blocks of agentic programs. Calibration runs every B and C\n" +
			"candidate on seed 520 at zero and the highest sharing, gates them (zero-sharing batch time and P95 ≤ 1.05 × A,\n" +
			"no preemptions, counters match) and freezes the fastest eligible one; validation then runs held-out seeds\n" +
			"700.. with --blocks paired blocks at the highest share and --secondary-blocks at the others. Ratios are\n" +
			"geometric means of paired batch ratios with 10,000-resample bootstrap intervals over whole blocks.\n\n" +
			"--device sim runs the simulated device on a virtual clock priced by --profile (a built-in H200 Llama-3-8B\n" +
			"profile, or one fitted by `turnstile bench calibrate --out DIR`, DIR/profile.json); --device cpu runs the real CPU\n" +
			"runner on stories260K, its measured step times spent on the virtual clock (tool waits cost no wall time); --device sim,cpu runs\n" +
			"both on the same workload and prints the simulator's prediction beside the CPU measurement.\n" +
			"Presets: seed000 (the study's scale; default for sim) and small (1/64 of the token lengths, default when\n" +
			"the CPU runner is used): 3 long turns; tool-loop (a 4,096-token context whose shared part stands for the system\n" +
			"prompt and tool list, then 10 short turns of 24 output and 48 tool tokens, 250 ms tool waits) and tool-loop-small\n" +
			"(1/16 of its token lengths, for the CPU runner). Rows are written to DIR/<device>/rows.csv as they complete.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.parsed(cmd.Flags())
			o.arms = arms
			var err error
			if o.shares, err = parseShares(shares); err != nil {
				return err
			}
			if o.devices, err = o.engineFlags.devices(simDevice, "cpu"); err != nil {
				return err
			}
			if err := o.resolvePreset(p); err != nil {
				return err
			}
			if err := o.validate(); err != nil {
				return err
			}
			return untilSignal(cmd, func(ctx context.Context) error { return runBenchAgentic(ctx, o, cmd.OutOrStdout(), cmd.ErrOrStderr()) })
		},
	}
	f := cmd.Flags()
	o.engineFlags.register(f, benchAgenticEngineFlags)
	o.commandFlags.register(f, benchAgenticCommandFlags)
	f.StringSliceVar(&arms, "arms", []string{"A", "B", "C"}, "arms to run (A is the reference and required)")
	f.StringSliceVar(&shares, "share", []string{"0", "0.5", "0.9"}, "validation sharing levels in [0, 1]; the last is primary")
	f.IntVar(&o.programs, "programs", o.programs, "programs per batch")
	f.IntVar(&o.turns, "turns", o.turns, "inference calls per program (default: the preset's)")
	f.StringVar(&o.preset, "preset", o.preset, "seed000, small, tool-loop or tool-loop-small (default: seed000 for sim, small with cpu)")
	f.IntVar(&p.ContextTokens, "context-tokens", 0, "turn-0 prompt tokens (default: the preset's)")
	f.IntVar(&p.OutputTokens, "output-tokens", 0, "tokens generated per turn")
	f.IntVar(&p.ToolTokens, "tool-tokens", 0, "tool-output tokens appended after each non-final turn")
	f.DurationVar(&p.ToolWait, "tool-wait", 0, "tool latency between turns (virtual time)")
	f.DurationVar(&p.Jitter, "jitter", 0, "tool-wait jitter, uniform ±")
	f.DurationVar(&p.Phase, "phase", 0, "arrival gap between programs")
	f.DurationVar(&p.Deadline, "deadline", 0, "per-batch deadline in virtual time")
	f.IntVar(&p.KVBlocks, "kv-blocks", 0, "KV blocks (capacity = blocks × block size)")
	f.IntVar(&o.blocks, "blocks", o.blocks, "paired validation blocks at the primary (last) share")
	f.IntVar(&o.secondary, "secondary-blocks", o.secondary, "paired validation blocks at every other share")
	f.BoolVar(&o.calibrate, "calibrate", o.calibrate, "calibrate B's and C's candidates before validation (else b2 and c2 are used)")
	f.Uint64Var(&o.samplingSeed, "sampling-seed", o.samplingSeed, "base of the programs' sampling seeds")
	f.Uint64Var(&o.bootSeed, "bootstrap-seed", o.bootSeed, "seed of the bootstrap resampling")
	f.DurationVar(&o.stepFixed, "step-fixed", o.stepFixed, "override the sim cost model's fixed time per step (e.g. 9ms: an eager-mode GPU's launch overhead; 0: keep)")
	f.BoolVar(&o.checkEveryStep, "check-every-step", o.checkEveryStep, "run the engine's accounting check after every step (slow; always after every row)")
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

// resolvePreset fills o.p from the preset and the flags given.
func (o *benchAgenticOptions) resolvePreset(flags agentic.Preset) error {
	if o.preset == "" {
		o.preset = agentic.PresetSeed000
		if slices.Contains(o.devices, "cpu") {
			o.preset = agentic.PresetSmall
		}
	}
	p, err := agentic.PresetNamed(o.preset)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		dst  *int
		src  int
	}{
		{"context-tokens", &p.ContextTokens, flags.ContextTokens}, {"output-tokens", &p.OutputTokens, flags.OutputTokens},
		{"tool-tokens", &p.ToolTokens, flags.ToolTokens}, {"kv-blocks", &p.KVBlocks, flags.KVBlocks},
		{"block-size", &p.BlockSize, o.blockSize}, {"max-num-batched-tokens", &p.MaxBatchTokens, o.maxBatched},
	} {
		if o.set[f.name] {
			*f.dst = f.src
		}
	}
	for _, f := range []struct {
		name string
		dst  *time.Duration
		src  time.Duration
	}{
		{"tool-wait", &p.ToolWait, flags.ToolWait}, {"jitter", &p.Jitter, flags.Jitter}, {"phase", &p.Phase, flags.Phase},
		{"deadline", &p.Deadline, flags.Deadline},
	} {
		if o.set[f.name] {
			*f.dst = f.src
		}
	}
	if !o.set["turns"] {
		o.turns = p.Turns
	}
	o.p = p
	return nil
}

func (o *benchAgenticOptions) validate() error {
	p := o.p
	for _, c := range []struct {
		name string
		v    int
	}{{"--programs", o.programs}, {"--turns", o.turns}, {"--context-tokens", p.ContextTokens}, {"--output-tokens", p.OutputTokens},
		{"--kv-blocks", p.KVBlocks}, {"--block-size", p.BlockSize}, {"--max-num-batched-tokens", p.MaxBatchTokens},
		{"--blocks", o.blocks}, {"--secondary-blocks", o.secondary}} {
		if c.v < 1 {
			return fmt.Errorf("%s %d: must be ≥ 1", c.name, c.v)
		}
	}
	if o.turns > 1 && p.ToolTokens < 1 {
		return fmt.Errorf("--tool-tokens %d: must be ≥ 1 with %d turns", p.ToolTokens, o.turns)
	}
	for _, c := range []struct {
		name string
		v    time.Duration
	}{{"--tool-wait", p.ToolWait}, {"--jitter", p.Jitter}, {"--phase", p.Phase}} {
		if c.v < 0 {
			return fmt.Errorf("%s %v: must be ≥ 0", c.name, c.v)
		}
	}
	if p.Deadline <= 0 {
		return fmt.Errorf("--deadline %v: must be > 0", p.Deadline)
	}
	// The engine flags, with the preset's sizes where none was given.
	e := o.engineFlags
	e.blockSize, e.maxBatched, e.maxBatchSize = p.BlockSize, p.MaxBatchTokens, o.programs
	if err := e.validate("bench agentic"); err != nil {
		return err
	}
	if o.stepFixed < 0 {
		return fmt.Errorf("--step-fixed %v: must be ≥ 0", o.stepFixed)
	}
	if need := p.ContextTokens + o.turns*p.OutputTokens + (o.turns-1)*p.ToolTokens; need > p.MaxContext && !slices.Contains(o.devices, "cpu") {
		return fmt.Errorf("a program reaches %d tokens, past the engine's %d-token context", need, p.MaxContext)
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
	armSet := agentic.Seed000Arms(o.programs).Scaled(o.p.Scale)
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
	plan := campaign.Plan{Reference: "A", Arms: campArms, Shares: o.shares, ValidationSeed: o.p.ValidationSeed,
		CalibrationSeed: o.p.CalibrationSeed}
	for k := range o.shares {
		plan.ShareBlocks = append(plan.ShareBlocks, map[bool]int{true: o.blocks, false: o.secondary}[k == primary])
	}
	if o.calibrate {
		plan.CalibrationShares = []float64{0, o.shares[primary]}
		if o.shares[primary] == 0 {
			plan.CalibrationShares = []float64{0}
		}
	}
	wl := workload.AgenticConfig{Programs: o.programs, Turns: o.turns, ContextTokens: o.p.ContextTokens, OutputTokens: o.p.OutputTokens,
		ToolTokens: o.p.ToolTokens, ToolWait: o.p.ToolWait, Jitter: o.p.Jitter, ArrivalGap: o.p.Phase}
	if o.turns == 1 {
		wl.ToolTokens = 0
	}

	var llama *model.Llama
	if slices.Contains(o.devices, "cpu") {
		if llama, err = model.LoadLlama(o.model, o.llamaOptions(cuda.BackendCPU)); err != nil {
			return fmt.Errorf("bench agentic: --model: %w", err) // the error names the file
		}
		if maxCtx := llama.Config().ContextLength; maxCtx < o.p.MaxContext {
			o.p.MaxContext = maxCtx
		}
		if need := o.p.ContextTokens + o.turns*o.p.OutputTokens + (o.turns-1)*o.p.ToolTokens; need > o.p.MaxContext {
			return fmt.Errorf("a program reaches %d tokens, past the model's %d-token context: lower --context-tokens", need, o.p.MaxContext)
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
	for _, r := range o.devices {
		setup := o.setup(r, armSet, cost, llama)
		run := agentic.Runner{Workload: wl, Setup: setup, SamplingSeed: o.samplingSeed, Deadline: o.p.Deadline,
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

// simCost is the simulated device's cost model: --profile's, with
// --step-fixed's fixed time when given.
func (o *benchAgenticOptions) simCost() (sim.Linear, string, error) {
	l, name, err := o.simProfile(!o.noOverlap)
	if err != nil {
		return sim.Linear{}, "", err
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
		c := rig.Config{MaxBatchSize: o.programs, KVBlocks: o.p.KVBlocks, BlockSize: o.p.BlockSize,
			MaxBatchTokens: o.p.MaxBatchTokens, Overlap: !o.noOverlap, Seed: 3, Programs: pc, CascadeMinBlocks: o.cascadeMin}
		if r == simDevice {
			eng, capTokens, err := rig.NewSim(c, rig.Sim{Cost: cost, MaxContext: o.p.MaxContext, Vocab: workload.DefaultTokenMax}, clk)
			if err != nil {
				return agentic.Setup{}, err
			}
			return agentic.EngineSetup(eng, capTokens), nil
		}
		kvType, err := o.kvType(cuda.BackendCPU)
		if err != nil {
			return agentic.Setup{}, fmt.Errorf("bench agentic: %w", err)
		}
		eng, _, capTokens, err := rig.NewCPU(c, rig.CPU{Model: llama, Workers: o.workers, KVType: kvType}, clk)
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
		o.preset, strings.Join(o.devices, ","), o.programs, o.turns, p.ContextTokens, p.OutputTokens, p.ToolTokens, p.ToolWait, p.Jitter, p.Phase,
		p.Deadline, p.KVBlocks*p.BlockSize, p.KVBlocks, p.BlockSize, o.programs, p.MaxBatchTokens, !o.noOverlap,
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
	for _, g := range agentic.Seed000Goals() {
		for _, c := range ar.comps {
			if c.Num != "B" || c.Share != primary || c.Metric != g.Metric {
				continue
			}
			fmt.Fprintf(w, "  %s\t%.3f [%.3f–%.3f]\tgoal %s %.2f\t%s\n", g.Metric, c.Ratio.Point, c.Ratio.Lo, c.Ratio.Hi, g.Relation(), g.Limit,
				map[bool]string{true: "met", false: "MISSED"}[g.Met(c.Ratio.Point)])
		}
	}
	return w.Flush()
}

// printPrediction prints the simulator's ratios beside the CPU runner's on
// the same workload: the ratio of ratios says how far the simulator's
// arm comparisons can be trusted.
func printPrediction(out io.Writer, simRun, cpuRun agenticRun) error {
	if simRun.runner != simDevice {
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
