package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ardanlabs/jinja"
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/turnstile-llm/turnstile/toolcall"
)

// message is one chat message after parsing.
type message struct {
	Role    string
	Content string
	Name    string
	// Reasoning is an assistant message's reasoning (reasoning_content),
	// passed to templates that render it.
	Reasoning string
	// ToolCalls are an assistant message's calls; ToolCallID is the call
	// a tool message answers.
	ToolCalls  []toolCall
	ToolCallID string
}

// chatTemplate turns a conversation into prompt text: through the model's
// Jinja chat template when it has one, else through the fallback format
// described in the package documentation. Safe for concurrent use.
type chatTemplate struct {
	tmpl     *jinja.Template // nil: the fallback format
	bos, eos string          // the BOS and EOS tokens' text, for templates
	// special, when set, encodes rendered templates: the template's own
	// special-token text becomes those tokens, message text is escaped
	// so that it stays text.
	special specialEncoder
	// syntax is how the model writes tool calls: read off the template by
	// rendering a call (detectSyntax), else turnstile's fallback syntax.
	syntax toolcall.Syntax
	// nativeTools: the template renders tools and calls itself; else the
	// fallback (toolPreamble and calls written as text) is used.
	nativeTools bool
	// thinks: the template marks reasoning with <think>…</think>.
	thinks bool
	// toolValues caches tools as template values, by definition: agents
	// send the same tools with every turn, and decoding their schemas
	// into values was most of a tools request's work before its first
	// token. Values are only read by renders, so they are shared.
	toolValues *lru.Cache[[32]byte, jinja.Value]
}

// toolValueEntries bounds chatTemplate.toolValues (tools, not requests).
const toolValueEntries = 4096

// specialEncoder is what a Tokenizer may also offer for chat templates
// (model/tokenizer's does): EncodeSpecial reads special-token text (e.g.
// "<|eot_id|>") as the tokens, and EscapeSpecial changes text so that
// EncodeSpecial encodes it as Encode would.
type specialEncoder interface {
	EncodeSpecial(text string, addBOS bool) []int32
	EscapeSpecial(s string) string
}

// withSpecial makes c encode through tok's special-token support when tok
// has it and c renders a template (the fallback format writes no special
// tokens).
func (c *chatTemplate) withSpecial(tok Tokenizer) *chatTemplate {
	if se, ok := tok.(specialEncoder); ok && c.tmpl != nil {
		c.special = se
	}
	return c
}

// encode tokenizes a prompt render returned.
func (c *chatTemplate) encode(tok Tokenizer, text string, addBOS bool) []int32 {
	if c.special != nil {
		return c.special.EncodeSpecial(text, addBOS)
	}
	return tok.Encode(text, addBOS)
}

// Reasoning markers of the templates that think (Qwen3, DeepSeek-R1, QwQ).
const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

// newChatTemplate compiles src ("" selects the fallback). bos and eos are
// the text of the tokenizer's BOS and EOS tokens (templates use them as
// bos_token and eos_token).
func newChatTemplate(src, bos, eos string) (*chatTemplate, error) {
	fallback, _ := toolcall.Known("fallback")
	values, err := lru.New[[32]byte, jinja.Value](toolValueEntries)
	if err != nil {
		return nil, fmt.Errorf("server: tool cache: %w", err)
	}
	c := &chatTemplate{bos: bos, eos: eos, syntax: fallback, toolValues: values}
	if src == "" {
		return c, nil
	}
	t, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("server: chat template (%d bytes): %w", len(src), err)
	}
	c.tmpl = t
	c.thinks = strings.Contains(src, thinkClose)
	if strings.Contains(src, "tool_calls") && strings.Contains(src, "tools") {
		if s, ok := c.detectSyntax(); ok {
			c.syntax, c.nativeTools = s, true
		}
	}
	return c, nil
}

// Probe call used to read a template's tool-call syntax.
const (
	probeTool = "probe_function"
	probeArgs = `{"probe_argument": 1}`
	// probeID is nine letters and digits: Mistral's templates refuse
	// other call ids.
	probeID = "probe0001"
)

