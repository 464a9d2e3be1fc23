package grammar

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	weatherSchema = `{"type":"object","properties":{"city":{"type":"string","maxLength":8},"unit":{"enum":["c","f"]}},"required":["city"],"additionalProperties":false}`
	addSchema     = `{"type":"object","properties":{"a":{"type":"integer","minimum":0},"b":{"type":"integer"}},"required":["a","b"],"additionalProperties":false}`
)

// hermes is a Hermes-style tool call of the function name: its arguments
// are the JSON value.
func hermes(name, schema string) TagStructure {
	return TagStructure{Begin: "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": ", Schema: []byte(schema), End: "}\n</tool_call>"}
}

func hermesTag(text TagText, min, max int) StructuralTag {
	return StructuralTag{
		Structures: []TagStructure{hermes("get_weather", weatherSchema), hermes("add", addSchema)},
		Triggers:   []string{"<tool_call>"},
		Text:       text, Min: min, Max: max,
	}
}

// call writes a Hermes-style call as a model would.
func call(name, args string) string {
	return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>"
}

// byteVocabT has a token per byte and a stop token (256).
func byteVocabT(t testing.TB) *Vocab {
	pieces := make([][]byte, 257)
	for i := range 256 {
		pieces[i] = []byte{byte(i)}
	}
	special := make([]bool, 257)
	special[256] = true
	v, err := NewVocab(pieces, special, []int32{256})
	require.NoError(t, err)
	return v
}

