package server

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/toolcall"
)

// msgOut is a whole Messages answer.
type msgOut struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Role    string `json:"role"`
	Model   string `json:"model"`
	Content []struct {
		Type     string          `json:"type"`
		Text     *string         `json:"text"`
		Thinking *string         `json:"thinking"`
		ID       string          `json:"id"`
		Name     string          `json:"name"`
		Input    json.RawMessage `json:"input"`
	} `json:"content"`
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        *struct {
		InputTokens              int  `json:"input_tokens"`
		OutputTokens             int  `json:"output_tokens"`
		CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
		CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
	} `json:"usage"`
}

// text is the answer's text blocks joined.
func (m *msgOut) text() string {
	var b strings.Builder
	for _, c := range m.Content {
		if c.Type == "text" {
			b.WriteString(*c.Text)
		}
	}
	return b.String()
}

// anthropicErrOut is Anthropic's error body.
type anthropicErrOut struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// sseEvent is one typed event of a stream.
type sseEvent struct {
	name string
	data json.RawMessage
}

// readTypedSSE reads every event of a typed stream ("event:" then
// "data:") to the end of the body; each data's type must equal its name.
func readTypedSSE(t testing.TB, resp *http.Response) []sseEvent {
	t.Helper()
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	var evs []sseEvent
	var name string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
		case strings.HasPrefix(line, "event: "):
			require.Empty(t, name, "two event lines without data")
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			require.NotEmpty(t, name, "a data line without its event line: %q", line)
			data := json.RawMessage(strings.TrimPrefix(line, "data: "))
			var typ struct {
				Type string `json:"type"`
			}
			require.NoError(t, json.Unmarshal(data, &typ), "data %s", data)
			require.Equal(t, name, typ.Type, "the data's type names its event")
			evs = append(evs, sseEvent{name: name, data: data})
			name = ""
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
	require.NoError(t, sc.Err())
	return evs
}

// streamedMessage checks that evs is a well-formed Messages stream and
// rebuilds its message: the blocks' text, the stop reason and sequence
// and the output tokens.
type streamedMessage struct {
	text, thinking string
	calls          []toolCall
	blockTypes     []string
	stopReason     string
	stopSequence   *string
	inputTokens    int // message_start's
	outputTokens   int
}

