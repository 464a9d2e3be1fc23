package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/sampling"
)

// Tokenizer is what the server needs of the model's tokenizer
// (model/tokenizer's Tokenizer satisfies it): encoding prompts to count and
// bound them before anything is submitted, token text for log-probabilities
// and the BOS/EOS text chat templates use.
type Tokenizer interface {
	// Encode turns text into token ids, with a leading BOS when addBOS.
	Encode(text string, addBOS bool) []int32
	// Piece is the bytes token id stands for (possibly part of a UTF-8
	// character); read-only.
	Piece(id int32) []byte
	// Token is the token's vocabulary string (e.g. "<s>").
	Token(id int32) string
	BOS() int32
	EOS() int32
	// AddBOS reports whether prompts start with BOS (the GGUF's
	// tokenizer.ggml.add_bos_token).
	AddBOS() bool
	VocabSize() int
}

// Request-size limits beyond the configurable ones.
const (
	maxStops        = 16   // stop strings per request
	maxStopBytes    = 1024 // bytes per stop string
	maxStopTokenIDs = 64
)

// maxTemperature is the top of OpenAI's documented temperature range [0, 2].
const maxTemperature = 2

// limits are what parsing checks requests against.
type limits struct {
	model      string // the one served model id
	maxContext int    // tokens, prompt + output
	vocab      int
	maxN       int // most choices per prompt
	maxChoices int // most engine requests one HTTP request may create
	// maxPiece is the longest token piece in bytes (maxPieceBytes): text
	// longer than maxContext*maxPiece bytes cannot fit the context and is
	// refused before it is tokenized. New always sets it; 0 skips that
	// byte pre-check (the exact token check still runs).
	maxPiece int
}

// maxPieceBytes is the longest piece of tok's vocabulary in bytes, at least
// 1. Every token Encode emits for text stands for at most that many of the
// text's bytes (a piece is the text it covers; a byte-fallback or unknown
// token covers one byte or character), so text of B bytes encodes to at
// least B/maxPieceBytes tokens. (A byte the vocabulary can encode neither
// as a byte token nor as unknown is dropped and breaks the bound; no
// vocabulary the tokenizer loads for real models lacks both.)
func maxPieceBytes(tok Tokenizer) int {
	m := 1
	for id := 0; id < tok.VocabSize(); id++ {
		m = max(m, len(tok.Piece(int32(id))))
	}
	return m
}

// byteBound is the most bytes of text that can fit the context, or 0 when
// unknown (lim.maxPiece unset).
func (p *parser) byteBound() int {
	if p.lim.maxPiece <= 0 || p.lim.maxContext <= 0 {
		return 0
	}
	return p.lim.maxContext * p.lim.maxPiece
}

// checkBytes refuses text of n bytes (what names it) that surely exceeds
// the context, before anything tokenizes or renders it: encoding costs
// memory in proportion to the text, so an oversized prompt must not get
// that far.
func (p *parser) checkBytes(param, what string, n int) *APIError {
	bound := p.byteBound()
	if bound == 0 || n <= bound {
		return nil
	}
	return badRequest(param, "context_length_exceeded",
		"%s is %d bytes: more than the model's context of %d tokens can hold (at most %d bytes: %d tokens × %d bytes per token at most); nothing was tokenized",
		what, n, p.lim.maxContext, bound, p.lim.maxContext, p.lim.maxPiece)
}

// checkPromptTokens is the exact context check of prompt i, n tokens long.
func (p *parser) checkPromptTokens(i, n int) *APIError {
	if n < p.lim.maxContext {
		return nil
	}
	return badRequest("prompt", "context_length_exceeded",
		"prompt %d is %d tokens, but the model's context is %d tokens (at least one must be left to generate)",
		i, n, p.lim.maxContext)
}

// maxCompletionLogprobs bounds the legacy completions logprobs field
// (OpenAI's limit there; chat's top_logprobs goes to
// sampling.MaxTopLogprobs).
const maxCompletionLogprobs = 5

