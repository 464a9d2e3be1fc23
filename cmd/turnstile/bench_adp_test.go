package main

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/bench/report"
)

func TestBenchADPFlagErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"dp 0", []string{"--dp", "2,0"}, "bench adp: --dp 0: must be in [1, 64]"},
		{"dp huge", []string{"--dp", "65"}, "bench adp: --dp 65"},
		{"dp repeated", []string{"--dp", "2,2"}, "bench adp: --dp 2 is repeated"},
		{"dp not a number", []string{"--dp", "x"}, `"x"`},
		{"arm unknown", []string{"--arms", "FIX,FAST"}, `bench adp: --arms "FAST": want BASE, FIX or OVLOFF`},
		{"arm repeated", []string{"--arms", "FIX,BASE,FIX"}, `bench adp: --arms "FIX" is repeated`},
		{"no reference", []string{"--arms", "BASE,OVLOFF"}, "bench adp: --arms BASE,OVLOFF: FIX, the reference arm"},
		{"blocks", []string{"--blocks", "0"}, "bench adp: --blocks 0: must be >= 1"},
		{"requests", []string{"--requests-per-rank", "0"}, "bench adp: --requests-per-rank 0"},
		{"isl", []string{"--isl", "-5"}, "bench adp: --isl -5"},
		{"batch", []string{"--max-batch-size", "0"}, "bench adp: --max-batch-size 0"},
		{"late word", []string{"--late", "some"}, `bench adp: --late "some": want a count >= 0 or 'all'`},
		{"late negative", []string{"--late", "-1"}, `bench adp: --late "-1"`},
		{"late above dp", []string{"--dp", "2,4", "--late", "3"}, "bench adp: --late 3 exceeds --dp 2"},
		{"out is a file", []string{"--out", filepath.Join(file, "sub")}, "bench adp: --out"},
		{"profile", []string{"--profile", "h100"}, `bench adp: --profile "h100": neither a built-in profile ([h200-roofline h200-measured])`},
		{"profile empty", []string{"--profile", ""}, "bench adp: --profile is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runCLI(t, append([]string{"bench", "adp"}, tc.args...)...)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// TestBenchADPRuns: a tiny campaign writes rows.csv (one row per arm),
// summary.json, table.md and a PNG, and prints the table and goal line.
func TestBenchADPRuns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	out, err := runCLI(t, "bench", "adp", "--dp", "2", "--blocks", "1", "--requests-per-rank", "12", "--isl", "128", "--out", dir)
	require.NoError(t, err, out)
	require.Regexp(t, `dp=2 FIX/BASE \+\d+\.\d% \[\+\d+\.\d%, \+\d+\.\d%\] \(seed \+27\.3%, predicted \+33\.3% for k=1\)`, out)
	require.Contains(t, out, "| throughput FIX/OVLOFF |")
	require.Contains(t, out, "FIX == OVLOFF per-rank routing in 1 of 1 blocks")
	require.Contains(t, out, "profile h200-measured", "the default profile is named")

	f, err := os.Open(filepath.Join(dir, "rows.csv"))
	require.NoError(t, err)
	defer f.Close()
	rows, err := report.ReadCSV(f)
	require.NoError(t, err)
	require.Len(t, rows, 3)
	for _, r := range rows {
		require.Equal(t, report.Pass, r.Audit, r.AuditDetail)
		require.Equal(t, 2, r.DP)
		require.Equal(t, 24, r.Completed)
		require.Len(t, r.M.RankRouted, 2)
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	require.NoError(t, err)
	var sum struct {
		Rows int `json:"rows"`
		DP   []struct {
			DP      int `json:"dp"`
			K       int `json:"late_ranks"`
			Routing []struct {
				Equal bool `json:"equal"`
			} `json:"fix_ovloff_routing"`
		} `json:"dp"`
	}
	require.NoError(t, json.Unmarshal(b, &sum))
	require.Equal(t, 3, sum.Rows)
	require.Len(t, sum.DP, 1)
	require.Equal(t, 1, sum.DP[0].K)
	require.True(t, sum.DP[0].Routing[0].Equal)
	md, err := os.ReadFile(filepath.Join(dir, "table.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "| BASE | 0 |")
	pf, err := os.Open(filepath.Join(dir, "rank0_share.png"))
	require.NoError(t, err)
	defer pf.Close()
	img, err := png.Decode(pf)
	require.NoError(t, err)
	require.Equal(t, report.PlotWidth, img.Bounds().Dx())
}

// TestBenchADPStreams: the progress bar goes to stderr, the results to
// stdout; --late all and --rank0-late reach the rows (every rank late:
// rank 0's BASE share is 1/dp).
func TestBenchADPStreams(t *testing.T) {
	o := newBenchADPOptions()
	o.dps, o.arms, o.blocks, o.requestsPerRank, o.isl = []int{2}, []string{"BASE", "FIX"}, 1, 8, 64
	o.maxBatchSize, o.late, o.rank0Late, o.seed = 2, "all", true, 3
	require.NoError(t, o.validate())
	var stdout, stderr bytes.Buffer
	require.NoError(t, runBenchADP(context.Background(), o, &stdout, &stderr))
	require.Contains(t, stderr.String(), "2/2 100%")
	require.NotContains(t, stdout.String(), "ETA")
	require.Contains(t, stdout.String(), "predicted +100.0% for k=2")
	require.Contains(t, stdout.String(), "dp=2 BASE rank-0 share 50.00%, rung 1/2")
	require.False(t, strings.Contains(stdout.String(), "OVLOFF |"), "OVLOFF did not run")
}
