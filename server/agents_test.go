package server

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// nodeClientPackages are the pinned npm packages the agent-client tests
// drive the server with; each runs on Node 20 (the newer lines of openai,
// 7.x, and so @openai/agents from 0.15 on, need Node >= 22). ajv is a JSON
// Schema validator that is not turnstile's.
var nodeClientPackages = []string{
	"openai@" + openaiNodeVersion,
	"@openai/agents@0.14.3",
	"@anthropic-ai/sdk@1.17.0",
	"ajv@8.20.0",
	"zod@4.6.7", // @openai/agents's peer dependency
}

// clientServer is one server the agent-client tests run against: the sim
// runner with the grammar engine on, over a real tokenizer and template.
type clientServer struct {
	name  string
	start func(t *testing.T) *env
	// thinks: the template reasons first unless a request turns it off.
	thinks bool
	// greedy: the runner samples greedily at temperature 0 (a real model;
	// the sim hashes the sampling seed whatever the temperature).
	greedy bool
}

// ordinaryRange is the range of a Hugging Face tokenizer fixture's
// ordinary tokens: below its first added token (the special and control
// tokens, which random sampling must not produce outside a grammar).
func ordinaryRange(t testing.TB, name string) (int32, int32) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "tokenizer", name, "tokenizer_config.json"))
	require.NoError(t, err)
	var cfg struct {
		Added map[string]json.RawMessage `json:"added_tokens_decoder"`
	}
	require.NoError(t, json.Unmarshal(b, &cfg))
	first := int32(-1)
	for k := range cfg.Added {
		id, err := strconv.Atoi(k)
		require.NoError(t, err)
		if first < 0 || int32(id) < first {
			first = int32(id)
		}
	}
	require.Positive(t, first, "%s has added tokens", name)
	return 0, first
}

func clientServers() []clientServer {
	hf := func(tokName, template string) func(t *testing.T) *env {
		return func(t *testing.T) *env {
			tok := hfTokenizer(t, tokName)
			lo, hi := ordinaryRange(t, tokName)
			require.Less(t, tok.EOS(), int32(tok.VocabSize()))
			require.GreaterOrEqual(t, tok.EOS(), hi, "EOS is a special token, outside the sampled range")
			return newSimEnv(t, simOpts{guided: true, maxContext: 4096, template: readTemplate(t, template),
				keys: []string{"sk-test"}, tok: tok, tokenMin: lo, tokenMax: hi})
		}
	}
	return []clientServer{
		{name: "stories-qwen2.5", start: func(t *testing.T) *env {
			return newSimEnv(t, simOpts{guided: true, maxContext: 4096, template: readTemplate(t, "qwen2.5"), keys: []string{"sk-test"}})
		}},
		// Qwen3 thinks unless told not to; on random logits the reasoning
		// would never end.
		{name: "qwen3", start: hf("qwen3", "qwen3"), thinks: true},
		{name: "llama3.1", start: hf("llama3", "llama3.1")},
	}
}

// clientCase is one scenario's report from a script: what it observed, or
// how it failed.
type clientCase struct {
	Failed *struct {
		Class   string          `json:"class"`
		Message string          `json:"message"`
		Status  int             `json:"status"`
		Body    json.RawMessage `json:"body"`
		Stack   string          `json:"stack"`
	} `json:"failed"`
	Ms   int             `json:"ms"`
	Data json.RawMessage `json:"-"`
}

// runClient runs a script of testdata/agents-node against e and returns
// its scenarios by name, in name order.
func runClient(t *testing.T, dir string, e *env, s clientServer, script string, only ...string) (map[string]json.RawMessage, []string) {
	t.Helper()
	thinks := "0"
	if s.thinks {
		thinks = "1"
	}
	stdout := runNode(t, dir, filepath.Join("testdata", "agents-node", script), 2*time.Minute,
		"TURNSTILE_URL="+e.ts.URL, "TURNSTILE_KEY=sk-test", "TURNSTILE_MODEL="+testModel, "TURNSTILE_THINKS="+thinks,
		"TURNSTILE_ONLY="+strings.Join(only, ","))
	if os.Getenv("TURNSTILE_NODE_LOG") != "" {
		t.Logf("%s: %s", script, stdout)
	}
	var got map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(stdout, &got), "%s output: %s", script, stdout)
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range got {
			if !yield(k) {
				return
			}
		}
	})
	return got, names
}

