package adprun

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/turnstile-llm/turnstile/bench/campaign"
	"github.com/turnstile-llm/turnstile/bench/report"
	"github.com/turnstile-llm/turnstile/internal/stats"
)

// SeedGain is seed 004's measured FIX/BASE throughput ratio at the dp
// widths it reports (k = 1 runs); 0 where it measured none.
func SeedGain(dp int) float64 {
	switch dp {
	case 2:
		return 1.273
	case 4:
		return 1.115
	}
	return 0
}

// PredictedGain is the ladder's FIX/BASE throughput ratio with k late
// ranks of dp: BASE runs at 1 − k/(2dp) of FIX, so 2dp/(2dp − k). It
// assumes an iteration lasts as long as a full batch whatever the late
// ranks run, i.e. that a healthy rank sets its time (k < dp). With every
// rank late (k = dp) on a cost model where a half batch costs about half,
// BASE loses only per-step fixed costs, far less than this.
func PredictedGain(dp, k int) float64 {
	return float64(2*dp) / float64(2*dp-k)
}

// Rung is the rank-0 share the ladder predicts for arm with k late ranks of
// dp, as num/den: 1/dp for FIX and OVLOFF and for k = 0; under BASE
// 1/(2dp − k) when rank 0 is late (penalised), 2/(2dp − k) when not.
func Rung(arm string, dp, k int, rank0Late bool) (num, den int) {
	if arm != BASE || k == 0 {
		return 1, dp
	}
	if rank0Late {
		return 1, 2*dp - k
	}
	return 2, 2*dp - k
}

// rungs lists every rung of dp: 1/dp, then 1/(2dp − k) and 2/(2dp − k)
// for k = 1..dp (duplicates by value removed).
func rungs(dp int) [][2]int {
	out := [][2]int{{1, dp}}
	seen := map[float64]bool{1 / float64(dp): true}
	for k := 1; k <= dp; k++ {
		for _, num := range []int{1, 2} {
			v := float64(num) / float64(2*dp-k)
			if v <= 1 && !seen[v] {
				seen[v] = true
				out = append(out, [2]int{num, 2*dp - k})
			}
		}
	}
	return out
}

// ShareCheck is one row's rank-0 share against its predicted rung.
type ShareCheck struct {
	Arm    string `json:"arm"`
	Block  int    `json:"block"`
	Rank0  int    `json:"rank0_routed"`
	Routed int    `json:"routed"`
	// Share is Rank0/Routed; Rung the predicted rung ("2/3") and
	// RungShare its value; Nearest the rung of dp nearest to Share.
	Share     float64 `json:"share"`
	Rung      string  `json:"rung"`
	RungShare float64 `json:"rung_share"`
	Nearest   string  `json:"nearest_rung"`
	// OnRung: the nearest rung is the predicted one.
	OnRung bool `json:"on_rung"`
}

// RoutingCheck compares FIX's and OVLOFF's per-rank routed counts in one
// block: seed 004's identity, to the request.
type RoutingCheck struct {
	Block  int   `json:"block"`
	FIX    []int `json:"fix"`
	OVLOFF []int `json:"ovloff"`
	Equal  bool  `json:"equal"`
}

// Analysis is one dp's campaign read against the ladder.
type Analysis struct {
	DP        int  `json:"dp"`
	K         int  `json:"late_ranks"`
	Rank0Late bool `json:"rank0_late"`
	// PredictedGain and SeedGain are FIX/BASE throughput ratios (SeedGain
	// 0 where the seed did not measure this dp).
	PredictedGain float64 `json:"predicted_fix_over_base"`
	SeedGain      float64 `json:"seed_fix_over_base"`
	// Comparisons are FIX/BASE and FIX/OVLOFF throughput over paired
	// blocks, with bootstrap intervals (those whose arms ran).
	Comparisons []report.Comparison `json:"comparisons"`
	Shares      []ShareCheck        `json:"rank0_shares"`
	Routing     []RoutingCheck      `json:"fix_ovloff_routing"`
}

// Ratio returns the throughput comparison FIX/den, if it was made.
func (a *Analysis) Ratio(den string) (report.Comparison, bool) {
	for _, c := range a.Comparisons {
		if c.Num == FIX && c.Den == den && c.Metric == report.Throughput {
			return c, true
		}
	}
	return report.Comparison{}, false
}

