// Package schemabench measures the structured-output grammar engine on a
// corpus of JSON Schemas with valid and invalid instances, in MaskBench's
// format (one file per schema: {"schema", "tests": [{"data", "valid"}]};
// guidance-ai/jsonschemabench, arXiv 2501.10868): every schema is
// compiled, then every instance is written compactly, tokenized with the
// model's tokenizer and fed token by token through a matcher, checking
// that each token of a valid instance is in the mask computed before it
// (and the stop token at the end), and that an invalid instance is
// rejected at some token or cannot end.
//
// Object members are written in the order the schema's grammar generates
// them (the order of `properties`), found by the matcher itself over the
// instance's bytes; JSON Schema gives member order no meaning, so the
// verdict does not change, and values are never touched. Numbers keep
// their text as written in the file (1.0 stays 1.0: draft 4 tells it
// from 1).
//
// Times are single-threaded wall times: compile per schema, and each mask
// computed from scratch (the matcher's tables, built lazily per grammar
// position as in serving, persist across the instances of one schema).
package schemabench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"

	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/turnstile-llm/turnstile/grammar"
	"github.com/turnstile-llm/turnstile/internal/stats"
)

// Config is one run.
type Config struct {
	// Dir holds the schema files (*.json).
	Dir string
	// Vocab is the model's vocabulary; Encode tokenizes text without BOS.
	Vocab  *grammar.Vocab
	Encode func(string) []int32
	// Options compile each schema.
	Options grammar.JSONOptions
	// Limit runs only the first Limit files in name order (0: all).
	Limit int
	// CSV, when set, gets one row per schema.
	CSV io.Writer
	// Progress, when set, is called after each schema.
	Progress func(done, total int)
}

// Status is a schema's outcome.
type Status string

// The outcomes: passing (compiled, every test right), refused (the
// compiler refused it with an error), failed (anything else: a crash, a
// wrong verdict).
const (
	Passing Status = "passing"
	Refused Status = "refused"
	Failed  Status = "failed"
)

// Row is one schema's result.
type Row struct {
	File       string
	Status     Status
	Reason     string
	CompileMS  float64
	Valid      int
	ValidOK    int
	Invalid    int
	InvalidOK  int
	Tokens     int
	MaskMeanUS float64
	MaskMaxUS  float64
}

// Summary aggregates a run.
type Summary struct {
	Schemas, Compiled, Refused, Failed, Passing int
	Valid, ValidOK, Invalid, InvalidOK          int
	// Mask times (µs) over every mask; compile times (ms) over compiled
	// schemas.
	MaskMean, MaskP50, MaskP99, MaskMax float64
	CompileMean, CompileP50, CompileP99 float64
	Masks                               int
	// FailedValid counts schemas failed because a valid instance was
	// rejected.
	FailedValid int
	Rows        []Row
}

// Print writes the summary's five lines.
func (s *Summary) Print(w io.Writer) {
	pct := 0.0
	if s.Schemas > 0 {
		pct = 100 * float64(s.Passing) / float64(s.Schemas)
	}
	fmt.Fprintf(w, "schemas %d compiled %d refused %d failed %d\n", s.Schemas, s.Compiled, s.Refused, s.Failed)
	fmt.Fprintf(w, "passing %d (%.1f%%)\n", s.Passing, pct)
	fmt.Fprintf(w, "valid accepted %d of %d; invalid rejected %d of %d\n", s.ValidOK, s.Valid, s.InvalidOK, s.Invalid)
	fmt.Fprintf(w, "mask us mean %.1f p50 %.1f p99 %.1f max %.1f\n", s.MaskMean, s.MaskP50, s.MaskP99, s.MaskMax)
	fmt.Fprintf(w, "compile ms mean %.2f p50 %.2f p99 %.2f\n", s.CompileMean, s.CompileP50, s.CompileP99)
}

