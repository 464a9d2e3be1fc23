package server

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnstile-llm/turnstile/internal/testwait"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/executor"
)

// joinStream concatenates the text of a completions or chat stream and
// returns the finish reason per choice and the usage chunk, checking the
// protocol on the way: [DONE] last, every chunk of the request's id.
func joinStream(t *testing.T, events []string, chat bool) (texts map[int]string, finish map[int]string, u *completionOut) {
	t.Helper()
	require.NotEmpty(t, events)
	require.Equal(t, "[DONE]", events[len(events)-1])
	texts, finish = map[int]string{}, map[int]string{}
	var id string
	for _, ev := range events[:len(events)-1] {
		var c completionOut
		require.NoError(t, json.Unmarshal([]byte(ev), &c), ev)
		if id == "" {
			id = c.ID
		}
		require.Equal(t, id, c.ID)
		if chat {
			require.Equal(t, "chat.completion.chunk", c.Object)
		} else {
			require.Equal(t, "text_completion", c.Object)
		}
		if c.Usage != nil {
			require.Empty(t, c.Choices, "the usage chunk has no choices")
			u = &c
			continue
		}
		require.Len(t, c.Choices, 1)
		ch := c.Choices[0]
		_, done := finish[ch.Index]
		require.False(t, done, "chunk after the finish of choice %d", ch.Index)
		if chat {
			require.NotNil(t, ch.Delta)
			if ch.Delta.Content != nil {
				texts[ch.Index] += *ch.Delta.Content
			}
		} else {
			texts[ch.Index] += ch.Text
		}
		if ch.FinishReason != nil {
			finish[ch.Index] = *ch.FinishReason
		}
	}
	return texts, finish, u
}

func TestCompletionStreamMatchesWhole(t *testing.T) {
	e := newSimEnv(t, simOpts{})
	for _, tc := range []struct {
		name string
		body map[string]any
	}{
		{"string prompt", map[string]any{"model": testModel, "prompt": "Once upon a time", "max_tokens": 24, "seed": 42}},
		{"token prompt", map[string]any{"prompt": []int{1, 400, 401, 402}, "max_tokens": 9, "seed": 7, "temperature": 0}},
		{"stop string", map[string]any{"prompt": "Lily", "max_tokens": 30, "seed": 9, "stop": []string{"e"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var whole completionOut
			resp := e.post(t, "/v1/completions", tc.body)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			decodeJSON(t, resp, &whole)
			require.Equal(t, "text_completion", whole.Object)
			require.True(t, strings.HasPrefix(whole.ID, "cmpl-"))
			require.Len(t, whole.Choices, 1)
			require.NotNil(t, whole.Usage)
			require.Equal(t, whole.Usage.PromptTokens+whole.Usage.CompletionTokens, whole.Usage.TotalTokens)

			sb := map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}}
			for k, v := range tc.body {
				sb[k] = v
			}
			texts, finish, u := joinStream(t, readSSE(t, e.post(t, "/v1/completions", sb)), false)
			require.Equal(t, whole.Choices[0].Text, texts[0])
			require.Equal(t, *whole.Choices[0].FinishReason, finish[0])
			require.NotNil(t, u)
			require.Equal(t, whole.Usage.PromptTokens, u.Usage.PromptTokens)
			require.Equal(t, whole.Usage.CompletionTokens, u.Usage.CompletionTokens)
			if tc.name == "stop string" {
				require.NotContains(t, whole.Choices[0].Text, "e")
				require.Equal(t, "stop", finish[0])
			} else {
				require.Equal(t, "length", finish[0])
				require.Equal(t, tc.body["max_tokens"], whole.Usage.CompletionTokens)
			}
		})
	}
}

