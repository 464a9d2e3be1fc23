package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/turnstile-llm/turnstile/adp"
	"github.com/turnstile-llm/turnstile/bench/adprun"
	"github.com/turnstile-llm/turnstile/bench/report"
	"github.com/turnstile-llm/turnstile/internal/stats"
	"github.com/turnstile-llm/turnstile/sim"
)

// benchADPOptions are the flags of `turnstile bench adp`.
type benchADPOptions struct {
	// engineFlags: --max-batch-size (every rank's; default seed 004's);
	// commandFlags: --seed (the workload of block 0, and the bootstrap),
	// --out and --profile.
	engineFlags
	commandFlags
	dps             []int
	arms            []string
	blocks          int
	requestsPerRank int
	isl             int
	late            string // "K" or "all"
	rank0Late       bool
}

// The engine and command flags bench adp registers.
const (
	benchADPEngineFlags  = flagMaxBatchSize
	benchADPCommandFlags = flagSeed | flagOut | flagProfile
)

// newBenchADPOptions are bench adp's defaults: seed 004's (package adprun).
func newBenchADPOptions() benchADPOptions {
	o := benchADPOptions{engineFlags: defaultEngineFlags(), commandFlags: defaultCommandFlags(), dps: []int{2, 4}, arms: []string{adprun.BASE, adprun.FIX, adprun.OVLOFF},
		blocks: 3, requestsPerRank: adprun.DefaultRequestsPerRank, isl: adprun.DefaultInputTokens, late: strconv.Itoa(adprun.DefaultLate)}
	o.maxBatchSize = adprun.DefaultMaxBatchSize
	return o
}

func newBenchADPCmd() *cobra.Command {
	o := newBenchADPOptions()
	cmd := &cobra.Command{
		Use:   "adp [--dp 2,4] [--arms BASE,FIX,OVLOFF] [--blocks N] [--requests-per-rank N] [--isl N] [--max-batch-size N] [--late K|all] [--seed N] [--out DIR]",
		Short: "Seed 004's attention-DP campaign on the simulated device (BASE, FIX, OVLOFF)",
		Long: "bench adp runs seed 004's arms on simulated attention-DP context ranks (--profile's cost\n" +
			"model, max batch 2, context-heavy requests of --isl ± 10% tokens and one output token, all\n" +
			"offered at once): BASE charges retiring requests against admission, FIX does not, OVLOFF\n" +
			"runs without overlap. One campaign per --dp: --blocks paired blocks, each every arm on\n" +
			"workload seed --seed + block. --late K makes K ranks late (their step's results are\n" +
			"processed after the next gather, so under BASE their finishing requests are charged there):\n" +
			"the last K, or the first K with --rank0-late; 'all' is every rank (this loop's natural\n" +
			"state). It prints, per dp, the campaign table, FIX/BASE and FIX/OVLOFF throughput ratios with\n" +
			"95% bootstrap intervals beside seed 004's and the ladder's predicted gain, rank 0's routing\n" +
			"share against its rung, and whether FIX and OVLOFF route identically per rank. --out writes\n" +
			"rows.csv (as rows complete), summary.json, table.md and rank0_share.png.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return untilSignal(cmd, func(ctx context.Context) error { return runBenchADP(ctx, o, cmd.OutOrStdout(), cmd.ErrOrStderr()) })
		},
	}
	f := cmd.Flags()
	o.engineFlags.register(f, benchADPEngineFlags)
	o.commandFlags.register(f, benchADPCommandFlags)
	f.IntSliceVar(&o.dps, "dp", o.dps, "attention-DP widths, one campaign each")
	f.StringSliceVar(&o.arms, "arms", o.arms, "arms to run (FIX, the reference, must be among them)")
	f.IntVar(&o.blocks, "blocks", o.blocks, "paired blocks per dp")
	f.IntVar(&o.requestsPerRank, "requests-per-rank", o.requestsPerRank, "requests offered per rank in every row")
	f.IntVar(&o.isl, "isl", o.isl, "nominal input length in tokens (each request ± 10%)")
	f.StringVar(&o.late, "late", o.late, "late ranks: a count K (the last K ranks) or 'all'")
	f.BoolVar(&o.rank0Late, "rank0-late", o.rank0Late, "make the first K ranks late (rank 0 among them) instead of the last K")
	return cmd
}

// lateK parses --late: K ≥ 0, or adprun.AllLate for "all".
func (o *benchADPOptions) lateK() (int, error) {
	if o.late == "all" {
		return adprun.AllLate, nil
	}
	k, err := strconv.Atoi(o.late)
	if err != nil || k < 0 {
		return 0, fmt.Errorf("bench adp: --late %q: want a count >= 0 or 'all'", o.late)
	}
	return k, nil
}

