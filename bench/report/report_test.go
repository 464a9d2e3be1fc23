package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/internal/stats"
)

// campaign builds paired rows: blocks × arms at each share, with B faster
// than A by a block-dependent factor, plus one failed row.
func campaign() []Row {
	var rows []Row
	for _, share := range []float64{0, 0.5, 0.9} {
		for block := range 4 {
			for _, arm := range []string{"A", "B", "C"} {
				base := 100.0 - 10*float64(block)
				speed := map[string]float64{"A": 1, "B": 1 + share/3 + 0.01*float64(block), "C": 0.98}[arm]
				bs := base / speed
				rows = append(rows, Row{
					Stage: "validation", Arm: arm, Candidate: strings.ToLower(arm) + "1", Block: block,
					RowID: "v_" + arm, Seed: uint64(700 + block), Share: share, Programs: 32, Completed: 32,
					Audit: Pass, Phase: 0.25, ToolWait: 1, JitterMS: 5, DP: 1, CapacityTokens: 468736, Workload: "abc",
					M: &Metrics{
						BatchSeconds: bs, ProgramsPerSecond: 32 / bs, P50ProgramSeconds: bs * 0.7, P95ProgramSeconds: bs * 0.99,
						SchedulerPauses: 32, SchedulerResumes: 32, FirstTurnCachedTokens: 412160, GeneratedTokens: 24576,
						GenerationCounterMatches: true, PeakActivePrograms: 28, ComputedPromptTokens: 132608,
						Rank0Share: math.NaN(), Steps: 1234,
					},
				})
			}
		}
	}
	rows = append(rows, Row{Stage: "validation", Arm: "B", Block: 4, Share: 0.9, RowID: "v_fail", Seed: 704, Programs: 32,
		Audit: Fail, AuditDetail: "leaked 3 blocks, seat 7", DP: 1})
	return rows
}

func TestCSVRoundTrip(t *testing.T) {
	rows := campaign()
	rows[1].M.Rank0Share = 0.2857142857142857
	rows[2].M.BatchSeconds = 1.0 / 3 // needs all 17 digits
	rows[3].Candidate = `quoted, "odd"`
	rows[4].M.TurnShares = []float64{0.9, 0.8421052631578947, 0.7}
	rows[4].M.RankRouted = []int{2928, 5853, 5850, 5850}
	rows[5].M.SchedulerPauses, rows[5].M.RecomputedTokens = -1, -1 // unmeasured
	var buf bytes.Buffer
	require.NoError(t, WriteCSV(&buf, rows))
	text := buf.String()
	lines := strings.Split(strings.TrimSpace(text), "\n")
	require.Len(t, lines, len(rows)+1)
	require.True(t, strings.HasPrefix(lines[0], "stage,arm,share,programs,completed,audit,batch_seconds,programs_per_second,p50_program_seconds,p95_program_seconds,scheduler_pauses,scheduler_resumes,forced_resumes,"))
	require.Contains(t, lines[len(lines)-1], "validation,B,0.9,32,0,FAIL,TBD,TBD,TBD,TBD,")
	require.Contains(t, lines[1], ",True,")
	require.Contains(t, lines[6], "PASS,"+fmtFloat(rows[5].M.BatchSeconds))
	require.Contains(t, lines[6], ",TBD,32,0,412160,0,TBD,24576,")

	back, err := ReadCSV(strings.NewReader(text))
	require.NoError(t, err)
	require.Len(t, back, len(rows))
	for i := range rows {
		want, got := rows[i], back[i]
		if want.M != nil {
			require.NotNil(t, got.M, "row %d", i)
			// NaN ≠ NaN: compare it apart, then the rest exactly.
			require.Equal(t, math.IsNaN(want.M.Rank0Share), math.IsNaN(got.M.Rank0Share), "row %d", i)
			wm, gm := *want.M, *got.M
			wm.Rank0Share, gm.Rank0Share = 0, 0
			require.Equal(t, wm, gm, "row %d", i)
			want.M, got.M = nil, nil
		}
		require.Equal(t, want, got, "row %d", i)
	}
	require.Equal(t, 0.2857142857142857, back[1].M.Rank0Share)
	require.Equal(t, []int{2928, 5853, 5850, 5850}, back[4].M.RankRouted)
	require.Contains(t, lines[5], ",2928;5853;5850;5850,", "per-rank counts in one cell")
	require.Equal(t, 1.0/3, back[2].M.BatchSeconds)

	var again bytes.Buffer
	require.NoError(t, WriteCSV(&again, back))
	require.Equal(t, text, again.String(), "write(read(write(x))) = write(x)")
}