// noFailure fails t with a scenario's client error, if it has one.
func noFailure(t *testing.T, raw json.RawMessage) bool {
	t.Helper()
	var c clientCase
	require.NoError(t, json.Unmarshal(raw, &c))
	if c.Failed != nil {
		t.Errorf("the client failed: %s: %s (status %d, body %s)\n%s", c.Failed.Class, c.Failed.Message, c.Failed.Status, c.Failed.Body, c.Failed.Stack)
		return false
	}
	return true
}

// endpointServed probes path with an empty JSON object: a 404 means the endpoint
// is not there.
func endpointServed(t *testing.T, e *env, path string) bool {
	t.Helper()
	resp := e.post(t, path, "{}", "Authorization", "Bearer sk-test")
	resp.Body.Close()
	return resp.StatusCode != http.StatusNotFound
}

type toolCallOut struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Valid     *bool  `json:"valid"`
	Errors    string `json:"errors"`
	Cut       bool   `json:"cut"`
}

// TestAgentClients drives servers over real tokenizers and templates with
// the official clients and agent SDKs: the OpenAI Node.js client's chat
// tools and Responses API, the OpenAI Agents SDK, and the Anthropic SDK;
// tool-call arguments and structured output are checked with ajv.
func TestAgentClients(t *testing.T) {
	dir := nodePackages(t, nodeClientPackages...)
	for _, s := range clientServers() {
		t.Run(s.name, func(t *testing.T) {
			e := s.start(t)
			t.Run("openai-tools", func(t *testing.T) { testOpenAITools(t, dir, e, s) })
			t.Run("openai-responses", func(t *testing.T) { testOpenAIResponses(t, dir, e, s) })
			t.Run("openai-agents", func(t *testing.T) { testOpenAIAgents(t, dir, e, s) })
			t.Run("anthropic", func(t *testing.T) { testAnthropic(t, dir, e, s) })
		})
	}
	// Neither the Responses API nor the Messages API has a seed:
	// temperature 0's determinism, whole against streamed, is checked
	// where it holds, on a real model (the stories260K CPU runner).
	t.Run("stories-cpu", func(t *testing.T) {
		eng, m := storiesEngine(t, true)
		e := startEnv(t, eng, m.Tokenizer(), Config{Model: testModel, MaxContext: m.MaxContext(), Tokenizer: m.Tokenizer(),
			ChatTemplate: readTemplate(t, "qwen2.5"), APIKeys: []string{"sk-test"}, MaxInFlight: 16})
		cpu := clientServer{name: "stories-cpu", greedy: true}
		t.Run("openai-responses", func(t *testing.T) { testOpenAIResponses(t, dir, e, cpu, "text") })
		t.Run("anthropic", func(t *testing.T) { testAnthropic(t, dir, e, cpu, "text") })
	})
}

