package report

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
)

// WriteMarkdown writes the campaign's summary (counts, failures, frozen
// candidates, gate outcomes), its comparisons and every row as markdown.
// Ratios print with 3 decimals, intervals as "lo–hi" at the bootstrap's
// level. Maps print in sorted key order, so the output is deterministic.
func WriteMarkdown(w io.Writer, s Summary, rows []Row) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n\n", escape(s.Campaign))
	fmt.Fprintf(&b, "%d rows: %d passed, %d failed; %d of %d programs completed.\n\n", s.Rows, s.Passed, s.Failed, s.Completed, s.Programs)
	for _, f := range s.Failures {
		fmt.Fprintf(&b, "- failed: %s\n", escape(f))
	}
	if len(s.Failures) > 0 {
		b.WriteString("\n")
	}
	if len(s.Frozen) > 0 {
		b.WriteString("| arm | frozen candidate |\n| --- | --- |\n")
		for _, arm := range slices.Sorted(maps.Keys(s.Frozen)) {
			fmt.Fprintf(&b, "| %s | %s |\n", escape(arm), escape(s.Frozen[arm]))
		}
		b.WriteString("\n")
	}
	if len(s.Gates) > 0 {
		b.WriteString("| gate | eligible | reason |\n| --- | --- | --- |\n")
		for _, k := range slices.Sorted(maps.Keys(s.Gates)) {
			g := s.Gates[k]
			fmt.Fprintf(&b, "| %s | %t | %s |\n", escape(k), g.Eligible, escape(g.Reason))
		}
		b.WriteString("\n")
	}
	comps := s.Comparisons
	if len(comps) > 0 {
		level := comps[0].Ratio.Level
		fmt.Fprintf(&b, "| stage | share | metric | ratio | %g%% interval | blocks | better |\n", 100*level)
		b.WriteString("| --- | ---: | --- | ---: | ---: | ---: | --- |\n")
		for _, c := range comps {
			better := "lower"
			if c.Metric.HigherIsBetter() {
				better = "higher"
			}
			fmt.Fprintf(&b, "| %s | %g | %s %s/%s | %.3f | %.3f–%.3f | %d | %s |\n",
				c.Stage, c.Share, c.Metric, c.Num, c.Den, c.Ratio.Point, c.Ratio.Lo, c.Ratio.Hi, c.Ratio.Blocks, better)
		}
		b.WriteString("\n")
	}
	b.WriteString("| row | stage | arm | cand. | share | block | audit | completed | batch s | programs/s | P50 s | P95 s | pauses | resumes | preemptions |\n")
	b.WriteString("| --- | --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for i := range rows {
		r := &rows[i]
		audit := r.Audit
		if r.AuditDetail != "" {
			audit += " (" + escape(r.AuditDetail) + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %g | %d | %s | %d/%d |", escape(r.RowID), r.Stage, r.Arm, r.Candidate, r.Share, r.Block, audit, r.Completed, r.Programs)
		if r.M == nil {
			b.WriteString(strings.Repeat(" TBD |", 7))
		} else {
			m := r.M
			fmt.Fprintf(&b, " %s | %s | %s | %s | %s | %s | %s |", num(m.BatchSeconds), num(m.ProgramsPerSecond),
				num(m.P50ProgramSeconds), num(m.P95ProgramSeconds), fmtCount(m.SchedulerPauses), fmtCount(m.SchedulerResumes), fmtCount(m.Preemptions))
		}
		b.WriteString("\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("report: write markdown: %w", err)
	}
	return nil
}

func num(v float64) string {
	if math.IsNaN(v) {
		return tbd
	}
	return fmt.Sprintf("%.3f", v)
}

// escape keeps a cell's text from breaking the table.
func escape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
