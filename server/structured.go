package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/turnstile-llm/turnstile/grammar"
	"github.com/turnstile-llm/turnstile/guided"
)

// This file is structured output's request side: OpenAI's response_format
// and vLLM's extensions (structured_outputs, and the older guided_json,
// guided_regex, guided_choice and guided_grammar) parsed into one
// constraint per request, compiled through the server's grammar cache.

// responseFormat is OpenAI's response_format.
type responseFormat struct {
	Type       string            `json:"type"`
	JSONSchema *jsonSchemaFormat `json:"json_schema"`
}

type jsonSchemaFormat struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Strict      *bool           `json:"strict"`
}

// structuredOutputs is vLLM's structured_outputs request field.
type structuredOutputs struct {
	JSON                        json.RawMessage `json:"json"` // a schema object, or its JSON text
	Regex                       *string         `json:"regex"`
	Choice                      []string        `json:"choice"`
	Grammar                     *string         `json:"grammar"`
	JSONObject                  *bool           `json:"json_object"`
	DisableAnyWhitespace        bool            `json:"disable_any_whitespace"`
	DisableFallback             bool            `json:"disable_fallback"`
	DisableAdditionalProperties bool            `json:"disable_additional_properties"`
	WhitespacePattern           *string         `json:"whitespace_pattern"`
	StructuralTag               json.RawMessage `json:"structural_tag"`
}

// constraintFields are the structured-output request fields, shared by
// /v1/completions and /v1/chat/completions.
type constraintFields struct {
	ResponseFormat    *responseFormat    `json:"response_format"`
	StructuredOutputs *structuredOutputs `json:"structured_outputs"`
	// vLLM's older names.
	GuidedJSON              json.RawMessage `json:"guided_json"`
	GuidedRegex             *string         `json:"guided_regex"`
	GuidedChoice            []string        `json:"guided_choice"`
	GuidedGrammar           *string         `json:"guided_grammar"`
	GuidedDecodingBackend   *string         `json:"guided_decoding_backend"`
	GuidedWhitespacePattern *string         `json:"guided_whitespace_pattern"`
}

// constraint is a request's parsed constraint and the field that gave it
// (for errors).
type constraint struct {
	spec  guided.Spec
	param string
	// optional: without the grammar engine the request runs unconstrained
	// (tool_choice auto: the model chooses anyway, and its calls are
	// parsed from the text).
	optional bool
	// rename, when set, rewrites a grammar error's message into the
	// request's field names.
	rename func(string) string
}

// constraint parses the structured-output fields: at most one source of
// a constraint; nil when there is none.
func parseConstraint(f *constraintFields) (*constraint, *APIError) {
	var found []*constraint
	add := func(c *constraint) { found = append(found, c) }
	if rf := f.ResponseFormat; rf != nil {
		switch rf.Type {
		case "text":
		case "json_object":
			add(&constraint{spec: guided.Spec{Kind: guided.JSONObject}, param: "response_format"})
		case "json_schema":
			js := rf.JSONSchema
			if js == nil {
				return nil, badRequest("response_format.json_schema", "invalid_value", `response_format: type "json_schema" needs a json_schema object`)
			}
			src, e := schemaSource(js.Schema, "response_format.json_schema.schema", false)
			if e != nil {
				return nil, e
			}
			add(&constraint{spec: guided.Spec{Kind: guided.JSONSchema, Source: src}, param: "response_format.json_schema.schema"})
		case "":
			return nil, badRequest("response_format.type", "invalid_value", "response_format.type is missing (text, json_object or json_schema)")
		default:
			return nil, badRequest("response_format.type", "invalid_value", "response_format.type %q: must be text, json_object or json_schema", rf.Type)
		}
	}
	ws := grammar.WhitespaceBounded
	if so := f.StructuredOutputs; so != nil {
		switch {
		case so.DisableAdditionalProperties:
			return nil, badRequest("structured_outputs.disable_additional_properties", "unsupported", "structured_outputs.disable_additional_properties is not supported: say additionalProperties: false in the schema")
		case so.WhitespacePattern != nil && *so.WhitespacePattern != "":
			return nil, badRequest("structured_outputs.whitespace_pattern", "unsupported", "structured_outputs.whitespace_pattern is not supported (disable_any_whitespace gives compact JSON)")
		}
		if so.DisableAnyWhitespace {
			ws = grammar.WhitespaceCompact
		}
		if present(so.JSON) {
			src, e := schemaSource(so.JSON, "structured_outputs.json", true)
			if e != nil {
				return nil, e
			}
			add(&constraint{spec: guided.Spec{Kind: guided.JSONSchema, Source: src}, param: "structured_outputs.json"})
		}
		if so.Regex != nil {
			add(&constraint{spec: guided.Spec{Kind: guided.Regex, Source: *so.Regex}, param: "structured_outputs.regex"})
		}
		if so.Choice != nil {
			add(&constraint{spec: guided.Spec{Kind: guided.Choice, Choices: so.Choice}, param: "structured_outputs.choice"})
		}
		if so.Grammar != nil {
			add(&constraint{spec: guided.Spec{Kind: guided.GBNF, Source: *so.Grammar}, param: "structured_outputs.grammar"})
		}
		if present(so.StructuralTag) {
			// vLLM sends xgrammar's structural tag as JSON text; an object
			// is taken as well. grammar.ParseStructuralTag checks it when
			// the cache compiles it, so errors name its members.
			src, e := schemaSource(so.StructuralTag, "structured_outputs.structural_tag", true)
			if e != nil {
				return nil, e
			}
			add(&constraint{spec: guided.Spec{Kind: guided.StructuralTag, Source: src}, param: "structured_outputs.structural_tag"})
		}
		if so.JSONObject != nil && *so.JSONObject {
			add(&constraint{spec: guided.Spec{Kind: guided.JSONObject}, param: "structured_outputs.json_object"})
		}
	}
	if present(f.GuidedJSON) {
		src, e := schemaSource(f.GuidedJSON, "guided_json", true)
		if e != nil {
			return nil, e
		}
		add(&constraint{spec: guided.Spec{Kind: guided.JSONSchema, Source: src}, param: "guided_json"})
	}
	if f.GuidedRegex != nil {
		add(&constraint{spec: guided.Spec{Kind: guided.Regex, Source: *f.GuidedRegex}, param: "guided_regex"})
	}
	if f.GuidedChoice != nil {
		add(&constraint{spec: guided.Spec{Kind: guided.Choice, Choices: f.GuidedChoice}, param: "guided_choice"})
	}
	if f.GuidedGrammar != nil {
		add(&constraint{spec: guided.Spec{Kind: guided.GBNF, Source: *f.GuidedGrammar}, param: "guided_grammar"})
	}
	if p := f.GuidedWhitespacePattern; p != nil && *p != "" {
		return nil, badRequest("guided_whitespace_pattern", "unsupported", "guided_whitespace_pattern is not supported")
	}
	// guided_decoding_backend names a vLLM implementation; turnstile has
	// one grammar engine, whose output is the same language, so any name
	// is served by it.
	switch len(found) {
	case 0:
		return nil, nil
	case 1:
		c := found[0]
		c.spec.Whitespace = ws
		return c, nil
	}
	return nil, badRequest(found[1].param, "invalid_value", "%s and %s both constrain the output: give one", found[0].param, found[1].param)
}

