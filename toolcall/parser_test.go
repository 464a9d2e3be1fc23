package toolcall

import (
	"testing"

	"github.com/stretchr/testify/require"
)

var think = Reasoning{Open: "<think>", Close: "</think>"}

type parseCase struct {
	name string
	r    Reasoning
	in   string
	want Result
}

// checkParse asserts Parse's result and that streaming the text one byte
// and three bytes at a time gives the same.
func checkParse(t *testing.T, syn *Syntax, cases []parseCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Parse(syn, c.r, c.in)
			require.Equal(t, c.want, got)
			for _, n := range []int{1, 3} {
				p := NewParser(syn, c.r)
				var ev []Event
				for i := 0; i < len(c.in); i += n {
					ev = append(ev, p.Feed(c.in[i:min(i+n, len(c.in))])...)
				}
				ev = append(ev, p.Close()...)
				require.Equal(t, c.want, Collect(ev), "chunks of %d", n)
			}
		})
	}
}

func calls(nameArgs ...string) []Call {
	var cs []Call
	for i := 0; i < len(nameArgs); i += 2 {
		cs = append(cs, Call{Name: nameArgs[i], Arguments: nameArgs[i+1]})
	}
	return cs
}

func syntax(t *testing.T, name string) *Syntax {
	s, ok := Known(name)
	require.True(t, ok)
	return &s
}

// common are the reasoning and no-call cases every syntax parses alike.
var common = []parseCase{
	{name: "empty", in: "", want: Result{}},
	{name: "plain", in: "  Hello, world!\n", want: Result{Content: "Hello, world!"}},
	{name: "inner whitespace kept", in: "a  b\n\nc", want: Result{Content: "a  b\n\nc"}},
	{name: "utf8", in: "héllo — ok", want: Result{Content: "héllo — ok"}},
	{name: "reasoning", r: think, in: "<think>\nhmm\n</think>\n\nAnswer.", want: Result{Reasoning: "hmm", Content: "Answer."}},
	{name: "reasoning after whitespace", r: think, in: "\n <think>hmm</think>Answer.", want: Result{Reasoning: "hmm", Content: "Answer."}},
	{name: "no open: no reasoning", r: think, in: "Answer </think> more", want: Result{Content: "Answer </think> more"}},
	{name: "open not at start", r: think, in: "a <think>b</think>", want: Result{Content: "a <think>b</think>"}},
	{name: "partial open", r: think, in: "<thin", want: Result{Content: "<thin"}},
	{name: "starts inside", r: Reasoning{Open: "<think>", Close: "</think>", StartsInside: true}, in: "hmm </thin k\n</think>\nAnswer", want: Result{Reasoning: "hmm </thin k", Content: "Answer"}},
	{name: "starts inside, no close", r: Reasoning{Open: "<think>", Close: "</think>", StartsInside: true}, in: "all of it is reasoning\n", want: Result{Reasoning: "all of it is reasoning"}},
	{name: "starts inside, open written anyway", r: Reasoning{Open: "<think>", Close: "</think>", StartsInside: true}, in: "\n<think>\nhmm</think>Answer", want: Result{Reasoning: "hmm", Content: "Answer"}},
	{name: "starts inside, partial open", r: Reasoning{Open: "<think>", Close: "</think>", StartsInside: true}, in: "<thi", want: Result{Reasoning: "<thi"}},
	{name: "unclosed reasoning", r: think, in: "<think>still thinking", want: Result{Reasoning: "still thinking"}},
	{name: "empty reasoning", r: think, in: "<think>\n\n</think>\n\nHi", want: Result{Content: "Hi"}},
}

func TestParseNoTools(t *testing.T) {
	checkParse(t, nil, append(common[:len(common):len(common)],
		parseCase{name: "markers are text", in: `<tool_call>{"name": "f", "arguments": {}}</tool_call>`, want: Result{Content: `<tool_call>{"name": "f", "arguments": {}}</tool_call>`}},
	))
}