func TestUsageCounts(t *testing.T) {
	e := newSimEnv(t, simOpts{})
	prompt := "One day, a little girl"
	var out completionOut
	decodeJSON(t, e.post(t, "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 5, "logprobs": 0}), &out)
	want := len(e.tok.Encode(prompt, true))
	require.Equal(t, want, out.Usage.PromptTokens)
	require.Equal(t, 5, out.Usage.CompletionTokens)
	require.Equal(t, want+5, out.Usage.TotalTokens)
	require.NotNil(t, out.Choices[0].Logprobs)
	require.Len(t, out.Choices[0].Logprobs.Tokens, 5)
	require.Equal(t, out.Choices[0].Text, strings.Join(out.Choices[0].Logprobs.Tokens, ""))
	for _, lp := range out.Choices[0].Logprobs.TokenLogprobs {
		require.LessOrEqual(t, lp, float32(0))
	}
}

func TestNChoices(t *testing.T) {
	e := newSimEnv(t, simOpts{})
	body := map[string]any{"prompt": []string{"Tom", "The cat"}, "n": 2, "max_tokens": 6, "seed": 5}
	var out completionOut
	decodeJSON(t, e.post(t, "/v1/completions", body), &out)
	require.Len(t, out.Choices, 4)
	p0, p1 := len(e.tok.Encode("Tom", true)), len(e.tok.Encode("The cat", true))
	require.Equal(t, p0+p1, out.Usage.PromptTokens)
	require.Equal(t, 24, out.Usage.CompletionTokens)
	require.NotEqual(t, out.Choices[0].Text, out.Choices[1].Text, "seeded choices of one prompt differ")

	body["stream"] = true
	texts, finish, _ := joinStream(t, readSSE(t, e.post(t, "/v1/completions", body)), false)
	require.Len(t, finish, 4)
	for i, c := range out.Choices {
		require.Equal(t, i, c.Index)
		require.Equal(t, c.Text, texts[i])
	}
}

// errCase is one bad request and the exact answer it must get.
type errCase struct {
	name   string
	path   string
	body   any
	hdr    []string
	status int
	typ    string
	param  string // "" for null
	code   string
}

func checkErrors(t *testing.T, e *env, cases []errCase) {
	t.Helper()
	before := e.eng.Snapshot()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path == "" {
				path = "/v1/completions"
			}
			resp := e.post(t, path, tc.body, tc.hdr...)
			require.Equal(t, tc.status, resp.StatusCode)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var out errorOut
			decodeJSON(t, resp, &out)
			require.Equal(t, tc.typ, out.Error.Type, out.Error.Message)
			require.NotEmpty(t, out.Error.Message)
			if tc.param == "" {
				require.Nil(t, out.Error.Param, out.Error.Message)
			} else {
				require.NotNil(t, out.Error.Param, out.Error.Message)
				require.Equal(t, tc.param, *out.Error.Param, out.Error.Message)
			}
			if tc.code != "" {
				require.NotNil(t, out.Error.Code)
				require.Equal(t, tc.code, *out.Error.Code)
			}
		})
	}
	after := e.eng.Snapshot()
	require.Equal(t, before.Submitted, after.Submitted, "rejected requests reached the engine")
	require.Equal(t, before.Steps, after.Steps)
	require.Equal(t, before.PromptTokens, after.PromptTokens)
	require.Zero(t, e.srv.InFlight())
}