func TestStructuralTagAccept(t *testing.T) {
	weather := call("get_weather", `{"city":"Paris"}`)
	add := call("add", `{"a":1,"b":-2}`)
	think := StructuralTag{
		Structures:   []TagStructure{hermes("add", addSchema)},
		Triggers:     []string{"<tool_call>"},
		Text:         TagTextBefore,
		Max:          1,
		ReasoningEnd: "</think>",
	}
	thinkNone := think
	thinkNone.Text, thinkNone.Min, thinkNone.ReasoningEnd = TagTextNone, 1, "</think>\n\n"
	fn := StructuralTag{
		Structures: []TagStructure{{Begin: "<function=f>", Schema: []byte(`{"type":"integer"}`), End: "</function>"}},
		Triggers:   []string{"<function="},
	}
	for _, tc := range []struct {
		name     string
		tag      StructuralTag
		text     string
		ok, done bool
	}{
		{"anywhere empty", hermesTag(TagTextAnywhere, 0, 0), "", true, true},
		{"anywhere text", hermesTag(TagTextAnywhere, 0, 0), "Hello, there!\n", true, true},
		{"anywhere one call", hermesTag(TagTextAnywhere, 0, 0), "Let me check.\n" + weather, true, true},
		{"anywhere text between and after", hermesTag(TagTextAnywhere, 0, 0), "a " + weather + " and then " + add + " done", true, true},
		{"anywhere calls back to back", hermesTag(TagTextAnywhere, 0, 0), weather + add, true, true},
		{"anywhere partial call", hermesTag(TagTextAnywhere, 0, 0), `x<tool_call>` + "\n" + `{"name": "add", "arguments": {"a":1,`, true, false},
		{"anywhere only the trigger", hermesTag(TagTextAnywhere, 0, 0), "x<tool_call>", true, false},
		{"unknown tool", hermesTag(TagTextAnywhere, 0, 0), "<tool_call>\n{\"name\": \"nope\"", false, false},
		{"trigger then garbage", hermesTag(TagTextAnywhere, 0, 0), "x<tool_call>garbage", false, false},
		{"trigger prefix that diverges", hermesTag(TagTextAnywhere, 0, 0), "a <tool_cal! b", true, true},
		{"trigger prefix at the end", hermesTag(TagTextAnywhere, 0, 0), "a<tool", true, true},
		{"trigger prefix twice", hermesTag(TagTextAnywhere, 0, 0), "<tool<tool_call<<tool_call>\n{", true, false},
		{"schema: wrong type", hermesTag(TagTextAnywhere, 0, 0), call("add", `{"a":1,"b":"x"}`), false, false},
		{"schema: below minimum", hermesTag(TagTextAnywhere, 0, 0), call("add", `{"a":-1,"b":2}`), false, false},
		{"schema: missing required", hermesTag(TagTextAnywhere, 0, 0), call("add", `{"a":1}`), false, false},
		{"schema: extra property", hermesTag(TagTextAnywhere, 0, 0), call("get_weather", `{"city":"x","zip":1}`), false, false},
		{"schema: string too long", hermesTag(TagTextAnywhere, 0, 0), call("get_weather", `{"city":"Llanfairpwll"}`), false, false},
		{"schema of the other tool", hermesTag(TagTextAnywhere, 0, 0), call("get_weather", `{"a":1,"b":2}`), false, false},
		{"anywhere max 1: second call", hermesTag(TagTextAnywhere, 0, 1), weather + " " + add, false, false},
		{"anywhere max 1: text after", hermesTag(TagTextAnywhere, 0, 1), weather + " bye", true, true},
		{"anywhere max 2: two calls", hermesTag(TagTextAnywhere, 0, 2), "a" + weather + "b<tool" + add + "c", true, true},
		{"anywhere max 2: then a trigger prefix", hermesTag(TagTextAnywhere, 0, 2), weather + add + "<tool_call", true, true},
		{"anywhere max 2: third call", hermesTag(TagTextAnywhere, 0, 2), weather + add + "<tool_call>", false, false},
		{"anywhere min 2 max 3: one", hermesTag(TagTextAnywhere, 2, 3), "x" + weather + "y", true, false},
		{"anywhere min 1: text only", hermesTag(TagTextAnywhere, 1, 0), "no calls", true, false},

		{"before: text then call", hermesTag(TagTextBefore, 0, 1), "Sure.\n" + add, true, true},
		{"before: text only", hermesTag(TagTextBefore, 0, 1), "no tools needed", true, true},
		{"before: empty", hermesTag(TagTextBefore, 0, 1), "", true, true},
		{"before max 1: second call", hermesTag(TagTextBefore, 0, 1), add + "\n" + weather, false, false},
		{"before max 1: text after", hermesTag(TagTextBefore, 0, 1), add + "ok", false, false},
		{"before max 1: whitespace after the last", hermesTag(TagTextBefore, 0, 1), add + "\n", false, false},
		{"before unbounded: whitespace after the last", hermesTag(TagTextBefore, 0, 0), add + "\n", true, false},
		{"before unbounded: calls with whitespace", hermesTag(TagTextBefore, 0, 0), "x" + add + "\n \t" + weather + weather, true, true},
		{"before unbounded: text between", hermesTag(TagTextBefore, 0, 0), add + "\nthen " + weather, false, false},

		{"none min 1: empty", hermesTag(TagTextNone, 1, 0), "", true, false},
		{"none min 1: text before", hermesTag(TagTextNone, 1, 0), "hi" + add, false, false},
		{"none min 1: whitespace before", hermesTag(TagTextNone, 1, 0), "\n" + add, false, false},
		{"none min 1: one call", hermesTag(TagTextNone, 1, 0), add, true, true},
		{"none min 1: two calls", hermesTag(TagTextNone, 1, 0), add + "\n" + weather, true, true},
		{"none min 1: text after", hermesTag(TagTextNone, 1, 0), add + "\nok", false, false},
		{"none min 2 max 2: one", hermesTag(TagTextNone, 2, 2), add, true, false},
		{"none min 2 max 2: three", hermesTag(TagTextNone, 2, 2), add + add + add, false, false},
		{"none min 0: empty", hermesTag(TagTextNone, 0, 0), "", true, true},

		{"reasoning then call", think, "<think>abc</think>\nSure" + add, true, true},
		{"reasoning holds a trigger", think, "<think>use <tool_call> maybe</think>" + add, true, true},
		{"reasoning unfinished", think, "<think>abc</thin", true, false},
		{"reasoning then text", think, "</think>plain answer", true, true},
		{"reasoning: text may not hold the trigger", think, "</think>a<tool_call>x", false, false},
		{"reasoning then none", thinkNone, "<think>a</think>\n\n" + add, true, true},
		{"reasoning then none: one newline is still reasoning", thinkNone, "<think>a</think>\n" + add, true, false},

		{"xgrammar function", fn, "<function=f>12</function> and <function=f>-3</function>", true, true},
		{"xgrammar function: the trigger starts a call", fn, "<function=g>", false, false},
		{"xgrammar function: bytes above 0x7f", fn, "caf\xc3\xa9 \xff\x00", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := CompileStructuralTag(tc.tag, JSONOptions{Whitespace: WhitespaceCompact})
			require.NoError(t, err)
			m := NewMatcher(g, byteVocabT(t))
			for i := 0; i < len(tc.text) && err == nil; i++ {
				err = m.AcceptBytes([]byte{tc.text[i]})
			}
			require.Equal(t, tc.ok, err == nil, "%v", err)
			if tc.ok {
				require.Equal(t, tc.done, m.Complete())
			}
		})
	}
}

