package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/turnstile-llm/turnstile/bench/decode"
	"github.com/turnstile-llm/turnstile/model"
)

// benchDecodeOptions are the flags of `turnstile bench decode`.
type benchDecodeOptions struct {
	// engineFlags: --model, --device, --workers, --block-size and
	// --kv-cache-dtype; commandFlags: --out.
	engineFlags
	commandFlags
	tests         []string
	batchedPrompt int
	rounds        int
}

// The engine and command flags bench decode registers.
const (
	benchDecodeEngineFlags  = flagModel | flagDevice | flagWorkers | flagBlockSize | flagKVDtype
	benchDecodeCommandFlags = flagOut
)

// benchDecodeCSV is the result file's name inside --out.
const benchDecodeCSV = "decode.csv"

func newBenchDecodeCmd() *cobra.Command {
	o := benchDecodeOptions{engineFlags: defaultEngineFlags(), commandFlags: defaultCommandFlags(), tests: []string{"pp512", "tg128", "tg128@d512", "tg128x8", "tg128x32"},
		batchedPrompt: 128, rounds: 3}
	cmd := &cobra.Command{
		Use:   "decode [--model FILE.gguf] [--tests pp512,tg128,...]",
		Short: "Prefill and decode throughput of the runner, as llama-bench and llama-batched-bench measure it",
		Long: "bench decode drives the runner directly (no engine, no server) and reports tokens/s with the\n" +
			"definitions of llama.cpp's llama-bench and llama-batched-bench, so the two can be compared on\n" +
			"the same GGUF file: ppN prefills one N-token prompt in one step; tgN decodes N tokens of one\n" +
			"sequence from an empty cache, tgN@dD after an untimed D-token prompt; tgNxB decodes B sequences\n" +
			"together for N steps after an untimed --batched-prompt-token prompt each (S_TG, all sequences'\n" +
			"tokens over the time). Each test runs once untimed (warm-up), then --rounds times, tests\n" +
			"interleaved round by round; the median is printed, every round goes to --out DIR/decode.csv.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.parsed(cmd.Flags())
			return runBenchDecode(cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	o.engineFlags.register(f, benchDecodeEngineFlags)
	o.commandFlags.register(f, benchDecodeCommandFlags)
	f.StringSliceVar(&o.tests, "tests", o.tests, "tests to run: ppN, tgN, tgN@dD, tgNxB")
	f.IntVar(&o.batchedPrompt, "batched-prompt", o.batchedPrompt, "prompt tokens per sequence before a tgNxB test (llama-batched-bench's npp)")
	f.IntVar(&o.rounds, "rounds", o.rounds, "timed runs of each test (≥ 1); the median is reported")
	return cmd
}

func runBenchDecode(out io.Writer, o benchDecodeOptions) error {
	const command = "bench decode"
	if err := o.engineFlags.validate(command); err != nil {
		return err
	}
	if o.rounds < 1 {
		return fmt.Errorf("%s: --rounds %d: must be ≥ 1", command, o.rounds)
	}
	if o.batchedPrompt < 1 {
		return fmt.Errorf("%s: --batched-prompt %d: must be ≥ 1", command, o.batchedPrompt)
	}
	if len(o.tests) == 0 {
		return fmt.Errorf("%s: --tests is empty", command)
	}
	tests := make([]decode.Test, len(o.tests))
	for i, name := range o.tests {
		t, err := decode.Parse(strings.TrimSpace(name), o.batchedPrompt)
		if err != nil {
			return fmt.Errorf("%s: --tests: %w", command, err)
		}
		tests[i] = t
	}
	sel, err := o.selectDevice(command)
	if err != nil {
		return err
	}
	device, note, err := o.dev.resolve(command, sel)
	if err != nil {
		return err
	}
	m, err := model.LoadLlama(o.model, o.llamaOptions(device.Backend))
	if err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	defer m.Close()
	seats, blocks, budget := decode.Sizes(tests, o.blockSize)
	for _, t := range tests {
		if n := max(t.Prompt, 1) + t.Gen; n > m.MaxContext() {
			return fmt.Errorf("%s: test %s needs %d positions; the model's context is %d", command, t.Name, n, m.MaxContext())
		}
	}
	kvType, err := o.kvType(device.Backend)
	if err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	r, _, err := newRunner(command, device, m, runnerSizes{seats: seats, kvBlocks: blocks, blockSize: o.blockSize,
		maxBatchTokens: budget, workers: o.workers, kvType: kvType})
	if err != nil {
		return err
	}
	defer r.Close()
	header := fmt.Sprintf("# bench decode: %s, %s", filepath.Base(o.model), device)
	if note != "" {
		header += " (" + note + ")"
	}
	if _, err := fmt.Fprintf(out, "%s, %d rounds, block size %d\n", header, o.rounds, o.blockSize); err != nil {
		return err
	}
	results := make([][]decode.Result, len(tests))
	for round := -1; round < o.rounds; round++ { // round -1: warm-up
		for i, t := range tests {
			res, err := decode.Run(r, t, time.Now)
			if err != nil {
				return fmt.Errorf("%s: %w", command, err)
			}
			if round >= 0 {
				results[i] = append(results[i], res)
			}
		}
	}
	if _, err := fmt.Fprintf(out, "%-14s %12s %12s %12s\n", "test", "tok/s", "min", "max"); err != nil {
		return err
	}
	for i, t := range tests {
		med, err := decode.Median(results[i])
		if err != nil {
			return err
		}
		lo, hi := results[i][0].TokensPerSecond(), results[i][0].TokensPerSecond()
		for _, r := range results[i] {
			lo, hi = min(lo, r.TokensPerSecond()), max(hi, r.TokensPerSecond())
		}
		if _, err := fmt.Fprintf(out, "%-14s %12.2f %12.2f %12.2f\n", t.Name, med, lo, hi); err != nil {
			return err
		}
	}
	if o.out == "" {
		return nil
	}
	return writeDecodeCSV(filepath.Join(o.out, benchDecodeCSV), results)
}

// writeDecodeCSV writes every timed round: test, round, tokens, seconds,
// tokens/s.
func writeDecodeCSV(path string, results [][]decode.Result) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("bench decode: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench decode: %w", err)
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"test", "round", "tokens", "seconds", "tokens_per_second"})
	for _, rs := range results {
		for round, r := range rs {
			_ = w.Write([]string{r.Test.Name, strconv.Itoa(round), strconv.Itoa(r.Tokens),
				strconv.FormatFloat(r.Elapsed.Seconds(), 'f', 6, 64), strconv.FormatFloat(r.TokensPerSecond(), 'f', 3, 64)})
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		_ = f.Close()
		return fmt.Errorf("bench decode: writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bench decode: %w", err)
	}
	return nil
}