// testOpenAITools: chat tool calls, named and required, whole and
// streamed, several seeds at temperature 1.
func testOpenAITools(t *testing.T, dir string, e *env, s clientServer) {
	got, names := runClient(t, dir, e, s, "openai-tools.mjs")
	require.Len(t, names, 3*3*2)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			if !noFailure(t, got[name]) {
				return
			}
			var c struct {
				Finish    string        `json:"finish"`
				Content   *string       `json:"content"`
				Calls     []toolCallOut `json:"calls"`
				RoundTrip *struct {
					Finish       string `json:"finish"`
					PromptTokens int    `json:"promptTokens"`
				} `json:"roundTrip"`
			}
			require.NoError(t, json.Unmarshal(got[name], &c))
			mode := strings.SplitN(name, "/", 2)[0]
			if mode == "required" {
				// Parallel calls: random sampling may go on calling until
				// max_tokens; the calls before the last are whole.
				require.Contains(t, []string{"tool_calls", "length"}, c.Finish, "calls %+v", c.Calls)
			} else {
				require.Equal(t, "tool_calls", c.Finish, "content %v calls %+v", c.Content, c.Calls)
				require.Len(t, c.Calls, 1, "one call: %+v", c.Calls)
			}
			require.NotEmpty(t, c.Calls)
			ids := map[string]bool{}
			for _, call := range c.Calls {
				require.Equal(t, "function", call.Type)
				require.NotEmpty(t, call.ID)
				require.False(t, ids[call.ID], "call ids are unique: %+v", c.Calls)
				ids[call.ID] = true
				if mode == "named" {
					require.Equal(t, "get_weather", call.Name)
				}
				if call.Cut {
					continue
				}
				require.True(t, *call.Valid, "%s(%s): ajv: %s", call.Name, call.Arguments, call.Errors)
			}
			if c.Finish == "tool_calls" {
				require.NotNil(t, c.RoundTrip, "the conversation was sent back")
				require.Positive(t, c.RoundTrip.PromptTokens)
				require.NotEmpty(t, c.RoundTrip.Finish)
			}
			whole, ok := strings.CutSuffix(name, "/stream")
			if !ok {
				return
			}
			// The same request (the same seed) whole: the stream's calls,
			// as the client's stream helper assembled them, are its calls.
			var w struct {
				Finish string        `json:"finish"`
				Calls  []toolCallOut `json:"calls"`
			}
			require.NoError(t, json.Unmarshal(got[whole+"/whole"], &w))
			require.Equal(t, w.Finish, c.Finish)
			require.Len(t, c.Calls, len(w.Calls))
			for k := range w.Calls {
				require.Equal(t, w.Calls[k].Name, c.Calls[k].Name)
				require.Equal(t, w.Calls[k].Arguments, c.Calls[k].Arguments)
			}
		})
	}
}

// respSummary is what the responses script reports of a response.
type respSummary struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Status string `json:"status"`
	Model  string `json:"model"`
	Text   string `json:"text"`
	Items  []struct {
		Type      string `json:"type"`
		Role      string `json:"role"`
		Status    string `json:"status"`
		Name      string `json:"name"`
		CallID    string `json:"call_id"`
		Arguments string `json:"arguments"`
	} `json:"items"`
	Usage struct {
		InputTokens        int `json:"input_tokens"`
		OutputTokens       int `json:"output_tokens"`
		InputTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	} `json:"usage"`
	Previous string `json:"previous"`
}

type ajvCheck struct {
	Valid  bool   `json:"valid"`
	Errors string `json:"errors"`
	Value  any    `json:"value"`
}