// validate checks every flag, naming the offending value, and creates
// --out.
func (o *benchADPOptions) validate() error {
	if err := o.engineFlags.validate("bench adp"); err != nil {
		return err
	}
	if _, _, err := o.simProfile(true); err != nil {
		return fmt.Errorf("bench adp: %w", err)
	}
	switch {
	case len(o.dps) == 0:
		return errors.New("bench adp: --dp is empty")
	case o.blocks < 1:
		return fmt.Errorf("bench adp: --blocks %d: must be >= 1", o.blocks)
	case o.requestsPerRank < 1:
		return fmt.Errorf("bench adp: --requests-per-rank %d: must be >= 1", o.requestsPerRank)
	case o.isl < 1:
		return fmt.Errorf("bench adp: --isl %d: must be >= 1", o.isl)
	}
	k, err := o.lateK()
	if err != nil {
		return err
	}
	for i, dp := range o.dps {
		switch {
		case dp < 1 || dp > adp.MaxRanks:
			return fmt.Errorf("bench adp: --dp %d: must be in [1, %d]", dp, adp.MaxRanks)
		case slices.Contains(o.dps[:i], dp):
			return fmt.Errorf("bench adp: --dp %d is repeated", dp)
		case k > dp:
			return fmt.Errorf("bench adp: --late %d exceeds --dp %d", k, dp)
		}
	}
	for i, a := range o.arms {
		switch {
		case !slices.Contains(adprun.Arms(), a):
			return fmt.Errorf("bench adp: --arms %q: want BASE, FIX or OVLOFF", a)
		case slices.Contains(o.arms[:i], a):
			return fmt.Errorf("bench adp: --arms %q is repeated", a)
		}
	}
	if !slices.Contains(o.arms, adprun.FIX) {
		return fmt.Errorf("bench adp: --arms %s: FIX, the reference arm, must be among them", strings.Join(o.arms, ","))
	}
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return fmt.Errorf("bench adp: --out %q: %w", o.out, err)
		}
	}
	return nil
}

// config is one dp's row configuration.
func (o *benchADPOptions) config(dp int) (adprun.Config, error) {
	c := adprun.DefaultConfig(dp)
	c.RequestsPerRank, c.InputTokens, c.MaxBatchSize, c.RankZeroLate = o.requestsPerRank, o.isl, o.maxBatchSize, o.rank0Late
	k, err := o.lateK()
	if err != nil {
		return c, err
	}
	c.Late = k
	// Read once; each arm sets its own overlap on a copy.
	l, _, err := o.simProfile(false)
	if err != nil {
		return c, err
	}
	c.Cost = func(overlap bool) sim.CostModel {
		arm := l
		arm.Overlap = overlap
		return arm
	}
	return c, c.Validate()
}

// runBenchADP runs one campaign per dp, writing rows as they complete, then
// the analysis.
func runBenchADP(ctx context.Context, o benchADPOptions, stdout, stderr io.Writer) (err error) {
	plan := adprun.Plan(o.arms, o.blocks, o.seed)
	log, err := openRowLog(o.out, plan.Rows()*len(o.dps), stderr)
	if err != nil {
		return fmt.Errorf("bench adp: %w", err)
	}
	defer func() {
		if cerr := log.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("bench adp: %w", cerr)
		}
	}()
	var rows []report.Row
	var analyses []adprun.Analysis
	boot := stats.Bootstrap{Seed: o.seed}
	offset := 0
	for _, dp := range o.dps {
		c, err := o.config(dp)
		if err != nil {
			return fmt.Errorf("bench adp: %w", err)
		}
		if err := log.progress(offset, fmt.Sprintf("dp=%d", dp)); err != nil {
			return err
		}
		res, cerr := adprun.Campaign(ctx, c, plan, func(r report.Row, done, _ int) error {
			return log.row(&r, offset+done, fmt.Sprintf("dp=%d %s", dp, r.RowID))
		})
		rows = append(rows, res.Rows...)
		offset += plan.Rows()
		if cerr != nil {
			return fmt.Errorf("bench adp: dp %d: %w", dp, cerr)
		}
		a, err := adprun.Analyse(res.Rows, c, boot)
		if err != nil {
			return fmt.Errorf("bench adp: %w", err)
		}
		analyses = append(analyses, a)
	}
	title := fmt.Sprintf("bench adp: dp %v, arms %s, %d blocks, %d requests/rank, ISL %d ± 10%%, max batch %d, late %s (rank 0 late: %v), seed %d, profile %s",
		o.dps, strings.Join(o.arms, ","), o.blocks, o.requestsPerRank, o.isl, o.maxBatchSize, o.late, o.rank0Late, o.seed, o.profile)
	var md strings.Builder
	if err := adprun.WriteMarkdown(&md, title, rows, analyses); err != nil {
		return err
	}
	if _, err := io.WriteString(stdout, md.String()); err != nil {
		return fmt.Errorf("bench adp: %w", err)
	}
	for i := range analyses {
		fmt.Fprintln(stdout, adprun.GoalLine(&analyses[i]))
	}
	if o.out == "" {
		return nil
	}
	return writeADPFiles(o.out, title, md.String(), rows, analyses)
}

// writeADPFiles writes summary.json, table.md and rank0_share.png.
func writeADPFiles(dir, title, md string, rows []report.Row, as []adprun.Analysis) error {
	s := adprun.Summary{Summary: report.Summarise(title, rows, nil), DP: as}
	if err := writeFile(filepath.Join(dir, "summary.json"), func(w io.Writer) error { return adprun.WriteJSON(w, s) }); err != nil {
		return fmt.Errorf("bench adp: %w", err)
	}
	if err := writeFile(filepath.Join(dir, "table.md"), func(w io.Writer) error {
		_, err := io.WriteString(w, md)
		return err
	}); err != nil {
		return fmt.Errorf("bench adp: %w", err)
	}
	if !slices.ContainsFunc(as, func(a adprun.Analysis) bool { return a.DP >= 2 }) {
		return nil // no attention DP, no routing share to plot
	}
	if err := writeFile(filepath.Join(dir, "rank0_share.png"), func(w io.Writer) error {
		return report.Rank0SharePlot(w, rows, report.PlotWidth, report.PlotHeight)
	}); err != nil {
		return fmt.Errorf("bench adp: %w", err)
	}
	return nil
}
