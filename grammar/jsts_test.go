package grammar_test

// TestJSTS runs the JSON Schema compiler against the official
// JSON-Schema-Test-Suite, draft 2020-12 (testdata/jsts; see its README and
// scripts/make-jsts-fixtures.sh). For every test group the schema is
// compiled; a refusal is allowed and counted. For a compiled group every
// instance is written compactly in a member order the grammar accepts
// (CompactInstance) and fed byte by byte to a matcher over a byte
// vocabulary: the grammar must accept exactly the valid instances (a valid
// instance rejected, or an invalid one accepted, is a compiler bug), and at
// a few positions FillMask must agree with Accept on every token. The
// suite's verdicts are also checked against the validator the compiler
// uses (LoadSchema); a disagreement there is logged, not failed (it fails
// for our own cases, below). Refusals are classed as unsupported, too
// large, the empty language (a schema nothing satisfies has no grammar)
// and other.
//
// go test -v -run JSTS ./grammar/ prints the per-keyword table;
// JSTS_TABLE=path also writes it there as markdown; JSTS_REFUSALS=1 logs
// each refusal. -run JSTS/draft2020-12/<keyword> runs one file.
// testdata/jsts/turnstile holds cases of our own in the suite's format
// (bugs the suite does not reach), run and tabled the same way.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/turnstile-llm/turnstile/grammar"
)

type jstsGroup struct {
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Tests       []struct {
		Description string          `json:"description"`
		Data        json.RawMessage `json:"data"`
		Valid       bool            `json:"valid"`
	} `json:"tests"`
}

// jstsRow is one keyword's line of the table.
type jstsRow struct {
	keyword                        string
	groups, compiled               int
	unsupported, tooLarge, empty   int
	otherRefuse                    int
	tests, right                   int
	validRejected, invalidAccepted int
	maskMismatch                   int
	errs                           int // panics, CompactInstance errors
	disagree                       int // the validator and the suite differ
	own                            bool
}

