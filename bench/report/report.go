// Package report turns experiment rows into the campaign's outputs: a CSV
// with seed 000's columns where they apply, paired comparisons with
// bootstrap intervals, a JSON summary, a markdown table and PNG plots
// (gonum.org/v1/plot).
//
// A Row is one run of one arm in one block. Rows are kept whatever their
// outcome: a failed row has Audit "FAIL", nil Metrics (its metric columns
// read "TBD", as in seed 000) and stays in the CSV; comparisons use only
// PASS rows of complete blocks.
package report

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/turnstile-llm/turnstile/internal/stats"
)

// Audit outcomes of a row.
const (
	Pass = "PASS"
	Fail = "FAIL"
)

// Row is one run: one arm of one paired block.
type Row struct {
	// Stage is the campaign stage: "qualification", "overhead",
	// "calibration" or "validation".
	Stage string `json:"stage"`
	// Arm is the arm's name (A, B, C; BASE, FIX, OVLOFF).
	Arm string `json:"arm"`
	// Candidate names the arm's parameter set (e.g. "b2"); "" when the arm
	// has one.
	Candidate string `json:"candidate"`
	// Block is the paired block's index within its stage: every arm of a
	// block ran the same workload seed.
	Block int `json:"block"`
	// RowID names the row uniquely in the campaign.
	RowID string `json:"row_id"`
	// Seed is the workload seed.
	Seed uint64 `json:"seed"`
	// Share is the requested initial shared-prefix ratio (agentic).
	Share float64 `json:"share"`
	// Programs is the number of programs (or requests) offered; Completed
	// how many completed; ClientFailed how many failed client-side.
	Programs     int `json:"programs"`
	Completed    int `json:"completed"`
	ClientFailed int `json:"client_failed_programs"`
	// Audit is Pass or Fail; AuditDetail says why a row failed.
	Audit       string `json:"audit"`
	AuditDetail string `json:"audit_detail"`
	// Phase is the arrival gap between programs, ToolWait the tool
	// latency, both in seconds; JitterMS the tool-wait jitter in ms.
	Phase    float64 `json:"phase"`
	ToolWait float64 `json:"tool_wait"`
	JitterMS float64 `json:"jitter_ms"`
	// DP is the attention-DP width (1 without attention DP).
	DP int `json:"dp"`
	// CapacityTokens is the KV capacity in tokens the arm ran with.
	CapacityTokens int `json:"capacity_tokens"`
	// Workload is the digest of the workload (workload.Digest).
	Workload string `json:"workload"`
	// M holds the measurements; nil when the row failed before measuring.
	M *Metrics `json:"metrics,omitempty"`
}

// Metrics are a row's measurements. An integer counter the run could not
// measure (e.g. scheduler pauses without program-level admission) is -1,
// and a float NaN; both are written "TBD".
type Metrics struct {
	// BatchSeconds runs from the batch origin to the last completed
	// program; ProgramsPerSecond is Completed / BatchSeconds.
	BatchSeconds      float64 `json:"batch_seconds"`
	ProgramsPerSecond float64 `json:"programs_per_second"`
	// P50 and P95 are nearest-rank percentiles of the program times
	// (arrival to last response, tool waits included), in seconds.
	P50ProgramSeconds float64 `json:"p50_program_seconds"`
	P95ProgramSeconds float64 `json:"p95_program_seconds"`
	// Scheduler pause/resume events of program-level admission, and
	// resumes forced by the liveness rule.
	SchedulerPauses  int `json:"scheduler_pauses"`
	SchedulerResumes int `json:"scheduler_resumes"`
	ForcedResumes    int `json:"forced_resumes"`
	// FirstTurnCachedTokens is Σ prefix-cache hits of turn-0 prompts.
	FirstTurnCachedTokens int `json:"first_turn_cached_tokens"`
	// Preemptions by recompute, the tokens they recomputed, and the tokens
	// the engine counted as generated.
	Preemptions      int `json:"backend_preemptions"`
	RecomputedTokens int `json:"backend_recomputed_tokens"`
	GeneratedTokens  int `json:"backend_generation_tokens_delta"`
	// GenerationCounterMatches: the engine's generated-token count equals
	// the tokens the client received.
	GenerationCounterMatches bool `json:"generation_counter_matches"`
	// PeakActivePrograms is the most programs admitted at once.
	PeakActivePrograms int `json:"peak_sampled_active_programs"`
	// ComputedPromptTokens is Σ(prompt tokens - cached tokens) over every
	// call: seed 000's prompt-work proxy.
	ComputedPromptTokens int `json:"computed_prompt_usage_proxy"`
	// Rank0Share is rank 0's share of routed requests (attention DP, seed
	// 004's observable); NaN without attention DP.
	Rank0Share float64 `json:"rank0_share"`
	// Steps is the number of engine steps (per rank, rank 0).
	Steps int `json:"steps"`
	// TurnShares is the shared-prefix ratio of every turn, reconstructed
	// from the token ids sent (workload.Sharing.Ratio); nil if not measured.
	TurnShares []float64 `json:"turn_shares"`
	// RankRouted is the requests routed to each attention-DP rank over the
	// run (index i is rank i; seed 004's per-rank counts, whose equality
	// between arms is exact); nil without attention DP.
	RankRouted []int `json:"rank_routed"`
}

