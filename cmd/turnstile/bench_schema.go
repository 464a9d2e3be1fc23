package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/turnstile-llm/turnstile/bench/progress"
	"github.com/turnstile-llm/turnstile/bench/schemabench"
	"github.com/turnstile-llm/turnstile/grammar"
	"github.com/turnstile-llm/turnstile/guided"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/model/tokenizer"
)

// benchSchemaOptions are the flags of `turnstile bench schema`.
type benchSchemaOptions struct {
	schemas    string
	tokenizer  string
	csvDir     string
	limit      int
	whitespace string
}

// benchSchemaCSV is the per-schema file's name inside --csv.
const benchSchemaCSV = "schemas.csv"

func newBenchSchemaCmd() *cobra.Command {
	o := benchSchemaOptions{whitespace: "bounded"}
	cmd := &cobra.Command{
		Use:   "schema --schemas DIR --tokenizer FILE",
		Short: "Structured output's grammar engine on a corpus of JSON Schemas (MaskBench format)",
		Long: "bench schema compiles every schema file in DIR (one JSON object with \"schema\" and\n" +
			"\"tests\": [{\"data\", \"valid\"}], as MaskBench's data/ has them), then feeds each test\n" +
			"instance, written compactly and tokenized with FILE's tokenizer (any GGUF, a vocabulary-only\n" +
			"one included, or a Hugging Face tokenizer.json), token by token through a matcher: every\n" +
			"token of a valid instance must be in the mask computed before it and the stop token allowed\n" +
			"at the end; an invalid instance must be rejected at some token or be unable to end. Object\n" +
			"members are written in the order the grammar generates (the schema's `properties` order),\n" +
			"which JSON Schema says does not matter. A schema passes when it compiled and every test came\n" +
			"out right; refused: the compiler refused it with an error; failed: anything else. Times are\n" +
			"one thread's: compile per schema, and every mask from scratch. The last five lines are the\n" +
			"summary; --csv DIR writes one row per schema to DIR/" + benchSchemaCSV + ".",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBenchSchema(cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.schemas, "schemas", "", "directory of schema files (MaskBench format)")
	f.StringVar(&o.tokenizer, "tokenizer", "", "tokenizer: a GGUF file or a Hugging Face tokenizer.json")
	f.StringVar(&o.csvDir, "csv", "", "directory to write "+benchSchemaCSV+" into (one row per schema)")
	f.IntVar(&o.limit, "limit", 0, "only the first N schema files in name order (0: all)")
	f.StringVar(&o.whitespace, "whitespace", o.whitespace, "whitespace the grammars allow between JSON tokens: bounded or compact")
	return cmd
}

func runBenchSchema(out, errOut io.Writer, o benchSchemaOptions) error {
	const command = "bench schema"
	if o.schemas == "" {
		return fmt.Errorf("%s: --schemas is required", command)
	}
	if o.tokenizer == "" {
		return fmt.Errorf("%s: --tokenizer is required", command)
	}
	if o.limit < 0 {
		return fmt.Errorf("%s: --limit %d: must be ≥ 0", command, o.limit)
	}
	ws, err := parseWhitespace(o.whitespace)
	if err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	tok, err := loadTokenizer(o.tokenizer)
	if err != nil {
		return fmt.Errorf("%s: --tokenizer %s: %w", command, o.tokenizer, err)
	}
	vocab, err := guided.VocabOf(tok, []int32{tok.EOS()}, tok.VocabSize())
	if err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	cfg := schemabench.Config{
		Dir:     o.schemas,
		Vocab:   vocab,
		Encode:  tok.EncodeContinuation,
		Options: grammar.JSONOptions{Whitespace: ws, IntegerPointZero: true},
		Limit:   o.limit,
	}
	if o.csvDir != "" {
		if err := os.MkdirAll(o.csvDir, 0o755); err != nil {
			return fmt.Errorf("%s: --csv: %w", command, err)
		}
		f, err := os.Create(filepath.Join(o.csvDir, benchSchemaCSV))
		if err != nil {
			return fmt.Errorf("%s: --csv: %w", command, err)
		}
		defer f.Close()
		cfg.CSV = f
	}
	var bar *progress.Bar
	cfg.Progress = func(done, total int) {
		if bar == nil {
			bar, _ = progress.New(errOut, total, time.Now)
		}
		if bar != nil && (done%50 == 0 || done == total) {
			_ = bar.Update(done, "schemas")
		}
	}
	s, err := schemabench.Run(cfg)
	if bar != nil {
		_ = bar.Done()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	fmt.Fprintf(out, "tokenizer %s: %d tokens; %d masks\n", filepath.Base(o.tokenizer), vocab.Size(), s.Masks)
	s.Print(out)
	return nil
}

func parseWhitespace(s string) (grammar.Whitespace, error) {
	switch s {
	case "bounded":
		return grammar.WhitespaceBounded, nil
	case "compact":
		return grammar.WhitespaceCompact, nil
	}
	return 0, fmt.Errorf("--whitespace %q: must be bounded or compact", s)
}

// loadTokenizer reads a GGUF file's tokenizer, or a Hugging Face
// tokenizer.json (with the tokenizer_config.json beside it, if any).
func loadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	if strings.HasSuffix(path, ".json") {
		tj, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		cfg, err := os.ReadFile(filepath.Join(filepath.Dir(path), "tokenizer_config.json"))
		if errors.Is(err, fs.ErrNotExist) {
			cfg = nil
		} else if err != nil {
			return nil, err
		}
		return tokenizer.FromHFJSON(tj, cfg)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return tokenizer.FromGGUF(f)
}
