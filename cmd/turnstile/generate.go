package main

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/turnstile-llm/turnstile/cuda"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/step"
)

// generateBlockSize is the KV block size of the one sequence generate runs,
// in tokens.
const generateBlockSize = 16

// generateMaxChunk is the most prompt tokens one prefill step computes.
const generateMaxChunk = 512

// generateOptions are the flags of `turnstile generate`.
type generateOptions struct {
	model       string
	prompt      string
	n           int
	temperature float32
	topP        float32
	topK        int
	seed        uint64
	workers     int
	// dev is --device; generate sizes its KV cache to the one sequence,
	// so it has no --gpu-memory-fraction.
	dev deviceOptions
}

func newGenerateCmd() *cobra.Command {
	o := generateOptions{}
	cmd := &cobra.Command{
		Use:   "generate --prompt TEXT [-n N]",
		Short: "Generate text from a prompt and report tokens/s",
		Long: "generate loads a llama GGUF model, runs one sequence through the CPU or CUDA runner (--device)\n" +
			"(prefill, then decode until -n tokens or end of sequence), prints the prompt and\n" +
			"the generated text, and reports prefill and decode throughput separately on stderr.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return runGenerate(cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.model, "model", defaultModelPath(), "GGUF model file (llama architecture)")
	f.StringVar(&o.prompt, "prompt", "", "prompt text (empty: start from BOS)")
	f.IntVarP(&o.n, "n", "n", 64, "tokens to generate (≥ 1)")
	f.Float32Var(&o.temperature, "temperature", 0, "sampling temperature (0: greedy)")
	f.Float32Var(&o.topP, "top-p", 1, "nucleus sampling mass in (0, 1] (1: off)")
	f.IntVar(&o.topK, "top-k", 0, "keep the K most likely tokens (0: off)")
	f.Uint64Var(&o.seed, "seed", 0, "sampling seed")
	f.IntVar(&o.workers, "workers", 0, "cores the CPU kernels use (0: GOMAXPROCS)")
	o.dev.addDeviceFlag(cmd)
	return cmd
}

// defaultModelPath is the stories260K test model when it can be found from
// the working directory, else its path relative to the repository.
func defaultModelPath() string {
	if p, err := gguf.TestModelPath(); err == nil {
		return p
	}
	return gguf.TestModelFile
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
	if _, err := o.selection(); err != nil {
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
	case o.workers < 0:
		return fmt.Errorf("generate: --workers %d: must be ≥ 0", o.workers)
	case o.model == "":
		return fmt.Errorf("generate: --model is empty")
	}
	p := o.params()
	// Vocabulary-independent checks; the vocabulary is checked after loading.
	if err := p.Validate(math.MaxInt32); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	return nil
}

// selection is --device parsed.
func (o generateOptions) selection() (cuda.Selection, error) {
	d := o.dev
	d.gpuFraction = defaultGPUMemoryFraction // not a generate flag; only checked
	return d.validate("generate", false)
}

// runGenerate loads the model and drives one sequence through the runner of
// the selected device directly, with its own block table (blocks 0, 1, ...
// in order). When --device auto chose, one line on errOut says which and why.
func runGenerate(out, errOut io.Writer, o generateOptions) error {
	sel, err := o.selection()
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
	m, err := model.LoadLlama(o.model, model.LlamaOptions{})
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
	chunk := min(len(prompt), generateMaxChunk)
	blocks := (total + generateBlockSize - 1) / generateBlockSize
	r, _, err := newRunner("generate", device, m, runnerSizes{seats: 1, kvBlocks: blocks, blockSize: generateBlockSize,
		maxBatchTokens: chunk, workers: o.workers})
	if err != nil {
		return err
	}
	defer r.Close()
	table := make([]int32, blocks)
	for i := range table {
		table[i] = int32(i)
	}

	if _, err := io.WriteString(out, o.prompt); err != nil {
		return err
	}
	var b step.Batch
	var res step.Output
	t0 := time.Now()
	// Prefill in chunks; only the last samples.
	for at := 0; at < len(prompt); at += chunk {
		end := min(at+chunk, len(prompt))
		b.Reset()
		for i := at; i < end; i++ {
			b.Tokens = append(b.Tokens, prompt[i])
			b.Positions = append(b.Positions, int32(i))
		}
		b.Seqs = append(b.Seqs, step.SeqBatch{
			NumTokens: int32(end - at), ContextLen: int32(end), BlockTable: table,
			Sample: end == len(prompt), Start: at == 0, Params: &p, History: prompt,
		})
		if err := r.Execute(&b, &res); err != nil {
			return fmt.Errorf("generate: prefill tokens [%d, %d): %w", at, end, err)
		}
	}
	prefill := time.Since(t0)

	dec := tok.NewContinuation()
	if len(prompt) == 1 && prompt[0] == tok.BOS() {
		dec = tok.NewDecoder() // text starts here: drop the space prefix
	}
	generated, steps := 0, 0 // tokens printed, decode steps run
	next := res.Tokens[0]
	t1 := time.Now()
	for {
		if next == tok.EOS() {
			break
		}
		generated++
		if _, err := io.WriteString(out, dec.Add(next)); err != nil {
			return err
		}
		if generated == o.n {
			break
		}
		ctx := int32(len(prompt) + generated)
		b.Reset()
		b.Tokens = append(b.Tokens, step.FutureToken)
		b.Positions = append(b.Positions, ctx-1)
		b.Seqs = append(b.Seqs, step.SeqBatch{NumTokens: 1, ContextLen: ctx, BlockTable: table, Sample: true})
		if err := r.Execute(&b, &res); err != nil {
			return fmt.Errorf("generate: decode at position %d: %w", ctx-1, err)
		}
		steps++
		next = res.Tokens[0]
	}
	decode := time.Since(t1)
	if _, err := fmt.Fprintln(out, dec.Flush()); err != nil {
		return err
	}
	_, err = fmt.Fprintf(errOut, "prefill: %d tokens in %v (%.0f tok/s); decode: %d tokens in %v (%.0f tok/s)\n",
		len(prompt), prefill.Round(time.Microsecond), rate(len(prompt), prefill),
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