// job is a parsed, validated request: one executor.Request per choice, in
// OpenAI's choice order (prompt i, sample j at index i*n+j).
type job struct {
	chat           bool
	n, prompts     int
	reqs           []executor.Request
	stream         bool
	includeUsage   bool
	logprobs       bool
	topLogprobs    int // alternatives per token (completions' logprobs N, chat's top_logprobs)
	programID      string
	programRelease bool
	user           string
	// constraint is the structured-output constraint, compiled by the
	// server (compileConstraint) after parsing.
	constraint *constraint
	// shape, when set, says how a conversation's output is parsed into
	// content, reasoning and tool calls; nil: the output is the text.
	shape *outShape
	// resp is a Responses turn's own state (its id, chain and
	// conversation, the response object's request part); nil elsewhere.
	resp *respTurn
}

// parser decodes and validates request bodies. It allocates nothing in the
// engine: a request it refuses never reaches Submit.
type parser struct {
	lim   limits
	tok   Tokenizer
	chat  *chatTemplate
	stops []int32 // the model's stop tokens (Config.StopTokenIDs)
	// tags caches requests' tool grammars as structural tags (the zero
	// value caches nothing).
	tags tagCache
}

// completionBody and chatBody shadow the fields whose elements are decoded
// one at a time, so that an error names the element's index and a long
// list is refused after its first elements instead of decoded whole.
type completionBody struct {
	completionRequest
	StopTokenIDs json.RawMessage `json:"stop_token_ids"`
}

type chatBody struct {
	chatRequest
	Messages     json.RawMessage `json:"messages"`
	StopTokenIDs json.RawMessage `json:"stop_token_ids"`
}

// decode unmarshals body, which must hold a JSON object, into v, mapping
// failures to 400 errors that name the field. body must be valid UTF-8
// (JSON's encoding; the standard decoder would silently replace bad bytes).
func decode(body []byte, v any) *APIError {
	if !utf8.Valid(body) {
		return badRequest("", "invalid_utf8", "request body is not valid UTF-8")
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return badRequest("", "invalid_json", "request body is empty; expected a JSON object")
	}
	// Unmarshal of null into a struct succeeds doing nothing, which would
	// report the first missing field instead of the wrong body.
	if trimmed[0] != '{' && json.Valid(trimmed) {
		return badRequest("", "invalid_json", "request body must be a JSON object, got %s", jsonValueKind(trimmed))
	}
	return unmarshalAt(body, v, "")
}

// unmarshalAt unmarshals data into v; errors name the offending value by
// its path under at (the API's name for data; "" for the request body).
func unmarshalAt(data []byte, v any, at string) *APIError {
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		param := joinParam(at, apiField(te.Field))
		if param == "" {
			return badRequest("", "invalid_json", "request body must be a JSON object, got a JSON %s", te.Value)
		}
		return badRequest(param, "invalid_type", "%s: expected %s, got a JSON %s", param, jsonKind(te.Type.String()), te.Value)
	case errors.As(err, &se):
		return badRequest(at, "invalid_json", "malformed JSON at byte %d: %v", se.Offset, err)
	default:
		return badRequest(at, "invalid_json", "malformed JSON: %v", err)
	}
}

// decodeElem decodes one array element into v (a pointer); unlike
// Unmarshal, it refuses null rather than leaving v's zero value.
func decodeElem(elem json.RawMessage, v any, at string) *APIError {
	if string(bytes.TrimSpace(elem)) == "null" {
		return badRequest(at, "invalid_type", "%s: expected %s, got null", at, jsonKind(fmt.Sprintf("%T", v)))
	}
	return unmarshalAt(elem, v, at)
}

