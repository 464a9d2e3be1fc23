package grammar

import (
	"regexp"
	"testing"
	"unicode/utf8"
)

// fuzzLimits keep one fuzz input cheap.
var fuzzLimits = Limits{States: 20_000, Rules: 500, Configs: 64, Time: 0}

// fuzzMatch compiles nothing itself: it feeds bytes to g through a byte
// vocabulary and checks the mask against Accept at every position.
func fuzzMatch(t *testing.T, g *Grammar, input []byte) {
	pieces := make([][]byte, 257)
	for i := range 256 {
		pieces[i] = []byte{byte(i)}
	}
	special := make([]bool, 257)
	special[256] = true
	v, err := NewVocab(pieces, special, []int32{256})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMatcher(g, v)
	mask := make([]uint64, v.MaskWords())
	for i, c := range input {
		if i >= 32 {
			break
		}
		if err := m.FillMask(mask); err != nil {
			if !IsTooLarge(err) {
				t.Fatalf("FillMask: %v", err)
			}
			return
		}
		allowed := mask[c>>6]&(1<<(c&63)) != 0
		err := m.Accept(int32(c))
		if allowed != (err == nil) && !IsTooLarge(err) {
			t.Fatalf("byte %q at %d: mask %v, Accept %v", c, i, allowed, err)
		}
		if err != nil {
			return
		}
	}
	if err := m.FillMask(mask); err == nil {
		if stop := mask[256>>6]&(1<<(256&63)) != 0; stop != m.Complete() {
			t.Fatalf("stop allowed %v, Complete %v", stop, m.Complete())
		}
	}
}

// FuzzCompileJSONSchema: any document either compiles or is refused with
// an error, within the limits, and what compiles keeps its mask and its
// Accept in agreement.
func FuzzCompileJSONSchema(f *testing.F) {
	for _, s := range []string{
		`{}`, `true`, `false`, `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`,
		`{"type":"array","items":{"type":"integer","minimum":-5,"maximum":300},"minItems":1,"maxItems":3}`,
		`{"anyOf":[{"type":"string","pattern":"^a+$"},{"type":"number","multipleOf":0.5}]}`,
		`{"$defs":{"n":{"type":"object","properties":{"c":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}`,
		`{"oneOf":[{"required":["a"]},{"not":{"required":["a"]}}],"type":"object"}`,
		`{"enum":[1,"x",null,[1],{"a":2}]}`, `{"type":"string","format":"date-time"}`,
		`{"$ref":"#"}`, `{"type":"objekt"}`, `{"patternProperties":{"^x":{"type":"boolean"}},"additionalProperties":false}`,
		`{"if":{"properties":{"k":{"const":1}}},"then":{"required":["v"]},"else":{"maxProperties":1}}`,
		`{"type":"string","minLength":2,"maxLength":4,"pattern":"[0-9]"}`,
	} {
		f.Add([]byte(s), []byte(`{"a":"x","c":{}}`))
		f.Add([]byte(s), []byte(`[1,2]`))
	}
	f.Fuzz(func(t *testing.T, schema, input []byte) {
		if len(schema) > 1<<12 {
			return
		}
		g, err := CompileJSONSchema(schema, JSONOptions{Limits: fuzzLimits})
		if err != nil {
			return
		}
		if g.NumStates() > fuzzLimits.States {
			t.Fatalf("%d states past the limit %d", g.NumStates(), fuzzLimits.States)
		}
		fuzzMatch(t, g, input)
	})
}

// FuzzCompileRegex: any pattern either compiles or is refused, and what
// compiles agrees with Go's regexp on the input (whole-string match).
func FuzzCompileRegex(f *testing.F) {
	for _, p := range []string{`a+b*`, `[0-9]{2,4}`, `(x|yz)?\d`, `^a.$`, `\p{L}+`, `(?i)ab`, `a{0,3}b{2}`, `[^a-c]`, `\bx`, `(a|b)*a(a|b){5}`} {
		f.Add(p, "aab")
		f.Add(p, "12")
	}
	f.Fuzz(func(t *testing.T, pattern, input string) {
		if len(pattern) > 256 || len(input) > 64 {
			return
		}
		g, err := CompileRegex(pattern, fuzzLimits)
		if err != nil {
			return
		}
		fuzzMatch(t, g, []byte(input))
		re, err := regexpFull(pattern)
		if err != nil || !utf8.ValidString(input) {
			// Go's regexp reads an invalid byte as U+FFFD; the grammar
			// matches valid UTF-8 only, as model output must be.
			return
		}
		pieces := make([][]byte, 257)
		for i := range 256 {
			pieces[i] = []byte{byte(i)}
		}
		special := make([]bool, 257)
		special[256] = true
		v, _ := NewVocab(pieces, special, []int32{256})
		m := NewMatcher(g, v)
		ours := m.AcceptBytes([]byte(input)) == nil && m.Complete()
		if theirs := re.MatchString(input); ours != theirs {
			t.Fatalf("pattern %q on %q: grammar %v, regexp %v", pattern, input, ours, theirs)
		}
	})
}

// regexpFull compiles pattern to match whole strings, as the grammar does.
func regexpFull(pattern string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + pattern + `)$`)
}