func TestParseHermes(t *testing.T) {
	const one = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	cases := append(common[:len(common):len(common)], []parseCase{
		{name: "one call", in: one, want: Result{Calls: calls("get_weather", `{"city": "Paris"}`)}},
		{name: "two calls", in: one + "\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", want: Result{Calls: calls("get_weather", `{"city": "Paris"}`, "f", "{}")}},
		{name: "text then call", in: "Let me check.\n\n" + one + "\n", want: Result{Content: "Let me check.", Calls: calls("get_weather", `{"city": "Paris"}`)}},
		{name: "text around calls", in: "a " + one + " b", want: Result{Content: "ab", Calls: calls("get_weather", `{"city": "Paris"}`)}},
		{name: "nested and markers in strings", in: `<tool_call>{"name":"f","arguments":{"a":[1,{"b":"x\"}</tool_call>"}],"c":"\\","d":-1.5e3,"e":[true,false,null]}}</tool_call>`,
			want: Result{Calls: calls("f", `{"a":[1,{"b":"x\"}</tool_call>"}],"c":"\\","d":-1.5e3,"e":[true,false,null]}`)}},
		{name: "keys reversed", in: "<tool_call>\n{ \"arguments\" : {\"x\": 1} ,\n \"name\" : \"f\" }\n</tool_call>", want: Result{Calls: calls("f", `{"x": 1}`)}},
		{name: "parameters key", in: `<tool_call>{"name": "f", "parameters": {"x": 1}}</tool_call>`, want: Result{Calls: calls("f", `{"x": 1}`)}},
		{name: "extra member", in: `<tool_call>{"name": "f", "arguments": 7, "id": "c1"}</tool_call>`, want: Result{Calls: calls("f", `7`)}},
		{name: "escaped name", in: `<tool_call>{"name": "g\u00e9t", "arguments": {}}</tool_call>`, want: Result{Calls: calls("gét", `{}`)}},
		{name: "malformed before arguments", in: `ok <tool_call>{"name": f}</tool_call>`, want: Result{Content: `ok <tool_call>{"name": f}</tool_call>`}},
		{name: "no name", in: `<tool_call>{"arguments": {}}</tool_call> x`, want: Result{Content: `<tool_call>{"arguments": {}}</tool_call> x`}},
		{name: "reversed without close tag", in: `<tool_call>{"arguments": {}, "name": "f"}`, want: Result{Calls: calls("f", "{}")}},
		{name: "no close tag, next call", in: "<tool_call>{\"name\": \"f\", \"arguments\": {}}\n<tool_call>{\"name\": \"g\", \"arguments\": {}}\n</tool", want: Result{Content: "</tool", Calls: calls("f", "{}", "g", "{}")}},
		{name: "reversed, unclosed object", in: `<tool_call>{"arguments": {}, "name": "f"`, want: Result{Content: `<tool_call>{"arguments": {}, "name": "f"`}},
		{name: "other first key", in: `<tool_call>{"id": 1, "name": "f", "arguments": {}}</tool_call>`, want: Result{Content: `<tool_call>{"id": 1, "name": "f", "arguments": {}}</tool_call>`}},
		{name: "partial tag", in: "a <tool_ca", want: Result{Content: "a <tool_ca"}},
		{name: "tag twice", in: "<tool_call><tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", want: Result{Content: "<tool_call>", Calls: calls("f", "{}")}},
		{name: "ends mid arguments", in: `<tool_call>{"name": "f", "arguments": {"x": "ab`, want: Result{Calls: calls("f", `{"x": "ab`)}},
		{name: "begun call, broken close", in: `<tool_call>{"name": "f", "arguments": {}}</tool_cal> more`, want: Result{Content: "</tool_cal> more", Calls: calls("f", `{}`)}},
		{name: "begun call, object not closed", in: `<tool_call>{"name": "f", "arguments": {} </tool_call> x`, want: Result{Content: "</tool_call> x", Calls: calls("f", `{}`)}},
		{name: "begun call, broken arguments", in: `<tool_call>{"name": "f", "arguments": {"x": 1]}`, want: Result{Content: "]}", Calls: calls("f", `{"x": 1`)}},
		{name: "reasoning then call", r: think, in: "<think>I should call f.</think>\n\n" + one, want: Result{Reasoning: "I should call f.", Calls: calls("get_weather", `{"city": "Paris"}`)}},
		{name: "call in reasoning is reasoning", r: think, in: "<think>" + one + "</think>", want: Result{Reasoning: one}},
	}...)
	checkParse(t, syntax(t, "hermes"), cases)
	checkParse(t, syntax(t, "fallback"), cases)
}

