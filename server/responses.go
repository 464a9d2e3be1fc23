package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/turnstile-llm/turnstile/executor"
)

// This file is OpenAI's Responses API (POST /v1/responses and the stored
// responses' GET and DELETE): its wire types and the parsing of a request
// into a conversation job. A chain of responses (previous_response_id) is
// an agentic program: every turn of it runs under the chain's program id,
// so the program policy admits it as one program and its KV prefix is
// shared from turn to turn. responses_answer.go writes the answers,
// respstore.go keeps the stored ones.

// chainPrefix starts the program id of a chain begun by a response
// without X-Program-Id: "resp-chain-" and the first response's id.
const chainPrefix = "resp-chain-"

// Responses-specific bounds (OpenAI's for metadata).
const (
	maxMetadata         = 16
	maxMetadataKeyLen   = 64
	maxMetadataValueLen = 512
)

// responsesRequest is the body of POST /v1/responses. Fields that change
// the answer and are not served are refused (check); the rest not listed
// are ignored, as OpenAI ignores unknown fields.
type responsesRequest struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	Tools              json.RawMessage   `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	Text               *respTextConfig   `json:"text"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	Stream             bool              `json:"stream"`
	Store              *bool             `json:"store"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Metadata           map[string]string `json:"metadata"`
	User               string            `json:"user"`
	Truncation         *string           `json:"truncation"`
	Reasoning          *respReasoning    `json:"reasoning"`
	Include            []string          `json:"include"`
	ServiceTier        *string           `json:"service_tier"`
	// PromptCacheKey is OpenAI's routing hint for its cache: accepted and
	// ignored (turnstile's prefix cache needs no hint; tenants are split
	// by API key and cache_salt).
	PromptCacheKey   *string `json:"prompt_cache_key"`
	SafetyIdentifier *string `json:"safety_identifier"`
	// Refused when they ask for something: they would change the answer.
	Background   *bool           `json:"background"`
	Conversation json.RawMessage `json:"conversation"`
	Prompt       json.RawMessage `json:"prompt"`
	MaxToolCalls *int            `json:"max_tool_calls"`
	TopLogprobs  *int            `json:"top_logprobs"`
}

type respTextConfig struct {
	Format    json.RawMessage `json:"format"`
	Verbosity *string         `json:"verbosity"`
}

// respFormat is text.format: {"type": "text" | "json_object"} or
// {"type": "json_schema", "name", "schema", "strict", "description"}.
type respFormat struct {
	Type        string          `json:"type"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

type respReasoning struct {
	Effort          *string `json:"effort"`
	Summary         *string `json:"summary"`
	GenerateSummary *string `json:"generate_summary,omitempty"`
}

// respInputItem is one element of input: a message (with or without
// "type": "message"), a function call, a function call's output or a
// reasoning item.
type respInputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    *string         `json:"call_id"`
	Name      *string         `json:"name"`
	Arguments *string         `json:"arguments"`
	Output    json.RawMessage `json:"output"`
	// A reasoning item's text: content [{type: reasoning_text, text}] or
	// summary [{type: summary_text, text}].
	Summary          json.RawMessage `json:"summary"`
	EncryptedContent *string         `json:"encrypted_content"`
}

// respPart is one content part of an input message or a reasoning item.
type respPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// respTurn is what a Responses job carries from parsing to its answer.
type respTurn struct {
	id    string
	chain string // the program id of the response's chain
	// msgs is the conversation to date without this turn's instructions:
	// what the stored response continues.
	msgs  []message
	store bool
	// echo is the response object's request part, filled in by the
	// answer (status, output, usage).
	echo respObject
}

// Include values that ask for nothing turnstile has (items of tools it
// does not offer, input images): accepted. The others are refused.
var respIncludeNothing = map[string]bool{
	"file_search_call.results": true, "web_search_call.results": true, "web_search_call.action.sources": true,
	"message.input_image.image_url": true, "computer_call_output.output.image_url": true, "code_interpreter_call.outputs": true,
}

// handleResponses serves POST /v1/responses.
func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	rs := &respStream{}
	header := r.Header.Get("X-Program-Id")
	s.serveJob(w, r, protocol{
		parse: func(body []byte) (*job, *APIError) { return s.parseResponses(body, header) },
		answer: func(ctx context.Context, w http.ResponseWriter, a *answer, streams []*executor.Stream) {
			s.respAnswer(ctx, w, a, streams, rs)
		},
		errs: rs, idPrefix: "resp_",
	})
}

