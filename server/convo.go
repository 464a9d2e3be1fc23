package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/turnstile-llm/turnstile/toolcall"
)

// This file is the protocol-neutral conversation every chat-like endpoint
// (chat completions, Responses, Anthropic Messages) parses into: messages
// with tool calls and results, the tools offered, the tool choice. One
// function (convoJob) renders it through the chat template, attaches the
// tool grammar and says how the output is parsed back.

// Tool-list bounds (OpenAI's: 128 tools, names of 64 characters).
const (
	maxTools        = 128
	maxToolNameLen  = 64
	maxToolCalls    = 128 // tool calls in one assistant message
	maxKwargs       = 32  // chat_template_kwargs members
	maxToolIDLength = 256
)

// toolNamePattern is OpenAI's rule for function names.
var toolNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// toolDef is one function tool a request offers.
type toolDef struct {
	Name        string
	Description string
	// Parameters is the JSON Schema of the arguments (an object schema);
	// nil: any JSON object.
	Parameters json.RawMessage
	Strict     bool
}

// choiceMode is what tool_choice asks.
type choiceMode uint8

const (
	toolsAuto     choiceMode = iota // the model chooses (the default with tools)
	toolsNone                       // no calls
	toolsRequired                   // at least one call
	toolsNamed                      // exactly one call of Name
)

// toolChoice is a parsed tool_choice.
type toolChoice struct {
	Mode choiceMode
	Name string // toolsNamed
}

// toolCall is one call, in a conversation or in output. Arguments is a
// JSON object's text.
type toolCall struct {
	ID        string
	Name      string
	Arguments string
}

// convo is a conversation request in protocol-neutral form.
type convo struct {
	msgs   []message
	tools  []toolDef
	choice toolChoice
	// parallel allows more than one call per output (parallel_tool_calls,
	// default true; Anthropic's disable_parallel_tool_use inverts it).
	parallel bool
	// kwargs are extra template variables (chat_template_kwargs).
	kwargs map[string]any
	// Request field names, for errors: where the messages, tools and the
	// choice came from in this protocol.
	msgsParam, toolsParam, choiceParam string
	// nameField and schemaField are where a tool's name and parameter
	// schema sit inside one tools element ("function.name" and
	// "function.parameters" on chat, "name" and "input_schema" on
	// Anthropic's).
	nameField, schemaField string
}

// toolField names field of tools[i], for errors.
func (c *convo) toolField(i int, field string) string {
	return fmt.Sprintf("%s[%d].%s", c.toolsParam, i, field)
}

// checkTools validates the offered tools and the choice against them.
func (c *convo) checkTools() *APIError {
	if len(c.tools) > maxTools {
		return badRequest(c.toolsParam, "invalid_value", "%s: %d tools, at most %d", c.toolsParam, len(c.tools), maxTools)
	}
	seen := make(map[string]int, len(c.tools))
	for i, t := range c.tools {
		name, schema := c.toolField(i, c.nameField), c.toolField(i, c.schemaField)
		if !toolNamePattern.MatchString(t.Name) {
			return badRequest(name, "invalid_value", "%s %q: must be 1 to %d letters, digits, underscores or dashes", name, clipValue(t.Name), maxToolNameLen)
		}
		if k, dup := seen[t.Name]; dup {
			return badRequest(name, "invalid_value", "%s %q: %s[%d] has the same name", name, t.Name, c.toolsParam, k)
		}
		seen[t.Name] = i
		if present(t.Parameters) {
			if p := bytes.TrimSpace(t.Parameters); p[0] != '{' {
				return badRequest(schema, "invalid_type", "%s: expected a JSON Schema object, got %s", schema, jsonValueKind(p))
			}
		}
	}
	switch c.choice.Mode {
	case toolsRequired, toolsNamed:
		if len(c.tools) == 0 {
			return badRequest(c.choiceParam, "invalid_value", "%s asks for a tool call but %s is empty", c.choiceParam, c.toolsParam)
		}
	}
	if c.choice.Mode == toolsNamed {
		if _, ok := seen[c.choice.Name]; !ok {
			return badRequest(c.choiceParam, "invalid_value", "%s names tool %q, which is not in %s", c.choiceParam, clipValue(c.choice.Name), c.toolsParam)
		}
	}
	return nil
}

