package main

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBenchDecode(t *testing.T) {
	dir := t.TempDir()
	out, err := runCLI(t, "bench", "decode", "--device", "cpu", "--tests", "pp32,tg8,tg8@d16,tg4x3", "--batched-prompt", "8",
		"--rounds", "2", "--out", dir)
	require.NoError(t, err, out)
	for _, want := range []string{"# bench decode: stories260K.gguf, cpu, 2 rounds", "pp32 ", "tg8 ", "tg8@d16 ", "tg4x3 "} {
		require.Contains(t, out, want)
	}
	f, err := os.Open(filepath.Join(dir, benchDecodeCSV))
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 1+4*2, "a header and every timed round")
	require.Equal(t, []string{"tg4x3", "1", "12"}, rows[8][:3], "3 sequences × 4 tokens")
}

func TestBenchDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tests", "tg0"}, `test "tg0"`},
		{[]string{"--tests", "xx"}, `test "xx"`},
		{[]string{"--rounds", "0"}, "--rounds 0"},
		{[]string{"--batched-prompt", "0"}, "--batched-prompt 0"},
		{[]string{"--tests", "tg4096"}, "test tg4096 needs 4097 positions; the model's context is 2048"},
		{[]string{"--device", "sim"}, "--device sim"},
	} {
		_, err := runCLI(t, append([]string{"bench", "decode", "--device", "cpu"}, tc.args...)...)
		require.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
}

// TestMaxModelLen: --max-model-len lowers the context every command loads
// the model with, and is refused negative or above the model's.
func TestMaxModelLen(t *testing.T) {
	_, err := runCLI(t, "generate", "--device", "cpu", "--max-model-len", "8", "--prompt", "Once upon a time", "-n", "4")
	require.ErrorContains(t, err, "exceeds the model's context of 8 tokens")
	_, err = runCLI(t, "bench", "decode", "--device", "cpu", "--max-model-len", "64", "--tests", "tg64")
	require.ErrorContains(t, err, "test tg64 needs 65 positions; the model's context is 64")
	_, err = runCLI(t, "generate", "--device", "cpu", "--max-model-len", "-1")
	require.ErrorContains(t, err, "--max-model-len -1")
	_, err = runCLI(t, "generate", "--device", "cpu", "--max-model-len", "4096")
	require.ErrorContains(t, err, "outside [0, 2048]")
}
