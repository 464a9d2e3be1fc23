package server

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// This file refuses the request fields turnstile does not implement yet
// whose silent omission would change the answer: a client that sends
// logit_bias expects its biases.
// Each is a 400 naming the field; a value that asks for nothing (null,
// an empty list or object, function_call "none" or "auto",
// best_of 1, modalities ["text"]) is accepted.

// refusedShared are such fields of both endpoints.
type refusedShared struct {
	LogitBias json.RawMessage `json:"logit_bias"`
}

// refusedCompletion are such fields of /v1/completions.
type refusedCompletion struct {
	BestOf json.RawMessage `json:"best_of"`
}

// refusedChat are such fields of /v1/chat/completions. (functions and
// function_call are OpenAI's deprecated form of tools.)
type refusedChat struct {
	Functions json.RawMessage `json:"functions"`
	// WebSearchOptions asks for answers grounded in a web search, and
	// Verbosity for a longer or shorter answer: turnstile does neither.
	WebSearchOptions json.RawMessage `json:"web_search_options"`
	Verbosity        json.RawMessage `json:"verbosity"`
	FunctionCall     json.RawMessage `json:"function_call"`
	Audio            json.RawMessage `json:"audio"`
	Modalities       json.RawMessage `json:"modalities"`
}

func (r *refusedShared) check() *APIError {
	if !asksNothing(r.LogitBias, `{}`) {
		return badRequest("logit_bias", "unsupported", "logit_bias is not supported")
	}
	return nil
}

func (r *refusedCompletion) check() *APIError {
	if !asksNothing(r.BestOf, `1`) {
		return badRequest("best_of", "unsupported", "best_of %s is not supported (only 1): ask for n completions instead", compact(r.BestOf))
	}
	return nil
}

func (r *refusedChat) check() *APIError {
	for _, f := range []struct {
		name  string
		v     json.RawMessage
		empty []string
	}{
		{"functions", r.Functions, []string{`[]`}},
		{"web_search_options", r.WebSearchOptions, []string{`{}`}},
		{"verbosity", r.Verbosity, []string{`"medium"`}},
		{"function_call", r.FunctionCall, []string{`"none"`, `"auto"`}},
		{"audio", r.Audio, nil},
		{"modalities", r.Modalities, []string{`[]`, `["text"]`}},
	} {
		if !asksNothing(f.v, f.empty...) {
			hint := ""
			if f.name == "functions" || f.name == "function_call" {
				hint = " (use tools and tool_choice)"
			}
			return badRequest(f.name, "unsupported", "%s %s is not supported%s", f.name, clipValue(compact(f.v)), hint)
		}
	}
	return nil
}

// asksNothing: v is absent, null, or (compacted) one of empty.
func asksNothing(v json.RawMessage, empty ...string) bool {
	c := compact(v)
	if c == "" || c == "null" {
		return true
	}
	for _, e := range empty {
		if c == e {
			return true
		}
	}
	return false
}

// compact is v without insignificant whitespace (v itself when it is not
// valid JSON; decode has already refused that).
func compact(v json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return string(v)
	}
	return b.String()
}

// clipValue shortens a value quoted in an error.
func clipValue(s string) string {
	n := 80
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