// eachElem calls fn on each element of the JSON array raw, in order, until
// fn returns an error. Elements are read one at a time, so a list refused
// at its k-th element costs k elements' work, whatever its length. raw was
// checked as JSON by the body's decode; elem is reused, fn must not keep
// it.
func eachElem(raw json.RawMessage, at string, fn func(i int, elem json.RawMessage) *APIError) *APIError {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return badRequest(at, "invalid_type", "%s: expected an array, got %s", at, jsonValueKind(raw))
	}
	var elem json.RawMessage
	for i := 0; dec.More(); i++ {
		if err := dec.Decode(&elem); err != nil {
			return badRequest(at, "invalid_json", "%s[%d]: malformed JSON: %v", at, i, err)
		}
		if e := fn(i, elem); e != nil {
			return e
		}
	}
	return nil
}

// tokenIDs decodes a JSON array of token ids; errors name the element as
// at[k].
func tokenIDs(raw json.RawMessage, at string) ([]int32, *APIError) {
	if !isArray(raw) {
		var ids []int32
		return nil, decodeElem(raw, &ids, at)
	}
	// One Unmarshal is the fast path; only a failure, or a null (which
	// Unmarshal reads as id 0), walks the elements to name the bad one.
	var ids []int32
	err := json.Unmarshal(raw, &ids)
	if err == nil && !bytes.Contains(raw, []byte("null")) {
		return ids, nil
	}
	if e := eachElem(raw, at, func(k int, elem json.RawMessage) *APIError {
		var id int32
		return decodeElem(elem, &id, fmt.Sprintf("%s[%d]", at, k))
	}); e != nil {
		return nil, e
	}
	if err != nil {
		return nil, unmarshalAt(raw, &ids, at)
	}
	return ids, nil
}

func isArray(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '['
}

// apiField strips the Go names of embedded structs, which
// json.UnmarshalTypeError puts in Field but are not part of the API, from a
// type error's field path.
func apiField(field string) string {
	embedded := [...]string{"completionRequest.", "chatRequest.", "sharedFields."}
	for changed := true; changed; {
		changed = false
		for _, n := range embedded {
			if rest, ok := strings.CutPrefix(field, n); ok {
				field, changed = rest, true
			}
		}
	}
	return field
}

func joinParam(at, field string) string {
	switch {
	case at == "":
		return field
	case field == "":
		return at
	default:
		return at + "." + field
	}
}

// jsonValueKind names the JSON value raw (valid JSON) holds, for errors.
func jsonValueKind(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "a JSON object"
	case '[':
		return "a JSON array"
	case '"':
		return "a JSON string"
	case 't', 'f':
		return "a JSON boolean"
	case 'n':
		return "null"
	default:
		return "a JSON number"
	}
}

// jsonKind names a Go type as the JSON a client should send.
func jsonKind(goType string) string {
	t := strings.TrimPrefix(goType, "*")
	switch {
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "string":
		return "a string"
	case t == "bool":
		return "a boolean"
	case strings.HasPrefix(t, "[]"):
		return "an array"
	default:
		return "an object"
	}
}

// completion parses a POST /v1/completions body.
func (p *parser) completion(body []byte) (*job, *APIError) {
	var b completionBody
	if e := decode(body, &b); e != nil {
		return nil, e
	}
	r := &b.completionRequest
	if e := decodeStopTokenIDs(&r.sharedFields, b.StopTokenIDs); e != nil {
		return nil, e
	}
	if e := p.checkModel(r.Model); e != nil {
		return nil, e
	}
	if e := r.refusedShared.check(); e != nil {
		return nil, e
	}
	if e := r.refusedCompletion.check(); e != nil {
		return nil, e
	}
	prompts, e := p.prompts(r.Prompt)
	if e != nil {
		return nil, e
	}
	if r.Echo {
		return nil, badRequest("echo", "unsupported", "echo is not supported")
	}
	if r.Suffix != nil && *r.Suffix != "" {
		return nil, badRequest("suffix", "unsupported", "suffix is not supported")
	}
	j := &job{}
	if r.Logprobs != nil {
		switch lp := *r.Logprobs; {
		case lp < 0 || lp > maxCompletionLogprobs:
			return nil, badRequest("logprobs", "invalid_value", "logprobs %d: must be in [0, %d]", lp, maxCompletionLogprobs)
		}
		j.logprobs, j.topLogprobs = true, *r.Logprobs
	}
	return p.finish(j, &r.sharedFields, r.MaxTokens, "max_tokens", prompts)
}

