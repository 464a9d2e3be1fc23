package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/seatpool"
)

func TestPoolsFlagErrors(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no --demo", []string{"pools"}, "pools: nothing to show without --demo"},
		{"extra argument", []string{"pools", "--demo", "extra"}, `unknown command "extra" for "turnstile pools"`},
		{"zero sequences", []string{"pools", "--demo", "--sequences", "0"}, "pools: --sequences 0: must be in 1..4096"},
		{"too many sequences", []string{"pools", "--demo", "--sequences", "5000"}, "pools: --sequences 5000: must be in 1..4096"},
		{"one token", []string{"pools", "--demo", "--tokens", "1"}, "pools: --tokens 1: must be > 1"},
		{"negative tokens", []string{"pools", "--demo", "--tokens", "-7"}, "pools: --tokens -7: must be > 1"},
		{"block size not a power of two", []string{"pools", "--demo", "--block-size", "24"}, "pools: --block-size 24: must be a power of two in 1..256"},
		{"block size too large", []string{"pools", "--demo", "--block-size", "512"}, "pools: --block-size 512: must be a power of two in 1..256"},
		{"zero block size", []string{"pools", "--demo", "--block-size", "0"}, "pools: --block-size 0: must be a power of two in 1..256"},
		{"zero batch", []string{"pools", "--demo", "--max-batch-size", "0"}, "pools: --max-batch-size 0: must be in 1..4096"},
		{"pool too large", []string{"pools", "--demo", "--sequences", "4096", "--tokens", "100000"},
			"pools: --sequences 4096 × --tokens 100000 at --block-size 16 needs more than 1048576 KV blocks"},
		{"not a number", []string{"pools", "--demo", "--tokens", "many"}, `invalid argument "many" for "--tokens" flag`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runCLI(t, tc.args...)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestSimulateTeardown(t *testing.T) {
	on := seatpool.Sizing{MaxBatchSize: 4, Overlap: true, DeferredTeardown: true}
	tests := []struct {
		name string
		sc   seatScenario
		want teardownResult
	}{
		{"overlap off", seatScenario{sizing: seatpool.Sizing{MaxBatchSize: 4, DeferredTeardown: true}},
			teardownResult{seats: 4, headroom: 0, admitted: 4, live: 4, retiring: 0, free: 0}},
		{"overlap on, immediate teardown", seatScenario{sizing: seatpool.Sizing{MaxBatchSize: 4, Overlap: true}},
			teardownResult{seats: 4, headroom: 0, admitted: 4, live: 4, retiring: 0, free: 0}},
		{"overlap on, deferred teardown", seatScenario{sizing: on},
			teardownResult{seats: 8, headroom: 4, admitted: 4, live: 4, retiring: 4, free: 0}},
		{"no headroom starves step n+1", seatScenario{sizing: on, noHeadroom: true},
			teardownResult{seats: 4, headroom: 0, admitted: 0, live: 0, retiring: 4, free: 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := simulateTeardown(tc.sc)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	_, err := simulateTeardown(seatScenario{sizing: seatpool.Sizing{MaxBatchSize: 0}})
	require.EqualError(t, err, "seatpool: max batch size 0: must be > 0")
}

func TestMeasureSharing(t *testing.T) {
	tests := []struct {
		name  string
		o     poolsOptions
		ratio float64
		want  sharingRow
	}{
		{"no sharing", poolsOptions{sequences: 4, tokens: 64, blockSize: 16, maxBatchSize: 1}, 0,
			sharingRow{ratio: 0, prefixTokens: 0, hitTokens: 0, sum: 16, distinct: 16,
				chargeA: 4 * (64 + 100), chargeB: 16*16 + 4*512}},
		// 32 shared tokens = 2 full blocks; 3 later sequences hit them.
		{"half shared", poolsOptions{sequences: 4, tokens: 64, blockSize: 16, maxBatchSize: 1}, 0.5,
			sharingRow{ratio: 0.5, prefixTokens: 32, hitTokens: 3 * 32, sum: 16, distinct: 4 + 3*2,
				chargeA: 4 * (64 + 100), chargeB: 10*16 + 4*512}},
		// 58 shared tokens: 3 full blocks; the 4th holds 10 shared + 6 own tokens.
		{"0.9 shared, partial block", poolsOptions{sequences: 3, tokens: 64, blockSize: 16, maxBatchSize: 1}, 0.9,
			sharingRow{ratio: 0.9, prefixTokens: 58, hitTokens: 2 * 48, sum: 12, distinct: 4 + 2*1,
				chargeA: 3 * (64 + 100), chargeB: 6*16 + 3*512}},
		// Tokens not a multiple of the block size: 5 blocks each, 2 shared.
		{"ragged tail", poolsOptions{sequences: 2, tokens: 70, blockSize: 16, maxBatchSize: 1}, 0.5,
			sharingRow{ratio: 0.5, prefixTokens: 35, hitTokens: 32, sum: 10, distinct: 5 + 3,
				chargeA: 2 * (70 + 100), chargeB: 8*16 + 2*512}},
		{"one sequence", poolsOptions{sequences: 1, tokens: 16, blockSize: 1, maxBatchSize: 1}, 0.9,
			sharingRow{ratio: 0.9, prefixTokens: 14, hitTokens: 0, sum: 16, distinct: 16,
				chargeA: 16 + 100, chargeB: 16 + 512}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.o.validate())
			got, err := measureSharing(tc.o, tc.ratio)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// tableRow returns the whitespace-separated fields of the output line whose
// first field is first.
func tableRow(t *testing.T, out, first string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == first {
			return f
		}
	}
	t.Fatalf("no line starting with %q in:\n%s", first, out)
	return nil
}

func TestPoolsDemoOutput(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		contains []string
		// sharing rows by share: Σ per-seq blocks, distinct, saved
		rows map[string][3]int
	}{
		{"defaults", []string{"pools", "--demo"}, []string{
			"Seat sizing (max batch size 8)",
			"seat pool has 16 seats but sampler state holds 8: seats 8..15 would index past it",
			"seat pool has 16 seats but block-table rows holds 17: 1 admitted sequence would have no seat",
			"KV prefix sharing (32 sequences × 2048 tokens, block size 16; measured in kvpool)",
		}, map[string][3]int{
			"0.0": {4096, 4096, 0},
			"0.5": {4096, 128 + 31*64, 31 * 64},
			"0.9": {4096, 128 + 31*13, 31 * 115},
		}},
		{"small", []string{"pools", "--demo", "--sequences", "4", "--tokens", "64", "--block-size", "16", "--max-batch-size", "2"}, []string{
			"Seat sizing (max batch size 2)",
			"seat pool has 4 seats but sampler state holds 2: seats 2..3 would index past it",
			"seat pool has 4 seats but block-table rows holds 5: 1 admitted sequence would have no seat",
		}, map[string][3]int{
			"0.0": {16, 16, 0},
			"0.5": {16, 10, 6},
			"0.9": {16, 7, 9}, // 58 shared tokens: 3 full blocks, shared by all 4
		}},
		{"batch of one", []string{"pools", "--demo", "--sequences", "2", "--tokens", "8", "--block-size", "4", "--max-batch-size", "1"}, []string{
			"seat pool has 2 seats but sampler state holds 1: seat 1 would index past it",
		}, map[string][3]int{
			"0.0": {4, 4, 0},
			"0.5": {4, 3, 1},
			"0.9": {4, 3, 1},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runCLI(t, tc.args...)
			require.NoError(t, err)
			for _, want := range tc.contains {
				require.Contains(t, out, want)
			}
			require.Contains(t, out, "every consumer sized from seatpool.Seats:\n    ok\n")
			// The bug row: with no headroom, step n+1 admits nothing.
			bug := tableRow(t, out, "same,")
			require.Equal(t, []string{"0", "of"}, bug[9:11], "bug row %v", bug)
			for share, want := range tc.rows {
				f := tableRow(t, out, share)
				require.Len(t, f, 10, "row %v", f)
				got := [3]int{atoi(t, f[3]), atoi(t, f[4]), atoi(t, f[5])}
				require.Equal(t, want, got, "share %s", share)
			}
		})
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}