// detectSyntax renders a conversation with and without an assistant tool
// call and reads the call's syntax off the difference, so a model's markers
// come from its own template rather than a list kept per model.
func (c *chatTemplate) detectSyntax() (toolcall.Syntax, bool) {
	tools := []toolDef{{Name: probeTool, Description: "probe", Parameters: json.RawMessage(`{"type": "object", "properties": {"probe_argument": {"type": "integer"}}}`)}}
	user := message{Role: "user", Content: "probe"}
	with := []message{user, {Role: "assistant", ToolCalls: []toolCall{{ID: probeID, Name: probeTool, Arguments: probeArgs}}}}
	without := []message{user, {Role: "assistant"}}
	a, errA := c.renderTemplate(with, tools, nil, false)
	b, errB := c.renderTemplate(without, tools, nil, false)
	if errA != nil || errB != nil {
		return toolcall.Syntax{}, false
	}
	p := 0
	for p < len(a) && p < len(b) && a[p] == b[p] {
		p++
	}
	s := 0
	for s < len(a)-p && s < len(b)-p && a[len(a)-1-s] == b[len(b)-1-s] {
		s++
	}
	// The difference can split a marker ("<tool_call>" against
	// "<|im_end|>" share their "<"): toolcall reads the call out of a
	// window around it, role markers included.
	const margin = 32
	return toolcall.FromTemplate(a[max(0, p-margin):min(len(a), len(a)-s+margin)], probeTool, probeArgs)
}

// fallbackRoles names roles in the fallback format.
var fallbackRoles = map[string]string{
	"system": "System", "developer": "System", "user": "User", "assistant": "Assistant", "tool": "Tool",
}

// render returns the prompt text for msgs (offering tools, with extra
// template variables kwargs), ending with the cue for the assistant's
// reply. A BOS the template writes at the very start is removed from the
// text and reported as bos, for the caller to encode as the BOS token.
// With special set, message content, names and tool text are escaped
// before rendering, so encode turns only the template's special-token text
// into tokens. Templates without tool support get the fallback: the tools
// described in a system message, calls written in the fallback syntax and
// results as the template renders the tool role (see toolPreamble).
func (c *chatTemplate) render(msgs []message, tools []toolDef, kwargs map[string]any) (text string, bos bool, err error) {
	return c.renderCue(msgs, tools, kwargs, true)
}

// renderCue is render, ending with the assistant's cue only when cue
// (add_generation_prompt).
func (c *chatTemplate) renderCue(msgs []message, tools []toolDef, kwargs map[string]any, cue bool) (text string, bos bool, err error) {
	if !c.nativeTools && (len(tools) > 0 || hasToolTurns(msgs)) {
		msgs = c.fallbackTools(msgs, tools)
		tools = nil
	}
	if c.tmpl == nil {
		var b strings.Builder
		for _, m := range msgs {
			b.WriteString(fallbackRoles[m.Role])
			b.WriteString(": ")
			b.WriteString(m.Content)
			b.WriteByte('\n')
		}
		if cue {
			b.WriteString("Assistant:")
		}
		return b.String(), false, nil
	}
	out, err := c.renderTemplate(msgs, tools, kwargs, cue)
	if err != nil {
		return "", false, err
	}
	if c.bos != "" && strings.HasPrefix(out, c.bos) {
		return out[len(c.bos):], true, nil
	}
	return out, false, nil
}

// hasToolTurns reports whether msgs hold tool calls or results.
func hasToolTurns(msgs []message) bool {
	for _, m := range msgs {
		if len(m.ToolCalls) > 0 || m.Role == "tool" {
			return true
		}
	}
	return false
}

