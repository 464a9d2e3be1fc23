package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/sampling"
)

// generateOptions are the flags of `turnstile generate`.
type generateOptions struct {
	// engineFlags: --model, --device, --cascade-min-blocks,
	// --kv-cache-dtype and --workers; generate sizes its KV cache to the one
	// sequence, so it has no --gpu-memory-fraction. commandFlags: --seed
	// (the sampling seed).
	engineFlags
	commandFlags
	prompt      string
	n           int
	temperature float32
	topP        float32
	topK        int
}

// The engine and command flags generate registers.
const (
	generateEngineFlags  = flagModel | flagDevice | flagCascade | flagKVDtype | flagWorkers
	generateCommandFlags = flagSeed
)

func newGenerateCmd() *cobra.Command {
	o := generateOptions{engineFlags: defaultEngineFlags(), commandFlags: defaultCommandFlags(), n: 64, topP: 1}
	cmd := &cobra.Command{
		Use:   "generate --prompt TEXT [-n N]",
		Short: "Generate text from a prompt and report tokens/s",
		Long: "generate loads a llama GGUF model and runs one request through the engine on the CPU or CUDA\n" +
			"runner (--device): prefill, then decode until -n tokens or end of sequence. It prints the prompt\n" +
			"and the generated text, and reports prefill and decode throughput separately on stderr.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.parsed(cmd.Flags())
			if err := o.validate(); err != nil {
				return err
			}
			return runGenerate(cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	f := cmd.Flags()
	o.engineFlags.register(f, generateEngineFlags)
	o.commandFlags.register(f, generateCommandFlags)
	f.StringVar(&o.prompt, "prompt", o.prompt, "prompt text (empty: start from BOS)")
	f.IntVarP(&o.n, "n", "n", o.n, "tokens to generate (≥ 1)")
	f.Float32Var(&o.temperature, "temperature", o.temperature, "sampling temperature (0: greedy)")
	f.Float32Var(&o.topP, "top-p", o.topP, "nucleus sampling mass in (0, 1] (1: off)")
	f.IntVar(&o.topK, "top-k", o.topK, "keep the K most likely tokens (0: off)")
	return cmd
}

// params converts the sampling flags.
func (o generateOptions) params() sampling.Params {
	p := sampling.DefaultParams()
	p.Temperature, p.TopP, p.TopK = o.temperature, o.topP, o.topK
	p.Seed, p.HasSeed = o.seed, true
	return p
}

// validate checks every flag that does not need the model, naming the
// offending value.
func (o generateOptions) validate() error {
	if err := o.engineFlags.validate("generate"); err != nil {
		return err
	}
	if _, err := o.selectDevice("generate"); err != nil {
		return err
	}
	switch {
	case o.n < 1:
		return fmt.Errorf("generate: -n %d: must be ≥ 1", o.n)
	case !(o.temperature >= 0) || math.IsInf(float64(o.temperature), 0):
		return fmt.Errorf("generate: --temperature %g: must be a finite number ≥ 0", o.temperature)
	case !(o.topP > 0 && o.topP <= 1):
		return fmt.Errorf("generate: --top-p %g: must be in (0, 1]", o.topP)
	case o.topK < 0:
		return fmt.Errorf("generate: --top-k %d: must be ≥ 0", o.topK)
	}
	p := o.params()
	// Vocabulary-independent checks; the vocabulary is checked after loading.
	if err := p.Validate(math.MaxInt32); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	return nil
}

// runGenerate loads the model, builds a deployment of one engine of one
// seat on the runner of the selected device (buildDeployment), submits the
// prompt and drains its stream. When --device auto chose, one line on
// errOut says which and why.
func runGenerate(out, errOut io.Writer, o generateOptions) error {
	sel, err := o.selectDevice("generate")
	if err != nil {
		return err
	}
	device, note, err := o.dev.resolve("generate", sel)
	if err != nil {
		return err
	}
	if note != "" {
		if _, err := fmt.Fprintf(errOut, "device: %s: %s\n", device, note); err != nil {
			return err
		}
	}
	m, err := model.LoadLlama(o.model, o.llamaOptions(device.Backend))
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	defer m.Close()
	tok := m.Tokenizer()
	prompt := tok.Encode(o.prompt, tok.AddBOS())
	if len(prompt) == 0 {
		return fmt.Errorf("generate: the prompt %q encodes to no tokens and the vocabulary has no BOS", o.prompt)
	}
	total := len(prompt) + o.n
	if total > m.MaxContext() {
		return fmt.Errorf("generate: prompt of %d tokens + -n %d = %d exceeds the model's context of %d tokens",
			len(prompt), o.n, total, m.MaxContext())
	}
	p := o.params()
	if err := p.Validate(m.Config().Vocab); err != nil {
		return fmt.Errorf("generate: %w", err)
	}

	// One sequence: one batch row, no overlap, a KV cache of its length.
	cfg := o.executorConfig()
	cfg.MaxBatchSize, cfg.Overlap = 1, false
	cfg.MaxNumBatchedTokens = min(len(prompt), cfg.MaxNumBatchedTokens)
	kvType, err := o.kvType(device.Backend)
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	d, err := buildDeployment(deploymentSpec{command: "generate", model: m, device: device, engine: cfg, dp: 1,
		runner: runnerSizes{kvBlocks: (total + cfg.BlockSize - 1) / cfg.BlockSize, workers: o.workers, kvType: kvType}})
	if err != nil {
		return err
	}
	defer d.Close()
	eng := d.front
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	loop := make(chan error, 1)
	go func() { loop <- eng.Run(ctx) }()

	if _, err := io.WriteString(out, o.prompt); err != nil {
		return err
	}
	t0 := time.Now()
	text, err := eng.Submit(ctx, &executor.Request{PromptTokens: prompt, MaxTokens: o.n, Params: p,
		// Every stop token of the model ends the text (EOS, <|eot_id|>, generation_config.json).
		StopTokenIDs: m.StopIDs()})
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	var t1 time.Time // the first token: prefill done
	var usage executor.Usage
	for {
		d, err := text.Recv(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("generate: %w", err)
		}
		if t1.IsZero() && len(d.TokenIDs) > 0 {
			t1 = time.Now()
		}
		if _, err := io.WriteString(out, d.Text); err != nil {
			return err
		}
		if d.FinishReason != executor.FinishNone {
			usage = d.Usage
		}
	}
	t2 := time.Now()
	stop()
	if err := <-loop; err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("generate: %w", err)
	}
	if err := eng.Check(); err != nil {
		return fmt.Errorf("generate: after the request: %w", err)
	}
	if _, err := fmt.Fprintln(out); err != nil {
		return err
	}
	if t1.IsZero() {
		t1 = t2
	}
	// The first token comes from the prefill step; every later one
	// (a stop token included) from a decode step.
	steps := max(usage.Completion-1, 0)
	prefill, decode := t1.Sub(t0), t2.Sub(t1)
	_, err = fmt.Fprintf(errOut, "prefill: %d tokens in %v (%.0f tok/s); decode: %d tokens in %v (%.0f tok/s)\n",
		usage.Prompt, prefill.Round(time.Microsecond), rate(usage.Prompt, prefill),
		steps, decode.Round(time.Microsecond), rate(steps, decode))
	return err
}

// rate is n per second over d, 0 when d is 0.
func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