// checkSequence validates the tool messages: each answers a call an
// earlier assistant message made, by its id, once.
func (c *convo) checkSequence() *APIError {
	open := map[string]bool{} // call id → still unanswered
	for i, m := range c.msgs {
		at := fmt.Sprintf("%s[%d]", c.msgsParam, i)
		switch m.Role {
		case "assistant":
			for k, tc := range m.ToolCalls {
				if _, dup := open[tc.ID]; dup {
					return badRequest(fmt.Sprintf("%s.tool_calls[%d].id", at, k), "invalid_value", "%s.tool_calls[%d].id %q is used by an earlier call", at, k, clipValue(tc.ID))
				}
				open[tc.ID] = true
			}
		case "tool":
			if m.ToolCallID == "" {
				return badRequest(at+".tool_call_id", "invalid_value", "%s: a tool message needs the tool_call_id of the call it answers", at)
			}
			unanswered, known := open[m.ToolCallID]
			switch {
			case !known:
				return badRequest(at+".tool_call_id", "invalid_value", "%s.tool_call_id %q: no earlier assistant message made a call with that id", at, clipValue(m.ToolCallID))
			case !unanswered:
				return badRequest(at+".tool_call_id", "invalid_value", "%s.tool_call_id %q: that call was already answered", at, clipValue(m.ToolCallID))
			}
			open[m.ToolCallID] = false
		}
	}
	return nil
}

// parseArguments decodes a call's arguments (a JSON object's text) for
// templates, which take them as objects.
func parseArguments(args, at string) (map[string]any, *APIError) {
	var v any
	d := json.NewDecoder(strings.NewReader(args))
	d.UseNumber()
	if err := d.Decode(&v); err != nil || d.More() {
		return nil, badRequest(at, "invalid_value", "%s: not a JSON object's text: %q", at, clipValue(args))
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, badRequest(at, "invalid_value", "%s: expected a JSON object's text, got %s", at, jsonValueKind([]byte(args)))
	}
	return obj, nil
}

// reservedVars are the template variables chat_template_kwargs may not set.
var reservedVars = map[string]bool{"messages": true, "tools": true, "add_generation_prompt": true, "bos_token": true, "eos_token": true}

// parseKwargs decodes chat_template_kwargs.
func parseKwargs(raw json.RawMessage, param string) (map[string]any, *APIError) {
	if !present(raw) {
		return nil, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, badRequest(param, "invalid_type", "%s: expected an object, got %s", param, jsonValueKind(raw))
	}
	if len(m) > maxKwargs {
		return nil, badRequest(param, "invalid_value", "%s: %d members, at most %d", param, len(m), maxKwargs)
	}
	for k := range m {
		if reservedVars[k] {
			return nil, badRequest(param+"."+k, "invalid_value", "%s.%s: the server sets this template variable", param, k)
		}
	}
	return m, nil
}

// outShape says how a conversation's output is parsed back: tool calls in
// the model's syntax (nil: no tools, so none are looked for) and reasoning.
type outShape struct {
	syntax    *toolcall.Syntax
	reasoning toolcall.Reasoning
}

// active reports whether output needs parsing at all.
func (o *outShape) active() bool {
	return o != nil && (o.syntax != nil || o.reasoning.Close != "")
}

// decodeTools decodes a tools array whose elements are T, naming each
// element tools[i] in errors and bounding the list at maxTools; convert
// checks one element and makes it a toolDef.
func decodeTools[T any](raw json.RawMessage, convert func(at string, t *T) (toolDef, *APIError)) ([]toolDef, *APIError) {
	if !present(raw) {
		return nil, nil
	}
	var tools []toolDef
	e := eachElem(raw, "tools", func(i int, elem json.RawMessage) *APIError {
		at := fmt.Sprintf("tools[%d]", i)
		if i >= maxTools {
			return badRequest("tools", "invalid_value", "tools: more than %d tools", maxTools)
		}
		var t T
		if e := decodeElem(elem, &t, at); e != nil {
			return e
		}
		d, e := convert(at, &t)
		if e != nil {
			return e
		}
		tools = append(tools, d)
		return nil
	})
	return tools, e
}

// reasoningEffort applies OpenAI's reasoning effort (param names the
// field) to the template variables kwargs: none and minimal turn thinking
// off on a template that thinks (enable_thinking false); low to xhigh
// leave it on, as turnstile has no budget between them. nil effort: kwargs
// unchanged.
func (p *parser) reasoningEffort(effort *string, kwargs map[string]any, param string) (map[string]any, *APIError) {
	if effort == nil {
		return kwargs, nil
	}
	switch *effort {
	case "none", "minimal":
		if p.chat.thinks {
			if _, set := kwargs["enable_thinking"]; set {
				return nil, badRequest(param, "invalid_value", "%s %q and chat_template_kwargs.enable_thinking both set thinking: give one", param, *effort)
			}
			if kwargs == nil {
				kwargs = map[string]any{}
			}
			kwargs["enable_thinking"] = false
		}
	case "low", "medium", "high", "xhigh":
	default:
		return nil, badRequest(param, "invalid_value", "%s %q: must be none, minimal, low, medium, high or xhigh", param, clipValue(*effort))
	}
	return kwargs, nil
}