// renderTemplate runs the Jinja template. Values are built in the order
// the client sent them (tool schemas, call arguments), as Python's
// json.dumps would write them.
func (c *chatTemplate) renderTemplate(msgs []message, tools []toolDef, kwargs map[string]any, cue bool) (string, error) {
	esc := func(s string) string { return s }
	if c.special != nil {
		esc = c.special.EscapeSpecial
	}
	list := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		d := jinja.NewDict()
		dd := d.AsDict()
		dd.Set("role", jinja.NewString(m.Role))
		dd.Set("content", jinja.NewString(esc(m.Content)))
		if m.Name != "" {
			dd.Set("name", jinja.NewString(esc(m.Name)))
		}
		if m.Reasoning != "" {
			dd.Set("reasoning_content", jinja.NewString(esc(m.Reasoning)))
		}
		if len(m.ToolCalls) > 0 {
			calls := make([]jinja.Value, len(m.ToolCalls))
			for k, tc := range m.ToolCalls {
				args, err := jsonToValue([]byte(tc.Arguments), esc)
				if err != nil {
					return "", fmt.Errorf("message %d, tool call %d: arguments: %w", i, k, err)
				}
				fn := jinja.NewDict()
				fn.AsDict().Set("name", jinja.NewString(tc.Name))
				fn.AsDict().Set("arguments", args)
				call := jinja.NewDict()
				call.AsDict().Set("id", jinja.NewString(esc(tc.ID)))
				call.AsDict().Set("type", jinja.NewString("function"))
				call.AsDict().Set("function", fn)
				calls[k] = call
			}
			dd.Set("tool_calls", jinja.NewList(calls))
		}
		if m.ToolCallID != "" {
			dd.Set("tool_call_id", jinja.NewString(esc(m.ToolCallID)))
		}
		list[i] = d
	}
	vars := make(map[string]jinja.Value, len(kwargs)+6)
	for k, v := range kwargs {
		vars[k] = jinja.FromGoValue(v)
	}
	vars["messages"] = jinja.NewList(list)
	vars["add_generation_prompt"] = jinja.NewBool(cue)
	vars["bos_token"] = jinja.NewString(c.bos)
	vars["eos_token"] = jinja.NewString(c.eos)
	if len(tools) > 0 {
		tl := make([]jinja.Value, len(tools))
		for i, t := range tools {
			key := t.key()
			v, ok := c.toolValues.Get(key)
			if !ok {
				var err error
				if v, err = toolValue(t, esc); err != nil {
					return "", fmt.Errorf("tool %d: %w", i, err)
				}
				c.toolValues.Add(key, v)
			}
			tl[i] = v
		}
		vars["tools"] = jinja.NewList(tl)
	}
	out, err := c.tmpl.RenderValues(vars)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}

// key identifies t's definition (name, description, parameters as sent).
func (t toolDef) key() [32]byte {
	h := sha256.New()
	var n [8]byte
	for _, part := range [][]byte{[]byte(t.Name), []byte(t.Description), t.Parameters} {
		binary.LittleEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// toolValue is t as templates expect it: OpenAI's
// {"type": "function", "function": {"name", "description", "parameters"}}.
func toolValue(t toolDef, esc func(string) string) (jinja.Value, error) {
	fn := jinja.NewDict()
	fd := fn.AsDict()
	fd.Set("name", jinja.NewString(t.Name))
	if t.Description != "" {
		fd.Set("description", jinja.NewString(esc(t.Description)))
	}
	params := t.Parameters
	if !present(params) {
		params = json.RawMessage(`{"type": "object", "properties": {}}`)
	}
	pv, err := jsonToValue(params, esc)
	if err != nil {
		return jinja.Value{}, fmt.Errorf("parameters: %w", err)
	}
	fd.Set("parameters", pv)
	v := jinja.NewDict()
	v.AsDict().Set("type", jinja.NewString("function"))
	v.AsDict().Set("function", fn)
	return v, nil
}

// jsonToValue decodes JSON into template values, keeping object members
// in their order and escaping every string with esc.
func jsonToValue(raw []byte, esc func(string) string) (jinja.Value, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	v, err := decodeValue(d, esc, 0)
	if err != nil {
		return jinja.Value{}, err
	}
	if d.More() {
		return jinja.Value{}, errors.New("more than one JSON value")
	}
	return v, nil
}

// maxJSONDepth bounds the nesting jsonToValue follows (the body's JSON
// decoder has bounded it already; this keeps the recursion's stack small).
const maxJSONDepth = 256

func decodeValue(d *json.Decoder, esc func(string) string, depth int) (jinja.Value, error) {
	if depth > maxJSONDepth {
		return jinja.Value{}, fmt.Errorf("nested deeper than %d", maxJSONDepth)
	}
	t, err := d.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			v := jinja.NewDict()
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				e, err := decodeValue(d, esc, depth+1)
				if err != nil {
					return jinja.Value{}, err
				}
				v.AsDict().Set(esc(k.(string)), e)
			}
			_, err = d.Token()
			return v, err
		case '[':
			var items []jinja.Value
			for d.More() {
				e, err := decodeValue(d, esc, depth+1)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, e)
			}
			_, err = d.Token()
			return jinja.NewList(items), err
		}
		return jinja.Value{}, fmt.Errorf("unexpected %v", t)
	case string:
		return jinja.NewString(esc(t)), nil
	case json.Number:
		return jinja.FromGoValue(t), nil
	case bool:
		return jinja.NewBool(t), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Value{}, fmt.Errorf("unexpected JSON token %v", t)
}