// Analyse reads the rows of one dp's campaign (run with c).
func Analyse(rows []report.Row, c Config, boot stats.Bootstrap) (Analysis, error) {
	k := c.K()
	a := Analysis{DP: c.DP, K: k, Rank0Late: k > 0 && c.LateRank(0), PredictedGain: PredictedGain(c.DP, k), SeedGain: SeedGain(c.DP),
		Comparisons: []report.Comparison{}, Shares: []ShareCheck{}, Routing: []RoutingCheck{}}
	for _, den := range []string{BASE, OVLOFF} {
		comps, err := report.Compare(rows, campaign.Validation, FIX, den, report.Throughput, boot)
		if err != nil {
			return a, fmt.Errorf("adprun: dp %d: %w", c.DP, err)
		}
		a.Comparisons = append(a.Comparisons, comps...)
	}
	byBlock := map[int]map[string][]int{}
	for i := range rows {
		r := &rows[i]
		if r.Audit != report.Pass || r.M == nil || len(r.M.RankRouted) == 0 {
			continue
		}
		total := 0
		for _, n := range r.M.RankRouted {
			total += n
		}
		num, den := Rung(r.Arm, c.DP, k, a.Rank0Late)
		sc := ShareCheck{Arm: r.Arm, Block: r.Block, Rank0: r.M.RankRouted[0], Routed: total,
			Rung: fmt.Sprintf("%d/%d", num, den), RungShare: float64(num) / float64(den)}
		if total > 0 {
			sc.Share = float64(sc.Rank0) / float64(total)
		}
		best := math.Inf(1)
		for _, q := range rungs(c.DP) {
			if d := math.Abs(sc.Share - float64(q[0])/float64(q[1])); d < best {
				best, sc.Nearest = d, fmt.Sprintf("%d/%d", q[0], q[1])
			}
		}
		sc.OnRung = float64(num)/float64(den) == shareOf(sc.Nearest)
		a.Shares = append(a.Shares, sc)
		if byBlock[r.Block] == nil {
			byBlock[r.Block] = map[string][]int{}
		}
		byBlock[r.Block][r.Arm] = r.M.RankRouted
	}
	for _, b := range slices.Sorted(maps.Keys(byBlock)) {
		fix, off := byBlock[b][FIX], byBlock[b][OVLOFF]
		if fix == nil || off == nil {
			continue
		}
		a.Routing = append(a.Routing, RoutingCheck{Block: b, FIX: fix, OVLOFF: off, Equal: slices.Equal(fix, off)})
	}
	return a, nil
}

// shareOf parses "num/den".
func shareOf(rung string) float64 {
	var num, den int
	if _, err := fmt.Sscanf(rung, "%d/%d", &num, &den); err != nil || den == 0 {
		return math.NaN()
	}
	return float64(num) / float64(den)
}

// Plan is the campaign of one dp: arms (FIX, the reference, among them) ×
// blocks paired blocks at share 0, block b on workload seed seed + b.
func Plan(arms []string, blocks int, seed uint64) campaign.Plan {
	p := campaign.Plan{Reference: FIX, Shares: []float64{0}, Blocks: blocks, ValidationSeed: seed}
	for _, a := range arms {
		p.Arms = append(p.Arms, campaign.Arm{Name: a, Candidates: []string{""}})
	}
	return p
}

// Campaign runs the plan with c's rows. Row ids are prefixed "dp<N>_" so
// the rows of several dp widths can share one CSV; obs sees them so.
func Campaign(ctx context.Context, c Config, p campaign.Plan, obs campaign.Observer) (campaign.Result, error) {
	prefix := fmt.Sprintf("dp%d_", c.DP)
	res, err := campaign.Run(ctx, p, Runner{Config: c}, func(r report.Row, done, total int) error {
		r.RowID = prefix + r.RowID
		if obs == nil {
			return nil
		}
		return obs(r, done, total)
	})
	for i := range res.Rows {
		res.Rows[i].RowID = prefix + res.Rows[i].RowID
	}
	return res, err
}

// GoalLine is the headline of one dp: "dp=2 FIX/BASE +X% [lo, hi] (seed
// +27.3%, predicted +Y% for k=K)", or why it is missing.
func GoalLine(a *Analysis) string {
	pred := fmt.Sprintf("predicted %+.1f%% for k=%d", 100*(a.PredictedGain-1), a.K)
	seed := "seed: not measured at this dp"
	if a.SeedGain > 0 {
		seed = fmt.Sprintf("seed %+.1f%%", 100*(a.SeedGain-1))
		if a.K != 1 {
			seed += " at k=1" // the seed's runs had one late rank
		}
	}
	c, ok := a.Ratio(BASE)
	if !ok {
		return fmt.Sprintf("dp=%d FIX/BASE: no complete block (%s, %s)", a.DP, seed, pred)
	}
	return fmt.Sprintf("dp=%d FIX/BASE %+.1f%% [%+.1f%%, %+.1f%%] (%s, %s)", a.DP,
		100*(c.Ratio.Point-1), 100*(c.Ratio.Lo-1), 100*(c.Ratio.Hi-1), seed, pred)
}