func TestCSVWriterIncremental(t *testing.T) {
	rows := campaign()
	var buf bytes.Buffer
	w, err := NewCSVWriter(&buf)
	require.NoError(t, err)
	for i := range rows[:3] {
		require.NoError(t, w.Write(&rows[i]))
		// Every row is on the writer as soon as it is written.
		back, err := ReadCSV(bytes.NewReader(buf.Bytes()))
		require.NoError(t, err)
		require.Len(t, back, i+1)
		require.Equal(t, rows[i].RowID, back[i].RowID)
	}
	_, err = NewCSVWriter(failWriter{})
	require.ErrorContains(t, err, "write CSV header: disk full")
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestReadCSVErrors(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, WriteCSV(&buf, campaign()[:1]))
	good := buf.String()
	header, row, _ := strings.Cut(good, "\n")
	tests := []struct {
		name, text, wantErr string
	}{
		{"empty", "", "read CSV header"},
		{"wrong header", strings.Replace(header, "share", "sharing", 1) + "\n" + row, "CSV header"},
		{"bad float", header + "\n" + strings.Replace(row, ",0.25,", ",x25,", 1), "column phase: value \"x25\""},
		{"bad bool", header + "\n" + strings.Replace(row, ",True,", ",yes,", 1), "column generation_counter_matches"},
		{"short row", header + "\nvalidation,A\n", "wrong number of fields"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadCSV(strings.NewReader(tc.text))
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestBatchMetrics(t *testing.T) {
	s := time.Second
	tests := []struct {
		name            string
		arrival, finish []time.Duration
		batch, pps      float64
		p50, p95        float64
		wantErr         string
	}{
		{
			name:    "four programs",
			arrival: []time.Duration{0, s / 4, s / 2, 3 * s / 4},
			finish:  []time.Duration{10 * s, 6 * s, 8 * s, 20 * s},
			// Program times 10, 5.75, 7.5, 19.25: nearest rank P50 = 2nd = 7.5,
			// P95 = ⌈3.8⌉ = 4th = 19.25; batch ends at the last finish, 20 s.
			batch: 20, pps: 0.2, p50: 7.5, p95: 19.25,
		},
		{name: "mismatch", arrival: []time.Duration{0}, finish: nil, wantErr: "1 arrivals but 0 finishes"},
		{name: "none", wantErr: "no completed programs"},
		{name: "finish first", arrival: []time.Duration{2 * s}, finish: []time.Duration{s}, wantErr: "program 0 finished at 1s before arriving at 2s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := BatchMetrics(tc.arrival, tc.finish)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.InDelta(t, tc.batch, m.BatchSeconds, 1e-12)
			require.InDelta(t, tc.pps, m.ProgramsPerSecond, 1e-12)
			require.InDelta(t, tc.p50, m.P50ProgramSeconds, 1e-12)
			require.InDelta(t, tc.p95, m.P95ProgramSeconds, 1e-12)
			require.True(t, math.IsNaN(m.Rank0Share))
		})
	}
}

func TestCompare(t *testing.T) {
	rows := campaign()
	boot := stats.Bootstrap{Seed: stats.DefaultSeed}
	comps, err := Compare(rows, "validation", "B", "A", Throughput, boot)
	require.NoError(t, err)
	require.Len(t, comps, 3)
	for _, c := range comps {
		// The failed block-4 row at 0.9 leaves that block incomplete.
		require.Equal(t, []int{0, 1, 2, 3}, c.BlockIDs, "share %v", c.Share)
		require.Equal(t, 4, c.Ratio.Blocks)
		// B/A throughput per block is 1 + share/3 + 0.01·block.
		want := make([]float64, 4)
		for b := range want {
			want[b] = 1 + c.Share/3 + 0.01*float64(b)
		}
		g, err := stats.GeoMean(want)
		require.NoError(t, err)
		require.InEpsilon(t, g, c.Ratio.Point, 1e-12)
		require.LessOrEqual(t, c.Ratio.Lo, c.Ratio.Point)
		require.GreaterOrEqual(t, c.Ratio.Hi, c.Ratio.Point)
		require.GreaterOrEqual(t, c.Ratio.Lo, want[0]-1e-12)
		require.LessOrEqual(t, c.Ratio.Hi, want[3]+1e-12)
	}
	// P95 ratio is the inverse of the throughput ratio here.
	p95, err := Compare(rows, "validation", "B", "A", P95, boot)
	require.NoError(t, err)
	require.InEpsilon(t, 1/comps[2].Ratio.Point, p95[2].Ratio.Point, 1e-12)
	require.False(t, P95.HigherIsBetter())

	// A block missing an arm is dropped; a stage with no complete block
	// yields nothing.
	cut := append([]Row(nil), rows[:len(rows)-2]...) // drop C of share .9 block 3 and the failure
	comps, err = Compare(cut, "validation", "B", "A", Throughput, boot)
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2}, comps[2].BlockIDs)
	comps, err = Compare(rows, "calibration", "B", "A", Throughput, boot)
	require.NoError(t, err)
	require.Empty(t, comps)

	bad := campaign()
	bad[0].M.ProgramsPerSecond = 0
	_, err = Compare(bad, "validation", "A", "B", Throughput, boot)
	require.ErrorContains(t, err, "throughput A/B at share 0 over blocks [0 1 2 3]")
	_, err = Compare(rows, "validation", "B", "A", Metric("nope"), boot)
	require.ErrorContains(t, err, `unknown metric "nope"`)
}