func checkMessageStream(t testing.TB, evs []sseEvent) streamedMessage {
	t.Helper()
	require.GreaterOrEqual(t, len(evs), 3)
	require.Equal(t, "message_start", evs[0].name)
	var start struct {
		Message struct {
			ID           string          `json:"id"`
			Type         string          `json:"type"`
			Role         string          `json:"role"`
			Model        string          `json:"model"`
			Content      []any           `json:"content"`
			StopReason   *string         `json:"stop_reason"`
			StopSequence json.RawMessage `json:"stop_sequence"`
			Usage        struct {
				InputTokens  int `json:"input_tokens"`
				OutputTokens int `json:"output_tokens"`
			} `json:"usage"`
		} `json:"message"`
	}
	require.NoError(t, json.Unmarshal(evs[0].data, &start))
	m := start.Message
	require.True(t, strings.HasPrefix(m.ID, "msg_"), m.ID)
	require.Equal(t, "message", m.Type)
	require.Equal(t, "assistant", m.Role)
	require.Equal(t, testModel, m.Model)
	require.NotNil(t, m.Content)
	require.Empty(t, m.Content)
	require.Nil(t, m.StopReason)
	require.Equal(t, "null", string(m.StopSequence))
	require.Positive(t, m.Usage.InputTokens)
	out := streamedMessage{inputTokens: m.Usage.InputTokens}

	n := len(evs)
	require.Equal(t, "message_stop", evs[n-1].name)
	require.Equal(t, "message_delta", evs[n-2].name)
	var md struct {
		Delta struct {
			StopReason   string  `json:"stop_reason"`
			StopSequence *string `json:"stop_sequence"`
		} `json:"delta"`
		Usage struct {
			OutputTokens int `json:"output_tokens"`
		} `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(evs[n-2].data, &md))
	out.stopReason, out.stopSequence, out.outputTokens = md.Delta.StopReason, md.Delta.StopSequence, md.Usage.OutputTokens

	open := -1 // the open block's index
	for _, ev := range evs[1 : n-2] {
		var e struct {
			Index        *int `json:"index"`
			ContentBlock struct {
				Type     string          `json:"type"`
				Text     *string         `json:"text"`
				Thinking *string         `json:"thinking"`
				ID       string          `json:"id"`
				Name     string          `json:"name"`
				Input    json.RawMessage `json:"input"`
			} `json:"content_block"`
			Delta struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				Thinking    string `json:"thinking"`
				PartialJSON string `json:"partial_json"`
			} `json:"delta"`
		}
		require.NoError(t, json.Unmarshal(ev.data, &e))
		switch ev.name {
		case "ping":
		case "content_block_start":
			require.Equal(t, -1, open, "a block starts while block %d is open", open)
			require.NotNil(t, e.Index)
			require.Equal(t, len(out.blockTypes), *e.Index, "blocks are numbered in order")
			open = *e.Index
			cb := e.ContentBlock
			out.blockTypes = append(out.blockTypes, cb.Type)
			switch cb.Type {
			case "text":
				require.NotNil(t, cb.Text)
				require.Empty(t, *cb.Text)
			case "thinking":
				require.NotNil(t, cb.Thinking)
				require.Empty(t, *cb.Thinking)
			case "tool_use":
				require.True(t, strings.HasPrefix(cb.ID, "toolu_"), cb.ID)
				require.NotEmpty(t, cb.Name)
				require.JSONEq(t, `{}`, string(cb.Input))
				out.calls = append(out.calls, toolCall{ID: cb.ID, Name: cb.Name})
			default:
				t.Fatalf("block type %q", cb.Type)
			}
		case "content_block_delta":
			require.NotNil(t, e.Index)
			require.Equal(t, open, *e.Index, "a delta of a block that is not open")
			want := map[string]string{"text": "text_delta", "thinking": "thinking_delta", "tool_use": "input_json_delta"}[out.blockTypes[open]]
			require.Equal(t, want, e.Delta.Type)
			switch e.Delta.Type {
			case "text_delta":
				out.text += e.Delta.Text
			case "thinking_delta":
				out.thinking += e.Delta.Thinking
			case "input_json_delta":
				out.calls[len(out.calls)-1].Arguments += e.Delta.PartialJSON
			}
		case "content_block_stop":
			require.NotNil(t, e.Index)
			require.Equal(t, open, *e.Index)
			open = -1
		default:
			t.Fatalf("unexpected event %q in the body of the stream", ev.name)
		}
	}
	require.Equal(t, -1, open, "block %d never stopped", open)
	return out
}

// TestMessagesStories: a whole and a streamed Messages answer on
// stories260K at temperature 0 hold the same text and stop reason, the
// stream is well-formed, and count_tokens counts the prompt usage reports.
func TestMessagesStories(t *testing.T) {
	for _, tmpl := range []string{"", chatML} {
		e := newStoriesEnv(t, tmpl)
		body := map[string]any{"model": testModel, "max_tokens": 20, "temperature": 0,
			"system":   []map[string]any{{"type": "text", "text": "You tell stories."}},
			"messages": []map[string]any{{"role": "user", "content": []map[string]any{{"type": "text", "text": "Tell me "}, {"type": "text", "text": "a story."}}}}}
		var whole msgOut
		resp := e.post(t, "/v1/messages", body, "anthropic-version", "2023-06-01")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		decodeJSON(t, resp, &whole)
		require.True(t, strings.HasPrefix(whole.ID, "msg_"), whole.ID)
		require.Equal(t, "message", whole.Type)
		require.Equal(t, "assistant", whole.Role)
		require.Equal(t, testModel, whole.Model)
		require.Len(t, whole.Content, 1)
		require.Equal(t, "text", whole.Content[0].Type)
		require.NotEmpty(t, whole.text())
		require.NotNil(t, whole.StopReason)
		require.Contains(t, []string{"end_turn", "max_tokens"}, *whole.StopReason)
		require.Nil(t, whole.StopSequence)
		require.NotNil(t, whole.Usage.CacheReadInputTokens)
		require.NotNil(t, whole.Usage.CacheCreationInputTokens)
		require.Zero(t, *whole.Usage.CacheCreationInputTokens)
		prompt := whole.Usage.InputTokens + *whole.Usage.CacheReadInputTokens

		// The same answer as chat completions gives the same conversation.
		var chat completionOut
		decodeJSON(t, e.post(t, "/v1/chat/completions", map[string]any{"max_tokens": 20, "temperature": 0,
			"messages": []map[string]any{{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "Tell me a story."}}}), &chat)
		require.Equal(t, chat.Choices[0].Message.Content, whole.text())
		require.Equal(t, chat.Usage.PromptTokens, prompt)
		require.Equal(t, chat.Usage.CompletionTokens, whole.Usage.OutputTokens)

		var count struct {
			InputTokens int `json:"input_tokens"`
		}
		delete(body, "max_tokens")
		resp = e.post(t, "/v1/messages/count_tokens", body)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		decodeJSON(t, resp, &count)
		require.Equal(t, prompt, count.InputTokens, "count_tokens counts the prompt the answer's usage reports")

		body["max_tokens"] = 20
		body["stream"] = true
		sm := checkMessageStream(t, readTypedSSE(t, e.post(t, "/v1/messages", body)))
		require.Equal(t, whole.text(), sm.text, "the streamed text is the whole text")
		require.Equal(t, []string{"text"}, sm.blockTypes)
		require.Equal(t, *whole.StopReason, sm.stopReason)
		require.Nil(t, sm.stopSequence)
		require.Equal(t, whole.Usage.OutputTokens, sm.outputTokens)
		require.Equal(t, prompt, sm.inputTokens, "message_start counts the whole prompt")
	}
}

// TestMessagesStopSequences: a stop sequence the greedy output holds ends
// it there, reported as stop_sequence with the string, whole and streamed.
func TestMessagesStopSequences(t *testing.T) {
	e := newStoriesEnv(t, "")
	body := map[string]any{"max_tokens": 30, "temperature": 0,
		"messages": []map[string]any{{"role": "user", "content": "Tell me a story."}}}
	var free msgOut
	decodeJSON(t, e.post(t, "/v1/messages", body), &free)
	text := free.text()
	words := strings.Fields(text)
	require.GreaterOrEqual(t, len(words), 4, "output %q", text)
	stop := " " + words[2]
	cut := strings.Index(text, stop)
	require.Positive(t, cut)

	body["stop_sequences"] = []string{"zzzz", stop}
	var out msgOut
	decodeJSON(t, e.post(t, "/v1/messages", body), &out)
	require.Equal(t, text[:cut], out.text())
	require.Equal(t, "stop_sequence", *out.StopReason)
	require.NotNil(t, out.StopSequence)
	require.Equal(t, stop, *out.StopSequence)

	body["stream"] = true
	sm := checkMessageStream(t, readTypedSSE(t, e.post(t, "/v1/messages", body)))
	require.Equal(t, text[:cut], sm.text)
	require.Equal(t, "stop_sequence", sm.stopReason)
	require.NotNil(t, sm.stopSequence)
	require.Equal(t, stop, *sm.stopSequence)
}

// TestMessagesErrors: bad requests are Anthropic's error bodies with the
// usual status, naming the field, and never reach the engine.
func TestMessagesErrors(t *testing.T) {
	e := newSimEnv(t, simOpts{})
	user := `"messages":[{"role":"user","content":"hi"}]`
	tool := `"tools":[{"name":"f","input_schema":{"type":"object"}}]`
	call := `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]}`
	const bad, inv = http.StatusBadRequest, "invalid_request_error"
	for _, tc := range []struct {
		name, body string
		status     int
		typ, field string
	}{
		{"max_tokens missing", `{` + user + `}`, bad, inv, "max_tokens"},
		{"max_tokens zero", `{"max_tokens":0,` + user + `}`, bad, inv, "max_tokens"},
		{"no messages", `{"max_tokens":5}`, bad, inv, "messages"},
		{"bad role", `{"max_tokens":5,"messages":[{"role":"system","content":"hi"}]}`, bad, inv, "messages[0].role"},
		{"content missing", `{"max_tokens":5,"messages":[{"role":"user"}]}`, bad, inv, "messages[0].content"},
		{"image", `{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image","source":{}}]}]}`, bad, inv, "messages[0].content[1].type"},
		{"document", `{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{}}]}]}`, bad, inv, "messages[0].content[0].type"},
		{"unknown block", `{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"audio"}]}]}`, bad, inv, "messages[0].content[0].type"},
		{"tool_use from the user", `{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_use","id":"x","name":"f","input":{}}]}]}`, bad, inv, "messages[0].content[0].type"},
		{"tool_use input not an object", `{"max_tokens":5,` + tool + `,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"tool_use","id":"x","name":"f","input":[1]}]},{"role":"user","content":"b"}]}`, bad, inv, "messages[1].content[0].input"},
		{"tool_result for no call", `{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"nope","content":"r"}]}]}`, bad, inv, "messages[0].content[0].tool_use_id"},
		{"tool_result twice", `{"max_tokens":5,` + tool + `,"messages":[{"role":"user","content":"a"},` + call + `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"r"},{"type":"tool_result","tool_use_id":"toolu_1","content":"r"}]}]}`, bad, inv, "messages[2].content[1].tool_use_id"},
		{"tool_result image", `{"max_tokens":5,` + tool + `,"messages":[{"role":"user","content":"a"},` + call + `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"image"}]}]}]}`, bad, inv, "messages[2].content[0].content[0].type"},
		{"prefill", `{"max_tokens":5,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`, bad, inv, "messages[1].role"},
		{"system image", `{"max_tokens":5,"system":[{"type":"image"}],` + user + `}`, bad, inv, "system[0].type"},
		{"system number", `{"max_tokens":5,"system":3,` + user + `}`, bad, inv, "system"},
		{"server tool", `{"max_tokens":5,"tools":[{"type":"web_search_20250305","name":"web_search"}],` + user + `}`, bad, inv, "tools[0].type"},
		{"tool name", `{"max_tokens":5,"tools":[{"name":"a b","input_schema":{}}],` + user + `}`, bad, inv, "tools[0].name"},
		{"input_schema not an object", `{"max_tokens":5,"tools":[{"name":"f","input_schema":[]}],` + user + `}`, bad, inv, "tools[0].input_schema"},
		{"tool_choice type", `{"max_tokens":5,` + tool + `,"tool_choice":{"type":"required"},` + user + `}`, bad, inv, "tool_choice.type"},
		{"tool_choice tool without name", `{"max_tokens":5,` + tool + `,"tool_choice":{"type":"tool"},` + user + `}`, bad, inv, "tool_choice.name"},
		{"tool_choice unknown tool", `{"max_tokens":5,` + tool + `,"tool_choice":{"type":"tool","name":"g"},` + user + `}`, bad, inv, "tool_choice"},
		{"tool_choice any without tools", `{"max_tokens":5,"tool_choice":{"type":"any"},` + user + `}`, bad, inv, "tool_choice"},
		{"tool_choice string", `{"max_tokens":5,` + tool + `,"tool_choice":"auto",` + user + `}`, bad, inv, "tool_choice"},
		{"temperature above 1", `{"max_tokens":5,"temperature":1.5,` + user + `}`, bad, inv, "temperature"},
		{"top_p", `{"max_tokens":5,"top_p":2,` + user + `}`, bad, inv, "top_p"},
		{"stop_sequences empty string", `{"max_tokens":5,"stop_sequences":["a",""],` + user + `}`, bad, inv, "stop_sequences[1]"},
		{"stop_sequences not a list", `{"max_tokens":5,"stop_sequences":"a",` + user + `}`, bad, inv, "stop_sequences"},
		{"thinking budget small", `{"max_tokens":4000,"thinking":{"type":"enabled","budget_tokens":100},` + user + `}`, bad, inv, "thinking.budget_tokens"},
		{"thinking budget over max_tokens", `{"max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":2000},` + user + `}`, bad, inv, "thinking.budget_tokens"},
		{"thinking type", `{"max_tokens":5,"thinking":{"type":"on"},` + user + `}`, bad, inv, "thinking.type"},
		{"max_tokens beyond the context", `{"max_tokens":100000,` + user + `}`, bad, inv, "max_tokens"},
		{"malformed", `{"max_tokens":5,`, bad, inv, "malformed"},
		{"unknown model", `{"model":"claude-x","max_tokens":5,` + user + `}`, http.StatusNotFound, "not_found_error", "model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := e.post(t, "/v1/messages", tc.body)
			require.Equal(t, tc.status, resp.StatusCode)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var out anthropicErrOut
			decodeJSON(t, resp, &out)
			require.Equal(t, "error", out.Type)
			require.Equal(t, tc.typ, out.Error.Type, out.Error.Message)
			require.Contains(t, out.Error.Message, tc.field)
		})
	}
	// The same refusals on count_tokens, which does not need max_tokens.
	resp := e.post(t, "/v1/messages/count_tokens", `{"messages":[{"role":"user","content":[{"type":"image"}]}]}`)
	require.Equal(t, bad, resp.StatusCode)
	var out anthropicErrOut
	decodeJSON(t, resp, &out)
	require.Contains(t, out.Error.Message, "messages[0].content[0].type")
	resp = e.post(t, "/v1/messages/count_tokens", `{`+user+`}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp.Body.Close()
	// Wrong method and content type answer in Anthropic's shape too.
	r, err := e.ts.Client().Get(e.ts.URL + "/v1/messages")
	require.NoError(t, err)
	require.Equal(t, http.StatusMethodNotAllowed, r.StatusCode)
	decodeJSON(t, r, &out)
	require.Equal(t, "error", out.Type)
	r, err = e.ts.Client().Post(e.ts.URL+"/v1/messages", "text/plain", strings.NewReader(`{}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusUnsupportedMediaType, r.StatusCode)
	decodeJSON(t, r, &out)
	require.Equal(t, "invalid_request_error", out.Error.Type)
	require.Zero(t, e.eng.Snapshot().Submitted, "refused requests reached the engine")
}