func TestParseLlama3(t *testing.T) {
	checkParse(t, syntax(t, "llama3"), append(common[:len(common):len(common)], []parseCase{
		{name: "one call", in: `{"name": "f", "parameters": {"x": 1}}`, want: Result{Calls: calls("f", `{"x": 1}`)}},
		{name: "two calls", in: `{"name": "f", "parameters": {"x": 1}}; {"name": "g", "parameters": {}}`, want: Result{Calls: calls("f", `{"x": 1}`, "g", "{}")}},
		{name: "arguments key", in: `{"name": "f", "arguments": {"x": 1}}`, want: Result{Calls: calls("f", `{"x": 1}`)}},
		{name: "text then call", in: "Sure:\n{\"name\": \"f\", \"parameters\": {}}", want: Result{Content: "Sure:", Calls: calls("f", `{}`)}},
		{name: "keys reversed", in: `{"parameters": {"s": "}{\"name\": \"g\""}, "name": "f"}`, want: Result{Calls: calls("f", `{"s": "}{\"name\": \"g\""}`)}},
		{name: "json that is not a call", in: `Use {"a": 1} or {"name": "Bob"} or { x }.`, want: Result{Content: `Use {"a": 1} or {"name": "Bob"} or { x }.`}},
		{name: "braces in code", in: "func f() { return }", want: Result{Content: "func f() { return }"}},
		{name: "malformed", in: `{"name": "f", "parameters" {}}`, want: Result{Content: `{"name": "f", "parameters" {}}`}},
		{name: "semicolon then text", in: `{"name": "f", "parameters": {}}; done`, want: Result{Content: "done", Calls: calls("f", "{}")}},
		{name: "reasoning then call", r: think, in: `<think>x</think>{"name": "f", "parameters": {}}`, want: Result{Reasoning: "x", Calls: calls("f", "{}")}},
	}...))
}

func TestParseMistral(t *testing.T) {
	checkParse(t, syntax(t, "mistral"), append(common[:len(common):len(common)], []parseCase{
		{name: "one call", in: `[TOOL_CALLS][{"name": "f", "arguments": {"x": 1}}]`, want: Result{Calls: calls("f", `{"x": 1}`)}},
		{name: "two calls", in: `[TOOL_CALLS] [ {"name": "f", "arguments": {"x": [1, 2]}} , {"arguments": {}, "name": "g"} ]`, want: Result{Calls: calls("f", `{"x": [1, 2]}`, "g", "{}")}},
		{name: "text then call", in: `I'll call f. [TOOL_CALLS][{"name": "f", "arguments": {}}]`, want: Result{Content: "I'll call f.", Calls: calls("f", `{}`)}},
		{name: "marker in string", in: `[TOOL_CALLS][{"name": "f", "arguments": {"s": "[TOOL_CALLS]]}"}}]`, want: Result{Calls: calls("f", `{"s": "[TOOL_CALLS]]}"}`)}},
		{name: "malformed", in: `[TOOL_CALLS]{"name": "f"}`, want: Result{Content: `[TOOL_CALLS]{"name": "f"}`}},
		{name: "second element malformed", in: `[TOOL_CALLS][{"name": "f", "arguments": {}}, {"name": 1}]`, want: Result{Content: `, {"name": 1}]`, Calls: calls("f", "{}")}},
		{name: "partial tag", in: "x [TOOL_CAL", want: Result{Content: "x [TOOL_CAL"}},
		{name: "reasoning then call", r: think, in: `<think>x</think>[TOOL_CALLS][{"name": "f", "arguments": {}}]`, want: Result{Reasoning: "x", Calls: calls("f", "{}")}},
	}...))
}