// TestStructuralTagTokens: triggers split across tokens, and tokens that
// hold text and the start of a call together; the masks agree with
// trying every token.
func TestStructuralTagTokens(t *testing.T) {
	v := testVocab(t, "a<>_", "<tool", "_call>", "<tool_call>", "a<to", "ol_c", "all>\n", "\n{", "{", `"name": "add", "arguments": `,
		`{"a":1,"b":2}`, "}\n</tool_call>", "<tool_cal!", "x")
	g, err := CompileStructuralTag(hermesTag(TagTextAnywhere, 0, 0), JSONOptions{Whitespace: WhitespaceCompact})
	require.NoError(t, err)
	id := map[string]int32{}
	for i := range v.Size() {
		id[string(v.Piece(int32(i)))] = int32(i)
	}
	mask := make([]uint64, v.MaskWords())
	for _, tc := range []struct {
		tokens []string
		ok     bool
		done   bool
	}{
		{[]string{"a<to", "ol_c", "all>\n", "{", `"name": "add", "arguments": `, `{"a":1,"b":2}`, "}\n</tool_call>"}, true, true},
		{[]string{"x", "<tool", "_call>", "\n{", `"name": "add", "arguments": `, `{"a":1,"b":2}`, "}\n</tool_call>", "a"}, true, true},
		{[]string{"<tool_call>", "\n{", `"name": "add", "arguments": `, `{"a":1,"b":2}`}, true, false},
		{[]string{"<tool_cal!", "<tool"}, true, true},
		{[]string{"<tool", "_call>", "x"}, false, false},
		{[]string{"a<to", "ol_c", "all>\n", "x"}, false, false},
	} {
		t.Run(strings.Join(tc.tokens, "|"), func(t *testing.T) {
			m := NewMatcher(g, v)
			var err error
			for _, tok := range tc.tokens {
				require.NoError(t, m.FillMask(mask))
				require.Equal(t, maskIDs(bruteMask(m), v), maskIDs(mask, v))
				i, ok := id[tok]
				require.True(t, ok, tok)
				if err = m.Accept(i); err != nil {
					require.False(t, mask[i>>6]&(1<<(i&63)) != 0, "%q rejected but in the mask", tok)
					break
				}
				require.True(t, mask[i>>6]&(1<<(i&63)) != 0, "%q accepted but not in the mask", tok)
			}
			require.Equal(t, tc.ok, err == nil, "%v", err)
			if tc.ok {
				require.Equal(t, tc.done, m.Complete())
			}
		})
	}
}

// checkTagOutput parses text as tag's output (the test's tags have no
// Begin that occurs inside another part) and checks every part.
func checkTagOutput(t *testing.T, tag StructuralTag, text string) {
	t.Helper()
	if tag.ReasoningEnd != "" {
		i := strings.Index(text, tag.ReasoningEnd)
		require.GreaterOrEqual(t, i, 0, "no reasoning end in %q", text)
		text = text[i+len(tag.ReasoningEnd):]
	}
	n := 0
	for {
		// The next structure begins where the earliest Begin occurs.
		at, which := -1, -1
		for i, s := range tag.Structures {
			if j := strings.Index(text, s.Begin); j >= 0 && (at < 0 || j < at) {
				at, which = j, i
			}
		}
		between := text
		if at >= 0 {
			between = text[:at]
		}
		switch {
		case tag.Text == TagTextAnywhere || tag.Text == TagTextBefore && n == 0:
			for _, tr := range tag.Triggers {
				require.NotContains(t, between, tr, "free text holds a trigger: %q", text)
			}
		case n == 0:
			require.Empty(t, between)
		default:
			require.Empty(t, strings.Trim(between, " \t\n"), "only whitespace between structures: %q", text)
		}
		if at < 0 {
			break
		}
		s := tag.Structures[which]
		rest := text[at+len(s.Begin):]
		dec := json.NewDecoder(strings.NewReader(rest))
		dec.UseNumber()
		var val any
		require.NoError(t, dec.Decode(&val), "structure %d in %q", n, text)
		off := int(dec.InputOffset())
		if len(s.Schema) > 0 {
			sch, err := LoadSchema(s.Schema)
			require.NoError(t, err)
			require.NoError(t, sch.Validate(val), "structure %q", rest[:off])
		}
		require.True(t, strings.HasPrefix(rest[off:], s.End), "structure %d: no end after %q", n, rest[:off])
		text = rest[off+len(s.End):]
		n++
	}
	require.GreaterOrEqual(t, n, tag.Min)
	if tag.Max > 0 {
		require.LessOrEqual(t, n, tag.Max)
	}
}