// testOpenAIResponses: the Responses API, whole and streamed, structured
// output and a required function tool checked with ajv, continued turns.
func testOpenAIResponses(t *testing.T, dir string, e *env, s clientServer, only ...string) {
	if !endpointServed(t, e, "/v1/responses") {
		t.Skip("POST /v1/responses is not served (404): the Responses API (branch responses) is not merged")
	}
	got, names := runClient(t, dir, e, s, "openai-responses.mjs", only...)
	if len(only) == 0 {
		require.Len(t, names, 9)
	}
	sub := func(name string, f func(t *testing.T, raw json.RawMessage)) {
		if len(only) > 0 && !slices.Contains(only, name) {
			return
		}
		t.Run(name, func(t *testing.T) {
			raw, ok := got[name]
			require.True(t, ok, "the script reports %s", name)
			if noFailure(t, raw) {
				f(t, raw)
			}
		})
	}
	sub("text", func(t *testing.T, raw json.RawMessage) {
		var c struct {
			Whole  respSummary `json:"whole"`
			Stream struct {
				respSummary
				Deltas string   `json:"deltas"`
				First  string   `json:"first"`
				Last   string   `json:"last"`
				Types  []string `json:"types"`
			} `json:"stream"`
		}
		require.NoError(t, json.Unmarshal(raw, &c))
		require.Equal(t, "response", c.Whole.Object)
		require.Equal(t, "incomplete", c.Whole.Status, "16 tokens of random text end at max_output_tokens")
		require.Equal(t, 16, c.Whole.Usage.OutputTokens)
		require.NotEmpty(t, c.Whole.Text)
		require.Equal(t, c.Stream.Text, c.Stream.Deltas, "the stream's deltas add up to its text")
		require.Equal(t, "response.created", c.Stream.First)
		require.Equal(t, c.Whole.Status, c.Stream.Status)
		if s.greedy {
			require.Equal(t, c.Whole.Text, c.Stream.Text, "the same request at temperature 0 whole and streamed")
		} else {
			// The Responses API has no seed (the server ignores the one
			// sent) and the sim ignores the temperature: each request
			// hashes its own engine-drawn seed.
			t.Logf("sim: whole %q, streamed %q (no seed in the Responses API; compared on stories-cpu)", c.Whole.Text, c.Stream.Text)
		}
	})
	for _, name := range []string{"json_schema/whole", "json_schema/stream"} {
		sub(name, func(t *testing.T, raw json.RawMessage) {
			var c struct {
				respSummary
				Check ajvCheck `json:"check"`
			}
			require.NoError(t, json.Unmarshal(raw, &c))
			require.Equal(t, "completed", c.Status, "%+v", c.respSummary)
			require.True(t, c.Check.Valid, "output_text %q: ajv: %s", c.Text, c.Check.Errors)
		})
	}
	for _, name := range []string{"tool/required/whole", "tool/required/stream", "tool/named/whole", "tool/named/stream"} {
		sub(name, func(t *testing.T, raw json.RawMessage) {
			var c struct {
				respSummary
				StreamedArgs *string    `json:"streamedArgs"`
				Checks       []ajvCheck `json:"checks"`
			}
			require.NoError(t, json.Unmarshal(raw, &c))
			require.Equal(t, "completed", c.Status, "%+v", c.respSummary)
			var calls []string
			for _, it := range c.Items {
				if it.Type == "function_call" {
					require.Equal(t, "get_weather", it.Name)
					require.NotEmpty(t, it.CallID)
					calls = append(calls, it.Arguments)
				}
			}
			require.Len(t, calls, 1, "one function_call item (parallel_tool_calls false): %+v", c.Items)
			require.Len(t, c.Checks, len(calls))
			for k, ch := range c.Checks {
				require.True(t, ch.Valid, "arguments %s: ajv: %s", calls[k], ch.Errors)
			}
			if c.StreamedArgs != nil {
				require.Equal(t, strings.Join(calls, ""), *c.StreamedArgs, "the argument deltas add up to the calls' arguments")
			}
		})
	}
	for _, name := range []string{"continue/text", "continue/tool"} {
		sub(name, func(t *testing.T, raw json.RawMessage) {
			var c struct {
				First  respSummary `json:"first"`
				Second respSummary `json:"second"`
			}
			require.NoError(t, json.Unmarshal(raw, &c))
			require.Equal(t, c.First.ID, c.Second.Previous)
			require.Contains(t, []string{"completed", "incomplete"}, c.Second.Status)
			require.Greater(t, c.Second.Usage.InputTokens, c.First.Usage.InputTokens, "the second turn's input holds the first's")
			require.Positive(t, c.Second.Usage.InputTokensDetails.CachedTokens, "the second turn reuses the first's KV prefix")
		})
	}
}

// testOpenAIAgents: the OpenAI Agents SDK runs an agent with one function
// tool through the Responses API: the tool is called (forced on the first
// turn) with valid arguments and the run ends with a final output.
func testOpenAIAgents(t *testing.T, dir string, e *env, s clientServer) {
	if !endpointServed(t, e, "/v1/responses") {
		t.Skip("POST /v1/responses is not served (404): the Responses API (branch responses) is not merged")
	}
	// The chat completions model's run needs no Responses API, but one
	// script runs them all.
	got, names := runClient(t, dir, e, s, "agents.mjs")
	require.Equal(t, []string{"chat_completions/stream", "json/stream", "zod/whole"}, names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			if !noFailure(t, got[name]) {
				return
			}
			var c struct {
				Calls          []ajvCheck `json:"calls"`
				FinalOutput    *string    `json:"finalOutput"`
				Items          []string   `json:"items"`
				Responses      int        `json:"responses"`
				LastResponseID string     `json:"lastResponseId"`
				Events         int        `json:"events"`
			}
			require.NoError(t, json.Unmarshal(got[name], &c))
			require.Len(t, c.Calls, 1, "the tool ran once: items %v", c.Items)
			require.True(t, c.Calls[0].Valid, "arguments %v: ajv: %s", c.Calls[0].Value, c.Calls[0].Errors)
			require.Equal(t, []string{"tool_call_item", "tool_call_output_item", "message_output_item"}, c.Items)
			require.Equal(t, 2, c.Responses, "a turn that calls and a turn that answers")
			require.NotNil(t, c.FinalOutput, "the run ended with a final output")
			if !strings.HasPrefix(name, "chat_completions") {
				require.NotEmpty(t, c.LastResponseID)
			}
			if strings.HasSuffix(name, "stream") {
				require.Positive(t, c.Events)
			}
		})
	}
}

