package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/internal/testwait"
	"github.com/turnstile-llm/turnstile/policy"
	"github.com/turnstile-llm/turnstile/toolcall"
)

// recEngine records the program id of every request it is given.
type recEngine struct {
	*executor.Engine
	mu       sync.Mutex
	programs []string
}

func (r *recEngine) Submit(ctx context.Context, q *executor.Request) (*executor.Stream, error) {
	r.mu.Lock()
	r.programs = append(r.programs, q.ProgramID)
	r.mu.Unlock()
	return r.Engine.Submit(ctx, q)
}

func (r *recEngine) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.programs...)
}

// newRespEnv serves stories260K (CPU runner, fallback chat format)
// through a recEngine.
func newRespEnv(t *testing.T, cfg func(*Config)) (*env, *recEngine) {
	t.Helper()
	eng, m := storiesEngine(t, true)
	rec := &recEngine{Engine: eng}
	c := Config{Model: testModel, MaxContext: m.MaxContext(), Tokenizer: m.Tokenizer(), MaxInFlight: 16}
	if cfg != nil {
		cfg(&c)
	}
	srv, err := New(c, rec)
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	e := &env{srv: srv, eng: eng, tok: m.Tokenizer(), stop: stop, done: make(chan error, 1)}
	go func() { e.done <- eng.Run(ctx) }()
	e.ts = httptest.NewServer(srv.Handler())
	e.ts.Client().Timeout = testwait.Bound
	t.Cleanup(func() { e.close(t) })
	return e, rec
}

