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
	// extra are members every OpenAI request body carries (JSON).
	extra string
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
		{name: "qwen3", start: hf("qwen3", "qwen3"), extra: `{"chat_template_kwargs":{"enable_thinking":false}}`},
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
func runClient(t *testing.T, dir string, e *env, s clientServer, script string) (map[string]json.RawMessage, []string) {
	t.Helper()
	extra := s.extra
	if extra == "" {
		extra = "{}"
	}
	stdout := runNode(t, dir, filepath.Join("testdata", "agents-node", script), 2*time.Minute,
		"TURNSTILE_URL="+e.ts.URL, "TURNSTILE_KEY=sk-test", "TURNSTILE_MODEL="+testModel, "TURNSTILE_EXTRA="+extra,
		"TURNSTILE_ONLY="+os.Getenv("TURNSTILE_ONLY"))
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
		})
	}
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
		})
	}
}