// BatchMetrics fills the batch-time metrics from per-program arrival and
// finish offsets (from the batch origin): BatchSeconds is the last finish,
// program time is finish - arrival, P50/P95 are nearest rank. Only the
// programs listed count as completed.
func BatchMetrics(arrival, finish []time.Duration) (Metrics, error) {
	if len(arrival) != len(finish) {
		return Metrics{}, fmt.Errorf("report: %d arrivals but %d finishes", len(arrival), len(finish))
	}
	if len(finish) == 0 {
		return Metrics{}, fmt.Errorf("report: batch metrics of no completed programs")
	}
	times := make([]float64, len(finish))
	for i := range finish {
		if finish[i] < arrival[i] || arrival[i] < 0 {
			return Metrics{}, fmt.Errorf("report: program %d finished at %v before arriving at %v", i, finish[i], arrival[i])
		}
		times[i] = (finish[i] - arrival[i]).Seconds()
	}
	ps, err := stats.Percentiles(times, 50, 95)
	if err != nil {
		return Metrics{}, err
	}
	batch := slices.Max(finish).Seconds()
	m := Metrics{BatchSeconds: batch, P50ProgramSeconds: ps[0], P95ProgramSeconds: ps[1], Rank0Share: math.NaN()}
	if batch > 0 {
		m.ProgramsPerSecond = float64(len(finish)) / batch
	}
	return m, nil
}

// tbd is how a missing value is written, as in seed 000.
const tbd = "TBD"

// column is one CSV column: its name, how to format it from a row and how
// to parse it back.
type column struct {
	name  string
	get   func(r *Row) string
	set   func(r *Row, s string) error
	known bool // true: from Row itself, always present; false: from Metrics
}

func fmtFloat(v float64) string {
	if math.IsNaN(v) {
		return tbd
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func parseFloat(s string, dst *float64) error {
	if s == tbd {
		*dst = math.NaN()
		return nil
	}
	v, err := strconv.ParseFloat(s, 64)
	*dst = v
	return err
}

func parseInt(s string, dst *int) error {
	v, err := strconv.Atoi(s)
	*dst = v
	return err
}

// fmtCount writes a counter, "TBD" when unmeasured (< 0).
func fmtCount(v int) string {
	if v < 0 {
		return tbd
	}
	return strconv.Itoa(v)
}

func parseCount(s string, dst *int) error {
	if s == tbd {
		*dst = -1
		return nil
	}
	return parseInt(s, dst)
}

// fmtFloats writes a list in one cell, separated by ";" ("" for none).
func fmtFloats(vs []float64) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmtFloat(v)
	}
	return strings.Join(parts, ";")
}

func parseFloats(s string) ([]float64, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ";")
	out := make([]float64, len(parts))
	for i, p := range parts {
		if err := parseFloat(p, &out[i]); err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
	}
	return out, nil
}

// fmtInts writes a list of counts in one cell, separated by ";" ("" for
// none).
func fmtInts(vs []int) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ";")
}

func parseInts(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ";")
	out := make([]int, len(parts))
	for i, p := range parts {
		if err := parseInt(p, &out[i]); err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
	}
	return out, nil
}

// fmtBool writes Python-style booleans, as seed 000's CSV does.
func fmtBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

func parseBool(s string, dst *bool) error {
	switch s {
	case "True":
		*dst = true
	case "False":
		*dst = false
	default:
		return fmt.Errorf("%q is neither True nor False", s)
	}
	return nil
}