// Lines are one dp's summary lines: the goal line, FIX/OVLOFF, the rank-0
// shares against their rungs and the routing identity.
func Lines(a *Analysis) []string {
	out := []string{GoalLine(a)}
	if c, ok := a.Ratio(OVLOFF); ok {
		out = append(out, fmt.Sprintf("dp=%d FIX/OVLOFF %+.2f%% [%+.2f%%, %+.2f%%] (overlap's own benefit)",
			a.DP, 100*(c.Ratio.Point-1), 100*(c.Ratio.Lo-1), 100*(c.Ratio.Hi-1)))
	}
	var arms []string
	for _, s := range a.Shares {
		if !slices.Contains(arms, s.Arm) {
			arms = append(arms, s.Arm)
		}
	}
	for _, arm := range arms {
		var shares []string
		on, n := 0, 0
		rung := ""
		for _, s := range a.Shares {
			if s.Arm != arm {
				continue
			}
			shares = append(shares, fmt.Sprintf("%.2f%%", 100*s.Share))
			rung = fmt.Sprintf("%s = %.2f%%", s.Rung, 100*s.RungShare)
			n++
			if s.OnRung {
				on++
			}
		}
		out = append(out, fmt.Sprintf("dp=%d %s rank-0 share %s, rung %s: %d of %d rows on it", a.DP, arm, strings.Join(shares, " "), rung, on, n))
	}
	eq := 0
	for _, r := range a.Routing {
		if r.Equal {
			eq++
		}
	}
	if len(a.Routing) > 0 {
		out = append(out, fmt.Sprintf("dp=%d FIX == OVLOFF per-rank routing in %d of %d blocks (e.g. %v)", a.DP, eq, len(a.Routing), a.Routing[0].FIX))
	}
	return out
}

// Summary is summary.json: row counts and failures over every dp (the
// per-dp comparisons are in DP, not in Comparisons), and each dp's
// analysis.
type Summary struct {
	report.Summary
	DP []Analysis `json:"dp"`
}

// WriteJSON writes s indented; a non-finite ratio is refused naming it.
func WriteJSON(w io.Writer, s Summary) error {
	for _, a := range s.DP {
		for _, c := range a.Comparisons {
			for _, v := range []float64{c.Ratio.Point, c.Ratio.Lo, c.Ratio.Hi} {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					return fmt.Errorf("adprun: dp %d %s/%s holds %v", a.DP, c.Num, c.Den, v)
				}
			}
		}
		for _, sc := range a.Shares {
			if math.IsNaN(sc.Share) {
				return fmt.Errorf("adprun: dp %d row %s block %d: rank-0 share is NaN", a.DP, sc.Arm, sc.Block)
			}
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return fmt.Errorf("adprun: write JSON summary: %w", err)
	}
	return nil
}

// WriteMarkdown writes table.md: per dp, report's campaign tables over its
// rows, then the rank-0 shares against their rungs, the routing identity
// and the summary lines.
func WriteMarkdown(w io.Writer, title string, rows []report.Row, as []Analysis) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", title)
	for i := range as {
		a := &as[i]
		var dpRows []report.Row
		for _, r := range rows {
			if r.DP == a.DP {
				dpRows = append(dpRows, r)
			}
		}
		s := report.Summarise(fmt.Sprintf("dp=%d, k=%d late ranks (rank 0 late: %v)", a.DP, a.K, a.Rank0Late), dpRows, a.Comparisons)
		if err := report.WriteMarkdown(&b, s, dpRows); err != nil {
			return err
		}
		b.WriteString("\n| arm | block | rank 0 / all | share | predicted rung | nearest rung | on rung |\n| --- | ---: | ---: | ---: | --- | --- | --- |\n")
		for _, sc := range a.Shares {
			fmt.Fprintf(&b, "| %s | %d | %d/%d | %.3f%% | %s (%.3f%%) | %s | %v |\n", sc.Arm, sc.Block, sc.Rank0, sc.Routed,
				100*sc.Share, sc.Rung, 100*sc.RungShare, sc.Nearest, sc.OnRung)
		}
		if len(a.Routing) > 0 {
			b.WriteString("\n| block | FIX per rank | OVLOFF per rank | equal |\n| ---: | --- | --- | --- |\n")
			for _, r := range a.Routing {
				fmt.Fprintf(&b, "| %d | %v | %v | %v |\n", r.Block, r.FIX, r.OVLOFF, r.Equal)
			}
		}
		b.WriteString("\n")
		for _, l := range Lines(a) {
			fmt.Fprintf(&b, "- %s\n", l)
		}
		b.WriteString("\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("adprun: write markdown: %w", err)
	}
	return nil
}