// respNotFound is the 404 of an unknown, evicted or expired response id.
func respNotFound(param, code, id string) *APIError {
	return &APIError{Status: http.StatusNotFound, Type: errInvalidRequest, Param: param, Code: code,
		Message: fmt.Sprintf("response %q is not stored here (unknown, deleted, evicted or expired)", clipValue(id))}
}

// handleGetResponse serves GET /v1/responses/{id}: a stored response.
func (s *Server) handleGetResponse(w http.ResponseWriter, r *http.Request) {
	if _, e := s.keys.check(r); e != nil {
		writeError(w, e)
		return
	}
	id := r.PathValue("id")
	sr := s.responses.get(id)
	if sr == nil {
		writeError(w, respNotFound("id", "response_not_found", id))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(sr.body)
}

// handleDeleteResponse serves DELETE /v1/responses/{id}; the chain's
// program is released with its last stored response.
func (s *Server) handleDeleteResponse(w http.ResponseWriter, r *http.Request) {
	if _, e := s.keys.check(r); e != nil {
		writeError(w, e)
		return
	}
	id := r.PathValue("id")
	if !s.responses.remove(id) {
		writeError(w, respNotFound("id", "response_not_found", id))
		return
	}
	writeJSON(w, map[string]any{"id": id, "object": "response", "deleted": true})
}

// releaseChain ends a chain's program: in the engine's program policy when
// it has one, else in the server's table (as DELETE /v1/programs/{id}).
func (s *Server) releaseChain(id string) {
	if rel, ok := s.eng.(ProgramReleaser); ok {
		_, err := rel.ReleaseProgram(id)
		if err != nil && !errors.Is(err, executor.ErrNoPrograms) {
			s.log.Warn("releasing a response chain's program", slog.String("program", id), slog.Any("err", err))
		}
	}
	s.progs.release(id)
}

// parseResponses parses a POST /v1/responses body; header is the request's
// X-Program-Id.
func (s *Server) parseResponses(body []byte, header string) (*job, *APIError) {
	p := &s.parse
	var r responsesRequest
	if e := decode(body, &r); e != nil {
		return nil, e
	}
	if e := p.checkModel(r.Model); e != nil {
		return nil, e
	}
	if e := r.check(); e != nil {
		return nil, e
	}
	t := &respTurn{id: newID("resp_"), store: r.Store == nil || *r.Store}
	// The conversation to date: the previous response's, then the input.
	var prior []message
	if r.PreviousResponseID != nil {
		prev := s.responses.get(*r.PreviousResponseID)
		if prev == nil {
			return nil, respNotFound("previous_response_id", "previous_response_not_found", *r.PreviousResponseID)
		}
		if header != "" && header != prev.chain {
			return nil, badRequest("previous_response_id", "invalid_value",
				"the X-Program-Id header %q differs from program %q, whose chain previous_response_id %q continues", clipValue(header), prev.chain, prev.id)
		}
		prior, t.chain = prev.msgs, prev.chain
	} else {
		t.chain = header
		if t.chain == "" {
			t.chain = chainPrefix + t.id
		}
	}
	input, e := p.respInput(r.Input, prior, r.PreviousResponseID != nil)
	if e != nil {
		return nil, e
	}
	t.msgs = append(prior[:len(prior):len(prior)], input...)
	msgs := t.msgs
	if r.Instructions != nil && *r.Instructions != "" {
		msgs = append([]message{{Role: "system", Content: *r.Instructions}}, t.msgs...)
	}
	tools, e := respTools(r.Tools)
	if e != nil {
		return nil, e
	}
	choice, e := respToolChoice(r.ToolChoice, len(tools) > 0)
	if e != nil {
		return nil, e
	}
	var kwargs map[string]any
	if r.Reasoning != nil {
		if kwargs, e = p.reasoningEffort(r.Reasoning.Effort, nil, "reasoning.effort"); e != nil {
			return nil, e
		}
	}
	c := &convo{msgs: msgs, tools: tools, choice: choice, parallel: r.ParallelToolCalls == nil || *r.ParallelToolCalls,
		kwargs: kwargs, msgsParam: "input", toolsParam: "tools", choiceParam: "tool_choice",
		nameField: "name", schemaField: "parameters"}
	f := &sharedFields{MaxTokens: r.MaxOutputTokens, Temperature: r.Temperature, TopP: r.TopP, Stream: r.Stream, User: r.User}
	format, e := respTextFormat(r.Text, f)
	if e != nil {
		return nil, e
	}
	if len(tools) > 0 && choice.Mode != toolsNone && format.Type != "text" {
		return nil, badRequest("text.format", "invalid_value", "tools and text.format %s both constrain the output: give one (or tool_choice none)", format.Type)
	}
	j, e := p.convoJob(c, &job{}, f, r.MaxOutputTokens, "max_output_tokens")
	if e != nil {
		return nil, e
	}
	if j.constraint != nil && strings.HasPrefix(j.constraint.param, "response_format") {
		j.constraint.param = "text.format.schema"
		if j.constraint.spec.Source == "" {
			j.constraint.param = "text.format"
		}
	}
	j.programID = t.chain
	j.resp = t
	t.echo = r.echo(s.cfg.Model, t, tools, choice, format)
	return j, nil
}

// check refuses the fields that ask for what is not served.
func (r *responsesRequest) check() *APIError {
	switch {
	case r.Background != nil && *r.Background:
		return badRequest("background", "unsupported", "background responses are not supported")
	case present(r.Conversation):
		return badRequest("conversation", "unsupported", "conversation objects are not supported: continue with previous_response_id")
	case present(r.Prompt):
		return badRequest("prompt", "unsupported", "prompt templates are not supported")
	case r.MaxToolCalls != nil:
		return badRequest("max_tool_calls", "unsupported", "max_tool_calls is not supported")
	case r.TopLogprobs != nil && *r.TopLogprobs != 0:
		return badRequest("top_logprobs", "unsupported", "top_logprobs is not supported on /v1/responses")
	case r.Truncation != nil && *r.Truncation == "auto":
		return badRequest("truncation", "unsupported", `truncation "auto" is not supported: a conversation beyond the context is refused ("disabled")`)
	case r.Truncation != nil && *r.Truncation != "disabled":
		return badRequest("truncation", "invalid_value", "truncation %q: must be disabled (or auto, unsupported)", clipValue(*r.Truncation))
	case r.PreviousResponseID != nil && *r.PreviousResponseID == "":
		return badRequest("previous_response_id", "invalid_value", "previous_response_id is empty")
	}
	for i, v := range r.Include {
		if !respIncludeNothing[v] {
			return badRequest(fmt.Sprintf("include[%d]", i), "unsupported", "include[%d] %q is not supported", i, clipValue(v))
		}
	}
	if len(r.Metadata) > maxMetadata {
		return badRequest("metadata", "invalid_value", "metadata: %d pairs, at most %d", len(r.Metadata), maxMetadata)
	}
	for k, v := range r.Metadata {
		if len(k) > maxMetadataKeyLen || len(v) > maxMetadataValueLen {
			return badRequest("metadata."+clipValue(k), "invalid_value", "metadata %q: keys are at most %d bytes, values at most %d", clipValue(k), maxMetadataKeyLen, maxMetadataValueLen)
		}
	}
	return nil
}

// respTextFormat reads text.format into f's response_format and returns
// the format to echo (type "text" when absent).
func respTextFormat(tc *respTextConfig, f *sharedFields) (respFormat, *APIError) {
	text := respFormat{Type: "text"}
	if tc == nil || !present(tc.Format) {
		return text, nil
	}
	var rf respFormat
	if e := unmarshalAt(tc.Format, &rf, "text.format"); e != nil {
		return text, e
	}
	switch rf.Type {
	case "text":
		return text, nil
	case "json_object":
		f.ResponseFormat = &responseFormat{Type: "json_object"}
	case "json_schema":
		if !present(rf.Schema) {
			return text, badRequest("text.format.schema", "invalid_value", `text.format: type "json_schema" needs a schema`)
		}
		f.ResponseFormat = &responseFormat{Type: "json_schema", JSONSchema: &jsonSchemaFormat{Name: rf.Name,
			Description: rf.Description, Schema: rf.Schema, Strict: rf.Strict}}
	case "":
		return text, badRequest("text.format.type", "invalid_value", "text.format.type is missing (text, json_object or json_schema)")
	default:
		return text, badRequest("text.format.type", "invalid_value", "text.format.type %q: must be text, json_object or json_schema", clipValue(rf.Type))
	}
	// The constraint is checked here so that its errors name text.format.
	if _, e := parseConstraint(&f.constraintFields); e != nil {
		e.Param = respParam(e.Param)
		e.Message = strings.ReplaceAll(strings.ReplaceAll(e.Message, "response_format.json_schema.", "text.format."), "response_format", "text.format")
		return text, e
	}
	rf.Schema = compactRaw(rf.Schema)
	return rf, nil
}

// respParam renames a response_format param as its text.format field.
func respParam(p string) string {
	if rest, ok := strings.CutPrefix(p, "response_format.json_schema."); ok {
		return "text.format." + rest
	}
	if rest, ok := strings.CutPrefix(p, "response_format"); ok {
		return "text.format" + rest
	}
	return p
}

// respTool is one element of tools: a function, flat (unlike chat's).
type respTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

// respTools decodes tools.
func respTools(raw json.RawMessage) ([]toolDef, *APIError) {
	return decodeTools(raw, func(at string, t *respTool) (toolDef, *APIError) {
		if t.Type != "function" {
			return toolDef{}, badRequest(at+".type", "unsupported", "%s.type %q: only function tools are supported", at, clipValue(t.Type))
		}
		return toolDef{Name: t.Name, Description: t.Description, Parameters: t.Parameters,
			Strict: t.Strict == nil || *t.Strict}, nil
	})
}

// respToolChoice decodes tool_choice: "none", "auto", "required" or
// {"type": "function", "name": ...}.
func respToolChoice(raw json.RawMessage, haveTools bool) (toolChoice, *APIError) {
	if !present(raw) || bytes.TrimSpace(raw)[0] == '"' {
		return openAIToolChoice(raw, haveTools)
	}
	var o struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if e := unmarshalAt(raw, &o, "tool_choice"); e != nil {
		return toolChoice{}, e
	}
	if o.Type != "function" || o.Name == "" {
		return toolChoice{}, badRequest("tool_choice", "invalid_value", `tool_choice %s: expected {"type": "function", "name": ...}`, clipValue(compact(raw)))
	}
	return toolChoice{Mode: toolsNamed, Name: o.Name}, nil
}

// respInput decodes input into messages: a string is one user message; a
// list's messages, function calls (joined to the assistant message before
// them) and function call outputs (tool messages) keep their order, and a
// reasoning item's text becomes the next assistant message's reasoning.
// prior is the previous response's conversation, whose calls outputs may
// answer.
func (p *parser) respInput(raw json.RawMessage, prior []message, continues bool) ([]message, *APIError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		if continues {
			return nil, nil
		}
		return nil, badRequest("input", "invalid_value", "input is required")
	}
	switch raw[0] {
	case '"':
		var s string
		if e := unmarshalAt(raw, &s, "input"); e != nil {
			return nil, e
		}
		if e := p.checkBytes("input", "input", len(s)); e != nil {
			return nil, e
		}
		return []message{{Role: "user", Content: s}}, nil
	case '[':
	default:
		return nil, badRequest("input", "invalid_type", "input: expected a string or a list of items, got %s", jsonValueKind(raw))
	}
	// Calls open so far (by call id), and whether answered, for errors
	// that name the item.
	open := map[string]bool{}
	for _, m := range prior {
		for _, c := range m.ToolCalls {
			open[c.ID] = true
		}
		if m.Role == "tool" {
			open[m.ToolCallID] = false
		}
	}
	var out []message
	content := 0
	reasoning := ""                    // a reasoning item's text, for the next assistant message
	lastAssistant := func() *message { // the assistant message a call joins
		if n := len(out); n > 0 && out[n-1].Role == "assistant" {
			return &out[n-1]
		}
		return nil
	}
	newAssistant := func() *message {
		out = append(out, message{Role: "assistant", Reasoning: reasoning})
		reasoning = ""
		return &out[len(out)-1]
	}
	e := eachElem(raw, "input", func(i int, elem json.RawMessage) *APIError {
		at := fmt.Sprintf("input[%d]", i)
		if p.lim.maxContext > 0 && i >= p.lim.maxContext {
			return badRequest("input", "context_length_exceeded",
				"input: more than %d items, more than the model's context of %d tokens can hold", i, p.lim.maxContext)
		}
		var it respInputItem
		if e := decodeElem(elem, &it, at); e != nil {
			return e
		}
		switch it.Type {
		case "", "message":
			switch it.Role {
			case "user", "system", "developer", "assistant":
			case "":
				return badRequest(at+".role", "invalid_value", "%s.role is missing (user, assistant, system or developer)", at)
			default:
				return badRequest(at+".role", "invalid_value", "%s.role %q: must be user, assistant, system or developer", at, clipValue(it.Role))
			}
			text, e := respContent(it.Content, at+".content")
			if e != nil {
				return e
			}
			content += len(text)
			if it.Role == "assistant" {
				m := newAssistant()
				m.Content = text
				return nil
			}
			out = append(out, message{Role: it.Role, Content: text})
		case "function_call":
			switch {
			case it.CallID == nil || *it.CallID == "" || len(*it.CallID) > maxToolIDLength:
				return badRequest(at+".call_id", "invalid_value", "%s.call_id: must be 1 to %d bytes", at, maxToolIDLength)
			case it.Name == nil || *it.Name == "":
				return badRequest(at+".name", "invalid_value", "%s.name is missing", at)
			case it.Arguments == nil:
				return badRequest(at+".arguments", "invalid_value", "%s.arguments is missing", at)
			}
			if _, seen := open[*it.CallID]; seen {
				return badRequest(at+".call_id", "invalid_value", "%s.call_id %q is used by an earlier call", at, clipValue(*it.CallID))
			}
			if _, e := parseArguments(*it.Arguments, at+".arguments"); e != nil {
				return e
			}
			m := lastAssistant()
			if m == nil || reasoning != "" {
				m = newAssistant()
			}
			if len(m.ToolCalls) >= maxToolCalls {
				return badRequest(at, "invalid_value", "%s: more than %d calls in one assistant turn", at, maxToolCalls)
			}
			m.ToolCalls = append(m.ToolCalls, toolCall{ID: *it.CallID, Name: *it.Name, Arguments: *it.Arguments})
			open[*it.CallID] = true
			content += len(*it.Arguments)
		case "function_call_output":
			if it.CallID == nil || *it.CallID == "" {
				return badRequest(at+".call_id", "invalid_value", "%s.call_id is missing", at)
			}
			switch unanswered, known := open[*it.CallID]; {
			case !known:
				return badRequest(at+".call_id", "invalid_value", "%s.call_id %q: no earlier function_call has that call_id", at, clipValue(*it.CallID))
			case !unanswered:
				return badRequest(at+".call_id", "invalid_value", "%s.call_id %q: that call was already answered", at, clipValue(*it.CallID))
			}
			text, e := respContent(it.Output, at+".output")
			if e != nil {
				return e
			}
			open[*it.CallID] = false
			content += len(text)
			out = append(out, message{Role: "tool", Content: text, ToolCallID: *it.CallID})
		case "reasoning":
			// Its text (content's reasoning_text, else summary's
			// summary_text) is the next assistant message's reasoning;
			// encrypted content is not readable here and is dropped.
			text, e := respContent(it.Content, at+".content")
			if e != nil {
				return e
			}
			if text == "" {
				if text, e = respContent(it.Summary, at+".summary"); e != nil {
					return e
				}
			}
			content += len(text)
			reasoning += text
		case "item_reference":
			return badRequest(at+".type", "unsupported", "%s.type %q: item references are not supported: continue with previous_response_id", at, it.Type)
		default:
			return badRequest(at+".type", "unsupported", "%s.type %q: only message, function_call, function_call_output and reasoning items are supported", at, clipValue(it.Type))
		}
		return nil
	})
	if e != nil {
		return nil, e
	}
	if len(out) == 0 && !continues {
		return nil, badRequest("input", "invalid_value", "input: at least one message is required")
	}
	if e := p.checkBytes("input", "the input's content", content); e != nil {
		return nil, e
	}
	return out, nil
}