// respOut is a response object as a client reads it.
type respOut struct {
	ID                 string          `json:"id"`
	Object             string          `json:"object"`
	Status             string          `json:"status"`
	Model              string          `json:"model"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Store              bool            `json:"store"`
	Metadata           map[string]any  `json:"metadata"`
	Instructions       *string         `json:"instructions"`
	Error              json.RawMessage `json:"error"`
	IncompleteDetails  *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Output []struct {
		Type    string `json:"type"`
		ID      string `json:"id"`
		Status  string `json:"status"`
		Role    string `json:"role"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"output"`
	Usage *struct {
		InputTokens        int `json:"input_tokens"`
		InputTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// text is the output's message text (the SDKs' output_text).
func (o *respOut) text() string {
	var b strings.Builder
	for _, it := range o.Output {
		if it.Type == "message" {
			for _, c := range it.Content {
				if c.Type == "output_text" {
					b.WriteString(c.Text)
				}
			}
		}
	}
	return b.String()
}

// respEvent is one typed stream event.
type respEvent struct {
	name string
	data map[string]any
	raw  string
}

// readRespEvents reads a typed event stream to its end.
func readRespEvents(t *testing.T, resp *http.Response) []respEvent {
	t.Helper()
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	var evs []respEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			raw := strings.TrimPrefix(line, "data: ")
			require.NotEqual(t, "[DONE]", raw, "the Responses stream has no [DONE]")
			var d map[string]any
			require.NoError(t, json.Unmarshal([]byte(raw), &d), raw)
			require.Equal(t, name, d["type"], "event %q's data has type %v", name, d["type"])
			require.EqualValues(t, len(evs), d["sequence_number"], raw)
			evs = append(evs, respEvent{name: name, data: d, raw: raw})
		default:
			t.Fatalf("unexpected stream line %q", line)
		}
	}
	require.NoError(t, sc.Err())
	return evs
}

// streamed checks a stream's event order and returns its final response
// and the text its deltas spelled.
func streamed(t *testing.T, evs []respEvent) (respOut, string) {
	t.Helper()
	require.GreaterOrEqual(t, len(evs), 3)
	require.Equal(t, "response.created", evs[0].name)
	require.Equal(t, "response.in_progress", evs[1].name)
	last := evs[len(evs)-1]
	require.Contains(t, []string{"response.completed", "response.incomplete"}, last.name)
	open := map[string]bool{}
	var deltas, args strings.Builder
	for _, ev := range evs[2 : len(evs)-1] {
		switch ev.name {
		case "response.output_item.added":
			item := ev.data["item"].(map[string]any)
			open[item["id"].(string)] = true
		case "response.output_item.done":
			item := ev.data["item"].(map[string]any)
			require.True(t, open[item["id"].(string)], "done for an item never added: %s", ev.raw)
			delete(open, item["id"].(string))
		case "response.output_text.delta":
			require.True(t, open[ev.data["item_id"].(string)])
			deltas.WriteString(ev.data["delta"].(string))
		case "response.function_call_arguments.delta":
			args.WriteString(ev.data["delta"].(string))
		case "response.content_part.added", "response.content_part.done", "response.output_text.done",
			"response.reasoning_text.delta", "response.reasoning_text.done", "response.function_call_arguments.done":
			require.True(t, open[ev.data["item_id"].(string)], ev.raw)
		default:
			t.Fatalf("unexpected event %s", ev.raw)
		}
	}
	require.Empty(t, open, "items never done")
	var out respOut
	b, err := json.Marshal(last.data["response"])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &out))
	return out, deltas.String()
}

func postResp(t *testing.T, e *env, body any, hdr ...string) respOut {
	t.Helper()
	resp := e.post(t, "/v1/responses", body, hdr...)
	var out respOut
	require.Equal(t, http.StatusOK, resp.StatusCode)
	decodeJSON(t, resp, &out)
	return out
}

// TestResponsesWholeAndStreamed: a string input and a list of items,
// whole and streamed at temperature 0, give the same text; the stream's
// events come in order and end with response.completed (or incomplete).
func TestResponsesWholeAndStreamed(t *testing.T) {
	e, _ := newRespEnv(t, nil)
	inputs := map[string]any{
		"string": "Once upon a time",
		"items": []any{
			map[string]any{"role": "user", "content": "Tell me a story."},
			map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "Once there was a cat."}}},
			map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "More!"}}},
		},
	}
	for name, input := range inputs {
		t.Run(name, func(t *testing.T) {
			body := map[string]any{"model": testModel, "input": input, "temperature": 0, "max_output_tokens": 12,
				"instructions": "Be brief.", "metadata": map[string]string{"k": "v"}}
			whole := postResp(t, e, body)
			require.Equal(t, "response", whole.Object)
			require.True(t, strings.HasPrefix(whole.ID, "resp_"), whole.ID)
			require.Contains(t, []string{"completed", "incomplete"}, whole.Status)
			if whole.Status == "incomplete" {
				require.Equal(t, "max_output_tokens", whole.IncompleteDetails.Reason)
			}
			require.Equal(t, "v", whole.Metadata["k"])
			require.Equal(t, "Be brief.", *whole.Instructions)
			require.Len(t, whole.Output, 1)
			require.Equal(t, "message", whole.Output[0].Type)
			require.True(t, strings.HasPrefix(whole.Output[0].ID, "msg_"))
			require.NotEmpty(t, whole.text())
			require.Positive(t, whole.Usage.InputTokens)
			require.Equal(t, whole.Usage.InputTokens+whole.Usage.OutputTokens, whole.Usage.TotalTokens)
			require.Equal(t, "null", string(whole.Error))

			body["stream"] = true
			out, deltas := streamed(t, readRespEvents(t, e.post(t, "/v1/responses", body)))
			require.Equal(t, whole.text(), out.text())
			require.Equal(t, whole.text(), deltas)
			require.Equal(t, whole.Status, out.Status)
			require.Equal(t, whole.Usage.OutputTokens, out.Usage.OutputTokens)

			// Both were stored: GET returns them.
			for _, id := range []string{whole.ID, out.ID} {
				resp, err := e.ts.Client().Get(e.ts.URL + "/v1/responses/" + id)
				require.NoError(t, err)
				var got respOut
				decodeJSON(t, resp, &got)
				require.Equal(t, id, got.ID)
				require.Equal(t, whole.text(), got.text())
			}
			require.NoError(t, e.srv.responses.check())
		})
	}
}

// TestResponsesChain: previous_response_id continues a stored response as
// a turn of the same program, whose KV prefix the engine reuses; unknown
// and deleted ids are 404; the chain's program is released with its last
// stored response.
func TestResponsesChain(t *testing.T) {
	e, rec := newRespEnv(t, nil)
	long := strings.Repeat("The little dog ran to the park and played with a red ball. ", 4)
	first := postResp(t, e, map[string]any{"input": long, "temperature": 0, "max_output_tokens": 8, "instructions": "Be kind."})
	second := postResp(t, e, map[string]any{"input": "What happened next?", "previous_response_id": first.ID,
		"temperature": 0, "max_output_tokens": 8, "instructions": "Be kind."})
	require.Equal(t, first.ID, *second.PreviousResponseID)
	require.Greater(t, second.Usage.InputTokens, first.Usage.InputTokens+first.Usage.OutputTokens)
	require.Positive(t, second.Usage.InputTokensDetails.CachedTokens, "the first turn is a KV prefix of the second")
	chain := chainPrefix + first.ID
	require.Equal(t, []string{chain, chain}, rec.seen(), "both turns ran as the chain's program")
	// A streamed third turn continues the second.
	third, _ := streamed(t, readRespEvents(t, e.post(t, "/v1/responses", map[string]any{"input": "And then?",
		"previous_response_id": second.ID, "temperature": 0, "max_output_tokens": 4, "stream": true, "instructions": "Be kind."})))
	require.Positive(t, third.Usage.InputTokensDetails.CachedTokens)
	require.Equal(t, "Be kind.", *third.Instructions)
	require.Equal(t, chain, rec.seen()[2])
	require.NoError(t, e.srv.responses.check())

	known := func() bool {
		e.srv.progs.mu.Lock()
		defer e.srv.progs.mu.Unlock()
		_, ok := e.srv.progs.table[chain]
		return ok
	}
	require.True(t, known())

	bad, nf := http.StatusBadRequest, http.StatusNotFound
	checkErrors(t, e, []errCase{
		{"unknown previous", "/v1/responses", `{"input":"x","previous_response_id":"resp_nope"}`, nil, nf, errInvalidRequest, "previous_response_id", "previous_response_not_found"},
		{"program header disagrees", "/v1/responses", `{"input":"x","previous_response_id":"` + first.ID + `"}`, []string{"X-Program-Id", "other"}, bad, errInvalidRequest, "previous_response_id", "invalid_value"},
	})
	del := func(id string) int {
		req, err := http.NewRequest(http.MethodDelete, e.ts.URL+"/v1/responses/"+id, nil)
		require.NoError(t, err)
		resp, err := e.ts.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.NoError(t, e.srv.responses.check())
		return resp.StatusCode
	}
	get := func(id string) int {
		resp, err := e.ts.Client().Get(e.ts.URL + "/v1/responses/" + id)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, del(first.ID))
	require.Equal(t, nf, get(first.ID))
	require.Equal(t, nf, del(first.ID))
	checkErrors(t, e, []errCase{
		{"deleted previous", "/v1/responses", `{"input":"x","previous_response_id":"` + first.ID + `"}`, nil, nf, errInvalidRequest, "previous_response_id", "previous_response_not_found"},
	})
	require.True(t, known(), "the chain keeps its program while a response of it is stored")
	require.Equal(t, http.StatusOK, del(second.ID))
	require.Equal(t, http.StatusOK, del(third.ID))
	require.False(t, known(), "the chain's program is released with its last response")

	// store false: nothing is kept, and the chain's program ends with the turn.
	out := postResp(t, e, map[string]any{"input": "Hi", "max_output_tokens": 2, "store": false})
	require.False(t, out.Store)
	require.Equal(t, nf, get(out.ID))
	n, _ := e.srv.responses.stats()
	require.Zero(t, n)
	require.NoError(t, e.srv.responses.check())

	// X-Program-Id names the chain's program on its first turn.
	a := postResp(t, e, map[string]any{"input": "Hi", "max_output_tokens": 2}, "X-Program-Id", "agent-7")
	postResp(t, e, map[string]any{"input": "Again", "max_output_tokens": 2, "previous_response_id": a.ID}, "X-Program-Id", "agent-7")
	seen := rec.seen()
	require.Equal(t, []string{"agent-7", "agent-7"}, seen[len(seen)-2:])
}

// TestResponsesFunctionCalls: function_call and function_call_output
// items render as an assistant's calls and their results, continuing a
// conversation.
func TestResponsesFunctionCalls(t *testing.T) {
	e, _ := newRespEnv(t, nil)
	out := postResp(t, e, map[string]any{"max_output_tokens": 4, "tool_choice": "none",
		"tools": []any{map[string]any{"type": "function", "name": "get_weather", "parameters": map[string]any{"type": "object"}}},
		"input": []any{
			map[string]any{"role": "user", "content": "Weather?"},
			map[string]any{"type": "reasoning", "id": "rs_1", "summary": []any{}, "content": []any{map[string]any{"type": "reasoning_text", "text": "Call it."}}},
			map[string]any{"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": `{"city":"Paris"}`},
			map[string]any{"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": `{"city":"Rome"}`},
			map[string]any{"type": "function_call_output", "call_id": "c1", "output": "sunny"},
			map[string]any{"type": "function_call_output", "call_id": "c2", "output": []any{map[string]any{"type": "input_text", "text": "rain"}}},
		}})
	require.Equal(t, "message", out.Output[0].Type)
	// The continuation may answer the second call's output later.
	resp := e.post(t, "/v1/responses", map[string]any{"input": []any{map[string]any{"type": "function_call_output", "call_id": "c1", "output": "again"}},
		"previous_response_id": out.ID})
	var eo errorOut
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	decodeJSON(t, resp, &eo)
	require.Equal(t, "input[0].call_id", *eo.Error.Param, eo.Error.Message)
}

func TestResponsesErrors(t *testing.T) {
	e := newSimEnv(t, simOpts{})
	const bad, inv = http.StatusBadRequest, errInvalidRequest
	p := "/v1/responses"
	call := `{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}`
	checkErrors(t, e, []errCase{
		{"no input", p, `{"model":"` + testModel + `"}`, nil, bad, inv, "input", "invalid_value"},
		{"input a number", p, `{"input":3}`, nil, bad, inv, "input", "invalid_type"},
		{"unknown model", p, `{"model":"gpt-9","input":"x"}`, nil, http.StatusNotFound, inv, "model", "model_not_found"},
		{"bad role", p, `{"input":[{"role":"robot","content":"x"}]}`, nil, bad, inv, "input[0].role", "invalid_value"},
		{"image part", p, `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`, nil, bad, inv, "input[0].content[0].type", "unsupported"},
		{"unknown item", p, `{"input":["x"]}`, nil, bad, inv, "input[0]", "invalid_type"},
		{"item type", p, `{"input":[{"type":"web_search_call"}]}`, nil, bad, inv, "input[0].type", "unsupported"},
		{"call without id", p, `{"input":[{"role":"user","content":"x"},{"type":"function_call","name":"f","arguments":"{}"}]}`, nil, bad, inv, "input[1].call_id", "invalid_value"},
		{"call arguments", p, `{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"[1]"}]}`, nil, bad, inv, "input[0].arguments", "invalid_value"},
		{"output of no call", p, `{"input":[{"role":"user","content":"x"},{"type":"function_call_output","call_id":"zz","output":"1"}]}`, nil, bad, inv, "input[1].call_id", "invalid_value"},
		{"output twice", p, `{"input":[` + call + `,{"type":"function_call_output","call_id":"c1","output":"1"},{"type":"function_call_output","call_id":"c1","output":"1"}]}`, nil, bad, inv, "input[2].call_id", "invalid_value"},
		{"call id reused", p, `{"input":[` + call + `,` + call + `]}`, nil, bad, inv, "input[1].call_id", "invalid_value"},
		{"tool type", p, `{"input":"x","tools":[{"type":"web_search"}]}`, nil, bad, inv, "tools[0].type", "unsupported"},
		{"tool name", p, `{"input":"x","tools":[{"type":"function","name":"a b"}]}`, nil, bad, inv, "tools[0].name", "invalid_value"},
		{"tool_choice unknown", p, `{"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}}`, nil, bad, inv, "tool_choice", "invalid_value"},
		{"tool_choice string", p, `{"input":"x","tool_choice":"always"}`, nil, bad, inv, "tool_choice", "invalid_value"},
		{"format type", p, `{"input":"x","text":{"format":{"type":"yaml"}}}`, nil, bad, inv, "text.format.type", "invalid_value"},
		{"format schema missing", p, `{"input":"x","text":{"format":{"type":"json_schema","name":"s"}}}`, nil, bad, inv, "text.format.schema", "invalid_value"},
		{"format schema not an object", p, `{"input":"x","text":{"format":{"type":"json_schema","name":"s","schema":[1]}}}`, nil, bad, inv, "text.format.schema", "invalid_type"},
		{"structured output off", p, `{"input":"x","text":{"format":{"type":"json_object"}}}`, nil, bad, inv, "text.format", "unsupported"},
		{"max_output_tokens", p, `{"input":"x","max_output_tokens":0}`, nil, bad, inv, "max_output_tokens", "invalid_value"},
		{"temperature", p, `{"input":"x","temperature":3}`, nil, bad, inv, "temperature", "invalid_value"},
		{"truncation auto", p, `{"input":"x","truncation":"auto"}`, nil, bad, inv, "truncation", "unsupported"},
		{"include", p, `{"input":"x","include":["file_search_call.results","reasoning.encrypted_content"]}`, nil, bad, inv, "include[1]", "unsupported"},
		{"background", p, `{"input":"x","background":true}`, nil, bad, inv, "background", "unsupported"},
		{"reasoning effort", p, `{"input":"x","reasoning":{"effort":"max"}}`, nil, bad, inv, "reasoning.effort", "invalid_value"},
		{"metadata", p, `{"input":"x","metadata":{"k":"` + strings.Repeat("v", 600) + `"}}`, nil, bad, inv, "metadata.k", "invalid_value"},
		{"wrong type", p, `{"input":"x","stream":"yes"}`, nil, bad, inv, "stream", "invalid_type"},
		{"empty previous", p, `{"input":"x","previous_response_id":""}`, nil, bad, inv, "previous_response_id", "invalid_value"},
	})
	for _, path := range []string{"/v1/responses/resp_nope"} {
		resp, err := e.ts.Client().Get(e.ts.URL + path)
		require.NoError(t, err)
		var out errorOut
		decodeJSON(t, resp, &out)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		require.Equal(t, "response_not_found", *out.Error.Code)
		require.Contains(t, out.Error.Message, "resp_nope")
	}
	resp, err := e.ts.Client().Get(e.ts.URL + "/v1/responses")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