// chatCompletion parses a POST /v1/chat/completions body.
func (p *parser) chatCompletion(body []byte) (*job, *APIError) {
	var b chatBody
	if e := decode(body, &b); e != nil {
		return nil, e
	}
	r := &b.chatRequest
	if e := decodeStopTokenIDs(&r.sharedFields, b.StopTokenIDs); e != nil {
		return nil, e
	}
	if e := p.checkModel(r.Model); e != nil {
		return nil, e
	}
	if e := r.refusedShared.check(); e != nil {
		return nil, e
	}
	if e := r.refusedChat.check(); e != nil {
		return nil, e
	}
	msgs, e := p.messages(b.Messages)
	if e != nil {
		return nil, e
	}
	tools, e := openAITools(r.Tools)
	if e != nil {
		return nil, e
	}
	choice, e := openAIToolChoice(r.ToolChoice, len(tools) > 0)
	if e != nil {
		return nil, e
	}
	kwargs, e := parseKwargs(r.ChatTemplateKwargs, "chat_template_kwargs")
	if e != nil {
		return nil, e
	}
	if kwargs, e = p.reasoningEffort(r.ReasoningEffort, kwargs, "reasoning_effort"); e != nil {
		return nil, e
	}
	c := &convo{msgs: msgs, tools: tools, choice: choice, parallel: r.ParallelToolCalls == nil || *r.ParallelToolCalls,
		kwargs: kwargs, msgsParam: "messages", toolsParam: "tools", choiceParam: "tool_choice",
		nameField: "function.name", schemaField: "function.parameters"}
	j := &job{chat: true, logprobs: r.Logprobs}
	if r.TopLogprobs != nil {
		switch tl := *r.TopLogprobs; {
		case tl < 0 || tl > sampling.MaxTopLogprobs:
			return nil, badRequest("top_logprobs", "invalid_value", "top_logprobs %d: must be in [0, %d]", tl, sampling.MaxTopLogprobs)
		case tl > 0 && !r.Logprobs:
			return nil, badRequest("top_logprobs", "invalid_value", "top_logprobs %d needs logprobs: true", tl)
		}
		j.topLogprobs = *r.TopLogprobs
	}
	maxTok, param := r.MaxTokens, "max_tokens"
	if r.MaxCompletionTokens != nil {
		maxTok, param = r.MaxCompletionTokens, "max_completion_tokens"
	}
	return p.convoJob(c, j, &r.sharedFields, maxTok, param)
}

// decodeStopTokenIDs decodes stop_token_ids (absent or null: none) into f;
// finish checks the count and the ids.
func decodeStopTokenIDs(f *sharedFields, raw json.RawMessage) *APIError {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	ids, e := tokenIDs(raw, "stop_token_ids")
	if e != nil {
		e.Param = "stop_token_ids" // the message names the element
		return e
	}
	f.StopTokenIDs = ids
	return nil
}