type testCase struct {
	Data  json.RawMessage `json:"data"`
	Valid bool            `json:"valid"`
}

type schemaFile struct {
	Schema json.RawMessage `json:"schema"`
	Tests  []testCase      `json:"tests"`
}

// Run benchmarks every schema file of cfg.Dir.
func Run(cfg Config) (*Summary, error) {
	if cfg.Vocab == nil || cfg.Encode == nil {
		return nil, errors.New("schemabench: no vocabulary or tokenizer")
	}
	files, err := filepath.Glob(filepath.Join(cfg.Dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("schemabench: no *.json files in %s", cfg.Dir)
	}
	sort.Strings(files)
	if cfg.Limit > 0 && cfg.Limit < len(files) {
		files = files[:cfg.Limit]
	}
	var cw *csv.Writer
	if cfg.CSV != nil {
		cw = csv.NewWriter(cfg.CSV)
		if err := cw.Write([]string{"file", "status", "reason", "compile_ms", "valid", "valid_ok", "invalid", "invalid_ok", "tokens", "mask_mean_us", "mask_max_us"}); err != nil {
			return nil, err
		}
	}
	s := &Summary{}
	var masks, compiles []float64
	r := &runner{cfg: cfg, mask: make([]uint64, cfg.Vocab.MaskWords())}
	for i, f := range files {
		row := r.schema(f, &masks)
		s.Rows = append(s.Rows, row)
		s.Schemas++
		switch row.Status {
		case Refused:
			s.Refused++
		case Failed:
			s.Failed++
		case Passing:
			s.Passing++
		}
		if row.Status != Refused && row.CompileMS >= 0 {
			s.Compiled++
			compiles = append(compiles, row.CompileMS)
			s.Valid += row.Valid
			s.ValidOK += row.ValidOK
			s.Invalid += row.Invalid
			s.InvalidOK += row.InvalidOK
			if row.ValidOK < row.Valid {
				s.FailedValid++
			}
		}
		if cw != nil {
			if err := cw.Write([]string{filepath.Base(row.File), string(row.Status), row.Reason, ff(row.CompileMS), strconv.Itoa(row.Valid),
				strconv.Itoa(row.ValidOK), strconv.Itoa(row.Invalid), strconv.Itoa(row.InvalidOK), strconv.Itoa(row.Tokens),
				ff(row.MaskMeanUS), ff(row.MaskMaxUS)}); err != nil {
				return nil, err
			}
		}
		if cfg.Progress != nil {
			cfg.Progress(i+1, len(files))
		}
	}
	if cw != nil {
		cw.Flush()
		if err := cw.Error(); err != nil {
			return nil, err
		}
	}
	s.Masks = len(masks)
	if len(masks) > 0 {
		s.MaskMean, _ = stats.Mean(masks)
		p, _ := stats.Percentiles(masks, 50, 99, 100)
		s.MaskP50, s.MaskP99, s.MaskMax = p[0], p[1], p[2]
	}
	if len(compiles) > 0 {
		s.CompileMean, _ = stats.Mean(compiles)
		p, _ := stats.Percentiles(compiles, 50, 99)
		s.CompileP50, s.CompileP99 = p[0], p[1]
	}
	return s, nil
}

func ff(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }

type runner struct {
	cfg  Config
	mask []uint64
}

// schema runs one file. A panic anywhere is a failure, not a crash of the
// run.
func (r *runner) schema(file string, masks *[]float64) (row Row) {
	row = Row{File: file, CompileMS: -1}
	defer func() {
		if p := recover(); p != nil {
			row.Status, row.Reason = Failed, fmt.Sprintf("panic: %v: %s", p, firstLines(debug.Stack(), 12))
		}
	}()
	data, err := os.ReadFile(file)
	if err != nil {
		row.Status, row.Reason = Failed, err.Error()
		return row
	}
	var sf schemaFile
	if err := json.Unmarshal(data, &sf); err != nil || len(sf.Schema) == 0 {
		row.Status, row.Reason = Failed, fmt.Sprintf("not a schema file: %v", err)
		return row
	}
	t0 := time.Now()
	g, err := grammar.CompileJSONSchema(sf.Schema, r.cfg.Options)
	ms := float64(time.Since(t0).Nanoseconds()) / 1e6
	if err != nil {
		row.Status, row.Reason = Refused, err.Error()
		return row
	}
	row.CompileMS = ms
	row.Status = Passing
	var sum float64
	for _, tc := range sf.Tests {
		text, order, err := grammar.CompactInstance(g, r.cfg.Vocab, tc.Data)
		if err != nil {
			row.Status, row.Reason = Failed, fmt.Sprintf("test data: %v", err)
			continue
		}
		toks := r.cfg.Encode(string(text))
		accepted, why, err := r.feed(g, toks, masks, &sum, &row.MaskMaxUS)
		if err != nil {
			row.Status, row.Reason = Failed, err.Error()
			return row
		}
		row.Tokens += len(toks)
		if tc.Valid {
			row.Valid++
			if accepted {
				row.ValidOK++
			} else if order == grammar.OrderUnknown {
				// Not the grammar's verdict: the members may fit in an
				// order the bounded search did not reach.
				row.Status, row.Reason = Failed, fmt.Sprintf("no member order found within the search's budget (valid instance rejected %s in the document's order): %s", why, clip(text))
			} else {
				row.Status, row.Reason = Failed, fmt.Sprintf("valid instance rejected %s: %s", why, clip(text))
			}
		} else {
			row.Invalid++
			if !accepted {
				row.InvalidOK++
			} else if row.Status == Passing {
				row.Status, row.Reason = Failed, fmt.Sprintf("invalid instance accepted: %s", clip(text))
			}
		}
	}
	if n := row.Tokens + row.Valid + row.Invalid; n > 0 {
		row.MaskMeanUS = sum / float64(n)
	}
	return row
}

// feed runs the tokens through a fresh matcher, computing the mask before
// each token and once more at the end (where a stop token must be
// allowed). It reports whether the text was accepted whole, and where not.
// A mask that disagrees with Accept is an error.
func (r *runner) feed(g *grammar.Grammar, toks []int32, masks *[]float64, sum, maxUS *float64) (bool, string, error) {
	v := r.cfg.Vocab
	m := grammar.NewMatcher(g, v)
	stop := v.Stops()
	for i := 0; i <= len(toks); i++ {
		t0 := time.Now()
		if err := m.FillMask(r.mask); err != nil {
			return false, "", err
		}
		us := float64(time.Since(t0).Nanoseconds()) / 1e3
		*masks = append(*masks, us)
		*sum += us
		*maxUS = max(*maxUS, us)
		if i == len(toks) {
			for _, s := range stop {
				if allowed(r.mask, s) {
					return true, "", nil
				}
			}
			return false, "at the end (not complete)", nil
		}
		tok := toks[i]
		ok := allowed(r.mask, tok)
		err := m.Accept(tok)
		if ok != (err == nil) {
			return false, "", fmt.Errorf("token %d (%q) at %d: mask says %v, Accept says %v", tok, v.Piece(tok), i, ok, err)
		}
		if !ok {
			return false, fmt.Sprintf("at token %d (%q)", i, v.Piece(tok)), nil
		}
	}
	return true, "", nil
}

func allowed(mask []uint64, id int32) bool { return mask[id>>6]&(1<<(id&63)) != 0 }

func clip(b []byte) string {
	if len(b) > 200 {
		return strings.ToValidUTF8(string(b[:200]), "") + "..."
	}
	return strings.ToValidUTF8(string(b), "\ufffd")
}

func firstLines(b []byte, n int) string {
	lines := bytes.SplitN(b, []byte("\n"), n+1)
	return string(bytes.Join(lines[:min(n, len(lines))], []byte(" | ")))
}
