package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBenchServeFlagErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"clients 0", []string{"--clients", "1,0"}, "bench serve: --clients 0: must be in [1, 4096]"},
		{"clients huge", []string{"--clients", "5000"}, "bench serve: --clients 5000"},
		{"clients not a number", []string{"--clients", "x"}, `"x"`},
		{"clients empty", []string{"--clients", ""}, `invalid argument "" for "--clients" flag`},
		{"duration", []string{"--duration", "0s"}, "bench serve: --duration 0s: must be > 0"},
		{"warmup", []string{"--warmup", "-1s"}, "bench serve: --warmup -1s: must be >= 0"},
		{"max tokens", []string{"--max-tokens", "0"}, "bench serve: --max-tokens 0: must be >= 1"},
		{"max requests", []string{"--max-requests", "-2"}, "bench serve: --max-requests -2"},
		{"batch", []string{"--max-batch-size", "0"}, "bench serve: --max-batch-size 0"},
		{"kv", []string{"--kv-cache-tokens", "-1"}, "bench serve: --kv-cache-tokens -1"},
		{"workers", []string{"--workers", "-1"}, "bench serve: --workers -1"},
		{"timeout", []string{"--request-timeout", "0s"}, "bench serve: --request-timeout 0s"},
		{"url without scheme", []string{"--url", "localhost:8080"}, `bench serve: --url "localhost:8080": must start with http:// or https://`},
		{"dp 0", []string{"--dp", "0"}, "serve: --dp 0: must be in [1, 64]"},
		{"model", []string{"--model", ""}, "bench serve: --model is empty"},
		{"missing model", []string{"--model", "/no/such.gguf"}, "/no/such.gguf"},
		{"out is a file", []string{"--out", filepath.Join(file, "sub")}, "bench serve: --out"},
		{"kv below context", []string{"--kv-cache-tokens", "100"}, "bench serve: --kv-cache-tokens 112 is less than the model context"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runCLI(t, append([]string{"bench", "serve", "--duration", "1s"}, tc.args...)...)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// TestBenchServeRuns: two short levels on stories260K print the table,
// write the JSON report and fail nothing.
func TestBenchServeRuns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	out, err := runCLI(t, "bench", "serve", "--duration", "1s", "--clients", "1,2", "--warmup", "200ms",
		"--max-tokens", "16", "--workers", "1", "--out", dir)
	require.NoError(t, err, out)
	require.Contains(t, out, "seats        16 = max-batch-size 8")
	require.Regexp(t, `clients +requests +req/s +out tok/s +TTFT p50 ms +TTFT p99 ms +errors +RSS before MiB +RSS after MiB`, out)
	require.Regexp(t, `(?m)^ +1 +[1-9][0-9]* .* 0 +[0-9.]+ +[0-9.]+$`, out)
	require.Regexp(t, `(?m)^ +2 +[1-9][0-9]* .* 0 +[0-9.]+ +[0-9.]+$`, out)
	require.Contains(t, out, "warm-up: 2 clients")

	b, err := os.ReadFile(filepath.Join(dir, benchServeFile))
	require.NoError(t, err)
	var rep benchServeReport
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Equal(t, 16, rep.MaxTokens)
	require.NotNil(t, rep.Warmup)
	require.Len(t, rep.Levels, 2)
	for i, l := range rep.Levels {
		require.Equal(t, []int{1, 2}[i], l.Clients)
		require.Positive(t, l.Successes)
		require.Zero(t, l.Errors)
		require.Equal(t, int64(16*l.Successes), l.OutputTokens)
		require.Positive(t, l.TTFTP50)
		require.Positive(t, l.RSSBeforeMiB)
		require.Positive(t, l.RSSAfterMiB)
	}
}

// TestBenchServeFailsOnErrors: requests the server refuses (max_tokens
// beyond the context) make the command fail with the server's message,
// after printing the table.
func TestBenchServeFailsOnErrors(t *testing.T) {
	out, err := runCLI(t, "bench", "serve", "--duration", "1s", "--clients", "2", "--warmup", "0s",
		"--max-tokens", "5000", "--max-requests", "4", "--workers", "1")
	require.ErrorContains(t, err, "bench serve: 4 of 4 requests failed at --clients 2 (first: status 400")
	require.ErrorContains(t, err, "max_tokens")
	require.Regexp(t, `(?m)^ +2 +4 +0\.0 .* 4 +[0-9.]+ +[0-9.]+$`, out)
}