func jstsVocab(t *testing.T) *grammar.Vocab {
	pieces := make([][]byte, 257)
	for i := range 256 {
		pieces[i] = []byte{byte(i)}
	}
	special := make([]bool, 257)
	special[256] = true
	v, err := grammar.NewVocab(pieces, special, []int32{256})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

const jstsStop = 256

func TestJSTS(t *testing.T) {
	if grammar.RaceEnabled {
		t.Skip("single-goroutine and long under -race; the non-race pass of make test runs it")
	}
	vocab := jstsVocab(t)
	start := time.Now()
	var doc strings.Builder
	for _, set := range []struct {
		dir, title string
		own        bool // our verdicts: the validator must agree
	}{
		{"draft2020-12", "JSON-Schema-Test-Suite, draft 2020-12", false},
		{"turnstile", "turnstile's own cases (same format)", true},
	} {
		files, err := filepath.Glob(filepath.Join("testdata", "jsts", set.dir, "*.json"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no fixtures in testdata/jsts/%s (scripts/make-jsts-fixtures.sh): %v", set.dir, err)
		}
		sort.Strings(files)
		var rows []*jstsRow
		for _, f := range files {
			kw := strings.TrimSuffix(filepath.Base(f), ".json")
			row := &jstsRow{keyword: kw, own: set.own}
			t.Run(set.dir+"/"+kw, func(t *testing.T) {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				var groups []jstsGroup
				if err := json.Unmarshal(data, &groups); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				for _, grp := range groups {
					jstsRunGroup(t, vocab, row, &grp)
				}
			})
			if row.groups > 0 {
				rows = append(rows, row)
			}
		}
		if len(rows) > 0 {
			fmt.Fprintf(&doc, "### %s\n\n%s\n", set.title, jstsTable(rows))
		}
	}
	t.Logf("JSTS (%v):\n%s", time.Since(start).Round(time.Millisecond), doc.String())
	if path := os.Getenv("JSTS_TABLE"); path != "" {
		if err := os.WriteFile(path, []byte(doc.String()), 0o644); err != nil {
			t.Errorf("JSTS_TABLE: %v", err)
		}
	}
}

// jstsRunGroup compiles one group's schema and checks its instances.
func jstsRunGroup(t *testing.T, vocab *grammar.Vocab, row *jstsRow, grp *jstsGroup) {
	row.groups++
	where := fmt.Sprintf("%s / %q", row.keyword, grp.Description)

	// The validator's verdicts, against the suite's.
	if s, err := grammar.LoadSchema(grp.Schema); err == nil {
		for _, tc := range grp.Tests {
			v, err := jsonschema.UnmarshalJSON(bytes.NewReader(tc.Data))
			if err != nil {
				t.Errorf("%s / %q: instance %s does not decode: %v", where, tc.Description, tc.Data, err)
				continue
			}
			if got := s.Validate(v) == nil; got != tc.Valid {
				row.disagree++
				log := t.Logf
				if row.own {
					log = t.Errorf // a case of ours with a wrong verdict
				}
				log("validator disagrees with the expected verdict: %s / %q: instance %s: expected valid=%v, validator valid=%v",
					where, tc.Description, tc.Data, tc.Valid, got)
			}
		}
	}

	var g *grammar.Grammar
	err := jstsCatch(func() error {
		var err error
		g, err = grammar.CompileJSONSchema(grp.Schema, grammar.JSONOptions{IntegerPointZero: true})
		return err
	})
	if err != nil {
		var p jstsPanic
		switch {
		case errors.As(err, &p):
			row.otherRefuse++
			t.Errorf("%s: compiling the schema panicked: %v\nschema: %s", where, err, jstsShort(grp.Schema))
		case grammar.IsUnsupported(err):
			row.unsupported++
		case grammar.IsTooLarge(err):
			row.tooLarge++
		case strings.Contains(err.Error(), "cannot match any string"):
			row.empty++
		default:
			row.otherRefuse++
		}
		if os.Getenv("JSTS_REFUSALS") != "" {
			t.Logf("refused: %s: %v", where, err)
		}
		return
	}
	row.compiled++
	for _, tc := range grp.Tests {
		row.tests++
		var r jstsResult
		if err := jstsCatch(func() error {
			r = jstsMatch(g, vocab, tc.Data)
			return nil
		}); err != nil {
			r = jstsResult{err: err}
		}
		head := fmt.Sprintf("%s / %q", where, tc.Description)
		for _, m := range r.mask {
			row.maskMismatch++
			t.Errorf("%s: FillMask disagrees with Accept: %s\nschema: %s\ninstance: %s",
				head, m, jstsShort(grp.Schema), r.text)
		}
		switch {
		case r.err != nil:
			row.errs++
			t.Errorf("%s: %v\nschema: %s\ninstance: %s", head, r.err, jstsShort(grp.Schema), tc.Data)
		case r.accepted == tc.Valid:
			row.right++
		case tc.Valid:
			row.validRejected++
			t.Errorf("%s: VALID instance REJECTED %s\nschema: %s\ninstance: %s",
				head, r.why, jstsShort(grp.Schema), r.text)
		default:
			row.invalidAccepted++
			t.Errorf("%s: INVALID instance ACCEPTED\nschema: %s\ninstance: %s",
				head, jstsShort(grp.Schema), r.text)
		}
	}
}

type jstsResult struct {
	text     []byte
	accepted bool
	why      string   // where a rejected instance was rejected
	mask     []string // FillMask/Accept disagreements
	err      error    // the harness could not run the instance
}

// jstsMatch writes data compactly in a member order g accepts and feeds it
// to a matcher byte by byte.
func jstsMatch(g *grammar.Grammar, vocab *grammar.Vocab, data []byte) jstsResult {
	text, order, err := grammar.CompactInstance(g, vocab, data)
	if err != nil {
		return jstsResult{err: fmt.Errorf("CompactInstance: %w", err)}
	}
	r := jstsResult{text: text}
	m := grammar.NewMatcher(g, vocab)
	mask := make([]uint64, vocab.MaskWords())
	// Full-vocabulary mask checks at the start, half-way and where the
	// matcher stops (the end, or the rejected byte).
	check := func(pos int) {
		if err := m.FillMask(mask); err != nil {
			r.mask = append(r.mask, fmt.Sprintf("at byte %d: FillMask: %v", pos, err))
			return
		}
		var bad []string
		for id := range int32(256) {
			bit := mask[id>>6]>>(id&63)&1 == 1
			ok := m.Accept(id) == nil
			if ok {
				if err := m.Rollback(1); err != nil {
					r.mask = append(r.mask, fmt.Sprintf("at byte %d: Rollback: %v", pos, err))
					return
				}
			}
			if bit != ok {
				bad = append(bad, fmt.Sprintf("%q mask=%v accept=%v", byte(id), bit, ok))
			}
		}
		if bit := mask[jstsStop>>6]>>(jstsStop&63)&1 == 1; bit != m.Complete() {
			bad = append(bad, fmt.Sprintf("stop mask=%v complete=%v", bit, m.Complete()))
		}
		if len(bad) > 0 {
			if len(bad) > 8 {
				bad = append(bad[:8], fmt.Sprintf("… %d more", len(bad)-8))
			}
			r.mask = append(r.mask, fmt.Sprintf("after %q: %s", text[:pos], strings.Join(bad, ", ")))
		}
	}
	mid := len(text) / 2
	check(0)
	for i, b := range text {
		if i == mid && i > 0 {
			check(i)
		}
		if err := m.Accept(int32(b)); err != nil {
			check(i)
			r.why = fmt.Sprintf("at byte %d %q (after %q)", i, b, text[:i])
			switch order {
			case grammar.OrderNone:
				r.why += "; no member order is accepted, shown in document order"
			case grammar.OrderUnknown:
				r.why += "; the member-order search ran out of budget, shown in document order"
			}
			return r
		}
	}
	check(len(text))
	if !m.Complete() {
		r.why = "at the end: the text is not complete"
		return r
	}
	if order != grammar.OrderFound {
		// CompactInstance found no order yet the text was accepted.
		r.err = fmt.Errorf("CompactInstance found no member order, yet %s is accepted", text)
		return r
	}
	r.accepted = true
	return r
}

type jstsPanic struct{ msg string }

func (p jstsPanic) Error() string { return p.msg }

// jstsCatch turns a panic into an error, so that every failure is listed.
func jstsCatch(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = jstsPanic{fmt.Sprintf("panic: %v\n%s", p, debug.Stack())}
		}
	}()
	return f()
}

