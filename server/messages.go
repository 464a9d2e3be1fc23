package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// This file reads Anthropic's Messages API (POST /v1/messages and
// /v1/messages/count_tokens) into a convo: the system prompt, messages of
// content blocks (text, tool_use, tool_result, thinking), tools,
// tool_choice and thinking; the answer is written by messages_answer.go.

// messagesRequest is the body of POST /v1/messages. Fields whose elements
// are decoded one at a time (to name the bad one) stay raw.
type messagesRequest struct {
	Model         string          `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	System        json.RawMessage `json:"system"`
	Messages      json.RawMessage `json:"messages"`
	Tools         json.RawMessage `json:"tools"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	StopSequences json.RawMessage `json:"stop_sequences"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	Stream        bool            `json:"stream"`
	Metadata      *struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
	Thinking json.RawMessage `json:"thinking"`
}

// anthropicBlock is one content block of a message (every kind's fields;
// Type says which apply).
type anthropicBlock struct {
	Type string `json:"type"`
	// text
	Text string `json:"text"`
	// tool_use
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// tool_result
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	// thinking (signature is Anthropic's, opaque: not checked)
	Thinking string `json:"thinking"`
}

// anthropicMessage is one element of messages.
type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anthropicTool is one element of tools.
type anthropicTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// Anthropic's bounds.
const (
	maxAnthropicTemperature = 1    // temperature is in [0, 1]
	minThinkingBudget       = 1024 // thinking.budget_tokens
)

// toolErrorPrefix starts the text of a tool_result with is_error true:
// templates render tool results as text only, so the flag is said in it.
const toolErrorPrefix = "Error: "

// messagesParse is the parser of one of the two routes.
type messagesParse struct {
	p *parser
	// count: /v1/messages/count_tokens (max_tokens and stream are not
	// read).
	count bool
}

// messages parses a POST /v1/messages body.
func (p *parser) anthropicMessages(body []byte) (*job, *APIError) {
	return messagesParse{p: p}.parse(body)
}

// countTokens parses a POST /v1/messages/count_tokens body: the job is
// never submitted, only its prompt counted.
func (p *parser) countTokens(body []byte) (*job, *APIError) {
	return messagesParse{p: p, count: true}.parse(body)
}

func (mp messagesParse) parse(body []byte) (*job, *APIError) {
	p := mp.p
	var r messagesRequest
	if e := decode(body, &r); e != nil {
		return nil, e
	}
	if e := p.checkModel(r.Model); e != nil {
		return nil, e
	}
	if mp.count {
		r.MaxTokens, r.Stream = nil, false
	} else if r.MaxTokens == nil {
		return nil, badRequest("max_tokens", "missing", "max_tokens is required")
	}
	msgs, e := p.anthropicConversation(r.System, r.Messages)
	if e != nil {
		return nil, e
	}
	tools, e := anthropicTools(r.Tools)
	if e != nil {
		return nil, e
	}
	choice, parallel, e := anthropicToolChoice(r.ToolChoice, len(tools) > 0)
	if e != nil {
		return nil, e
	}
	kwargs, e := anthropicThinking(r.Thinking, r.MaxTokens)
	if e != nil {
		return nil, e
	}
	f := &sharedFields{MaxTokens: r.MaxTokens, TopP: r.TopP, TopK: r.TopK, Stream: r.Stream}
	if t := r.Temperature; t != nil && (*t < 0 || *t > maxAnthropicTemperature) {
		return nil, badRequest("temperature", "invalid_value", "temperature %v: must be in [0, %d]", *t, maxAnthropicTemperature)
	}
	f.Temperature = r.Temperature
	if r.Metadata != nil {
		f.User = r.Metadata.UserID
	}
	if f.Stop, e = stopSequences(r.StopSequences); e != nil {
		return nil, e
	}
	c := &convo{msgs: msgs, tools: tools, choice: choice, parallel: parallel, kwargs: kwargs,
		msgsParam: "messages", toolsParam: "tools", choiceParam: "tool_choice",
		nameField: "name", schemaField: "input_schema"}
	return p.convoJob(c, &job{chat: true}, f, r.MaxTokens, "max_tokens")
}

// anthropicConversation decodes system and messages into a conversation:
// the system prompt first, then each message's blocks. A user message's
// tool_result blocks become tool messages (answering the call named by
// tool_use_id), placed before the rest of its text; an assistant message's
// tool_use blocks become its calls, its thinking blocks its reasoning.
// Content is bounded in bytes before anything renders it, as chat's is.
func (p *parser) anthropicConversation(system, raw json.RawMessage) ([]message, *APIError) {
	var msgs []message
	sys, e := anthropicText(system, "system")
	if e != nil {
		return nil, e
	}
	if sys != "" {
		msgs = append(msgs, message{Role: "system", Content: sys})
	}
	content := len(sys)
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("messages", "invalid_value", "messages: at least one message is required")
	}
	if raw[0] != '[' {
		return nil, badRequest("messages", "invalid_type", "messages: expected an array, got %s", jsonValueKind(raw))
	}
	open := map[string]bool{} // tool_use id → not yet answered
	n := 0
	var last string
	e = eachElem(raw, "messages", func(i int, elem json.RawMessage) *APIError {
		if p.lim.maxContext > 0 && i >= p.lim.maxContext {
			return badRequest("messages", "context_length_exceeded",
				"messages: more than %d messages, more than the model's context of %d tokens can hold", i, p.lim.maxContext)
		}
		at := fmt.Sprintf("messages[%d]", i)
		var m anthropicMessage
		if e := decodeElem(elem, &m, at); e != nil {
			return e
		}
		if m.Role != "user" && m.Role != "assistant" {
			return badRequest(at+".role", "invalid_value", "%s.role %q: must be user or assistant", at, clipValue(m.Role))
		}
		out, e := anthropicBlocks(m, at, open)
		if e != nil {
			return e
		}
		for _, o := range out {
			content += len(o.Content) + len(o.Reasoning)
			for _, tc := range o.ToolCalls {
				content += len(tc.Arguments)
			}
		}
		msgs = append(msgs, out...)
		n, last = i+1, m.Role
		return nil
	})
	if e != nil {
		return nil, e
	}
	if n == 0 {
		return nil, badRequest("messages", "invalid_value", "messages: at least one message is required")
	}
	if last == "assistant" {
		// Anthropic continues a final assistant message (a prefill); the
		// template would instead render it as a finished turn and cue a
		// new one.
		return nil, badRequest(fmt.Sprintf("messages[%d].role", n-1), "unsupported",
			"messages[%d].role: a final assistant message (prefill) is not supported; end with a user message", n-1)
	}
	if e := p.checkBytes("messages", "the messages' content", content); e != nil {
		return nil, e
	}
	return msgs, nil
}

// anthropicBlocks turns one message m (at names it) into conversation
// messages; open tracks the tool_use ids not yet answered.
func anthropicBlocks(m anthropicMessage, at string, open map[string]bool) ([]message, *APIError) {
	param := at + ".content"
	raw := bytes.TrimSpace(m.Content)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest(param, "invalid_value", "%s is required", param)
	}
	if raw[0] == '"' {
		var s string
		if e := unmarshalAt(raw, &s, param); e != nil {
			return nil, e
		}
		return []message{{Role: m.Role, Content: s}}, nil
	}
	if raw[0] != '[' {
		return nil, badRequest(param, "invalid_type", "%s: expected a string or a list of content blocks, got %s", param, jsonValueKind(raw))
	}
	var results []message // tool results, before the text
	main := message{Role: m.Role}
	var text strings.Builder
	e := eachElem(raw, param, func(k int, elem json.RawMessage) *APIError {
		bat := fmt.Sprintf("%s[%d]", param, k)
		var b anthropicBlock
		if e := decodeElem(elem, &b, bat); e != nil {
			return e
		}
		onlyFor := func(role string) *APIError {
			if m.Role != role {
				return badRequest(bat+".type", "invalid_value", "%s.type %s: only %s messages hold it (role is %s)", bat, b.Type, role, m.Role)
			}
			return nil
		}
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			if e := onlyFor("assistant"); e != nil {
				return e
			}
			switch {
			case b.ID == "" || len(b.ID) > maxToolIDLength:
				return badRequest(bat+".id", "invalid_value", "%s.id: must be 1 to %d bytes", bat, maxToolIDLength)
			case b.Name == "":
				return badRequest(bat+".name", "invalid_value", "%s.name is missing", bat)
			case len(main.ToolCalls) >= maxToolCalls:
				return badRequest(param, "invalid_value", "%s: more than %d tool_use blocks", param, maxToolCalls)
			}
			if _, dup := open[b.ID]; dup {
				return badRequest(bat+".id", "invalid_value", "%s.id %q is used by an earlier tool_use block", bat, clipValue(b.ID))
			}
			input := bytes.TrimSpace(b.Input)
			if len(input) == 0 || input[0] != '{' {
				return badRequest(bat+".input", "invalid_type", "%s.input: expected an object, got %s", bat, jsonValueKind(input))
			}
			open[b.ID] = true
			main.ToolCalls = append(main.ToolCalls, toolCall{ID: b.ID, Name: b.Name, Arguments: string(compactRaw(input))})
		case "tool_result":
			if e := onlyFor("user"); e != nil {
				return e
			}
			unanswered, known := open[b.ToolUseID]
			switch {
			case b.ToolUseID == "":
				return badRequest(bat+".tool_use_id", "invalid_value", "%s.tool_use_id is missing", bat)
			case !known:
				return badRequest(bat+".tool_use_id", "invalid_value", "%s.tool_use_id %q: no earlier tool_use block has that id", bat, clipValue(b.ToolUseID))
			case !unanswered:
				return badRequest(bat+".tool_use_id", "invalid_value", "%s.tool_use_id %q: that call was already answered", bat, clipValue(b.ToolUseID))
			}
			open[b.ToolUseID] = false
			s, e := anthropicText(b.Content, bat+".content")
			if e != nil {
				return e
			}
			if b.IsError {
				s = toolErrorPrefix + s
			}
			results = append(results, message{Role: "tool", Content: s, ToolCallID: b.ToolUseID})
		case "thinking":
			if e := onlyFor("assistant"); e != nil {
				return e
			}
			main.Reasoning += b.Thinking
		case "redacted_thinking":
			// Anthropic's encrypted reasoning: no other model can read it.
			if e := onlyFor("assistant"); e != nil {
				return e
			}
		case "image", "document", "search_result", "container_upload":
			return badRequest(bat+".type", "unsupported", "%s.type %s: only text content is supported", bat, b.Type)
		default:
			return badRequest(bat+".type", "unsupported", "%s.type %q: unknown or unsupported content block", bat, clipValue(b.Type))
		}
		return nil
	})
	if e != nil {
		return nil, e
	}
	main.Content = text.String()
	if m.Role == "user" && main.Content == "" && len(results) > 0 {
		return results, nil // only tool results
	}
	return append(results, main), nil
}

// anthropicText flattens system or a tool_result's content: a string or
// a list of text blocks (absent or null: "").
func anthropicText(raw json.RawMessage, param string) (string, *APIError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		if e := unmarshalAt(raw, &s, param); e != nil {
			return "", e
		}
		return s, nil
	case '[':
	default:
		return "", badRequest(param, "invalid_type", "%s: expected a string or a list of text blocks, got %s", param, jsonValueKind(raw))
	}
	var b strings.Builder
	e := eachElem(raw, param, func(k int, elem json.RawMessage) *APIError {
		at := fmt.Sprintf("%s[%d]", param, k)
		var blk anthropicBlock
		if e := decodeElem(elem, &blk, at); e != nil {
			return e
		}
		if blk.Type != "text" {
			return badRequest(at+".type", "unsupported", "%s.type %q: only text blocks are supported here", at, clipValue(blk.Type))
		}
		b.WriteString(blk.Text)
		return nil
	})
	return b.String(), e
}

// anthropicTools decodes tools: custom tools only (Anthropic's server
// tools, such as web_search, run on Anthropic's side).
func anthropicTools(raw json.RawMessage) ([]toolDef, *APIError) {
	return decodeTools(raw, func(at string, t *anthropicTool) (toolDef, *APIError) {
		if t.Type != "" && t.Type != "custom" {
			return toolDef{}, badRequest(at+".type", "unsupported", "%s.type %q: only custom tools are supported (server tools run on Anthropic's side)", at, clipValue(t.Type))
		}
		if present(t.InputSchema) {
			if s := bytes.TrimSpace(t.InputSchema); s[0] != '{' {
				return toolDef{}, badRequest(at+".input_schema", "invalid_type", "%s.input_schema: expected a JSON Schema object, got %s", at, jsonValueKind(s))
			}
		}
		return toolDef{Name: t.Name, Description: t.Description, Parameters: t.InputSchema}, nil
	})
}

// anthropicToolChoice decodes tool_choice {type: auto|any|tool|none, name,
// disable_parallel_tool_use}; absent: auto with tools, none without. The
// second result allows parallel calls.
func anthropicToolChoice(raw json.RawMessage, haveTools bool) (toolChoice, bool, *APIError) {
	if !present(raw) {
		if haveTools {
			return toolChoice{Mode: toolsAuto}, true, nil
		}
		return toolChoice{Mode: toolsNone}, true, nil
	}
	var o struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
	}
	if t := bytes.TrimSpace(raw); t[0] != '{' {
		return toolChoice{}, false, badRequest("tool_choice", "invalid_type", "tool_choice: expected an object, got %s", jsonValueKind(t))
	}
	if e := unmarshalAt(raw, &o, "tool_choice"); e != nil {
		return toolChoice{}, false, e
	}
	parallel := !o.DisableParallelToolUse
	switch o.Type {
	case "auto":
		return toolChoice{Mode: toolsAuto}, parallel, nil
	case "any":
		return toolChoice{Mode: toolsRequired}, parallel, nil
	case "none":
		return toolChoice{Mode: toolsNone}, parallel, nil
	case "tool":
		if o.Name == "" {
			return toolChoice{}, false, badRequest("tool_choice.name", "invalid_value", "tool_choice.name is required with type tool")
		}
		return toolChoice{Mode: toolsNamed, Name: o.Name}, parallel, nil
	}
	return toolChoice{}, false, badRequest("tool_choice.type", "invalid_value", "tool_choice.type %q: must be auto, any, tool or none", clipValue(o.Type))
}

// anthropicThinking decodes thinking into the template variable
// enable_thinking (Qwen3's and others'; templates without it ignore it).
// budget_tokens is validated as Anthropic does (≥ 1024, < max_tokens) but
// not enforced: turnstile does not cut the reasoning at the budget, only
// max_tokens bounds it. maxTok is nil for count_tokens.
func anthropicThinking(raw json.RawMessage, maxTok *int) (map[string]any, *APIError) {
	if !present(raw) {
		return nil, nil
	}
	var t struct {
		Type         string `json:"type"`
		BudgetTokens *int   `json:"budget_tokens"`
	}
	if e := unmarshalAt(raw, &t, "thinking"); e != nil {
		return nil, e
	}
	switch t.Type {
	case "enabled":
		switch b := t.BudgetTokens; {
		case b == nil:
			return nil, badRequest("thinking.budget_tokens", "missing", "thinking.budget_tokens is required with type enabled")
		case *b < minThinkingBudget:
			return nil, badRequest("thinking.budget_tokens", "invalid_value", "thinking.budget_tokens %d: must be at least %d", *b, minThinkingBudget)
		case maxTok != nil && *b >= *maxTok:
			return nil, badRequest("thinking.budget_tokens", "invalid_value", "thinking.budget_tokens %d: must be less than max_tokens %d", *b, *maxTok)
		}
		return map[string]any{"enable_thinking": true}, nil
	case "disabled":
		return map[string]any{"enable_thinking": false}, nil
	}
	return nil, badRequest("thinking.type", "invalid_value", "thinking.type %q: must be enabled or disabled", clipValue(t.Type))
}

// stopSequences checks stop_sequences (a list of strings) as stop is
// checked, and returns it as stop's JSON for the shared fields.
func stopSequences(raw json.RawMessage) (json.RawMessage, *APIError) {
	if !present(raw) {
		return nil, nil
	}
	const param = "stop_sequences"
	var list []string
	e := eachElem(raw, param, func(i int, elem json.RawMessage) *APIError {
		at := fmt.Sprintf("%s[%d]", param, i)
		if i >= maxStops {
			return badRequest(param, "invalid_value", "%s: more than %d strings", param, maxStops)
		}
		var s string
		if e := decodeElem(elem, &s, at); e != nil {
			return e
		}
		switch {
		case s == "":
			return badRequest(at, "invalid_value", "%s: empty string", at)
		case len(s) > maxStopBytes:
			return badRequest(at, "invalid_value", "%s: %d bytes, at most %d", at, len(s), maxStopBytes)
		}
		list = append(list, s)
		return nil
	})
	if e != nil || len(list) == 0 {
		return nil, e
	}
	b, err := json.Marshal(list)
	if err != nil {
		return nil, badRequest(param, "invalid_value", "%s: %v", param, err)
	}
	return b, nil
}

// anthropicErrors is Anthropic's error shape: {"type": "error", "error":
// {"type", "message"}} with the same HTTP status as OpenAI's, and in a
// stream an "error" event (the stream then ends; Anthropic sends no
// [DONE]).
type anthropicErrors struct{}

// anthropicErrorBody is Anthropic's error JSON.
type anthropicErrorBody struct {
	Type  string               `json:"type"`
	Error anthropicErrorDetail `json:"error"`
}

type anthropicErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// anthropicError maps e to Anthropic's error types by its status. The
// message keeps the offending field's name.
func anthropicError(e *APIError) anthropicErrorBody {
	typ := "invalid_request_error"
	switch {
	case e.Status == http.StatusUnauthorized:
		typ = "authentication_error"
	case e.Status == http.StatusForbidden:
		typ = "permission_error"
	case e.Status == http.StatusNotFound:
		typ = "not_found_error"
	case e.Status == http.StatusRequestEntityTooLarge:
		typ = "request_too_large"
	case e.Status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case e.Status == http.StatusServiceUnavailable:
		typ = "overloaded_error"
	case e.Status >= 500:
		typ = "api_error"
	}
	msg := e.Message
	if e.Param != "" && !strings.Contains(msg, e.Param) {
		msg = e.Param + ": " + msg
	}
	return anthropicErrorBody{Type: "error", Error: anthropicErrorDetail{Type: typ, Message: msg}}
}

func (anthropicErrors) whole(w http.ResponseWriter, e *APIError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", fmt.Sprint(e.RetryAfter))
	}
	w.WriteHeader(e.Status)
	_ = jsonEncoder(w).Encode(anthropicError(e))
}

func (anthropicErrors) inStream(sse *sseWriter, e *APIError) error {
	return sse.sendEvent("error", anthropicError(e))
}