// TestStructuralTagWalks walks random tokens of the mask (favouring
// the long ones, which hold the tags and JSON) and checks that every
// output the grammar lets stop is one the tag describes.
func TestStructuralTagWalks(t *testing.T) {
	v := testVocab(t, "a<>_\n", "<tool", "_call>", "<tool_call>", "a<to", "all>\n", "\n{",
		`"name": "add", "arguments": `, `"name": "get_weather", "arguments": `,
		`{"a":`, `,"b":`, `"city":`, `"unit":`, `"c"`, `"f"`, `"Paris"`, `"`, "}", ",", "-", "0", "1", "7", "12",
		`{"a":1,"b":2}`, "}\n</tool_call>", "</think>", "<think>", " ", "\t",
		"{", "b", "c", "i", "t", "y", "u", "n", "f", ":")
	reasoning := hermesTag(TagTextBefore, 0, 0)
	reasoning.ReasoningEnd = "</think>"
	for _, tc := range []struct {
		name string
		tag  StructuralTag
	}{
		{"anywhere", hermesTag(TagTextAnywhere, 0, 0)},
		{"anywhere1-2", hermesTag(TagTextAnywhere, 1, 2)},
		{"anywhere0-3", hermesTag(TagTextAnywhere, 0, 3)},
		{"before", hermesTag(TagTextBefore, 0, 1)},
		{"none", hermesTag(TagTextNone, 1, 3)},
		{"reasoning", reasoning},
	} {
		name, tag := tc.name, tc.tag
		t.Run(name, func(t *testing.T) {
			g, err := CompileStructuralTag(tag, JSONOptions{Whitespace: WhitespaceCompact})
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(7, uint64(len(name))))
			mask := make([]uint64, v.MaskWords())
			stop := v.Stops()[0]
			complete, calls := 0, 0
			for walk := range 400 {
				m := NewMatcher(g, v)
				var text bytes.Buffer
				for range 400 {
					require.NoError(t, m.FillMask(mask))
					if walk < 10 {
						require.Equal(t, maskIDs(bruteMask(m), v), maskIDs(mask, v), "after %q", text.String())
					}
					var ids []int32
					weights, total := []int{}, 0
					forBits(mask, func(id int32) {
						w := 1
						if len(v.Piece(id)) > 1 {
							w = 30
						}
						if id == stop {
							w = 6
						}
						ids = append(ids, id)
						weights = append(weights, w)
						total += w
					})
					if len(ids) == 0 {
						break
					}
					k := rng.IntN(total)
					pick := 0
					for k >= weights[pick] {
						k -= weights[pick]
						pick++
					}
					if ids[pick] == stop {
						require.True(t, m.Complete())
						checkTagOutput(t, tag, text.String())
						complete++
						calls += strings.Count(text.String(), "</tool_call>")
						break
					}
					require.NoError(t, m.Accept(ids[pick]))
					text.Write(v.Piece(ids[pick]))
				}
			}
			t.Logf("%d complete outputs, %d calls", complete, calls)
			require.Greater(t, complete, 20)
			require.Greater(t, calls, 20)
		})
	}
}