// TestResponsesJSONSchema: text.format json_schema constrains the output
// to the schema, whole and streamed.
func TestResponsesJSONSchema(t *testing.T) {
	e := newSimEnv(t, simOpts{guided: true, maxContext: 512})
	var schema any
	require.NoError(t, json.Unmarshal([]byte(personSchema), &schema))
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("person.json", schema))
	sch, err := c.Compile("person.json")
	require.NoError(t, err)
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			body := map[string]any{"input": "Give me a person.", "max_output_tokens": 120, "stream": stream,
				"text": map[string]any{"format": map[string]any{"type": "json_schema", "name": "person", "schema": json.RawMessage(personSchema), "strict": true}}}
			var out respOut
			if stream {
				out, _ = streamed(t, readRespEvents(t, e.post(t, "/v1/responses", body)))
			} else {
				out = postResp(t, e, body)
			}
			require.Equal(t, "completed", out.Status, "output %q", out.text())
			var v any
			require.NoError(t, json.Unmarshal([]byte(out.text()), &v), out.text())
			require.NoError(t, sch.Validate(v), out.text())
		})
	}
}

// TestResponsesRequiredTool: tool_choice required gives a function_call
// item whose arguments match the tool's parameters.
func TestResponsesRequiredTool(t *testing.T) {
	e := newSimEnv(t, simOpts{guided: true, maxContext: 4096})
	body := map[string]any{"input": "Weather in Paris?", "max_output_tokens": 200, "tool_choice": "required", "parallel_tool_calls": false,
		"tools": []any{map[string]any{"type": "function", "name": "get_weather", "strict": true,
			"parameters": json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","maxLength":8}},"required":["city"],"additionalProperties":false}`)}}}
	out := postResp(t, e, body)
	require.Equal(t, "completed", out.Status)
	var call int
	for _, it := range out.Output {
		if it.Type == "function_call" {
			call++
			require.Equal(t, "get_weather", it.Name)
			require.True(t, strings.HasPrefix(it.CallID, "call_"))
			var args map[string]any
			require.NoError(t, json.Unmarshal([]byte(it.Arguments), &args))
			require.Contains(t, args, "city")
		}
	}
	require.Positive(t, call)
}

// TestRespStoreBounds: the store keeps its count, byte and time bounds,
// evicting the least recently used, and releases a chain with its last
// response; check holds after every operation.
func TestRespStoreBounds(t *testing.T) {
	clk := clock.NewVirtual(time.Unix(1000, 0))
	var released []string
	st := newRespStore(3, 4000, time.Minute, clk, func(c string) { released = append(released, c) })
	ok := func() { t.Helper(); require.NoError(t, st.check()) }
	mk := func(id, chain string, n int) *storedResponse {
		return &storedResponse{id: id, chain: chain, body: []byte(strings.Repeat("x", n)),
			msgs: []message{{Role: "user", Content: "hi"}}}
	}
	require.True(t, st.put(mk("a", "c1", 100)))
	ok()
	require.True(t, st.put(mk("b", "c1", 100)))
	ok()
	require.True(t, st.put(mk("c", "c2", 100)))
	ok()
	require.NotNil(t, st.get("a")) // a is now the most recently used
	ok()
	require.True(t, st.put(mk("d", "c3", 100))) // count bound: b goes
	ok()
	require.Nil(t, st.get("b"))
	require.NotNil(t, st.get("a"))
	require.Empty(t, released, "c1 still has a")
	n, _ := st.stats()
	require.Equal(t, 3, n)

	// Byte bound: a large response evicts the least recently used.
	require.True(t, st.put(mk("e", "c4", 3000)))
	ok()
	_, b := st.stats()
	require.LessOrEqual(t, b, int64(4000))
	require.Nil(t, st.get("c"), "c was least recently used")
	require.Contains(t, released, "c2")
	require.False(t, st.put(mk("huge", "c5", 5000)), "larger than the byte bound alone")
	ok()
	require.Nil(t, st.get("huge"))

	// Expiry: unused for the TTL.
	require.NoError(t, clk.Advance(30*time.Second))
	require.NotNil(t, st.get("e"))
	ok()
	require.NoError(t, clk.Advance(45*time.Second))
	require.NotNil(t, st.get("e"), "e was used 45s ago")
	ok()
	require.Nil(t, st.get("a"), "a expired")
	ok()
	require.Contains(t, released, "c1")

	// A chain with a turn in flight is released when the turn ends.
	st.begin("c4")
	ok()
	require.True(t, st.remove("e"))
	ok()
	require.NotContains(t, released, "c4")
	st.end("c4")
	ok()
	require.Contains(t, released, "c4")
	require.False(t, st.remove("e"))
	ok()
}

// TestRespStoreConcurrent: concurrent operations keep the store
// consistent (run with -race).
func TestRespStoreConcurrent(t *testing.T) {
	clk := clock.NewVirtual(time.Unix(1000, 0))
	var mu sync.Mutex
	releases := 0
	st := newRespStore(16, 1<<14, time.Minute, clk, func(string) { mu.Lock(); releases++; mu.Unlock() })
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				id := fmt.Sprintf("r%d-%d", g, i%40)
				chain := fmt.Sprintf("c%d-%d", g, i%7)
				switch i % 4 {
				case 0, 1:
					st.begin(chain)
					st.put(&storedResponse{id: id, chain: chain, body: make([]byte, 100+i)})
					st.end(chain)
				case 2:
					st.get(id)
				case 3:
					st.remove(id)
					_ = clk.Advance(time.Second)
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, st.check())
	mu.Lock()
	require.Positive(t, releases)
	mu.Unlock()
}

// TestResponsesConfig: negative store bounds are refused.
func TestResponsesConfig(t *testing.T) {
	tok := storiesTokenizer(t)
	for _, cfg := range []Config{{ResponsesMax: -1}, {ResponsesMaxBytes: -1}, {ResponsesTTL: -time.Second}} {
		cfg.Model, cfg.MaxContext, cfg.Tokenizer, cfg.MaxInFlight = testModel, 64, tok, 1
		_, err := New(cfg, &recEngine{})
		require.ErrorContains(t, err, "Responses")
	}
}

// TestRespBuilderShaped: reasoning, content and a tool call become the
// same output items whole and streamed, the stream's events in the
// documented order; a failure mid-stream sends error and response.failed.
func TestRespBuilderShaped(t *testing.T) {
	hermes, ok := toolcall.Known("hermes")
	require.True(t, ok)
	shape := &outShape{syntax: &hermes, reasoning: toolcall.Reasoning{Open: thinkOpen, Close: thinkClose}}
	j := &job{shape: shape, resp: &respTurn{id: "resp_x", chain: "c", echo: respObject{ID: "resp_x", Object: "response"}}}
	text := "<think>plan</think>Sure.<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>"
	items := func(b *respBuilder) string {
		var out []map[string]any
		raw, err := json.Marshal(b.items)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, &out))
		for _, it := range out {
			delete(it, "id") // random per answer
			if id, ok := it["call_id"].(string); ok {
				require.True(t, strings.HasPrefix(id, "call_"), id)
				it["call_id"] = "call_"
			}
		}
		s, err := json.Marshal(out)
		require.NoError(t, err)
		return string(s)
	}
	whole := newRespBuilder(j, nil)
	require.NoError(t, whole.feed(text, true))
	require.NoError(t, whole.finish("completed"))
	rec := httptest.NewRecorder()
	sse := newSSE(rec)
	st := newRespBuilder(j, sse)
	for i, piece := range []string{text[:7], text[7:30], text[30:]} {
		require.NoError(t, st.feed(piece, i == 2))
	}
	require.NoError(t, st.finish("completed"))
	require.JSONEq(t, items(whole), items(st))
	m := whole.assistant()
	require.Equal(t, "Sure.", m.Content)
	require.Equal(t, "plan", m.Reasoning)
	require.Len(t, m.ToolCalls, 1)
	require.Equal(t, "f", m.ToolCalls[0].Name)
	require.JSONEq(t, `{"a": 1}`, m.ToolCalls[0].Arguments)

	rs := &respStream{b: st}
	require.NoError(t, rs.inStream(sse, abortedError()))
	res := rec.Result()
	evs := readRespEvents(t, res)
	var names []string
	for _, ev := range evs {
		names = append(names, strings.TrimPrefix(ev.name, "response."))
	}
	require.Equal(t, []string{
		"output_item.added", "content_part.added", "reasoning_text.delta", "reasoning_text.done", "content_part.done", "output_item.done",
		"output_item.added", "content_part.added", "output_text.delta", "output_text.done", "content_part.done", "output_item.done",
		"output_item.added", "function_call_arguments.delta", "function_call_arguments.done", "output_item.done",
		"error", "failed",
	}, names)
	failed := evs[len(evs)-1].data["response"].(map[string]any)
	require.Equal(t, "failed", failed["status"])
	require.Equal(t, "server_error", failed["error"].(map[string]any)["code"])
	require.Equal(t, "aborted", evs[len(evs)-2].data["code"])
}

// TestOpenAINodeResponses drives /v1/responses with the official OpenAI
// Node.js client, whose stream helper rebuilds the response from the
// events and fails on any it cannot place.
func TestOpenAINodeResponses(t *testing.T) {
	dir := openaiNode(t)
	node, err := exec.LookPath("node")
	require.NoError(t, err, "npm is installed but node is not")
	script, err := os.ReadFile(filepath.Join("testdata", "openai-node", "responses.mjs"))
	require.NoError(t, err)
	run := t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(run, "node_modules")))
	require.NoError(t, os.WriteFile(filepath.Join(run, "responses.mjs"), script, 0o644))
	e, _ := newRespEnv(t, func(c *Config) { c.APIKeys = []string{"sk-test"} })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "responses.mjs")
	cmd.Dir = run
	cmd.Env = append(os.Environ(), "TURNSTILE_URL="+e.ts.URL+"/v1", "TURNSTILE_KEY=sk-test", "TURNSTILE_MODEL="+testModel)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "responses.mjs: %s", stderr.String())
	var got struct {
		First struct {
			ID, Status, Text string
		}
		Streamed struct {
			Text, Deltas, Status, First, Last string
		}
		Second struct {
			Previous string
			Cached   int
		}
		Retrieved, Deleted bool
		AfterDelete        int
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &got), "client output: %s", stdout.String())
	require.NotEmpty(t, got.First.Text)
	require.Equal(t, got.First.Text, got.Streamed.Text)
	require.Equal(t, got.First.Text, got.Streamed.Deltas)
	require.Equal(t, got.First.Status, got.Streamed.Status)
	require.Equal(t, "response.created", got.Streamed.First)
	require.Contains(t, []string{"response.completed", "response.incomplete"}, got.Streamed.Last)
	require.Equal(t, got.First.ID, got.Second.Previous)
	require.Positive(t, got.Second.Cached)
	require.True(t, got.Retrieved)
	require.True(t, got.Deleted)
	require.Equal(t, 404, got.AfterDelete)
}