// TestMessagesAuth: the Messages routes authenticate through the keyring
// (x-api-key as Anthropic's clients send it, or Bearer) and answer
// failures in Anthropic's shape.
func TestMessagesAuth(t *testing.T) {
	e := newSimEnv(t, simOpts{keys: []string{"k-one"}})
	body := `{"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`
	for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
		for _, tc := range []struct {
			hdr    []string
			status int
			typ    string
		}{
			{nil, http.StatusUnauthorized, "authentication_error"},
			{[]string{"x-api-key", "nope"}, http.StatusUnauthorized, "authentication_error"},
			{[]string{"x-api-key", "k-one", "Authorization", "Bearer other"}, http.StatusBadRequest, "invalid_request_error"},
			{[]string{"x-api-key", "k-one", "anthropic-version", "2023-06-01"}, http.StatusOK, ""},
			{[]string{"Authorization", "Bearer k-one"}, http.StatusOK, ""},
		} {
			resp := e.post(t, path, body, tc.hdr...)
			require.Equal(t, tc.status, resp.StatusCode, "%s %q", path, tc.hdr)
			if tc.typ == "" {
				resp.Body.Close()
				continue
			}
			var out anthropicErrOut
			decodeJSON(t, resp, &out)
			require.Equal(t, "error", out.Type)
			require.Equal(t, tc.typ, out.Error.Type)
		}
	}
}