func TestStructuralTagErrors(t *testing.T) {
	ok := hermesTag(TagTextAnywhere, 0, 0)
	with := func(f func(*StructuralTag)) StructuralTag {
		tag := ok
		tag.Structures = append([]TagStructure(nil), ok.Structures...)
		tag.Triggers = append([]string(nil), ok.Triggers...)
		f(&tag)
		return tag
	}
	for _, tc := range []struct {
		name string
		tag  StructuralTag
		want string
		is   error
	}{
		{"no structures", with(func(t *StructuralTag) { t.Structures = nil }), "structures: the list is empty", nil},
		{"empty trigger", with(func(t *StructuralTag) { t.Triggers = append(t.Triggers, "") }), "triggers[1]: the trigger is empty", nil},
		{"begin without trigger", with(func(t *StructuralTag) { t.Structures[1].Begin = "<call>" }), "structures[1].begin", nil},
		{"no triggers with text", with(func(t *StructuralTag) { t.Triggers = nil; t.Text = TagTextBefore }), "structures[0].begin", nil},
		{"empty begin with text", with(func(t *StructuralTag) { t.Structures[0].Begin = "" }), "structures[0].begin", nil},
		{"min above max", with(func(t *StructuralTag) { t.Min, t.Max = 3, 2 }), "min: 3 is more than max (2)", nil},
		{"negative min", with(func(t *StructuralTag) { t.Min = -1 }), "min: -1 is negative", nil},
		{"negative max", with(func(t *StructuralTag) { t.Max = -1 }), "max: -1 is negative", nil},
		{"bad text", with(func(t *StructuralTag) { t.Text = 9 }), "text: 9", nil},
		{"long triggers", with(func(t *StructuralTag) { t.Triggers = append(t.Triggers, strings.Repeat("x", 5000)) }), "triggers: 5011 bytes", errTooLarge},
		{"long reasoning end", with(func(t *StructuralTag) { t.ReasoningEnd = strings.Repeat("x", 5000) }), "reasoning_end: 5000 bytes", errTooLarge},
		{"schema not JSON", with(func(t *StructuralTag) { t.Structures[1].Schema = []byte(`{"type":`) }), "structures[1].schema: schema is not valid JSON", nil},
		{"schema invalid", with(func(t *StructuralTag) { t.Structures[0].Schema = []byte(`{"type":"objekt"}`) }), "structures[0].schema: invalid schema", nil},
		{"schema unsupported", with(func(t *StructuralTag) { t.Structures[1].Schema = []byte(`{"$ref":"http://example.com/s.json"}`) }), "structures[1].schema", nil},
		{"schema empty", with(func(t *StructuralTag) { t.Structures[1].Schema = []byte(`false`) }), "structures[1].schema: no JSON value satisfies the schema", ErrEmpty},
		{"schema empty by recursion", with(func(t *StructuralTag) {
			t.Structures[1].Schema = []byte(`{"$defs":{"a":{"type":"array","items":{"$ref":"#/$defs/a"},"minItems":1}},"$ref":"#/$defs/a"}`)
		}), "structures[1].schema: no JSON value satisfies the schema", ErrEmpty},
		{"every schema empty, one required", with(func(t *StructuralTag) {
			t.Min = 1
			t.Structures[0].Schema, t.Structures[1].Schema = []byte(`false`), []byte(`{"not":{}}`)
		}), "structures[0].schema: no JSON value satisfies the schema", ErrEmpty},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := CompileStructuralTag(tc.tag, JSONOptions{})
			require.ErrorContains(t, err, tc.want)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
			}
		})
	}
	_, err := CompileStructuralTag(ok, JSONOptions{Limits: Limits{States: 40, Rules: 100, Configs: 8}})
	require.True(t, IsTooLarge(err), "%v", err)
	_, err = CompileStructuralTag(ok, JSONOptions{Limits: Limits{States: 100_000, Rules: 3, Configs: 8}})
	require.True(t, IsTooLarge(err), "%v", err)
	require.ErrorContains(t, err, "structural tag: grammar has")

	// With no free text, a structure needs no trigger (nor a Begin).
	_, err = CompileStructuralTag(StructuralTag{Structures: []TagStructure{{Schema: []byte(`{"type":"integer"}`)}}, Text: TagTextNone}, JSONOptions{})
	require.NoError(t, err)
}