// present: a raw field holds a value other than null.
func present(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && string(t) != "null"
}

// schemaSource returns a schema field's JSON: an object, or (when
// asString, as vLLM allows) a string holding the schema's JSON text.
func schemaSource(raw json.RawMessage, param string, asString bool) (string, *APIError) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return "", badRequest(param, "invalid_value", "%s: the schema is missing", param)
	}
	switch t[0] {
	case '{':
		return string(t), nil
	case '"':
		if asString {
			var s string
			if err := json.Unmarshal(t, &s); err != nil {
				return "", badRequest(param, "invalid_value", "%s: %v", param, err)
			}
			if !json.Valid([]byte(s)) {
				return "", badRequest(param, "invalid_value", "%s: the string is not JSON", param)
			}
			return s, nil
		}
	case 't', 'f':
		// A boolean schema: true allows any JSON value, false none.
		return string(t), nil
	}
	return "", badRequest(param, "invalid_type", "%s: expected a JSON Schema object, got %s", param, jsonValueKind(t))
}

// compileConstraint compiles j's constraint (on the request's goroutine,
// bounded by the cache's compilers) and attaches it to every choice.
func (s *Server) compileConstraint(ctx context.Context, j *job) *APIError {
	c := j.constraint
	if c == nil {
		return nil
	}
	if s.cfg.Grammars == nil {
		if c.optional {
			return nil
		}
		if s.cfg.GrammarsOff != nil {
			return badRequest(c.param, "unsupported", "%s: structured output is off on this server: %v", c.param, s.cfg.GrammarsOff)
		}
		return badRequest(c.param, "unsupported", "%s: structured output is not enabled on this server", c.param)
	}
	g, err := s.cfg.Grammars.Get(ctx, c.spec)
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return nil // the client went away; the caller sees ctx
	case err != nil:
		code := "invalid_value"
		switch {
		case grammar.IsUnsupported(err):
			code = "unsupported"
		case grammar.IsTooLarge(err):
			code = "too_large"
		}
		msg := err.Error()
		if c.rename != nil {
			msg = c.rename(msg)
		}
		return badRequest(c.param, code, "%s: %s", c.param, msg)
	}
	for i := range j.reqs {
		if j.reqs[i].IgnoreEOS {
			return badRequest("ignore_eos", "invalid_value", "ignore_eos cannot be used with %s: the constraint decides where the output ends", c.param)
		}
		j.reqs[i].Grammar = g
	}
	return nil
}

// guidedError is the answer to a request whose matcher failed in the
// engine (a grammar more ambiguous than the engine follows).
func guidedError(err error) *APIError {
	return &APIError{Status: http.StatusInternalServerError, Type: errServer, Code: "structured_output_failed",
		Message: fmt.Sprintf("the request was ended: %v", err)}
}