func TestBadInputs(t *testing.T) {
	const ctxLen = 64
	e := newSimEnv(t, simOpts{maxContext: ctxLen, maxBody: 4096})
	long := make([]int, ctxLen)
	for i := range long {
		long[i] = 300
	}
	const bad, inv = http.StatusBadRequest, errInvalidRequest
	checkErrors(t, e, []errCase{
		{"malformed JSON", "", `{"prompt": "hi",`, nil, bad, inv, "", "invalid_json"},
		{"empty body", "", ``, nil, bad, inv, "", "invalid_json"},
		{"not an object", "", `[1,2]`, nil, bad, inv, "", "invalid_json"},
		{"trailing garbage", "", `{"prompt":"hi"} x`, nil, bad, inv, "", "invalid_json"},
		{"max_tokens string", "", `{"prompt":"hi","max_tokens":"5"}`, nil, bad, inv, "max_tokens", "invalid_type"},
		{"max_tokens fraction", "", `{"prompt":"hi","max_tokens":2.5}`, nil, bad, inv, "max_tokens", "invalid_type"},
		{"temperature string", "", `{"prompt":"hi","temperature":"hot"}`, nil, bad, inv, "temperature", "invalid_type"},
		{"stream string", "", `{"prompt":"hi","stream":"yes"}`, nil, bad, inv, "stream", "invalid_type"},
		{"prompt number", "", `{"prompt":5}`, nil, bad, inv, "prompt", "invalid_type"},
		{"prompt mixed list", "", `{"prompt":["a",1]}`, nil, bad, inv, "prompt", "invalid_type"},
		{"prompt missing", "", `{"max_tokens":3}`, nil, bad, inv, "prompt", "missing"},
		{"prompt empty", "", `{"prompt":""}`, nil, bad, inv, "prompt", "invalid_value"},
		{"prompt empty list", "", `{"prompt":[]}`, nil, bad, inv, "prompt", "invalid_value"},
		{"prompt token outside vocab", "", `{"prompt":[1,512]}`, nil, bad, inv, "prompt", "invalid_value"},
		{"max_tokens 0", "", `{"prompt":"hi","max_tokens":0}`, nil, bad, inv, "max_tokens", "invalid_value"},
		{"max_tokens negative", "", `{"prompt":"hi","max_tokens":-3}`, nil, bad, inv, "max_tokens", "invalid_value"},
		{"max_tokens beyond context", "", `{"prompt":"hi","max_tokens":64}`, nil, bad, inv, "max_tokens", "context_length_exceeded"},
		{"prompt beyond context", "", map[string]any{"prompt": long}, nil, bad, inv, "prompt", "context_length_exceeded"},
		{"temperature negative", "", `{"prompt":"hi","temperature":-0.5}`, nil, bad, inv, "temperature", "invalid_value"},
		{"temperature huge", "", `{"prompt":"hi","temperature":1e300}`, nil, bad, inv, "temperature", "invalid_value"},
		{"top_p 0", "", `{"prompt":"hi","top_p":0}`, nil, bad, inv, "top_p", "invalid_value"},
		{"top_p above 1", "", `{"prompt":"hi","top_p":1.5}`, nil, bad, inv, "top_p", "invalid_value"},
		{"top_k -2", "", `{"prompt":"hi","top_k":-2}`, nil, bad, inv, "top_k", "invalid_value"},
		{"min_p 2", "", `{"prompt":"hi","min_p":2}`, nil, bad, inv, "min_p", "invalid_value"},
		{"presence_penalty 3", "", `{"prompt":"hi","presence_penalty":3}`, nil, bad, inv, "presence_penalty", "invalid_value"},
		{"frequency_penalty -3", "", `{"prompt":"hi","frequency_penalty":-3}`, nil, bad, inv, "frequency_penalty", "invalid_value"},
		{"repetition_penalty 0", "", `{"prompt":"hi","repetition_penalty":0}`, nil, bad, inv, "repetition_penalty", "invalid_value"},
		{"logprobs 6", "", `{"prompt":"hi","logprobs":6}`, nil, bad, inv, "logprobs", "invalid_value"},
		{"logprobs negative", "", `{"prompt":"hi","logprobs":-1}`, nil, bad, inv, "logprobs", "invalid_value"},
		{"n 0", "", `{"prompt":"hi","n":0}`, nil, bad, inv, "n", "invalid_value"},
		{"n 17", "", `{"prompt":"hi","n":17}`, nil, bad, inv, "n", "invalid_value"},
		{"n beyond in-flight bound", "", `{"prompt":["a","b"],"n":9}`, nil, bad, inv, "n", "invalid_value"},
		{"stop number", "", `{"prompt":"hi","stop":5}`, nil, bad, inv, "stop", "invalid_type"},
		{"stop empty", "", `{"prompt":"hi","stop":[""]}`, nil, bad, inv, "stop", "invalid_value"},
		{"stop_token_ids outside vocab", "", `{"prompt":"hi","stop_token_ids":[9999]}`, nil, bad, inv, "stop_token_ids", "invalid_value"},
		{"stream_options without stream", "", `{"prompt":"hi","stream_options":{"include_usage":true}}`, nil, bad, inv, "stream_options", "invalid_value"},
		{"echo", "", `{"prompt":"hi","echo":true}`, nil, bad, inv, "echo", "unsupported"},
		// Fields not implemented yet, refused rather than ignored.
		{"logit_bias", "", `{"prompt":"hi","logit_bias":{"5":100}}`, nil, bad, inv, "logit_bias", "unsupported"},
		{"best_of 2", "", `{"prompt":"hi","best_of":2}`, nil, bad, inv, "best_of", "unsupported"},
		{"chat logit_bias", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"logit_bias":{"5":-100}}`, nil, bad, inv, "logit_bias", "unsupported"},
		{"chat tools not a list", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":{"type":"function"}}`, nil, bad, inv, "tools", "invalid_type"},
		{"chat tool type", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_search"}]}`, nil, bad, inv, "tools[0].type", "invalid_value"},
		{"chat tool without function", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}]}`, nil, bad, inv, "tools[0].function", "invalid_value"},
		{"chat tool name", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"a b"}}]}`, nil, bad, inv, "tools[0].function.name", "invalid_value"},
		{"chat tool names twice", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]}`, nil, bad, inv, "tools[1].function.name", "invalid_value"},
		{"chat tool parameters not an object", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":[1]}}]}`, nil, bad, inv, "tools[0].function.parameters", "invalid_type"},
		{"chat tool_choice required without tools", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tool_choice":"required"}`, nil, bad, inv, "tool_choice", "invalid_value"},
		{"chat tool_choice word", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tool_choice":"always"}`, nil, bad, inv, "tool_choice", "invalid_value"},
		{"chat tool_choice unknown name", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, nil, bad, inv, "tool_choice", "invalid_value"},
		{"chat tool message without call", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"},{"role":"tool","content":"42","tool_call_id":"c1"}]}`, nil, bad, inv, "messages[1].tool_call_id", "invalid_value"},
		{"chat tool message without id", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"},{"role":"tool","content":"42"}]}`, nil, bad, inv, "messages[1].tool_call_id", "invalid_value"},
		{"chat tool result twice", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"1","tool_call_id":"c1"},{"role":"tool","content":"2","tool_call_id":"c1"}]}`, nil, bad, inv, "messages[3].tool_call_id", "invalid_value"},
		{"chat tool call arguments not JSON", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{x"}}]}]}`, nil, bad, inv, "messages[1].tool_calls[0].function.arguments", "invalid_value"},
		{"chat tool call arguments not an object", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"[1]"}}]}]}`, nil, bad, inv, "messages[1].tool_calls[0].function.arguments", "invalid_value"},
		{"chat tool call without id", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}]}`, nil, bad, inv, "messages[1].tool_calls[0].id", "invalid_value"},
		{"chat tool call ids twice", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`, nil, bad, inv, "messages[1].tool_calls[1].id", "invalid_value"},
		{"chat user tool_calls", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi","tool_calls":[]}]}`, nil, bad, inv, "messages[0].tool_calls", "invalid_value"},
		{"chat kwargs reserved", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"messages":[]}}`, nil, bad, inv, "chat_template_kwargs.messages", "invalid_value"},
		{"chat tools and response_format", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"response_format":{"type":"json_object"}}`, nil, bad, inv, "response_format", "invalid_value"},
		{"chat reasoning_effort", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"max"}`, nil, bad, inv, "reasoning_effort", "invalid_value"},
		{"chat web_search_options", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"web_search_options":{"search_context_size":"low"}}`, nil, bad, inv, "web_search_options", "unsupported"},
		{"chat verbosity", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"verbosity":"low"}`, nil, bad, inv, "verbosity", "unsupported"},
		{"chat functions", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"functions":[{"name":"f"}]}`, nil, bad, inv, "functions", "unsupported"},
		{"chat function_call", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"function_call":{"name":"f"}}`, nil, bad, inv, "function_call", "unsupported"},
		{"chat audio", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"audio":{"voice":"alloy","format":"wav"}}`, nil, bad, inv, "audio", "unsupported"},
		{"chat modalities audio", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"modalities":["text","audio"]}`, nil, bad, inv, "modalities", "unsupported"},
		{"invalid UTF-8", "", []byte("{\"prompt\":\"h\xffi\"}"), nil, bad, inv, "", "invalid_utf8"},
		{"body over limit", "", `{"prompt":"` + strings.Repeat("a", 5000) + `"}`, nil, bad, inv, "", "request_too_large"},
		{"unknown model", "", `{"model":"gpt-4","prompt":"hi"}`, nil, http.StatusNotFound, inv, "model", "model_not_found"},
		{"program id bad", "", `{"prompt":"hi","program_id":"a b"}`, nil, bad, inv, "program_id", "invalid_value"},
		{"program header mismatch", "", `{"prompt":"hi","program_id":"a"}`, []string{"X-Program-Id", "b"}, bad, inv, "program_id", "invalid_value"},
		{"release without program", "", `{"prompt":"hi","program_release":true}`, nil, bad, inv, "program_release", "invalid_value"},
		{"chat no messages", "/v1/chat/completions", `{"messages":[]}`, nil, bad, inv, "messages", "invalid_value"},
		{"chat bad role", "/v1/chat/completions", `{"messages":[{"role":"wizard","content":"hi"}]}`, nil, bad, inv, "messages[0].role", "invalid_value"},
		{"chat image part", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, nil, bad, inv, "messages[0].content[0].type", "unsupported"},
		{"chat content number", "/v1/chat/completions", `{"messages":[{"role":"user","content":3}]}`, nil, bad, inv, "messages[0].content", "invalid_type"},
		{"chat messages wrong type", "/v1/chat/completions", `{"messages":"hi"}`, nil, bad, inv, "messages", "invalid_type"},
		{"chat max_completion_tokens 0", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":0}`, nil, bad, inv, "max_completion_tokens", "invalid_value"},
		{"chat top_logprobs 21", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":21}`, nil, bad, inv, "top_logprobs", "invalid_value"},
		{"chat top_logprobs negative", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":-1}`, nil, bad, inv, "top_logprobs", "invalid_value"},
		{"chat top_logprobs without logprobs", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"top_logprobs":2}`, nil, bad, inv, "top_logprobs", "invalid_value"},
		{"chat unknown model", "/v1/chat/completions", `{"model":"x","messages":[{"role":"user","content":"hi"}]}`, nil, http.StatusNotFound, inv, "model", "model_not_found"},
		{"unknown route", "/v1/embeddings", `{}`, nil, http.StatusNotFound, inv, "", "not_found"},
		{"wrong method", "/v1/models", `{}`, nil, http.StatusMethodNotAllowed, inv, "", "method_not_allowed"},
	})
}

func TestUnknownFieldsIgnored(t *testing.T) {
	e := newSimEnv(t, simOpts{})
	var out completionOut
	resp := e.post(t, "/v1/completions", `{"prompt":"hi","max_tokens":3,"best_of":1,"logit_bias":{},"user":"u1","whatever":[1,{"a":null}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	decodeJSON(t, resp, &out)
	require.Equal(t, 3, out.Usage.CompletionTokens)
	// The refused fields' values that ask for nothing are accepted.
	var chat chatResponse
	resp = e.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"tools":[],"tool_choice":"none","functions":null,"function_call":"auto","modalities":["text"],"logit_bias":{},"audio":null}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	decodeJSON(t, resp, &chat)
	require.Equal(t, 3, chat.Usage.CompletionTokens)
}

func TestAuth(t *testing.T) {
	e := newSimEnv(t, simOpts{keys: []string{"k-one", "k-two"}})
	const un, auth = http.StatusUnauthorized, errAuthentication
	checkErrors(t, e, []errCase{
		{"missing key", "", `{"prompt":"hi"}`, nil, un, auth, "", "missing_api_key"},
		{"wrong key", "", `{"prompt":"hi"}`, []string{"Authorization", "Bearer nope"}, un, auth, "", "invalid_api_key"},
		{"wrong scheme", "", `{"prompt":"hi"}`, []string{"Authorization", "Basic k-one"}, un, auth, "", "invalid_api_key"},
		{"chat missing key", "/v1/chat/completions", `{"messages":[]}`, nil, un, auth, "", "missing_api_key"},
	})
	for _, key := range []string{"k-one", "k-two"} {
		resp := e.post(t, "/v1/completions", `{"prompt":"hi","max_tokens":2}`, "Authorization", "Bearer "+key)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		resp.Body.Close()
	}
	// /health and /metrics stay open; /v1/models needs the key.
	for path, want := range map[string]int{"/health": 200, "/metrics": 200, "/v1/models": 401} {
		resp, err := e.ts.Client().Get(e.ts.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, path)
	}
}

// TestAPIKeyHeader: x-api-key (Anthropic's clients) authenticates as the
// Bearer key does, on every route; both headers with different keys, or
// two x-api-key headers, are 400.
func TestAPIKeyHeader(t *testing.T) {
	e := newSimEnv(t, simOpts{keys: []string{"k-one", "k-two"}})
	const un, auth = http.StatusUnauthorized, errAuthentication
	checkErrors(t, e, []errCase{
		{"wrong x-api-key", "", `{"prompt":"hi"}`, []string{"X-Api-Key", "nope"}, un, auth, "", "invalid_api_key"},
		{"empty x-api-key", "", `{"prompt":"hi"}`, []string{"X-Api-Key", ""}, un, auth, "", "invalid_api_key"},
		{"different keys", "", `{"prompt":"hi"}`, []string{"X-Api-Key", "k-one", "Authorization", "Bearer k-two"},
			http.StatusBadRequest, errInvalidRequest, "", "conflicting_api_keys"},
		{"wrong bearer, right x-api-key", "", `{"prompt":"hi"}`, []string{"X-Api-Key", "k-one", "Authorization", "Bearer nope"},
			http.StatusBadRequest, errInvalidRequest, "", "conflicting_api_keys"},
	})
	for _, hdr := range [][]string{
		{"X-Api-Key", "k-one"},
		{"x-api-key", "k-two", "anthropic-version", "2023-06-01"},
		{"X-Api-Key", "k-one", "Authorization", "Bearer k-one"},
	} {
		resp := e.post(t, "/v1/completions", `{"prompt":"hi","max_tokens":2}`, hdr...)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%q", hdr)
		resp.Body.Close()
	}
	req, err := http.NewRequest(http.MethodGet, e.ts.URL+"/v1/models", nil)
	require.NoError(t, err)
	req.Header.Set("X-Api-Key", "k-two")
	resp, err := e.ts.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET /v1/models with x-api-key")
	req.Header.Add("X-Api-Key", "k-one")
	resp, err = e.ts.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "two x-api-key headers")
}

// TestTenantSalt: requests with different API keys never share prefix
// blocks; the same key does.
func TestTenantSalt(t *testing.T) {
	e := newSimEnv(t, simOpts{keys: []string{"alice", "bob"}})
	prompt := strings.Repeat("the little dog ran to the park. ", 6) // several full blocks
	cached := func(key, salt string) int {
		var out completionOut
		body := map[string]any{"prompt": prompt, "max_tokens": 1}
		if salt != "" {
			body["cache_salt"] = salt
		}
		decodeJSON(t, e.post(t, "/v1/completions", body, "Authorization", "Bearer "+key), &out)
		return out.Usage.PromptTokensDetails.CachedTokens
	}
	require.Zero(t, cached("alice", ""))
	require.Positive(t, cached("alice", ""), "same tenant shares its prefix")
	require.Zero(t, cached("bob", ""), "another key never sees alice's blocks")
	require.Zero(t, cached("alice", "s1"), "a body salt splits a tenant's cache")
	require.Positive(t, cached("alice", "s1"))
}

func TestModels(t *testing.T) {
	e := newSimEnv(t, simOpts{})
	resp, err := e.ts.Client().Get(e.ts.URL + "/v1/models")
	require.NoError(t, err)
	var out modelList
	decodeJSON(t, resp, &out)
	require.Equal(t, "list", out.Object)
	require.Len(t, out.Data, 1)
	require.Equal(t, testModel, out.Data[0].ID)
	require.Equal(t, 256, out.Data[0].MaxLength)
}

// startStream opens a long streamed completion and waits for its first
// chunk, so it is certainly running in the engine.
func startStream(t *testing.T, e *env, ctx context.Context) (*http.Response, func() string) {
	t.Helper()
	body := `{"prompt":"Once","stream":true,"ignore_eos":true}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.ts.URL+"/v1/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.ts.Client().Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	buf := make([]byte, 1)
	var line strings.Builder
	readEvent := func() string {
		line.Reset()
		for !strings.HasSuffix(line.String(), "\n\n") {
			_, err := resp.Body.Read(buf)
			require.NoError(t, err)
			line.Write(buf)
		}
		return line.String()
	}
	require.Contains(t, readEvent(), `"text_completion"`)
	return resp, readEvent
}

func TestQueueFull(t *testing.T) {
	e := newSimEnv(t, simOpts{step: 2 * time.Millisecond, maxInFlight: 1})
	ctx, cancel := context.WithCancel(context.Background())
	resp, _ := startStream(t, e, ctx)
	require.Equal(t, 1, e.srv.InFlight())

	r2 := e.post(t, "/v1/completions", `{"prompt":"hi","max_tokens":2}`)
	require.Equal(t, http.StatusTooManyRequests, r2.StatusCode)
	require.Equal(t, "1", r2.Header.Get("Retry-After"))
	var out errorOut
	decodeJSON(t, r2, &out)
	require.Equal(t, errRateLimit, out.Error.Type)
	require.Equal(t, "queue_full", *out.Error.Code)
	require.Equal(t, uint64(1), e.eng.Snapshot().Submitted, "the refused request never reached the engine")

	cancel()
	resp.Body.Close()
	require.Eventually(t, func() bool { return e.srv.InFlight() == 0 }, 10*time.Second, time.Millisecond)
	r3 := e.post(t, "/v1/completions", `{"prompt":"hi","max_tokens":2}`)
	require.Equal(t, http.StatusOK, r3.StatusCode)
	r3.Body.Close()
}

// TestDisconnectFreesSeat: a client that goes away mid-stream aborts its
// request; its seat and blocks return to the pools.
func TestDisconnectFreesSeat(t *testing.T) {
	e := newSimEnv(t, simOpts{step: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	resp, readEvent := startStream(t, e, ctx)
	readEvent()
	m := e.eng.Snapshot()
	require.Equal(t, 1, m.Running)
	require.Equal(t, 1, m.SeatsLive)
	require.Positive(t, m.KVBlocksUsed)

	cancel()
	resp.Body.Close()
	require.Eventually(t, func() bool {
		m := e.eng.Snapshot()
		return m.Aborted == 1 && m.SeatsLive+m.SeatsRetiring+m.KVBlocksUsed+m.Running == 0
	}, 10*time.Second, time.Millisecond, "seat and blocks still held: %+v", e.eng.Snapshot())
	require.Eventually(t, func() bool { return e.srv.InFlight() == 0 }, 10*time.Second, time.Millisecond)
}

// TestShutdownDrains: Serve stops accepting, lets the request in flight
// finish, and returns; with a short deadline it aborts the rest.
func TestShutdownDrains(t *testing.T) {
	for _, tc := range []struct {
		name   string
		drain  time.Duration
		body   string
		finish string
	}{
		{"finishes within the deadline", time.Minute, `{"prompt":"Once","stream":true,"max_tokens":40,"ignore_eos":true}`, "length"},
		{"aborted at the deadline", 50 * time.Millisecond, `{"prompt":"Once","stream":true,"ignore_eos":true}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSimEnv(t, simOpts{step: 2 * time.Millisecond})
			e.ts.Close() // serve through Serve instead
			ln, err := netListen()
			require.NoError(t, err)
			ctx, stop := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- e.srv.Serve(ctx, ln, tc.drain) }()
			url := "http://" + ln.Addr().String()
			client := &http.Client{Timeout: testwait.Bound}

			resp, err := client.Post(url+"/v1/completions", "application/json", strings.NewReader(tc.body))
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			first := make([]byte, 6)
			_, err = io.ReadFull(resp.Body, first) // "data: ": the request is running
			require.NoError(t, err)

			stop()
			require.Eventually(t, func() bool { return e.srv.draining.Load() }, 10*time.Second, time.Millisecond)
			rest, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, testwait.Recv(t, served, "Serve to return after its drain"))
			if tc.finish != "" {
				require.Contains(t, string(rest), `"finish_reason":"length"`)
				require.True(t, strings.HasSuffix(string(rest), "data: [DONE]\n\n"))
				require.Equal(t, uint64(1), e.eng.Snapshot().Finished)
			} else {
				// A stream the deadline cut says so: an error event, then [DONE].
				require.Contains(t, string(rest), `"code":"aborted"`)
				require.True(t, strings.HasSuffix(string(rest), "data: [DONE]\n\n"), "the cut stream ends with [DONE]: %q", rest)
				require.Eventually(t, func() bool { return e.eng.Snapshot().Aborted == 1 }, 10*time.Second, time.Millisecond)
			}
			_, err = client.Post(url+"/v1/completions", "application/json", strings.NewReader(tc.body))
			require.Error(t, err, "the listener is closed after Serve returns")
			require.Zero(t, e.srv.InFlight())
		})
	}
}