func TestParseStructuralTag(t *testing.T) {
	// xgrammar's form, as vLLM's structured_outputs.structural_tag holds it.
	src := `{"type": "structural_tag",
		"structures": [{"begin": "<function=get_weather>", "schema": {"type": "object",
			"properties": {"city": {"type": "string"}}}, "end": "</function>"}],
		"triggers": ["<function="]}`
	tag, err := ParseStructuralTag([]byte(src))
	require.NoError(t, err)
	require.Equal(t, StructuralTag{
		Structures: []TagStructure{{Begin: "<function=get_weather>", Schema: []byte(`{"type":"object","properties":{"city":{"type":"string"}}}`), End: "</function>"}},
		Triggers:   []string{"<function="},
	}, tag)
	require.Equal(t, `{"type":"structural_tag","structures":[{"begin":"<function=get_weather>","schema":{"type":"object","properties":{"city":{"type":"string"}}},"end":"</function>"}],"triggers":["<function="]}`, string(tag.JSON()))

	for _, tag := range []StructuralTag{
		hermesTag(TagTextAnywhere, 0, 0),
		hermesTag(TagTextBefore, 0, 1),
		hermesTag(TagTextNone, 2, 5),
		{Structures: []TagStructure{{Begin: "a\"\\\n\t<&>\u2028", End: ""}, {Begin: "b", Schema: []byte(`true`), End: "\x01"}}, Triggers: []string{"a", "b"}, ReasoningEnd: "</think>"},
		{Structures: []TagStructure{{}}, Text: TagTextNone, Min: 1},
	} {
		t.Run(string(tag.JSON()), func(t *testing.T) {
			back, err := ParseStructuralTag(tag.JSON())
			require.NoError(t, err)
			require.Equal(t, tag, back)
			require.True(t, json.Valid(tag.JSON()))
		})
	}

	for _, tc := range []struct{ src, want string }{
		{`[]`, "structural tag: not a JSON object"},
		{`null`, "structural tag: not a JSON object"},
		{`{"structures":[],"triggers":[],"foo":1,"bar":2}`, `structural tag: unknown member "bar", "foo"`},
		{`{"type":"regex","structures":[]}`, `type: "regex" is not "structural_tag"`},
		{`{"triggers":["a"]}`, "structures: missing"},
		{`{"structures":{}}`, "structures: not an array"},
		{`{"structures":[{"begin":"a","end":"b","stop":"c"}]}`, `structures[0]: unknown member "stop"`},
		{`{"structures":[{"begin":"a"}]}`, "structures[0].end: missing"},
		{`{"structures":[{"begin":1,"end":""}]}`, "structures[0].begin: not a string"},
		{`{"structures":[],"triggers":"a"}`, "triggers: not an array of strings"},
		{`{"structures":[],"text":"sometimes"}`, `text: "sometimes" is not one of`},
		{`{"structures":[],"min":"1"}`, `min: not an integer: "1"`},
		{`{"structures":[],"max":1.5}`, `max: not an integer: 1.5`},
		{`{"structures":[],"reasoning_end":true}`, `reasoning_end: not a string`},
	} {
		t.Run(tc.src, func(t *testing.T) {
			_, err := ParseStructuralTag([]byte(tc.src))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestTextGraph: the free-text automaton against a direct check, over
// every string of up to 6 bytes of a small alphabet.
func TestTextGraph(t *testing.T) {
	for _, pats := range [][]string{{"ab"}, {"aab"}, {"abab", "ba"}, {"a", "bb"}, {"abc", "bca", "cab"}, {"aa", "aaa"}} {
		t.Run(strings.Join(pats, ","), func(t *testing.T) {
			var b Builder
			g, err := b.Build(b.Rule("text", GraphExpr(textGraph(pats))), DefaultLimits)
			require.NoError(t, err)
			v := byteVocabT(t)
			var walk func(s string)
			walk = func(s string) {
				want := true
				for _, p := range pats {
					if strings.Contains(s, p) {
						want = false
					}
				}
				m := NewMatcher(g, v)
				err := m.AcceptBytes([]byte(s))
				require.Equal(t, want, err == nil && m.Complete(), "%q", s)
				if len(s) < 6 {
					for _, c := range "abc" {
						walk(s + string(c))
					}
				}
			}
			walk("")
		})
	}
}

// FuzzStructuralTag: over any bytes, a structural tag's mask and Accept
// agree, and stops are allowed exactly when the output is complete.
func FuzzStructuralTag(f *testing.F) {
	for _, s := range []string{"", "a<tool_call>\n{", "x" + call("add", `{"a":1,"b":2}`), "<tool_cal!<tool", "</think>" + call("get_weather", `{"city":"x"}`)} {
		f.Add(s)
	}
	tag := hermesTag(TagTextAnywhere, 0, 2)
	tag.ReasoningEnd = "</think>"
	g, err := CompileStructuralTag(tag, JSONOptions{Whitespace: WhitespaceCompact, Limits: fuzzLimits})
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, s string) { fuzzMatch(t, g, []byte(s)) })
}