// TestResponsesChainIsOneProgram: under the engine's program policy, a
// chain of three stored responses is one program in /metrics, and deleting
// the chain's responses ends it.
func TestResponsesChainIsOneProgram(t *testing.T) {
	pc := policy.DefaultConfig(policy.BlockAccounting, 0)
	e := newSimEnv(t, simOpts{programs: &pc, maxContext: 1024})
	programs := func() float64 {
		fams := scrape(t, e)
		n := 0.0
		for _, st := range []string{"active", "paused", "waiting"} {
			n += labelled(fams, "turnstile_programs", "state", st)
		}
		return n
	}
	var ids []string
	prev := ""
	for turn := range 3 {
		body := map[string]any{"input": fmt.Sprintf("Turn %d: tell me more.", turn), "max_output_tokens": 4}
		if prev != "" {
			body["previous_response_id"] = prev
		}
		out := postResp(t, e, body)
		prev = out.ID
		ids = append(ids, out.ID)
		require.Eventually(t, func() bool { return programs() == 1 }, 5*time.Second, time.Millisecond, "turn %d", turn)
	}
	for _, id := range ids {
		req, err := http.NewRequest(http.MethodDelete, e.ts.URL+"/v1/responses/"+id, nil)
		require.NoError(t, err)
		resp, err := e.ts.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	require.Eventually(t, func() bool { return programs() == 0 }, 5*time.Second, time.Millisecond, "the chain's program ends with its last response")
}