// messages decodes and checks the chat messages. Their content is bounded
// in bytes before the template renders it (rendering costs time and memory
// in proportion to the conversation), assuming the template writes every
// message's content, as common templates do.
func (p *parser) messages(raw json.RawMessage) ([]message, *APIError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("messages", "invalid_value", "messages: at least one message is required")
	}
	if raw[0] != '[' {
		return nil, badRequest("messages", "invalid_type", "messages: expected an array, got %s", jsonValueKind(raw))
	}
	var msgs []message
	content := 0
	e := eachElem(raw, "messages", func(i int, elem json.RawMessage) *APIError {
		// Every message takes at least one token (its role marker, at
		// least), so more messages than the context cannot fit.
		if p.lim.maxContext > 0 && i >= p.lim.maxContext {
			return badRequest("messages", "context_length_exceeded",
				"messages: more than %d messages, more than the model's context of %d tokens can hold", i, p.lim.maxContext)
		}
		m, e := p.message(i, elem)
		if e != nil {
			return e
		}
		content += len(m.Content)
		msgs = append(msgs, m)
		return nil
	})
	if e != nil {
		return nil, e
	}
	if len(msgs) == 0 {
		return nil, badRequest("messages", "invalid_value", "messages: at least one message is required")
	}
	if e := p.checkBytes("messages", "the messages' content", content); e != nil {
		return nil, e
	}
	return msgs, nil
}

// message decodes messages[i].
func (p *parser) message(i int, elem json.RawMessage) (message, *APIError) {
	param := fmt.Sprintf("messages[%d]", i)
	var m chatMessage
	if e := decodeElem(elem, &m, param); e != nil {
		return message{}, e
	}
	if _, ok := fallbackRoles[m.Role]; !ok {
		return message{}, badRequest(param+".role", "invalid_value",
			"%s.role %q: must be one of system, developer, user, assistant, tool", param, m.Role)
	}
	text, e := messageText(m.Content, param+".content")
	if e != nil {
		return message{}, e
	}
	out := message{Role: m.Role, Content: text, Name: m.Name}
	if present(m.ToolCalls) {
		if m.Role != "assistant" {
			return message{}, badRequest(param+".tool_calls", "invalid_value", "%s.tool_calls: only assistant messages make tool calls (role is %s)", param, m.Role)
		}
		if out.ToolCalls, e = openAIToolCalls(m.ToolCalls, param+".tool_calls"); e != nil {
			return message{}, e
		}
	}
	if m.ToolCallID != nil {
		if m.Role != "tool" {
			return message{}, badRequest(param+".tool_call_id", "invalid_value", "%s.tool_call_id: only tool messages answer a call (role is %s)", param, m.Role)
		}
		out.ToolCallID = *m.ToolCallID
	}
	if m.ReasoningContent != nil {
		if m.Role != "assistant" {
			return message{}, badRequest(param+".reasoning_content", "invalid_value", "%s.reasoning_content: only assistant messages hold reasoning (role is %s)", param, m.Role)
		}
		out.Reasoning = *m.ReasoningContent
	}
	return out, nil
}

// messageText flattens a message's content: a string, null, or a list of
// text parts.
func messageText(raw json.RawMessage, param string) (string, *APIError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badRequest(param, "invalid_type", "%s: %v", param, err)
		}
		return s, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(param, "invalid_type", "%s: expected a string or a list of content parts, got %s", param, jsonValueKind(raw))
	}
	var b strings.Builder
	for i, pt := range parts {
		if pt.Type != "text" {
			return "", badRequest(fmt.Sprintf("%s[%d].type", param, i), "unsupported",
				"%s[%d].type %q: only text content parts are supported", param, i, pt.Type)
		}
		b.WriteString(pt.Text)
	}
	return b.String(), nil
}

func (p *parser) checkModel(name string) *APIError {
	if name == "" || name == p.lim.model {
		return nil
	}
	return &APIError{Status: http.StatusNotFound, Type: errInvalidRequest, Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("model %q does not exist; this server serves %q", name, p.lim.model)}
}

// promptKinds is what a completions prompt may be.
const promptKinds = "a string, a list of strings, a list of token ids or a list of lists of token ids"

