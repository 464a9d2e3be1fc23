package toolcall

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
)

// Syntax is how a model family writes tool calls in its output.
//
// A run of calls is written Prefix, then each call as Begin(name) + the
// arguments' JSON + End, with Sep between two calls, then Suffix:
//
//	hermes:  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>\n<tool_call>\n...
//	llama3:  {"name": "f", "parameters": {...}}; {"name": "g", "parameters": {...}}
//	mistral: [TOOL_CALLS][{"name": "f", "arguments": {...}}, {"name": "g", ...}]
//
// Only mistral has a Prefix and Suffix: its calls are the elements of one
// JSON array.
type Syntax struct {
	Name string // "hermes", "llama3", "mistral", "fallback"

	callOpen  string // before each call's object
	callClose string // after each call's object
	key       string // the arguments' key the syntax writes
	sep       string
	prefix    string
	suffix    string
	trigger   string

	// What the parser looks for in free text: tag starts a call (or, with
	// array, an array of calls); without a tag a call starts at '{'.
	tag      string
	closeTag string // after each call's object (hermes)
	array    bool   // calls are the elements of a JSON array after tag
	skipSep  byte   // a separator character dropped right after a call (llama3's ';')
}

var hermes = Syntax{
	Name: "hermes", callOpen: "<tool_call>\n", callClose: "\n</tool_call>", key: "arguments", sep: "\n",
	trigger: "<tool_call>", tag: "<tool_call>", closeTag: "</tool_call>",
}

// known lists the syntaxes by name. fallback is hermes under another
// name: it is what turnstile asks of a model whose template does not
// write tool calls, because it is the most common form models are trained
// on and its tags make it unambiguous in free text.
var known = []Syntax{
	hermes,
	{
		Name: "llama3", key: "parameters", sep: "; ",
		trigger: `{"name": "`, skipSep: ';',
	},
	{
		Name: "mistral", key: "arguments", sep: ", ", prefix: "[TOOL_CALLS][", suffix: "]",
		trigger: "[TOOL_CALLS]", tag: "[TOOL_CALLS]", array: true,
	},
	func() Syntax { s := hermes; s.Name = "fallback"; return s }(),
}

// Known returns the syntax of a name above.
func Known(name string) (Syntax, bool) {
	for _, s := range known {
		if s.Name == name {
			return s, true
		}
	}
	return Syntax{}, false
}

// quote writes s as a JSON string without escaping HTML characters (a
// model writes "<" as is).
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// Begin is the text that starts a call of tool name up to where its
// arguments' JSON value begins. For mistral it does not include Prefix.
func (s Syntax) Begin(name string) string {
	return s.callOpen + `{"name": ` + quote(name) + `, "` + s.key + `": `
}

// End is the text after the arguments that ends one call.
func (s Syntax) End() string { return "}" + s.callClose }

// Sep is what goes between two calls (may be "").
func (s Syntax) Sep() string { return s.sep }

// Prefix is the text before the first call of a run ("" but for mistral).
func (s Syntax) Prefix() string { return s.prefix }

// Suffix is the text after the last call of a run ("" but for mistral).
func (s Syntax) Suffix() string { return s.suffix }

// Triggers are the strings that start any run of calls in free text, for a
// lazy grammar: text never contains them otherwise. Each is a prefix of
// Prefix + Begin(name) for any name.
func (s Syntax) Triggers() []string { return []string{s.trigger} }

// Format writes calls the way the model would (for prompts of templates
// without tool support and for tests); no calls: "".
func (s Syntax) Format(calls []Call) string {
	if len(calls) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(s.prefix)
	for i, c := range calls {
		if i > 0 {
			b.WriteString(s.sep)
		}
		b.WriteString(s.Begin(c.Name))
		b.WriteString(strings.TrimSpace(c.Arguments))
		b.WriteString(s.End())
	}
	b.WriteString(s.suffix)
	return b.String()
}

// FromTemplate picks the syntax a chat template writes: rendered is the
// template's output for an assistant message holding one call of tool name
// with arguments args (a JSON object text), possibly with role markers
// around it. It parses rendered with each syntax and keeps the one that
// finds exactly that call written with the syntax's arguments key; the
// tagged syntaxes are tried first because a hermes call holds a JSON object
// that llama3 would also take. The arguments are compared as JSON values,
// since templates re-serialize them. ok is false when none matches.
func FromTemplate(rendered, name, args string) (Syntax, bool) {
	for _, s := range []string{"hermes", "mistral", "llama3"} {
		syn, _ := Known(s)
		p := NewParser(&syn, Reasoning{})
		ev := append(p.Feed(rendered), p.Close()...)
		r := Collect(ev)
		if len(r.Calls) != 1 || r.Calls[0].Name != name || !sameJSON(r.Calls[0].Arguments, args) || p.keys[0] != syn.key {
			continue
		}
		if syn.tag == "" && (strings.Contains(r.Content, "<tool_call>") || strings.Contains(r.Content, "[TOOL_CALLS]")) {
			continue // a tagged call with another key, not a bare llama3 object
		}
		return syn, true
	}
	return Syntax{}, false
}

// sameJSON compares two JSON texts as values (texts when either is not JSON).
func sameJSON(a, b string) bool {
	var va, vb any
	if json.Unmarshal([]byte(a), &va) != nil || json.Unmarshal([]byte(b), &vb) != nil {
		return strings.TrimSpace(a) == strings.TrimSpace(b)
	}
	return reflect.DeepEqual(va, vb)
}
