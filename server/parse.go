package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
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
	maxStops        = 16 // stop strings per request
	maxStopTokenIDs = 64
)

// limits are what parsing checks requests against.
type limits struct {
	model      string // the one served model id
	maxContext int    // tokens, prompt + output
	vocab      int
	maxN       int // most choices per prompt
	maxChoices int // most engine requests one HTTP request may create
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
}

// parser decodes and validates request bodies. It allocates nothing in the
// engine: a request it refuses never reaches Submit.
type parser struct {
	lim  limits
	tok  Tokenizer
	chat *chatTemplate
}

// decode unmarshals body into v, mapping failures to 400 errors that name
// the field. body must be valid UTF-8 (JSON's encoding; the standard decoder
// would silently replace bad bytes).
func decode(body []byte, v any) *APIError {
	if !utf8.Valid(body) {
		return badRequest("", "invalid_utf8", "request body is not valid UTF-8")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("", "invalid_json", "request body is empty; expected a JSON object")
	}
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te) && te.Field == "":
		return badRequest("", "invalid_json", "request body must be a JSON object, got a JSON %s", te.Value)
	case errors.As(err, &te):
		te.Field = strings.TrimPrefix(te.Field, "sharedFields.") // the embedded struct is not part of the API
		return badRequest(te.Field, "invalid_type", "%s: expected %s, got a JSON %s", te.Field, jsonKind(te.Type.String()), te.Value)
	case errors.As(err, &se):
		return badRequest("", "invalid_json", "malformed JSON at byte %d: %v", se.Offset, err)
	default:
		return badRequest("", "invalid_json", "malformed JSON: %v", err)
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
	var r completionRequest
	if e := decode(body, &r); e != nil {
		return nil, e
	}
	if e := p.checkModel(r.Model); e != nil {
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
	var r chatRequest
	if e := decode(body, &r); e != nil {
		return nil, e
	}
	if e := p.checkModel(r.Model); e != nil {
		return nil, e
	}
	if len(r.Messages) == 0 {
		return nil, badRequest("messages", "invalid_value", "messages: at least one message is required")
	}
	msgs := make([]message, len(r.Messages))
	for i, m := range r.Messages {
		param := fmt.Sprintf("messages[%d]", i)
		if _, ok := fallbackRoles[m.Role]; !ok {
			return nil, badRequest(param+".role", "invalid_value",
				"%s.role %q: must be one of system, developer, user, assistant, tool", param, m.Role)
		}
		text, e := messageText(m.Content, param+".content")
		if e != nil {
			return nil, e
		}
		msgs[i] = message{Role: m.Role, Content: text, Name: m.Name}
	}
	text, bos, err := p.chat.render(msgs)
	if err != nil {
		return nil, badRequest("messages", "invalid_value", "messages: %v", err)
	}
	prompt := p.tok.Encode(text, bos || p.tok.AddBOS())
	if len(prompt) == 0 {
		return nil, badRequest("messages", "invalid_value", "messages: the rendered prompt encodes to no tokens")
	}
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
	return p.finish(j, &r.sharedFields, maxTok, param, [][]int32{prompt})
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
		return "", badRequest(param, "invalid_type", "%s: expected a string or a list of content parts", param)
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

// prompts decodes the completions prompt: a string, a list of strings, a
// list of token ids, or a list of lists of token ids. Text is encoded with a
// leading BOS when the tokenizer asks for one; token ids are taken as they
// are.
func (p *parser) prompts(raw json.RawMessage) ([][]int32, *APIError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("prompt", "missing", "prompt is required")
	}
	var texts []string
	var ids [][]int32
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, badRequest("prompt", "invalid_type", "prompt: %v", err)
		}
		texts = []string{s}
	case '[':
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil {
			return nil, badRequest("prompt", "invalid_type", "prompt: %v", err)
		}
		if len(elems) == 0 {
			return nil, badRequest("prompt", "invalid_value", "prompt: empty list")
		}
		// A failed Unmarshal may leave its target partly filled: decode
		// into fresh variables and keep only the one that succeeded.
		var strs []string
		var one []int32
		var many [][]int32
		switch {
		case json.Unmarshal(raw, &strs) == nil:
			texts = strs
		case json.Unmarshal(raw, &one) == nil:
			ids = [][]int32{one}
		case json.Unmarshal(raw, &many) == nil:
			ids = many
		default:
			return nil, badRequest("prompt", "invalid_type",
				"prompt: expected a string, a list of strings, a list of token ids or a list of lists of token ids")
		}
	default:
		return nil, badRequest("prompt", "invalid_type",
			"prompt: expected a string, a list of strings, a list of token ids or a list of lists of token ids")
	}
	out := make([][]int32, 0, len(texts)+len(ids))
	for i, s := range texts {
		if s == "" {
			return nil, badRequest("prompt", "invalid_value", "prompt[%d]: empty string", i)
		}
		toks := p.tok.Encode(s, p.tok.AddBOS())
		if len(toks) == 0 {
			return nil, badRequest("prompt", "invalid_value", "prompt[%d]: encodes to no tokens", i)
		}
		out = append(out, toks)
	}
	for i, toks := range ids {
		if len(toks) == 0 {
			return nil, badRequest("prompt", "invalid_value", "prompt[%d]: empty list of token ids", i)
		}
		for k, t := range toks {
			if t < 0 || int(t) >= p.lim.vocab {
				return nil, badRequest("prompt", "invalid_value", "prompt[%d][%d]: token %d outside the vocabulary [0, %d)", i, k, t, p.lim.vocab)
			}
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
		if len(pr) >= p.lim.maxContext {
			return nil, badRequest("prompt", "context_length_exceeded",
				"prompt %d is %d tokens, but the model's context is %d tokens (at least one must be left to generate)",
				i, len(pr), p.lim.maxContext)
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
	if f.StreamOptions != nil && !f.Stream {
		return nil, badRequest("stream_options", "invalid_value", "stream_options is only allowed with stream: true")
	}
	j.n, j.prompts = n, len(prompts)
	j.stream = f.Stream
	j.includeUsage = f.StreamOptions != nil && f.StreamOptions.IncludeUsage
	j.programID, j.programRelease, j.user = f.ProgramID, f.ProgramRelease, f.User
	j.reqs = make([]executor.Request, 0, n*len(prompts))
	for _, pr := range prompts {
		for c := 0; c < n; c++ {
			ps := params
			if ps.HasSeed {
				ps.Seed += uint64(c) // choices of one seeded request differ, reproducibly
			}
			j.reqs = append(j.reqs, executor.Request{
				PromptTokens: pr, MaxTokens: maxTokens, Params: ps, Stop: stops,
				StopTokenIDs: f.StopTokenIDs, IgnoreEOS: f.IgnoreEOS, CacheSalt: f.CacheSalt,
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
func stopStrings(raw json.RawMessage) ([]string, *APIError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var stops []string
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, badRequest("stop", "invalid_type", "stop: %v", err)
		}
		stops = []string{s}
	} else if err := json.Unmarshal(raw, &stops); err != nil {
		return nil, badRequest("stop", "invalid_type", "stop: expected a string or a list of strings")
	}
	if len(stops) > maxStops {
		return nil, badRequest("stop", "invalid_value", "stop: %d strings, at most %d", len(stops), maxStops)
	}
	for i, s := range stops {
		if s == "" {
			return nil, badRequest("stop", "invalid_value", "stop[%d]: empty string", i)
		}
	}
	return stops, nil
}