func TestHealth(t *testing.T) {
	e := newSimEnv(t, simOpts{})
	resp, err := e.ts.Client().Get(e.ts.URL + "/health")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp.Body.Close()
	e.srv.draining.Store(true)
	resp, err = e.ts.Client().Get(e.ts.URL + "/health")
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	resp.Body.Close()
	r := e.post(t, "/v1/completions", `{"prompt":"hi"}`)
	require.Equal(t, http.StatusServiceUnavailable, r.StatusCode)
	r.Body.Close()
}

// releasingEngine is an engine whose policy tracks programs: it records
// the releases the server forwards.
type releasingEngine struct {
	*executor.Engine
	mu       sync.Mutex
	released []string
}

func (r *releasingEngine) ReleaseProgram(id string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.released = append(r.released, id)
	return id != "unknown", nil
}

func TestPrograms(t *testing.T) {
	e := newSimEnv(t, simOpts{})
	del := func(srv *Server, id string) (int, errorOut) {
		req, err := http.NewRequest(http.MethodDelete, e.ts.URL+"/v1/programs/"+id, nil)
		require.NoError(t, err)
		resp, err := e.ts.Client().Do(req)
		require.NoError(t, err)
		var out errorOut
		if resp.StatusCode != http.StatusOK {
			decodeJSON(t, resp, &out)
		} else {
			resp.Body.Close()
		}
		return resp.StatusCode, out
	}
	// Without a program policy the server's table is the program: DELETE
	// ends an id it knows and answers 404 for one it does not, and either
	// way the table agrees with the answer.
	code, out := del(e.srv, "p1")
	require.Equal(t, http.StatusNotFound, code, "p1 was never seen")
	require.Equal(t, "program_not_found", *out.Error.Code)
	resp := e.post(t, "/v1/completions", `{"prompt":"hi","max_tokens":2}`, "X-Program-Id", "p2")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp.Body.Close()
	require.Equal(t, 1, e.srv.progs.size())
	code, _ = del(e.srv, "p2")
	require.Equal(t, http.StatusOK, code)
	require.Zero(t, e.srv.progs.size(), "a DELETE that answers 200 forgets the id")
	code, _ = del(e.srv, "p2")
	require.Equal(t, http.StatusNotFound, code, "and a second DELETE finds nothing")

	// An engine implementing ProgramReleaser gets the header's program,
	// the release flag and DELETE.
	rel := &releasingEngine{Engine: e.eng}
	srv, err := New(e.srv.cfg, rel)
	require.NoError(t, err)
	e.ts.Config.Handler = srv.Handler()
	resp = e.post(t, "/v1/completions", `{"prompt":"hi","max_tokens":2}`, "X-Program-Id", "agent-7", "X-Program-Release", "true")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp.Body.Close()
	resp = e.post(t, "/v1/completions", `{"prompt":"hi","max_tokens":2,"program_id":"agent-8"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp.Body.Close()
	require.Equal(t, map[string]int{"active": 0, "idle": 1}, srv.progs.states(), "agent-7 released, agent-8 idle")
	code, _ = del(srv, "agent-8")
	require.Equal(t, http.StatusOK, code)
	code, out = del(srv, "unknown")
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, "program_not_found", *out.Error.Code)
	code, out = del(srv, strings.Repeat("x", 300))
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "id", *out.Error.Param)
	require.Equal(t, []string{"agent-7", "agent-8", "unknown"}, rel.released)
	require.Equal(t, map[string]int{"active": 0, "idle": 0}, srv.progs.states())
}

func TestNewRejectsConfig(t *testing.T) {
	tok := storiesTokenizer(t)
	e := newSimEnv(t, simOpts{})
	good := Config{Model: "m", MaxContext: 64, Tokenizer: tok, MaxInFlight: 4}
	for _, tc := range []struct {
		mut  func(c *Config)
		want string
	}{
		{func(c *Config) { c.Model = "" }, "Model"},
		{func(c *Config) { c.MaxContext = 1 }, "MaxContext 1"},
		{func(c *Config) { c.MaxInFlight = 0 }, "MaxInFlight 0"},
		{func(c *Config) { c.ChatTemplate = "{% for %}" }, "chat template"},
		{func(c *Config) { c.Tokenizer = nil }, "tokenizer"},
	} {
		c := good
		tc.mut(&c)
		_, err := New(c, e.eng)
		require.ErrorContains(t, err, tc.want)
	}
	_, err := New(good, e.eng)
	require.NoError(t, err)
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