// prompts decodes the completions prompt: a string, a list of strings, a
// list of token ids, or a list of lists of token ids. Text is encoded with a
// leading BOS when the tokenizer asks for one; token ids are taken as they
// are. Lists are bounded before their elements are decoded or tokenized.
// Errors keep param "prompt" and name the element in the message.
func (p *parser) prompts(raw json.RawMessage) ([][]int32, *APIError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("prompt", "missing", "prompt is required")
	}
	switch raw[0] {
	case '"':
		var s string
		if e := unmarshalAt(raw, &s, "prompt"); e != nil {
			return nil, e
		}
		return p.encodePrompts([]string{s})
	case '[':
		return p.promptList(raw)
	default:
		return nil, badRequest("prompt", "invalid_type", "prompt: expected %s, got %s", promptKinds, jsonValueKind(raw))
	}
}

// promptList decodes a list prompt, which its first element's kind
// decides: strings, lists of token ids, or token ids.
func (p *parser) promptList(raw json.RawMessage) ([][]int32, *APIError) {
	switch first := bytes.TrimSpace(raw[1:]); first[0] {
	case ']':
		return nil, badRequest("prompt", "invalid_value", "prompt: empty list")
	case '"':
		var texts []string
		e := eachElem(raw, "prompt", func(i int, elem json.RawMessage) *APIError {
			if e := p.checkPromptCount(i); e != nil {
				return e
			}
			var s string
			if e := decodeElem(elem, &s, fmt.Sprintf("prompt[%d]", i)); e != nil {
				e.Param = "prompt"
				return e
			}
			texts = append(texts, s)
			return nil
		})
		if e != nil {
			return nil, e
		}
		return p.encodePrompts(texts)
	case '[':
		var out [][]int32
		e := eachElem(raw, "prompt", func(i int, elem json.RawMessage) *APIError {
			if e := p.checkPromptCount(i); e != nil {
				return e
			}
			toks, e := p.promptIDs(i, elem)
			if e != nil {
				return e
			}
			out = append(out, toks)
			return nil
		})
		if e != nil {
			return nil, e
		}
		return out, nil
	default:
		toks, e := p.promptIDs(0, raw)
		if e != nil {
			return nil, e
		}
		return [][]int32{toks}, nil
	}
}

// checkPromptCount refuses a list's prompt i when it is one too many: each
// prompt makes at least one choice (n >= 1; finish checks n × prompts).
func (p *parser) checkPromptCount(i int) *APIError {
	if i < p.lim.maxChoices {
		return nil
	}
	return badRequest("prompt", "invalid_value",
		"prompt: more than %d prompts; this server makes at most %d sequences per request (prompts × n)", i, p.lim.maxChoices)
}

// promptIDs decodes and checks prompt i given as token ids.
func (p *parser) promptIDs(i int, raw json.RawMessage) ([]int32, *APIError) {
	toks, e := tokenIDs(raw, fmt.Sprintf("prompt[%d]", i))
	if e != nil {
		e.Param = "prompt"
		return nil, e
	}
	if len(toks) == 0 {
		return nil, badRequest("prompt", "invalid_value", "prompt[%d]: empty list of token ids", i)
	}
	if e := p.checkPromptTokens(i, len(toks)); e != nil {
		return nil, e
	}
	for k, t := range toks {
		if t < 0 || int(t) >= p.lim.vocab {
			return nil, badRequest("prompt", "invalid_value", "prompt[%d][%d]: token %d outside the vocabulary [0, %d)", i, k, t, p.lim.vocab)
		}
	}
	return toks, nil
}

// encodePrompts tokenizes text prompts after checking all of them against
// the byte bound, so a refused request tokenizes nothing.
func (p *parser) encodePrompts(texts []string) ([][]int32, *APIError) {
	for i, s := range texts {
		if s == "" {
			return nil, badRequest("prompt", "invalid_value", "prompt[%d]: empty string", i)
		}
		if e := p.checkBytes("prompt", fmt.Sprintf("prompt[%d]", i), len(s)); e != nil {
			return nil, e
		}
	}
	out := make([][]int32, 0, len(texts))
	for i, s := range texts {
		toks := p.tok.Encode(s, p.tok.AddBOS())
		if len(toks) == 0 {
			return nil, badRequest("prompt", "invalid_value", "prompt[%d]: encodes to no tokens", i)
		}
		if e := p.checkPromptTokens(i, len(toks)); e != nil {
			return nil, e
		}
		out = append(out, toks)
	}
	return out, nil
}

