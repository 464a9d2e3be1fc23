package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGenerateFlagErrors(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"zero n", []string{"generate", "-n", "0"}, "generate: -n 0: must be ≥ 1"},
		{"negative n", []string{"generate", "-n", "-3"}, "generate: -n -3: must be ≥ 1"},
		{"negative temperature", []string{"generate", "--temperature", "-0.5"}, "generate: --temperature -0.5: must be a finite number ≥ 0"},
		{"NaN temperature", []string{"generate", "--temperature", "NaN"}, "generate: --temperature NaN"},
		{"zero top-p", []string{"generate", "--top-p", "0"}, "generate: --top-p 0: must be in (0, 1]"},
		{"top-p above one", []string{"generate", "--top-p", "1.5"}, "generate: --top-p 1.5: must be in (0, 1]"},
		{"negative top-k", []string{"generate", "--top-k", "-2"}, "generate: --top-k -2: must be ≥ 0"},
		{"negative workers", []string{"generate", "--workers", "-1"}, "generate: --workers -1: must be >= 0"},
		{"missing model", []string{"generate", "--model", "/no/such/model.gguf"}, "/no/such/model.gguf"},
		{"too long", []string{"generate", "-n", "4000"}, "-n 4000 = 4001 exceeds the model's context of 2048 tokens"},
		{"extra argument", []string{"generate", "extra"}, `unknown command "extra" for "turnstile generate"`},
		{"not a number", []string{"generate", "-n", "many"}, `invalid argument "many" for "-n, --n" flag`},
		{"bad device", []string{"generate", "--device", "metal"}, `generate: --device "metal": want auto, cpu, cuda or cuda:N`},
		{"no fraction flag", []string{"generate", "--gpu-memory-fraction", "0.5"}, "unknown flag: --gpu-memory-fraction"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runCLI(t, tc.args...)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestGenerateGreedy(t *testing.T) {
	out, err := runCLI(t, "generate", "--device", "cpu", "-n", "30")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, "Once upon a time, there was a little girl named Lily."), "output %q", out)
	require.Regexp(t, regexp.MustCompile(`prefill: 1 tokens in .* tok/s\); decode: 29 tokens in .* tok/s\)`), out)
}

func TestGenerateSampledWithPrompt(t *testing.T) {
	args := []string{"generate", "--device", "cpu", "--prompt", "Tom had a big red ball", "-n", "20", "--temperature", "0.9", "--top-k", "40", "--top-p", "0.95", "--seed", "5"}
	a, err := runCLI(t, args...)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(a, "Tom had a big red ball"), "output %q", a)
	b, err := runCLI(t, args...)
	require.NoError(t, err)
	strip := func(s string) string { return s[:strings.Index(s, "prefill:")] }
	require.Equal(t, strip(a), strip(b), "the same seed must give the same text")
	require.Greater(t, len(strip(a)), len("Tom had a big red ball")+5)
}