// TestMessagesConversation: blocks map onto the conversation: the system
// prompt first, tool_use blocks as the assistant's calls (arguments the
// input's JSON), thinking as its reasoning, tool_result blocks as tool
// messages before the user's other text, is_error said in the result.
func TestMessagesConversation(t *testing.T) {
	e := newSimEnv(t, simOpts{maxContext: 2048}) // the fallback's tool preamble is long
	raw := `[{"role":"user","content":"weather?"},
		{"role":"assistant","content":[{"type":"thinking","thinking":"need a tool","signature":"sig"},{"type":"redacted_thinking","data":"xx"},
			{"type":"text","text":"Let me look."},{"type":"tool_use","id":"toolu_a","name":"get","input":{"city": "Paris"}},
			{"type":"tool_use","id":"toolu_b","name":"get","input":{"city":"Rome"}}]},
		{"role":"user","content":[{"type":"text","text":"thanks"},{"type":"tool_result","tool_use_id":"toolu_a","content":"sunny"},
			{"type":"tool_result","tool_use_id":"toolu_b","is_error":true,"content":[{"type":"text","text":"no "},{"type":"text","text":"data"}]}]}]`
	msgs, apiErr := e.srv.parse.anthropicConversation(json.RawMessage(`"Be brief."`), json.RawMessage(raw))
	require.Nil(t, apiErr)
	require.Equal(t, []message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "weather?"},
		{Role: "assistant", Content: "Let me look.", Reasoning: "need a tool", ToolCalls: []toolCall{
			{ID: "toolu_a", Name: "get", Arguments: `{"city":"Paris"}`}, {ID: "toolu_b", Name: "get", Arguments: `{"city":"Rome"}`}}},
		{Role: "tool", Content: "sunny", ToolCallID: "toolu_a"},
		{Role: "tool", Content: toolErrorPrefix + "no data", ToolCallID: "toolu_b"},
		{Role: "user", Content: "thanks"},
	}, msgs)

	// The tools count in count_tokens, and the conversation is accepted
	// whole (thinking enables the template variable).
	base := map[string]any{"messages": json.RawMessage(raw), "system": "Be brief."}
	count := func(extra map[string]any) int {
		t.Helper()
		b := map[string]any{}
		for k, v := range base {
			b[k] = v
		}
		for k, v := range extra {
			b[k] = v
		}
		var out struct {
			InputTokens int `json:"input_tokens"`
		}
		resp := e.post(t, "/v1/messages/count_tokens", b)
		if resp.StatusCode != http.StatusOK {
			var eo anthropicErrOut
			decodeJSON(t, resp, &eo)
			t.Fatalf("count_tokens: %d %s", resp.StatusCode, eo.Error.Message)
		}
		decodeJSON(t, resp, &out)
		return out.InputTokens
	}
	plain := count(nil)
	require.Positive(t, plain)
	withTools := count(map[string]any{"tools": []map[string]any{{"name": "get", "description": "weather by city",
		"input_schema": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}})
	require.Greater(t, withTools, plain, "the tools are part of the prompt")
	require.Equal(t, plain, count(map[string]any{"thinking": map[string]any{"type": "enabled", "budget_tokens": 2048}}),
		"a template without enable_thinking ignores it")
}

