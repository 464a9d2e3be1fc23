package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/bench/calibrate"
	"github.com/turnstile-llm/turnstile/sim"
)

func TestBenchCalibrateFlagErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"device", []string{"--device", "tpu"}, `bench calibrate: --device "tpu": want auto, cpu, cuda or cuda:N`},
		{"device auto", []string{"--device", "auto"}, "bench calibrate: --device auto: name the runner to calibrate"},
		{"gpu", []string{"--device", "cuda:-1"}, `bench calibrate: --device "cuda:-1"`},
		{"workers with cuda", []string{"--device", "cuda", "--workers", "2"}, "bench calibrate: --workers 2: applies to --device cpu"},
		{"model with sim", []string{"--device", "sim", "--model", "x.gguf"}, `bench calibrate: --model "x.gguf": applies to --device cpu`},
		{"workers with sim", []string{"--device", "sim", "--workers", "2"}, "bench calibrate: --workers 2: applies to --device cpu"},
		{"workers", []string{"--workers", "-1"}, "bench calibrate: --workers -1: must be >= 0"},
		{"batch", []string{"--max-batch-size", "0"}, "bench calibrate: --max-batch-size 0: must be in [1, 256]"},
		{"batch huge", []string{"--max-batch-size", "1000"}, "bench calibrate: --max-batch-size 1000"},
		{"requests", []string{"--requests", "7"}, "bench calibrate: --requests 7: must be >= 8"},
		{"seed", []string{"--seed", "-1"}, `invalid argument "-1" for "--seed"`},
		{"model empty", []string{"--model", ""}, "bench calibrate: --model is empty"},
		{"missing model", []string{"--model", "/no/such.gguf"}, "bench calibrate: --model: model: load: gguf: open /no/such.gguf: no such file"},
		{"out is a file", []string{"--device", "sim", "--out", filepath.Join(file, "sub")}, "bench calibrate: --out"},
		{"args", []string{"extra"}, `unknown command "extra"`},
		{"profile with cpu", []string{"--profile", "h200-measured"}, `bench calibrate: --profile "h200-measured": applies to --device sim`},
		{"unknown profile", []string{"--device", "sim", "--profile", "h100"}, `--profile "h100": neither a built-in profile`},
		{"cascade", []string{"--cascade-min-blocks", "-1"}, "bench calibrate: --cascade-min-blocks -1: must be >= 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runCLI(t, append([]string{"bench", "calibrate"}, tc.args...)...)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// TestBenchCalibrateSim: the self-check recovers the profile it is priced
// by, shared pairs included (cascade groups are on by default), and the
// table and the profile say so.
func TestBenchCalibrateSim(t *testing.T) {
	for _, tc := range []struct {
		name    string
		profile []string
		want    sim.Linear
	}{
		{"default", nil, sim.H200Llama3_8BMeasured(false)},
		{"roofline", []string{"--profile", sim.ProfileH200Roofline}, sim.H200Llama3_8B(false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "sim")
			path := filepath.Join(dir, calibrateProfileFile)
			args := append([]string{"bench", "calibrate", "--device", "sim", "--max-batch-size", "4", "--requests", "32", "--out", dir}, tc.profile...)
			out, err := runCLI(t, args...)
			require.NoError(t, err)
			for _, want := range []string{"fitted µs", "true µs", "per context token", "per shared pair", "decode-only", "with prefill",
				"median step-time error 0.00% (goal ≤ 10%)", "profile written to " + path} {
				require.Contains(t, out, want)
			}
			p, err := calibrate.ReadProfile(path)
			require.NoError(t, err)
			want := tc.want
			require.Equal(t, "sim", p.Runner)
			require.Equal(t, 4, p.MaxBatchSize)
			require.InEpsilon(t, want.Fixed, p.Linear.Fixed, 1e-6)
			require.InEpsilon(t, want.PerPrefillToken, p.Linear.PerPrefillToken, 1e-6)
			require.InEpsilon(t, want.PerSharedPair, p.Linear.PerSharedPair, 1e-3)
			require.Less(t, p.P90RelErr, 1e-6)
		})
	}
}

// TestBenchCalibrateCPU: a tiny calibration of the CPU runner on
// stories260K prints the table and writes a valid profile (its error is
// wall-clock timing, so only its presence is checked).
func TestBenchCalibrateCPU(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, calibrateProfileFile)
	out, err := runCLI(t, "bench", "calibrate", "--workers", "1", "--max-batch-size", "2", "--requests", "8", "--out", dir)
	require.NoError(t, err)
	require.Contains(t, out, "calibrating the cpu runner (stories260K.gguf, workers 1)")
	require.Contains(t, out, "median step-time error")
	require.NotContains(t, out, "true µs")
	p, err := calibrate.ReadProfile(path)
	require.NoError(t, err)
	require.Equal(t, "stories260K.gguf", p.Model)
	require.Equal(t, "cpu", p.Runner)
	require.Equal(t, 1, p.Workers)
	require.Greater(t, p.TrainSamples, 50)
}

// TestBenchCalibrateCUDAWithoutDriver: on a machine without the CUDA
// driver --device cuda fails with an error naming the runner and the
// missing library, before any step is recorded. (On a GPU machine it
// calibrates; that path has not run here.)
func TestBenchCalibrateCUDAWithoutDriver(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("a GPU is present")
	}
	out, err := runCLI(t, "bench", "calibrate", "--device", "cuda", "--requests", "8", "--max-batch-size", "1")
	require.Error(t, err)
	require.Contains(t, err.Error(), "CUDA runner")
	require.Contains(t, out, "calibrating the cuda runner (stories260K.gguf, GPU 0)")
}
