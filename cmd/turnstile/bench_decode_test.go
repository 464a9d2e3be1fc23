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