// TestMessagesBlocks: parsed output events become content blocks and the
// stream's block events: a block starts with its first event, stops when
// another kind or call starts, tool_use input is the arguments' JSON.
func TestMessagesBlocks(t *testing.T) {
	var names []string
	var sent []any
	sh := &shaper{idPrefix: "toolu_", ids: []string{"toolu_1", "toolu_2"}}
	b := &blocks{sh: sh, emit: func(name string, v any) error { names = append(names, name); sent = append(sent, v); return nil }}
	require.NoError(t, b.add([]toolcall.Event{
		{Kind: toolcall.Thinking, Text: "hm"}, {Kind: toolcall.Thinking, Text: "m"},
		{Kind: toolcall.Content, Text: ""}, {Kind: toolcall.Content, Text: "I'll call."},
		{Kind: toolcall.CallBegin, Call: 0, Name: "get"}, {Kind: toolcall.CallArgs, Call: 0, Text: `{"a":`}, {Kind: toolcall.CallArgs, Call: 0, Text: `1}`},
		{Kind: toolcall.CallBegin, Call: 1, Name: "put"}, {Kind: toolcall.CallArgs, Call: 1, Text: `{"b"`},
	}))
	require.NoError(t, b.stop())
	require.True(t, b.hasUse)
	require.Equal(t, []string{
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_stop",
	}, names)
	js, err := json.Marshal(sent[7])
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"get","input":{}}}`, string(js))
	js, err = json.Marshal(sent[8])
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}`, string(js))
	js, err = json.Marshal(sent[0])
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`, string(js))
	js, err = json.Marshal(b.whole())
	require.NoError(t, err)
	require.JSONEq(t, `[{"type":"thinking","thinking":"hmm","signature":""},{"type":"text","text":"I'll call."},
		{"type":"tool_use","id":"toolu_1","name":"get","input":{"a":1}},{"type":"tool_use","id":"toolu_2","name":"put","input":"{\"b\""}]`, string(js))
}

// TestMessagesForcedToolUse: tool_choice {type: tool} makes the answer a
// tool_use block of that tool with an object input, stop_reason tool_use.
func TestMessagesForcedToolUse(t *testing.T) {
	e := newSimEnv(t, simOpts{guided: true, maxContext: 4096})
	body := map[string]any{"max_tokens": 120, "messages": []map[string]any{{"role": "user", "content": "weather in Paris?"}},
		"tools": []map[string]any{{"name": "get_weather", "input_schema": map[string]any{"type": "object",
			"properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 8}}, "required": []string{"city"}, "additionalProperties": false}}},
		"tool_choice": map[string]any{"type": "tool", "name": "get_weather"}}
	var out msgOut
	resp := e.post(t, "/v1/messages", body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	decodeJSON(t, resp, &out)
	var uses int
	for _, c := range out.Content {
		if c.Type == "tool_use" {
			uses++
			require.Equal(t, "get_weather", c.Name)
			require.True(t, strings.HasPrefix(c.ID, "toolu_"), c.ID)
			var in map[string]any
			require.NoError(t, json.Unmarshal(c.Input, &in), "input %s", c.Input)
			require.Contains(t, in, "city")
		}
	}
	require.Equal(t, 1, uses)
	require.Equal(t, "tool_use", *out.StopReason)

	body["stream"] = true
	sm := checkMessageStream(t, readTypedSSE(t, e.post(t, "/v1/messages", body)))
	require.Len(t, sm.calls, 1)
	require.Equal(t, "get_weather", sm.calls[0].Name)
	require.True(t, json.Valid([]byte(sm.calls[0].Arguments)), sm.calls[0].Arguments)
	require.Equal(t, "tool_use", sm.stopReason)
}