// finish validates the shared fields and builds one executor.Request per
// choice. maxTok is the max-tokens field under its name param.
func (p *parser) finish(j *job, f *sharedFields, maxTok *int, param string, prompts [][]int32) (*job, *APIError) {
	n := 1
	if f.N != nil {
		n = *f.N
	}
	if n < 1 || n > p.lim.maxN {
		return nil, badRequest("n", "invalid_value", "n %d: must be in [1, %d]", n, p.lim.maxN)
	}
	if n*len(prompts) > p.lim.maxChoices {
		return nil, badRequest("n", "invalid_value", "%d prompts × n %d = %d sequences exceed this server's limit of %d per request",
			len(prompts), n, n*len(prompts), p.lim.maxChoices)
	}
	for i, pr := range prompts {
		if e := p.checkPromptTokens(i, len(pr)); e != nil {
			return nil, e
		}
	}
	maxTokens := 0 // up to the context
	if maxTok != nil {
		maxTokens = *maxTok
		if maxTokens <= 0 {
			return nil, badRequest(param, "invalid_value", "%s %d: must be > 0", param, maxTokens)
		}
		for _, pr := range prompts {
			if len(pr)+maxTokens > p.lim.maxContext {
				return nil, badRequest(param, "context_length_exceeded",
					"%s %d + prompt %d tokens = %d exceed the model's context of %d tokens",
					param, maxTokens, len(pr), len(pr)+maxTokens, p.lim.maxContext)
			}
		}
	}
	params, e := p.sampling(f)
	if e != nil {
		return nil, e
	}
	params.Logprobs, params.TopLogprobs = j.logprobs, j.topLogprobs
	stops, e := stopStrings(f.Stop)
	if e != nil {
		return nil, e
	}
	if len(f.StopTokenIDs) > maxStopTokenIDs {
		return nil, badRequest("stop_token_ids", "invalid_value", "stop_token_ids: %d ids, at most %d", len(f.StopTokenIDs), maxStopTokenIDs)
	}
	for i, t := range f.StopTokenIDs {
		if t < 0 || int(t) >= p.lim.vocab {
			return nil, badRequest("stop_token_ids", "invalid_value", "stop_token_ids[%d]: token %d outside the vocabulary [0, %d)", i, t, p.lim.vocab)
		}
	}
	c, e := parseConstraint(&f.constraintFields)
	if e != nil {
		return nil, e
	}
	j.constraint = c
	if f.StreamOptions != nil && !f.Stream {
		return nil, badRequest("stream_options", "invalid_value", "stream_options is only allowed with stream: true")
	}
	j.n, j.prompts = n, len(prompts)
	j.stream = f.Stream
	j.includeUsage = f.StreamOptions != nil && f.StreamOptions.IncludeUsage
	j.programID, j.programRelease, j.user = f.ProgramID, f.ProgramRelease, f.User
	stopIDs := f.StopTokenIDs
	if !f.IgnoreEOS && len(p.stops) > 0 {
		// One list per request: the client's ids, then the model's.
		stopIDs = append(slices.Clip(slices.Clone(f.StopTokenIDs)), p.stops...)
	}
	j.reqs = make([]executor.Request, 0, n*len(prompts))
	for _, pr := range prompts {
		for c := 0; c < n; c++ {
			ps := params
			if ps.HasSeed {
				ps.Seed += uint64(c) // choices of one seeded request differ, reproducibly
			}
			j.reqs = append(j.reqs, executor.Request{
				PromptTokens: pr, MaxTokens: maxTokens, Params: ps, Stop: stops,
				StopTokenIDs: stopIDs, IgnoreEOS: f.IgnoreEOS, CacheSalt: f.CacheSalt,
			})
		}
	}
	return j, nil
}