// TestStreamEvents: arguments of a name-first call stream as they come;
// CallBegin waits for the name and the arguments' start.
func TestStreamEvents(t *testing.T) {
	p := NewParser(syntax(t, "hermes"), Reasoning{})
	require.Equal(t, []Event{{Kind: Content, Text: "Hi"}}, p.Feed("Hi <tool_"))
	require.Empty(t, p.Feed(`call>{"name": "f", "argu`))
	require.Equal(t, []Event{{Kind: CallBegin, Name: "f"}, {Kind: CallArgs, Text: `{"a`}}, p.Feed(`ments": {"a`))
	require.Equal(t, []Event{{Kind: CallArgs, Text: `": "}"}`}}, p.Feed(`": "}"}}`))
	require.Empty(t, p.Feed("\n</tool_call>\n"))
	require.Empty(t, p.Close())
}

func TestFormatRoundTrip(t *testing.T) {
	cs := calls("get_weather", `{"city": "Paris", "s": "</tool_call>]; {\"name\": \"x\"}"}`, "f.g-h", `{}`, "n", `[1, {"a": null}]`)
	for _, name := range []string{"hermes", "llama3", "mistral", "fallback"} {
		t.Run(name, func(t *testing.T) {
			s := syntax(t, name)
			for n := 1; n <= len(cs); n++ {
				text := s.Format(cs[:n])
				require.Equal(t, Result{Calls: cs[:n]}, Parse(s, Reasoning{}, text))
				require.Equal(t, Result{Content: "Text.", Calls: cs[:n]}, Parse(s, Reasoning{}, "Text.\n"+text))
			}
			require.Empty(t, s.Format(nil))
		})
	}
}

func TestSyntaxText(t *testing.T) {
	h := syntax(t, "hermes")
	require.Equal(t, "<tool_call>\n{\"name\": \"f<\", \"arguments\": ", h.Begin("f<"))
	require.Equal(t, "}\n</tool_call>", h.End())
	require.Equal(t, "\n", h.Sep())
	require.Equal(t, []string{"<tool_call>"}, h.Triggers())
	l := syntax(t, "llama3")
	require.Equal(t, `{"name": "f", "parameters": `, l.Begin("f"))
	require.Equal(t, "}", l.End())
	require.Equal(t, "; ", l.Sep())
	m := syntax(t, "mistral")
	require.Equal(t, "[TOOL_CALLS][", m.Prefix())
	require.Equal(t, "]", m.Suffix())
	require.Equal(t, ", ", m.Sep())
	require.Equal(t, `[TOOL_CALLS][{"name": "f", "arguments": {}}, {"name": "g", "arguments": 1}]`, m.Format(calls("f", "{}", "g", " 1 ")))
	for _, name := range []string{"hermes", "llama3", "mistral", "fallback"} {
		s := syntax(t, name)
		for _, tr := range s.Triggers() {
			require.True(t, len(tr) > 0 && len(tr) <= len(s.Prefix()+s.Begin("x")) && (s.Prefix() + s.Begin("x"))[:len(tr)] == tr, "%s: trigger %q starts the call", name, tr)
		}
	}
	_, ok := Known("nope")
	require.False(t, ok)
}

func TestFromTemplate(t *testing.T) {
	for _, c := range []struct {
		name, rendered, want string
	}{
		{"qwen", "<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1, \"y\": [\"a\"]}}\n</tool_call><|im_end|>\n", "hermes"},
		{"qwen reformatted args", "<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"y\":[\"a\"],\"x\":1}}\n</tool_call><|im_end|>", "hermes"},
		{"llama3", "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"f\", \"parameters\": {\"x\": 1, \"y\": [\"a\"]}}<|eot_id|>", "llama3"},
		{"mistral", "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": 1, \"y\": [\"a\"]}}]</s>", "mistral"},
		{"unknown", "<|assistant|><function=f>{\"x\": 1, \"y\": [\"a\"]}</function>", ""},
		{"hermes tags with parameters", "<tool_call>\n{\"name\": \"f\", \"parameters\": {\"x\": 1, \"y\": [\"a\"]}}\n</tool_call>", ""},
		{"other name", "<tool_call>\n{\"name\": \"g\", \"arguments\": {\"x\": 1, \"y\": [\"a\"]}}\n</tool_call>", ""},
		{"other args", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 2}}\n</tool_call>", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, ok := FromTemplate(c.rendered, "f", `{"x": 1, "y": ["a"]}`)
			require.Equal(t, c.want != "", ok)
			require.Equal(t, c.want, s.Name)
		})
	}
}
