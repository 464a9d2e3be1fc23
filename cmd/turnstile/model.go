package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"

	"github.com/spf13/cobra"

	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/model/tokenizer"
)

func newModelCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "model",
		Short: "Inspect GGUF model files and synthesize test models",
	}
	cmd.AddCommand(newModelInspectCmd(), newModelSynthCmd())
	return cmd
}

func newModelInspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect FILE",
		Short: "Print a GGUF file's metadata, tensors, parameter count and size",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := gguf.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			return inspect(cmd.OutOrStdout(), args[0], f)
		},
	}
}

// arraySummaryLen is how many array elements inspect prints.
const arraySummaryLen = 4

func formatValue(v gguf.Value) string {
	switch x := v.V.(type) {
	case string:
		return fmt.Sprintf("%q", x)
	case []string:
		parts := make([]string, 0, arraySummaryLen)
		for i := 0; i < len(x) && i < arraySummaryLen; i++ {
			parts = append(parts, fmt.Sprintf("%q", x[i]))
		}
		return summarize(parts, len(x))
	case []gguf.Value:
		return fmt.Sprintf("[%d arrays]", len(x))
	}
	if v.Type == gguf.ValArray {
		// Numeric arrays: print the head of fmt's rendering.
		s := strings.Fields(strings.Trim(fmt.Sprint(v.V), "[]"))
		return summarize(s[:min(len(s), arraySummaryLen)], v.Len())
	}
	return fmt.Sprint(v.V)
}

func summarize(head []string, n int) string {
	s := "[" + strings.Join(head, " ")
	if n > len(head) {
		s += fmt.Sprintf(" ... (%d total)", n)
	}
	return s + "]"
}