func jstsShort(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	if buf.Len() > 600 {
		return buf.String()[:600] + "…"
	}
	return buf.String()
}

// jstsTable is the per-keyword table in markdown.
func jstsTable(rows []*jstsRow) string {
	var sb strings.Builder
	sb.WriteString("| keyword | groups | compiled | refused: unsupported | too large | matches nothing | other | tests (compiled groups) | right | valid rejected | invalid accepted | mask ≠ accept | errors | validator ≠ expected |\n")
	sb.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	tot := jstsRow{keyword: "**total**"}
	for _, r := range append(rows, &tot) {
		fmt.Fprintf(&sb, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d |\n",
			r.keyword, r.groups, r.compiled, r.unsupported, r.tooLarge, r.empty, r.otherRefuse,
			r.tests, r.right, r.validRejected, r.invalidAccepted, r.maskMismatch, r.errs, r.disagree)
		if r != &tot {
			tot.groups += r.groups
			tot.compiled += r.compiled
			tot.unsupported += r.unsupported
			tot.tooLarge += r.tooLarge
			tot.empty += r.empty
			tot.otherRefuse += r.otherRefuse
			tot.tests += r.tests
			tot.right += r.right
			tot.validRejected += r.validRejected
			tot.invalidAccepted += r.invalidAccepted
			tot.maskMismatch += r.maskMismatch
			tot.errs += r.errs
			tot.disagree += r.disagree
		}
	}
	return sb.String()
}