func TestSummaryJSONAndMarkdown(t *testing.T) {
	rows := campaign()
	comps, err := Compare(rows, "validation", "B", "A", Throughput, stats.Bootstrap{Seed: 1})
	require.NoError(t, err)
	s := Summarise("agentic test", rows, comps)
	require.Equal(t, len(rows), s.Rows)
	require.Equal(t, len(rows)-1, s.Passed)
	require.Equal(t, 1, s.Failed)
	require.Equal(t, []string{"v_fail: leaked 3 blocks, seat 7"}, s.Failures)
	require.Equal(t, 32*len(rows), s.Programs)
	require.Equal(t, 32*(len(rows)-1), s.Completed)

	var buf bytes.Buffer
	require.NoError(t, WriteJSON(&buf, s))
	var back Summary
	require.NoError(t, json.Unmarshal(buf.Bytes(), &back))
	require.Equal(t, s, back)

	s.Comparisons[0].Ratio.Hi = math.Inf(1)
	require.ErrorContains(t, WriteJSON(&bytes.Buffer{}, s), "holds +Inf")

	s.Comparisons[0].Ratio.Hi = comps[0].Ratio.Hi
	s.Frozen = map[string]string{"B": "b2", "A": "a"}
	s.Gates = map[string]GateResult{"B/b1": {Reason: "zero-sharing P95 1.2× | high"}, "B/b2": {Eligible: true, Reason: "passed"}}
	var md bytes.Buffer
	require.NoError(t, WriteMarkdown(&md, s, rows))
	text := md.String()
	require.True(t, strings.HasPrefix(text, "## agentic test\n\n37 rows: 36 passed, 1 failed; 1152 of 1184 programs completed.\n\n- failed: v_fail: leaked 3 blocks, seat 7\n\n"), text)
	require.Contains(t, text, "| arm | frozen candidate |\n| --- | --- |\n| A | a |\n| B | b2 |\n")
	require.Contains(t, text, "| B/b1 | false | zero-sharing P95 1.2× \\| high |\n| B/b2 | true | passed |\n")
	require.Contains(t, text, "| stage | share | metric | ratio | 95% interval | blocks | better |")
	c := comps[2].Ratio
	require.Contains(t, text, fmt.Sprintf("| validation | 0.9 | throughput B/A | %.3f | %.3f–%.3f | 4 | higher |\n", c.Point, c.Lo, c.Hi))
	require.Contains(t, text, `| v_fail | validation | B |  | 0.9 | 4 | FAIL (leaked 3 blocks, seat 7) | 0/32 | TBD | TBD |`)
	// Title, counts, failure and the two small tables take 16 lines; then
	// one line per comparison and per row, plus two headers, separators and
	// a blank line.
	require.Equal(t, 16+len(comps)+len(rows)+5, strings.Count(text, "\n"))
}