// sampling builds and validates the sampling parameters. OpenAI's defaults
// apply to absent fields (temperature 1, top_p 1); validation errors name
// the field.
func (p *parser) sampling(f *sharedFields) (sampling.Params, *APIError) {
	ps := sampling.DefaultParams()
	ps.Temperature = 1
	if t := f.Temperature; t != nil && (*t < 0 || *t > maxTemperature) {
		return ps, badRequest("temperature", "invalid_value", "temperature %v: must be in [0, %d]", *t, maxTemperature)
	}
	// 0 and -1 mean off; a larger k than the vocabulary is a client error
	// (OpenAI-compatible servers refuse it too).
	if k := f.TopK; k != nil && *k > p.lim.vocab {
		return ps, badRequest("top_k", "invalid_value", "top_k %d: must be at most the vocabulary size %d (0 or -1 means off)", *k, p.lim.vocab)
	}
	type field struct {
		name string
		src  *float64
		dst  *float32
	}
	for _, fl := range []field{
		{"temperature", f.Temperature, &ps.Temperature},
		{"top_p", f.TopP, &ps.TopP},
		{"min_p", f.MinP, &ps.MinP},
		{"presence_penalty", f.PresencePenalty, &ps.PresencePenalty},
		{"frequency_penalty", f.FrequencyPenalty, &ps.FrequencyPenalty},
		{"repetition_penalty", f.RepetitionPenalty, &ps.RepetitionPenalty},
	} {
		if fl.src == nil {
			continue
		}
		if math.Abs(*fl.src) > math.MaxFloat32 {
			return ps, badRequest(fl.name, "invalid_value", "%s %v: out of range", fl.name, *fl.src)
		}
		*fl.dst = float32(*fl.src)
	}
	if f.TopK != nil {
		ps.TopK = *f.TopK
	}
	if f.Seed != nil {
		ps.Seed, ps.HasSeed = uint64(*f.Seed), true
	}
	if err := ps.Validate(p.lim.vocab); err != nil {
		// sampling's errors start with the field name.
		name, _, _ := strings.Cut(err.Error(), " ")
		return ps, badRequest(name, "invalid_value", "%v", err)
	}
	return ps, nil
}

// stopStrings decodes stop: absent, null, a string or a list of strings.
// Errors keep param "stop" and name the element in the message.
func stopStrings(raw json.RawMessage) ([]string, *APIError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	switch raw[0] {
	case '"':
		var s string
		if e := unmarshalAt(raw, &s, "stop"); e != nil {
			return nil, e
		}
		if e := checkStop(0, s); e != nil {
			return nil, e
		}
		return []string{s}, nil
	case '[':
		var stops []string
		e := eachElem(raw, "stop", func(i int, elem json.RawMessage) *APIError {
			if i >= maxStops {
				return badRequest("stop", "invalid_value", "stop: more than %d strings, at most %d", i, maxStops)
			}
			var s string
			if e := decodeElem(elem, &s, fmt.Sprintf("stop[%d]", i)); e != nil {
				e.Param = "stop"
				return e
			}
			stops = append(stops, s)
			return checkStop(i, s)
		})
		if e != nil {
			return nil, e
		}
		return stops, nil
	default:
		return nil, badRequest("stop", "invalid_type", "stop: expected a string or a list of strings, got %s", jsonValueKind(raw))
	}
}

// checkStop checks stop string i: not empty (it would match everywhere),
// and bounded, as every sequence's output is scanned for it.
func checkStop(i int, s string) *APIError {
	switch {
	case s == "":
		return badRequest("stop", "invalid_value", "stop[%d]: empty string", i)
	case len(s) > maxStopBytes:
		return badRequest("stop", "invalid_value", "stop[%d]: %d bytes, at most %d", i, len(s), maxStopBytes)
	}
	return nil
}