// toolPreamble introduces the tools to a model whose template has no tool
// support, in the fallback syntax (toolcall's "fallback").
const toolPreamble = "# Tools\n\nYou may call one or more functions to help with the user's request. The functions, as JSON, one per line:\n<tools>\n%s</tools>\n\nTo call a function, write a JSON object with its name and arguments between <tool_call></tool_call> tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <arguments-object>}\n</tool_call>"

// fallbackTools rewrites a conversation with tools for a template without
// tool support: the tools are described in the system message (appended
// to the first one, or a new first message), an assistant's calls are
// written into its content in the fallback syntax; tool results stay tool
// messages, rendered as the template renders that role (as Hugging Face's
// renderer does).
func (c *chatTemplate) fallbackTools(msgs []message, tools []toolDef) []message {
	out := make([]message, 0, len(msgs)+1)
	if len(tools) > 0 {
		var lines strings.Builder
		for _, t := range tools {
			b, _ := json.Marshal(struct {
				Type     string `json:"type"`
				Function struct {
					Name        string          `json:"name"`
					Description string          `json:"description,omitempty"`
					Parameters  json.RawMessage `json:"parameters,omitempty"`
				} `json:"function"`
			}{Type: "function", Function: struct {
				Name        string          `json:"name"`
				Description string          `json:"description,omitempty"`
				Parameters  json.RawMessage `json:"parameters,omitempty"`
			}{t.Name, t.Description, compactRaw(t.Parameters)}})
			lines.Write(b)
			lines.WriteByte('\n')
		}
		pre := fmt.Sprintf(toolPreamble, lines.String())
		if len(msgs) > 0 && (msgs[0].Role == "system" || msgs[0].Role == "developer") {
			first := msgs[0]
			first.Content += "\n\n" + pre
			out = append(out, first)
			msgs = msgs[1:]
		} else {
			out = append(out, message{Role: "system", Content: pre})
		}
	}
	for _, m := range msgs {
		switch {
		case len(m.ToolCalls) > 0:
			calls := make([]toolcall.Call, len(m.ToolCalls))
			for k, tc := range m.ToolCalls {
				calls[k] = toolcall.Call{Name: tc.Name, Arguments: tc.Arguments}
			}
			text := c.syntax.Format(calls)
			if m.Content != "" {
				text = m.Content + "\n" + text
			}
			out = append(out, message{Role: "assistant", Content: text, Name: m.Name})
		default:
			out = append(out, m)
		}
	}
	return out
}

// compactRaw is raw without insignificant whitespace (nil stays nil).
func compactRaw(raw json.RawMessage) json.RawMessage {
	if !present(raw) {
		return nil
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}