func rowStr(name string, f func(*Row) *string) column {
	return column{name: name, known: true,
		get: func(r *Row) string { return *f(r) },
		set: func(r *Row, s string) error { *f(r) = s; return nil }}
}

func rowInt(name string, f func(*Row) *int) column {
	return column{name: name, known: true,
		get: func(r *Row) string { return strconv.Itoa(*f(r)) },
		set: func(r *Row, s string) error { return parseInt(s, f(r)) }}
}

func rowFloat(name string, f func(*Row) *float64) column {
	return column{name: name, known: true,
		get: func(r *Row) string { return fmtFloat(*f(r)) },
		set: func(r *Row, s string) error { return parseFloat(s, f(r)) }}
}

func mInt(name string, f func(*Metrics) *int) column {
	return column{name: name,
		get: func(r *Row) string { return fmtCount(*f(r.M)) },
		set: func(r *Row, s string) error { return parseCount(s, f(r.M)) }}
}

func mFloat(name string, f func(*Metrics) *float64) column {
	return column{name: name,
		get: func(r *Row) string { return fmtFloat(*f(r.M)) },
		set: func(r *Row, s string) error { return parseFloat(s, f(r.M)) }}
}

// columns lists the CSV columns in order: seed 000's, where they apply,
// under its names (backend_* are the engine's own counters here; the
// seed's backend_failures, backend_oom and sampling_off have no
// counterpart in turnstile and are left out), then turnstile's additions
// (block, dp, rank0_share, steps, turn_shares, rank_routed, audit_detail,
// workload).
func columns() []column {
	return []column{
		rowStr("stage", func(r *Row) *string { return &r.Stage }),
		rowStr("arm", func(r *Row) *string { return &r.Arm }),
		rowFloat("share", func(r *Row) *float64 { return &r.Share }),
		rowInt("programs", func(r *Row) *int { return &r.Programs }),
		rowInt("completed", func(r *Row) *int { return &r.Completed }),
		rowStr("audit", func(r *Row) *string { return &r.Audit }),
		mFloat("batch_seconds", func(m *Metrics) *float64 { return &m.BatchSeconds }),
		mFloat("programs_per_second", func(m *Metrics) *float64 { return &m.ProgramsPerSecond }),
		mFloat("p50_program_seconds", func(m *Metrics) *float64 { return &m.P50ProgramSeconds }),
		mFloat("p95_program_seconds", func(m *Metrics) *float64 { return &m.P95ProgramSeconds }),
		mInt("scheduler_pauses", func(m *Metrics) *int { return &m.SchedulerPauses }),
		mInt("scheduler_resumes", func(m *Metrics) *int { return &m.SchedulerResumes }),
		mInt("forced_resumes", func(m *Metrics) *int { return &m.ForcedResumes }),
		mInt("first_turn_cached_tokens", func(m *Metrics) *int { return &m.FirstTurnCachedTokens }),
		mInt("backend_preemptions", func(m *Metrics) *int { return &m.Preemptions }),
		mInt("backend_recomputed_tokens", func(m *Metrics) *int { return &m.RecomputedTokens }),
		mInt("backend_generation_tokens_delta", func(m *Metrics) *int { return &m.GeneratedTokens }),
		rowInt("client_failed_programs", func(r *Row) *int { return &r.ClientFailed }),
		rowStr("row_id", func(r *Row) *string { return &r.RowID }),
		{name: "seed", known: true,
			get: func(r *Row) string { return strconv.FormatUint(r.Seed, 10) },
			set: func(r *Row, s string) (err error) { r.Seed, err = strconv.ParseUint(s, 10, 64); return err }},
		rowStr("candidate", func(r *Row) *string { return &r.Candidate }),
		rowFloat("phase", func(r *Row) *float64 { return &r.Phase }),
		rowFloat("tool_wait", func(r *Row) *float64 { return &r.ToolWait }),
		rowFloat("jitter_ms", func(r *Row) *float64 { return &r.JitterMS }),
		{name: "generation_counter_matches",
			get: func(r *Row) string { return fmtBool(r.M.GenerationCounterMatches) },
			set: func(r *Row, s string) error { return parseBool(s, &r.M.GenerationCounterMatches) }},
		rowInt("capacity_tokens", func(r *Row) *int { return &r.CapacityTokens }),
		mInt("peak_sampled_active_programs", func(m *Metrics) *int { return &m.PeakActivePrograms }),
		mInt("computed_prompt_usage_proxy", func(m *Metrics) *int { return &m.ComputedPromptTokens }),
		rowInt("block", func(r *Row) *int { return &r.Block }),
		rowInt("dp", func(r *Row) *int { return &r.DP }),
		mFloat("rank0_share", func(m *Metrics) *float64 { return &m.Rank0Share }),
		mInt("steps", func(m *Metrics) *int { return &m.Steps }),
		{name: "turn_shares",
			get: func(r *Row) string { return fmtFloats(r.M.TurnShares) },
			set: func(r *Row, s string) (err error) { r.M.TurnShares, err = parseFloats(s); return err }},
		{name: "rank_routed",
			get: func(r *Row) string { return fmtInts(r.M.RankRouted) },
			set: func(r *Row, s string) (err error) { r.M.RankRouted, err = parseInts(s); return err }},
		rowStr("audit_detail", func(r *Row) *string { return &r.AuditDetail }),
		rowStr("workload", func(r *Row) *string { return &r.Workload }),
	}
}

