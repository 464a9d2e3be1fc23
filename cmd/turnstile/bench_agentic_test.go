package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/bench/report"
)

func TestBenchAgenticFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--share", "1.5"}, `--share "1.5"`},
		{[]string{"--share", "0,0"}, "--share 0 listed twice"},
		{[]string{"--device", "gpu"}, `--device "gpu"`},
		{[]string{"--device", "sim,sim"}, "--device sim,sim"},
		{[]string{"--arms", "B,C"}, "lack A"},
		{[]string{"--arms", "A,D"}, `arm "D"`},
		{[]string{"--preset", "huge"}, `--preset "huge"`},
		{[]string{"--programs", "0"}, "--programs 0"},
		{[]string{"--blocks", "0"}, "--blocks 0"},
		{[]string{"--tool-wait", "-1s"}, "--tool-wait -1s"},
		{[]string{"--deadline", "0s"}, "--deadline 0s"},
		{[]string{"--step-fixed", "-1ms"}, "--step-fixed -1ms"},
		{[]string{"--context-tokens", "40000"}, "past the engine's 32768-token context"},
		{[]string{"--profile", "/nonexistent/profile.json"}, `--profile "/nonexistent/profile.json": neither a built-in profile`},
		{[]string{"--profile", "h300"}, `--profile "h300"`},
		{[]string{"--device", "cpu", "--context-tokens", "600"}, "past the model's"},
	} {
		args := append([]string{"bench", "agentic", "--out", ""}, tc.args...)
		_, err := runCLI(t, args...)
		require.Error(t, err, "%v", tc.args)
		require.Contains(t, err.Error(), tc.want, "%v", tc.args)
	}
}

// TestBenchAgenticSim runs a small campaign on the simulated device: every
// row passes, the outputs are written, and the report names the seed's
// goals.
func TestBenchAgenticSim(t *testing.T) {
	dir := t.TempDir()
	out, err := runCLI(t, "bench", "agentic", "--preset", "small", "--programs", "8", "--turns", "2", "--share", "0,0.9",
		"--blocks", "2", "--secondary-blocks", "1", "--kv-blocks", "400", "--out", dir)
	require.NoError(t, err, out)
	require.Contains(t, out, "seed 000's goals at share 0.90 (B/A)")
	require.NotContains(t, out, "instead of", "no --step-fixed, the profile's own fixed time")
	require.Contains(t, out, "sim cost: built-in h200-measured", "the default profile")
	require.Contains(t, out, "frozen: A=a B=b")
	for _, f := range []string{"rows.csv", "summary.json", "table.md", "throughput.png"} {
		st, err := os.Stat(filepath.Join(dir, "sim", f))
		require.NoError(t, err, f)
		require.Positive(t, st.Size(), f)
	}
	csvf, err := os.Open(filepath.Join(dir, "sim", "rows.csv"))
	require.NoError(t, err)
	defer csvf.Close()
	rows, err := report.ReadCSV(csvf)
	require.NoError(t, err)
	// Calibration: A + 3 B + 3 C at two shares; validation: 3 blocks × 3 arms.
	require.Len(t, rows, 14+9)
	for _, r := range rows {
		require.Equal(t, report.Pass, r.Audit, r.RowID)
		require.Equal(t, 8, r.Completed, r.RowID)
		require.Equal(t, 400*16, r.CapacityTokens)
	}

	// A tighter pool: every B candidate misses the zero-sharing gate (a
	// smaller batch than A's, slower), the campaign stops with an error
	// naming the arm, and the calibration rows are kept on disk.
	dir = t.TempDir()
	out, err = runCLI(t, "bench", "agentic", "--preset", "small", "--programs", "8", "--turns", "2", "--share", "0,0.9",
		"--blocks", "2", "--secondary-blocks", "1", "--kv-blocks", "114", "--out", dir)
	require.ErrorContains(t, err, "no candidate of arm B passed the eligibility gate")
	require.Contains(t, out, "gate B/b1  REJECTED  zero-sharing batch time")
	csvf2, err := os.Open(filepath.Join(dir, "sim", "rows.csv"))
	require.NoError(t, err)
	defer csvf2.Close()
	rows, err = report.ReadCSV(csvf2)
	require.NoError(t, err)
	require.Len(t, rows, 14, "every calibration row kept")
}

// TestBenchAgenticPrediction runs the same tiny campaign on the simulated
// device and the CPU runner (stories260K) and prints them side by side.
func TestBenchAgenticPrediction(t *testing.T) {
	out, err := runCLI(t, "bench", "agentic", "--device", "sim,cpu", "--arms", "A,B", "--programs", "4", "--turns", "2",
		"--share", "0.9", "--blocks", "2", "--calibrate=false", "--kv-blocks", "64", "--out", "")
	require.NoError(t, err, out)
	require.Contains(t, out, "== runner sim")
	require.Contains(t, out, "== runner cpu")
	i := strings.Index(out, "simulator prediction vs CPU measurement")
	require.Positive(t, i, out)
	require.Contains(t, out[i:], "B/A    throughput")
}

// TestBenchAgenticToolLoop runs the tool-loop workload, scaled down, on the
// simulated device and the CPU runner: the preset sets 10 short turns
// (--turns overrides it), and B admits every program at 90% sharing where
// A admits fewer.
func TestBenchAgenticToolLoop(t *testing.T) {
	dir := t.TempDir()
	out, err := runCLI(t, "bench", "agentic", "--preset", "tool-loop-small", "--device", "sim,cpu", "--arms", "A,B", "--programs", "8",
		"--share", "0,0.9", "--blocks", "1", "--secondary-blocks", "1", "--calibrate=false", "--kv-blocks", "115", "--out", dir)
	require.NoError(t, err, out)
	require.Contains(t, out, "preset tool-loop-small, runner sim,cpu, 8 programs × 10 turns, context 256, output 2, tool 3 tokens")
	for _, runner := range []string{"sim", "cpu"} {
		f, err := os.Open(filepath.Join(dir, runner, "rows.csv"))
		require.NoError(t, err)
		rows, err := report.ReadCSV(f)
		f.Close()
		require.NoError(t, err)
		require.Len(t, rows, 4, runner)
		for _, r := range rows {
			require.Equal(t, report.Pass, r.Audit, r.RowID)
			require.Equal(t, 8, r.Completed, r.RowID)
			// A admits at most 7 (7 × 262 ≤ 1,840 < 8 × 262; fewer on
			// the CPU when programs grow before the last is admitted).
			if r.Share == 0.9 && r.Arm == "B" {
				require.Equal(t, 8, r.M.PeakActivePrograms, "%s %s", runner, r.RowID)
			} else if r.Arm == "A" {
				require.LessOrEqual(t, r.M.PeakActivePrograms, 7, "%s %s", runner, r.RowID)
			}
		}
	}

	out, err = runCLI(t, "bench", "agentic", "--preset", "tool-loop-small", "--arms", "A", "--programs", "4", "--turns", "2",
		"--share", "0", "--blocks", "1", "--calibrate=false", "--kv-blocks", "64", "--out", "")
	require.NoError(t, err, out)
	require.Contains(t, out, "4 programs × 2 turns")
}
