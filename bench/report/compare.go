package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/turnstile-llm/turnstile/internal/stats"
)

// Metric names a per-row measurement that comparisons take ratios of.
type Metric string

// The metrics seed 000 compares. Throughput ratios above 1 are better;
// P50/P95 ratios above 1 are worse.
const (
	Throughput Metric = "throughput"
	P50        Metric = "p50"
	P95        Metric = "p95"
	BatchTime  Metric = "batch_seconds"
)

// value reads metric m of a measured row.
func (m Metric) value(r *Row) (float64, error) {
	switch m {
	case Throughput:
		return r.M.ProgramsPerSecond, nil
	case P50:
		return r.M.P50ProgramSeconds, nil
	case P95:
		return r.M.P95ProgramSeconds, nil
	case BatchTime:
		return r.M.BatchSeconds, nil
	}
	return 0, fmt.Errorf("report: unknown metric %q", m)
}

// HigherIsBetter says which direction of the ratio is an improvement.
func (m Metric) HigherIsBetter() bool { return m == Throughput }

// Comparison is the geometric mean of paired per-block ratios Num/Den of
// one metric at one sharing level of one stage, with its bootstrap interval
// over whole blocks.
type Comparison struct {
	Stage  string         `json:"stage"`
	Share  float64        `json:"share"`
	Metric Metric         `json:"metric"`
	Num    string         `json:"num"`
	Den    string         `json:"den"`
	Ratio  stats.Estimate `json:"ratio"`
	// BlockIDs are the paired blocks used, ascending.
	BlockIDs []int `json:"block_ids"`
}

// CompleteBlocks returns, for one stage and sharing level, the blocks in
// which every arm that appears in that stage and share has exactly one PASS
// row with metrics, keyed by block then arm. Blocks missing an arm, holding
// a failed row or a duplicate arm are left out: comparisons never mix a
// block's arms with another block's.
func CompleteBlocks(rows []Row, stage string, share float64) map[int]map[string]*Row {
	arms := map[string]bool{}
	byBlock := map[int][]*Row{}
	for i := range rows {
		r := &rows[i]
		if r.Stage != stage || r.Share != share {
			continue
		}
		arms[r.Arm] = true
		byBlock[r.Block] = append(byBlock[r.Block], r)
	}
	out := map[int]map[string]*Row{}
	for b, rs := range byBlock {
		got := map[string]*Row{}
		ok := true
		for _, r := range rs {
			if r.Audit != Pass || r.M == nil || got[r.Arm] != nil {
				ok = false
				break
			}
			got[r.Arm] = r
		}
		if ok && len(got) == len(arms) {
			out[b] = got
		}
	}
	return out
}

// Shares returns the distinct sharing levels of a stage's rows, ascending.
func Shares(rows []Row, stage string) []float64 {
	var out []float64
	for _, r := range rows {
		if r.Stage == stage && !slices.Contains(out, r.Share) {
			out = append(out, r.Share)
		}
	}
	slices.Sort(out)
	return out
}

// Compare computes num/den of metric at every sharing level of stage over
// complete blocks (see CompleteBlocks). A sharing level with no complete
// block is skipped, not an error; a non-positive metric value is an error
// naming the row.
func Compare(rows []Row, stage, num, den string, metric Metric, boot stats.Bootstrap) ([]Comparison, error) {
	var out []Comparison
	for _, share := range Shares(rows, stage) {
		blocks := CompleteBlocks(rows, stage, share)
		ids := make([]int, 0, len(blocks))
		for b, arms := range blocks {
			if arms[num] != nil && arms[den] != nil {
				ids = append(ids, b)
			}
		}
		if len(ids) == 0 {
			continue
		}
		slices.Sort(ids)
		nv := make([]float64, len(ids))
		dv := make([]float64, len(ids))
		for i, b := range ids {
			var err error
			if nv[i], err = metric.value(blocks[b][num]); err != nil {
				return nil, err
			}
			if dv[i], err = metric.value(blocks[b][den]); err != nil {
				return nil, err
			}
		}
		est, err := boot.GeoMeanRatio(nv, dv)
		if err != nil {
			return nil, fmt.Errorf("report: %s %s/%s at share %v over blocks %v: %w", metric, num, den, share, ids, err)
		}
		out = append(out, Comparison{Stage: stage, Share: share, Metric: metric, Num: num, Den: den, Ratio: est, BlockIDs: ids})
	}
	return out, nil
}

// Summary is the campaign's JSON summary.
type Summary struct {
	// Campaign names the campaign (command and key parameters).
	Campaign string `json:"campaign"`
	// Rows counts all rows; Passed and Failed by audit.
	Rows   int `json:"rows"`
	Passed int `json:"passed"`
	Failed int `json:"failed"`
	// Programs and Completed sum over all rows.
	Programs  int `json:"programs"`
	Completed int `json:"completed"`
	// Frozen holds the parameters selected by calibration, by arm.
	Frozen map[string]string `json:"frozen,omitempty"`
	// Gates records each eligibility gate's outcome, by candidate.
	Gates map[string]GateResult `json:"gates,omitempty"`
	// Comparisons are the paired ratios with intervals.
	Comparisons []Comparison `json:"comparisons"`
	// Failures lists the row ids and details of failed rows.
	Failures []string `json:"failures"`
}

// GateResult is one eligibility gate's outcome for one candidate.
type GateResult struct {
	Eligible bool   `json:"eligible"`
	Reason   string `json:"reason"`
}

// Summarise counts rows and attaches comparisons.
func Summarise(campaign string, rows []Row, comps []Comparison) Summary {
	s := Summary{Campaign: campaign, Rows: len(rows), Comparisons: comps, Failures: []string{}}
	if s.Comparisons == nil {
		s.Comparisons = []Comparison{}
	}
	for _, r := range rows {
		s.Programs += r.Programs
		s.Completed += r.Completed
		if r.Audit == Pass {
			s.Passed++
		} else {
			s.Failed++
			s.Failures = append(s.Failures, r.RowID+": "+r.AuditDetail)
		}
	}
	return s
}

// WriteJSON writes s indented. NaN and ±Inf, which JSON cannot hold, are
// refused with an error naming the comparison.
func WriteJSON(w io.Writer, s Summary) error {
	for _, c := range s.Comparisons {
		for _, v := range []float64{c.Share, c.Ratio.Point, c.Ratio.Lo, c.Ratio.Hi} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("report: comparison %s %s/%s at share %v holds %v", c.Metric, c.Num, c.Den, c.Share, v)
			}
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return fmt.Errorf("report: write JSON summary: %w", err)
	}
	return nil
}