func TestPlots(t *testing.T) {
	rows := campaign()
	var comps []Comparison
	for _, arm := range []string{"B", "C"} {
		c, err := Compare(rows, "validation", arm, "A", Throughput, stats.Bootstrap{Seed: 3, Resamples: 500})
		require.NoError(t, err)
		comps = append(comps, c...)
	}
	var adp []Row
	for _, dp := range []int{2, 4} {
		for rep := range 3 {
			for _, arm := range []string{"BASE", "FIX", "OVLOFF"} {
				share := 1 / float64(dp)
				if arm == "BASE" {
					share = 1 / float64(2*dp-1-rep%2)
				}
				adp = append(adp, Row{Stage: "validation", Arm: arm, Block: rep, DP: dp, Audit: Pass, M: &Metrics{Rank0Share: share}})
			}
		}
	}
	tests := []struct {
		name    string
		draw    func(*bytes.Buffer, int, int) error
		w, h    int
		wantErr string
	}{
		{"throughput", func(b *bytes.Buffer, w, h int) error { return ThroughputPlot(b, comps, w, h) }, 400, 250, ""},
		{"throughput small", func(b *bytes.Buffer, w, h int) error { return ThroughputPlot(b, comps, w, h) }, 320, 200, ""},
		{"rank0", func(b *bytes.Buffer, w, h int) error { return Rank0SharePlot(b, adp, w, h) }, 400, 250, ""},
		{"no throughput", func(b *bytes.Buffer, w, h int) error { return ThroughputPlot(b, nil, w, h) }, 10, 10, "no throughput comparisons"},
		{"no dp rows", func(b *bytes.Buffer, w, h int) error { return Rank0SharePlot(b, rows, w, h) }, 10, 10, "dp ≥ 2"},
		{"zero size", func(b *bytes.Buffer, w, h int) error { return ThroughputPlot(b, comps, w, h) }, 0, 10, "0×10 pixels"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := tc.draw(&buf, tc.w, tc.h)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			img, err := png.Decode(&buf)
			require.NoError(t, err)
			require.Equal(t, tc.w, img.Bounds().Dx())
			require.Equal(t, tc.h, img.Bounds().Dy())
			// Something was drawn: not every pixel is the white background.
			drawn := false
			for y := 0; y < tc.h && !drawn; y += 3 {
				for x := 0; x < tc.w; x += 3 {
					if r, g, b, _ := img.At(x, y).RGBA(); r != 0xffff || g != 0xffff || b != 0xffff {
						drawn = true
						break
					}
				}
			}
			require.True(t, drawn)
		})
	}
}

// FuzzReadCSV feeds arbitrary text to ReadCSV: it must never panic, and
// whatever it accepts must write back to text that reads to the same rows.
func FuzzReadCSV(f *testing.F) {
	var buf bytes.Buffer
	if err := WriteCSV(&buf, campaign()[len(campaign())-3:]); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.String())
	f.Add(strings.Join(Columns(), ",") + "\n")
	f.Add("stage,arm\nx,y\n")
	f.Fuzz(func(t *testing.T, text string) {
		rows, err := ReadCSV(strings.NewReader(text))
		if err != nil {
			return
		}
		var out bytes.Buffer
		require.NoError(t, WriteCSV(&out, rows))
		again, err := ReadCSV(bytes.NewReader(out.Bytes()))
		require.NoError(t, err)
		require.Len(t, again, len(rows))
		var out2 bytes.Buffer
		require.NoError(t, WriteCSV(&out2, again))
		require.Equal(t, out.String(), out2.String())
	})
}