// Columns is the CSV header, in order.
func Columns() []string {
	cols := columns()
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = c.name
	}
	return out
}

// CSVWriter writes rows one at a time, flushing each, so a campaign's CSV
// holds every row run so far even if the process dies (the Observer of a
// campaign writes each row as it completes).
type CSVWriter struct {
	cw   *csv.Writer
	cols []column
	rec  []string
	n    int
}

// NewCSVWriter writes the header to w and returns the writer.
func NewCSVWriter(w io.Writer) (*CSVWriter, error) {
	c := &CSVWriter{cw: csv.NewWriter(w), cols: columns()}
	c.rec = make([]string, len(c.cols))
	if err := c.cw.Write(Columns()); err != nil {
		return nil, fmt.Errorf("report: write CSV header: %w", err)
	}
	c.cw.Flush()
	if err := c.cw.Error(); err != nil {
		return nil, fmt.Errorf("report: write CSV header: %w", err)
	}
	return c, nil
}

// Write writes one row and flushes it. Floats are written in the shortest
// form that parses back to the same bits; a row without Metrics writes
// "TBD" in every metric column, as does a NaN float or a negative
// (unmeasured) counter.
func (c *CSVWriter) Write(r *Row) error {
	for j, col := range c.cols {
		if !col.known && r.M == nil {
			c.rec[j] = tbd
			continue
		}
		c.rec[j] = col.get(r)
	}
	if err := c.cw.Write(c.rec); err != nil {
		return fmt.Errorf("report: write CSV row %d (%s): %w", c.n, r.RowID, err)
	}
	c.cw.Flush()
	if err := c.cw.Error(); err != nil {
		return fmt.Errorf("report: write CSV row %d (%s): %w", c.n, r.RowID, err)
	}
	c.n++
	return nil
}

// WriteCSV writes the header and one line per row (see CSVWriter.Write).
func WriteCSV(w io.Writer, rows []Row) error {
	c, err := NewCSVWriter(w)
	if err != nil {
		return err
	}
	for i := range rows {
		if err := c.Write(&rows[i]); err != nil {
			return err
		}
	}
	return nil
}

// ReadCSV reads rows written by WriteCSV. The header must be Columns()
// exactly. A row whose metric columns are all "TBD" gets nil Metrics.
func ReadCSV(r io.Reader) ([]Row, error) {
	cr := csv.NewReader(r)
	cols := columns()
	cr.FieldsPerRecord = len(cols)
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("report: read CSV header: %w", err)
	}
	if want := Columns(); !slices.Equal(header, want) {
		return nil, fmt.Errorf("report: CSV header %v, want %v", header, want)
	}
	var rows []Row
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("report: read CSV: %w", err)
		}
		row := Row{M: &Metrics{}}
		allTBD := true
		for j, c := range cols {
			if !c.known && rec[j] != tbd {
				allTBD = false
			}
		}
		for j, c := range cols {
			if !c.known && allTBD {
				continue
			}
			if err := c.set(&row, rec[j]); err != nil {
				return nil, fmt.Errorf("report: CSV line %d, column %s: value %q: %w", line, c.name, rec[j], err)
			}
		}
		if allTBD {
			row.M = nil
		}
		rows = append(rows, row)
	}
}