// respContent flattens content: a string, null, or a list of text parts
// (input_text, output_text, text, reasoning_text, summary_text).
func respContent(raw json.RawMessage, param string) (string, *APIError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if e := unmarshalAt(raw, &s, param); e != nil {
			return "", e
		}
		return s, nil
	}
	if raw[0] != '[' {
		return "", badRequest(param, "invalid_type", "%s: expected a string or a list of content parts, got %s", param, jsonValueKind(raw))
	}
	var b strings.Builder
	e := eachElem(raw, param, func(k int, elem json.RawMessage) *APIError {
		at := fmt.Sprintf("%s[%d]", param, k)
		var pt respPart
		if e := decodeElem(elem, &pt, at); e != nil {
			return e
		}
		switch pt.Type {
		case "input_text", "output_text", "text", "reasoning_text", "summary_text":
			b.WriteString(pt.Text)
			return nil
		}
		return badRequest(at+".type", "unsupported", "%s.type %q: only text parts are supported", at, clipValue(pt.Type))
	})
	return b.String(), e
}

// echo is the response object's request part.
func (r *responsesRequest) echo(model string, t *respTurn, tools []toolDef, choice toolChoice, format respFormat) respObject {
	o := respObject{ID: t.id, Object: "response", CreatedAt: time.Now().Unix(), Model: model,
		Instructions: r.Instructions, ParallelToolCalls: r.ParallelToolCalls == nil || *r.ParallelToolCalls,
		Temperature: 1.0, TopP: 1.0, MaxOutputTokens: r.MaxOutputTokens, PreviousResponseID: r.PreviousResponseID,
		Store: t.store, Text: respTextOut{Format: format}, Truncation: "disabled", Metadata: r.Metadata,
		Tools: make([]respTool, len(tools)), Reasoning: respReasoning{}, ServiceTier: "default", Output: []any{}}
	if r.Temperature != nil {
		o.Temperature = *r.Temperature
	}
	if r.TopP != nil {
		o.TopP = *r.TopP
	}
	if o.Metadata == nil {
		o.Metadata = map[string]string{}
	}
	if r.User != "" {
		o.User = &r.User
	}
	if r.Reasoning != nil {
		o.Reasoning = respReasoning{Effort: r.Reasoning.Effort, Summary: r.Reasoning.Summary}
	}
	if r.Text != nil {
		o.Text.Verbosity = r.Text.Verbosity
	}
	for i, td := range tools {
		strict := td.Strict
		o.Tools[i] = respTool{Type: "function", Name: td.Name, Description: td.Description, Parameters: compactRaw(td.Parameters), Strict: &strict}
	}
	switch choice.Mode {
	case toolsNone:
		o.ToolChoice = "none"
	case toolsAuto:
		o.ToolChoice = "auto"
	case toolsRequired:
		o.ToolChoice = "required"
	case toolsNamed:
		o.ToolChoice = map[string]string{"type": "function", "name": choice.Name}
	}
	if !present(r.ToolChoice) {
		o.ToolChoice = "auto" // OpenAI echoes auto, tools or not
	}
	return o
}