// msgSummary is what the anthropic script reports of a message.
type msgSummary struct {
	ID         string  `json:"id"`
	Type       string  `json:"type"`
	Role       string  `json:"role"`
	Model      string  `json:"model"`
	StopReason string  `json:"stop_reason"`
	StopSeq    *string `json:"stop_sequence"`
	Content    []struct {
		Type  string          `json:"type"`
		Text  string          `json:"text"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"content"`
	Usage struct {
		InputTokens   int `json:"input_tokens"` // Anthropic's: past the cache's
		CacheRead     int `json:"cache_read_input_tokens"`
		CacheCreation int `json:"cache_creation_input_tokens"`
		OutputTokens  int `json:"output_tokens"`
	} `json:"usage"`
	Checks []ajvCheck `json:"checks"`
}

// prompt is the prompt's whole length: Anthropic's input_tokens counts only
// what follows the cache's part.
func (m msgSummary) prompt() int {
	return m.Usage.InputTokens + m.Usage.CacheRead + m.Usage.CacheCreation
}

func (m msgSummary) text() string {
	var b strings.Builder
	for _, c := range m.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// testAnthropic: the Anthropic SDK's messages, whole and streamed, a
// forced tool_use block checked with ajv, its result sent back, and
// errors mapped to the SDK's classes.
func testAnthropic(t *testing.T, dir string, e *env, s clientServer, only ...string) {
	if !endpointServed(t, e, "/v1/messages") {
		t.Skip("POST /v1/messages is not served (404): the Messages API (branch messages) is not merged")
	}
	got, names := runClient(t, dir, e, s, "anthropic.mjs", only...)
	if len(only) == 0 {
		require.Equal(t, []string{"errors", "text", "tool/any", "tool/tool"}, names)
	}
	sub := func(name string, f func(t *testing.T, raw json.RawMessage)) {
		if len(only) > 0 && !slices.Contains(only, name) {
			return
		}
		t.Run(name, func(t *testing.T) {
			raw, ok := got[name]
			require.True(t, ok, "the script reports %s", name)
			if noFailure(t, raw) {
				f(t, raw)
			}
		})
	}
	sub("text", func(t *testing.T, raw json.RawMessage) {
		var c struct {
			Whole  msgSummary `json:"whole"`
			Stream struct {
				msgSummary
				Deltas string `json:"deltas"`
			} `json:"stream"`
			Raw struct {
				Types      []string `json:"types"`
				First      string   `json:"first"`
				Last       string   `json:"last"`
				Text       string   `json:"text"`
				StopReason string   `json:"stop_reason"`
				Usage      struct {
					OutputTokens int `json:"output_tokens"`
				} `json:"usage"`
			} `json:"raw"`
		}
		require.NoError(t, json.Unmarshal(raw, &c))
		require.Equal(t, "message", c.Whole.Type)
		require.Equal(t, "assistant", c.Whole.Role)
		require.Equal(t, testModel, c.Whole.Model)
		require.Equal(t, "max_tokens", c.Whole.StopReason, "16 tokens of text end at max_tokens")
		require.Equal(t, 16, c.Whole.Usage.OutputTokens)
		require.Positive(t, c.Whole.prompt())
		require.Len(t, c.Whole.Content, 1)
		require.Equal(t, "text", c.Whole.Content[0].Type)
		require.NotEmpty(t, c.Whole.text())
		require.Equal(t, c.Stream.text(), c.Stream.Deltas, "the helper's text events add up to its message")
		require.Equal(t, "max_tokens", c.Stream.StopReason)
		require.Equal(t, "message_start", c.Raw.First)
		require.Equal(t, "message_stop", c.Raw.Last)
		require.Equal(t, "max_tokens", c.Raw.StopReason)
		require.Equal(t, 16, c.Raw.Usage.OutputTokens)
		if s.greedy {
			require.Equal(t, c.Whole.text(), c.Stream.text(), "the same request at temperature 0 whole and streamed (the helper)")
			require.Equal(t, c.Whole.text(), c.Raw.Text, "the same request at temperature 0 whole and streamed (create)")
		} else {
			t.Logf("sim: whole %q, streamed %q (no seed in the Messages API; compared on stories-cpu)", c.Whole.text(), c.Stream.text())
		}
	})
	for _, name := range []string{"tool/tool", "tool/any"} {
		sub(name, func(t *testing.T, raw json.RawMessage) {
			var c struct {
				Whole  msgSummary `json:"whole"`
				Stream msgSummary `json:"stream"`
				Raw    struct {
					StopReason string   `json:"stop_reason"`
					Types      []string `json:"types"`
					Uses       []struct {
						ID    string   `json:"id"`
						Name  string   `json:"name"`
						JSON  string   `json:"json"`
						Check ajvCheck `json:"check"`
					} `json:"uses"`
				} `json:"raw"`
				Second *msgSummary `json:"second"`
			}
			require.NoError(t, json.Unmarshal(raw, &c))
			for _, m := range []msgSummary{c.Whole, c.Stream} {
				require.Equal(t, "tool_use", m.StopReason, "%+v", m)
				var uses []string
				for _, b := range m.Content {
					if b.Type == "tool_use" {
						require.Equal(t, "get_weather", b.Name)
						require.NotEmpty(t, b.ID)
						uses = append(uses, string(b.Input))
					}
				}
				require.Len(t, uses, 1, "one tool_use block: %+v", m.Content)
				require.Len(t, m.Checks, 1)
				require.True(t, m.Checks[0].Valid, "input %s: ajv: %s", uses[0], m.Checks[0].Errors)
			}
			require.Equal(t, "tool_use", c.Raw.StopReason)
			require.Len(t, c.Raw.Uses, 1)
			require.True(t, c.Raw.Uses[0].Check.Valid, "input_json_delta pieces %s: ajv: %s", c.Raw.Uses[0].JSON, c.Raw.Uses[0].Check.Errors)
			require.Contains(t, c.Raw.Types, "content_block_delta")
			require.NotNil(t, c.Second, "the tool's result was sent back")
			require.Equal(t, "message", c.Second.Type)
			require.Contains(t, []string{"end_turn", "max_tokens", "tool_use"}, c.Second.StopReason)
			require.Greater(t, c.Second.prompt(), c.Whole.prompt(), "the second turn's prompt holds the first's")
			require.Positive(t, c.Second.Usage.CacheRead, "the second turn reuses the first's KV prefix")
		})
	}
	sub("errors", func(t *testing.T, raw json.RawMessage) {
		type errOut struct {
			Class  string `json:"class"`
			Status int    `json:"status"`
			Body   struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			} `json:"body"`
		}
		var c struct {
			NotFound     errOut `json:"notFound"`
			Unauthorized errOut `json:"unauthorized"`
			BadRequest   errOut `json:"badRequest"`
		}
		require.NoError(t, json.Unmarshal(raw, &c))
		for _, tc := range []struct {
			got            errOut
			class, errType string
			status         int
		}{
			{c.NotFound, "NotFoundError", "not_found_error", 404},
			{c.Unauthorized, "AuthenticationError", "authentication_error", 401},
			{c.BadRequest, "BadRequestError", "invalid_request_error", 400},
		} {
			require.Equal(t, tc.class, tc.got.Class)
			require.Equal(t, tc.status, tc.got.Status)
			require.Equal(t, "error", tc.got.Body.Type, "Anthropic's error shape")
			require.Equal(t, tc.errType, tc.got.Body.Error.Type)
			require.NotEmpty(t, tc.got.Body.Error.Message)
		}
	})
}