func inspect(w io.Writer, path string, f *gguf.File) error {
	var b strings.Builder
	fmt.Fprintf(&b, "file %s: GGUF v%d, %d bytes, alignment %d, %d metadata keys, %d tensors\n",
		path, f.Version, f.Size, f.Alignment, len(f.Metadata), len(f.Tensors))
	b.WriteString("metadata:\n")
	for _, kv := range f.Metadata {
		fmt.Fprintf(&b, "  %-40s %-14s %s\n", kv.Key, kv.Value.TypeName(), formatValue(kv.Value))
	}
	fmt.Fprintf(&b, "tensors:\n  %-28s %-5s %-14s %10s\n", "name", "type", "shape", "bytes")
	var total uint64
	for i := range f.Tensors {
		t := &f.Tensors[i]
		total += uint64(len(t.Data))
		fmt.Fprintf(&b, "  %-28s %-5s %-14s %10d\n", t.Name, t.Type, t.Shape(), len(t.Data))
	}
	fmt.Fprintf(&b, "parameters: %d\ntensor bytes: %d\n", f.Params(), total)
	if c, err := f.LlamaConfig(); err == nil {
		fmt.Fprintf(&b, "llama: dim %d, layers %d, heads %d, kv heads %d, head dim %d, ffn %d, vocab %d, context %d, rms eps %g, rope theta %g, tied output %v\n",
			c.Dim, c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.FFN, c.Vocab, c.ContextLength, c.NormEps, c.RopeTheta, c.TiedOutput)
	} else {
		fmt.Fprintf(&b, "llama: not loadable: %v\n", err)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// parseType reads a --type flag value.
func parseType(s string) (gguf.GGMLType, error) {
	for _, t := range gguf.SupportedTypes {
		if strings.EqualFold(s, t.String()) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("--type %q: want one of %s", s, gguf.SupportedList())
}

func newModelSynthCmd() *cobra.Command {
	var (
		c         gguf.LlamaConfig
		typ       string
		vocabFrom string
		out       string
		format    string
		cf        = defaultCommandFlags() // --seed: the weights' seed
	)
	cmd := &cobra.Command{
		Use:   "synth",
		Short: "Write a llama-shaped GGUF with seeded random weights and another file's tokenizer",
		Long: "synth writes a model of a supported architecture whose weights are drawn from N(0, 0.02²) (norm weights 1; " +
			"qwen3's per-head norms from 1 + N(0, 0.1²), biases from N(0, 0.1²)) " +
			"with the given shape, and copies every tokenizer.* key of --vocab-from; the vocabulary " +
			"size is that tokenizer's. Same flags and seed give the same file.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := parseType(typ)
			if err != nil {
				return err
			}
			if out == "" {
				return errors.New("-o: an output file is required")
			}
			if format != "gguf" && format != "safetensors" {
				return fmt.Errorf("--format %q: want gguf or safetensors", format)
			}
			if vocabFrom == "" {
				return errors.New("--vocab-from: a GGUF file with a tokenizer is required")
			}
			src, err := gguf.Open(vocabFrom)
			if err != nil {
				return fmt.Errorf("--vocab-from: %w", err)
			}
			defer src.Close()
			tok, err := tokenizer.FromGGUF(src)
			if err != nil {
				return fmt.Errorf("--vocab-from %s: %w", vocabFrom, err)
			}
			c.Vocab = tok.VocabSize()
			w, err := gguf.SynthLlama(c, t, rand.New(rand.NewPCG(cf.seed, 0x7475726e)))
			if err != nil {
				return err
			}
			for _, kv := range src.Metadata {
				if strings.HasPrefix(kv.Key, "tokenizer.") {
					w.SetValue(kv.Key, kv.Value)
				}
			}
			if format == "safetensors" {
				// The same weights, through the GGUF in memory, as a Hugging
				// Face directory (Q/K un-permuted; a byte-level tokenizer).
				var buf bytes.Buffer
				if _, err := w.WriteTo(&buf); err != nil {
					return err
				}
				g, err := gguf.Parse(buf.Bytes())
				if err != nil {
					return err
				}
				if err := model.WriteHFDir(out, g, c); err != nil {
					return fmt.Errorf("-o %s: %w", out, err)
				}
				return nil
			}
			return writeFile(out, func(f io.Writer) error {
				_, err := w.WriteTo(f)
				return err
			})
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&c.Dim, "dim", 64, "embedding width")
	fl.IntVar(&c.Layers, "layers", 2, "transformer blocks")
	fl.IntVar(&c.Heads, "heads", 4, "query heads (must divide --dim)")
	fl.IntVar(&c.KVHeads, "kv-heads", 2, "key/value heads (must divide --heads)")
	fl.IntVar(&c.FFN, "ffn", 128, "feed-forward hidden width")
	fl.IntVar(&c.ContextLength, "context", 512, "context length written to llama.context_length")
	fl.BoolVar(&c.TiedOutput, "tied", false, "omit output.weight (logits use token_embd.weight)")
	fl.StringVar(&c.Arch, "arch", "llama", "architecture: "+gguf.ArchNames()+" (qwen3 adds per-head Q/K norms)")
	fl.IntVar(&c.HeadDim, "head-dim", 0, "per-head width (0: dim/heads; otherwise written as key_length and value_length)")
	fl.BoolVar(&c.QKVBias, "qkv-bias", false, "add Q/K/V projection biases (as qwen2 has)")
	fl.Float32Var(&c.RopeTheta, "rope-theta", 10000, "RoPE base (rope.freq_base)")
	fl.StringVar(&c.RopeScaling, "rope-scaling", "none", "RoPE scaling: none or llama3 (written as rope_freqs.weight)")
	fl.Float32Var(&c.RopeScaleFactor, "rope-factor", 8, "llama3 scaling factor")
	fl.Float32Var(&c.RopeLowFreqFactor, "rope-low-freq-factor", 1, "llama3 low_freq_factor")
	fl.Float32Var(&c.RopeHighFreqFactor, "rope-high-freq-factor", 4, "llama3 high_freq_factor")
	fl.IntVar(&c.RopeOrigContext, "rope-original-context", 8192, "llama3 original_max_position_embeddings")
	fl.IntVar(&c.SlidingWindow, "sliding-window", 0, "attention.sliding_window in tokens (0: none)")
	fl.StringVar(&typ, "type", "f32", "weight type: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k or q6_k (norms stay f32; block types need --dim and --ffn multiples of the block size)")
	fl.StringVar(&vocabFrom, "vocab-from", "", "GGUF file whose tokenizer metadata is copied")
	cf.register(fl, flagSeed)
	fl.StringVarP(&out, "output", "o", "", "output GGUF file, or directory with --format safetensors")
	fl.StringVar(&format, "format", "gguf", "gguf (one file) or safetensors (a Hugging Face directory: config.json, model.safetensors, "+
		"a synthetic byte-level tokenizer of the same vocabulary size, ≥ 259 tokens)")
	return cmd
}