// respObject is a response object (object "response").
type respObject struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"`
	Background         bool              `json:"background"`
	Error              *respError        `json:"error"`
	IncompleteDetails  *respIncomplete   `json:"incomplete_details"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Model              string            `json:"model"`
	Output             []any             `json:"output"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Reasoning          respReasoning     `json:"reasoning"`
	ServiceTier        string            `json:"service_tier"`
	Store              bool              `json:"store"`
	Temperature        float64           `json:"temperature"`
	Text               respTextOut       `json:"text"`
	ToolChoice         any               `json:"tool_choice"`
	Tools              []respTool        `json:"tools"`
	TopP               float64           `json:"top_p"`
	Truncation         string            `json:"truncation"`
	Usage              *respUsage        `json:"usage"`
	User               *string           `json:"user,omitempty"`
	Metadata           map[string]string `json:"metadata"`
}

type respTextOut struct {
	Format    respFormat `json:"format"`
	Verbosity *string    `json:"verbosity,omitempty"`
}

type respError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type respIncomplete struct {
	Reason string `json:"reason"`
}

type respUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// Output items.
type respMessageItem struct {
	Type    string           `json:"type"` // "message"
	ID      string           `json:"id"`
	Status  string           `json:"status"`
	Role    string           `json:"role"`
	Content []respOutputText `json:"content"`
}

type respOutputText struct {
	Type        string `json:"type"` // "output_text"
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

type respReasoningItem struct {
	Type    string     `json:"type"` // "reasoning"
	ID      string     `json:"id"`
	Status  string     `json:"status,omitempty"`
	Summary []respPart `json:"summary"`
	Content []respPart `json:"content"`
}

type respCallItem struct {
	Type      string `json:"type"` // "function_call"
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}
