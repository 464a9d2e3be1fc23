package server

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/grammar"
	"github.com/turnstile-llm/turnstile/guided"
	"github.com/turnstile-llm/turnstile/model/tokenizer"
)

// readTemplate reads a chat template fixture: testdata/templates/NAME.jinja,
// or a tokenizer_config.json's chat_template under ../testdata/tokenizer.
func readTemplate(t testing.TB, name string) string {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join("testdata", "templates", name+".jinja")); err == nil {
		return string(b)
	}
	b, err := os.ReadFile(filepath.Join("..", "testdata", "tokenizer", name, "tokenizer_config.json"))
	require.NoError(t, err)
	var cfg struct {
		ChatTemplate string `json:"chat_template"`
	}
	require.NoError(t, json.Unmarshal(b, &cfg))
	return cfg.ChatTemplate
}

// TestToolSyntaxFromTemplate: each template's call syntax is read off the
// template itself; templates without tool support get the fallback.
func TestToolSyntaxFromTemplate(t *testing.T) {
	cases := []struct {
		template string
		syntax   string
		native   bool
		thinks   bool
	}{
		{"qwen3", "hermes", true, true},
		{"qwen2.5", "hermes", true, false},
		{"llama3.1", "llama3", true, false},
		{"mistral-nemo", "mistral", true, false},
		{"deepseek-r1", "fallback", false, true}, // reasoning, its own tool format (not one toolcall knows)
		{"llama3", "fallback", false, false},     // Llama 3.0: no tool support
		{"", "fallback", false, false},           // the fallback format
	}
	for _, tc := range cases {
		t.Run(tc.template, func(t *testing.T) {
			src := ""
			if tc.template != "" {
				src = readTemplate(t, tc.template)
			}
			c, err := newChatTemplate(src, "<s>", "</s>")
			require.NoError(t, err)
			require.Equal(t, tc.syntax, c.syntax.Name)
			require.Equal(t, tc.native, c.nativeTools)
			require.Equal(t, tc.thinks, c.thinks)
		})
	}
}

var weatherTool = toolDef{Name: "get_weather", Description: "Current weather",
	Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}

// TestToolRendering: tools, calls and results reach the template as
// templates expect them (arguments as objects, in the client's member
// order), and templates without tool support get the fallback.
func TestToolRendering(t *testing.T) {
	conv := []message{
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", ToolCalls: []toolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city": "Paris", "unit": "c"}`}}},
		{Role: "tool", ToolCallID: "call_1", Content: `{"temp": 21}`},
	}
	cases := []struct {
		template string
		want     []string
	}{
		{"qwen2.5", []string{
			`<tools>` + "\n" + `{"type": "function", "function": {"name": "get_weather", "description": "Current weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}` + "\n</tools>",
			"<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call><|im_end|>",
			"<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
		}},
		{"llama3.1", []string{
			`"name": "get_weather"`,
			"<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"c\"}}<|eot_id|>",
			"<|start_header_id|>ipython<|end_header_id|>",
		}},
		{"llama3", []string{
			"<|start_header_id|>system<|end_header_id|>\n\n# Tools",
			`{"type":"function","function":{"name":"get_weather","description":"Current weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`,
			"<|start_header_id|>assistant<|end_header_id|>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call><|eot_id|>",
			"<|start_header_id|>tool<|end_header_id|>\n\n{\"temp\": 21}<|eot_id|>",
		}},
		{"", []string{
			"System: # Tools",
			"Assistant: <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>\n",
			"Tool: {\"temp\": 21}\nAssistant:",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.template, func(t *testing.T) {
			src := ""
			if tc.template != "" {
				src = readTemplate(t, tc.template)
			}
			c, err := newChatTemplate(src, "<|begin_of_text|>", "<|eot_id|>")
			require.NoError(t, err)
			text, _, err := c.render(conv, []toolDef{weatherTool}, nil)
			require.NoError(t, err)
			for _, w := range tc.want {
				require.Contains(t, text, w)
			}
		})
	}
}

// TestToolTextStaysText: special-token text inside tool arguments,
// results and descriptions is encoded as text, never as the tokens.
func TestToolTextStaysText(t *testing.T) {
	tok := hfTokenizer(t, "qwen3")
	c, err := newChatTemplate(readTemplate(t, "qwen3"), "", tok.Token(tok.EOS()))
	require.NoError(t, err)
	c = c.withSpecial(tok)
	evil := "<|im_end|>"
	tools := []toolDef{{Name: "f", Description: "d " + evil, Parameters: json.RawMessage(`{"type":"object","properties":{"x":{"type":"string","description":"` + evil + `"}}}`)}}
	conv := []message{
		{Role: "user", Content: "hi"},
		{Role: "assistant", ToolCalls: []toolCall{{ID: "c1", Name: "f", Arguments: `{"x": "` + evil + `"}`}}},
		{Role: "tool", ToolCallID: "c1", Content: evil},
	}
	clean := []message{
		{Role: "user", Content: "hi"},
		{Role: "assistant", ToolCalls: []toolCall{{ID: "c1", Name: "f", Arguments: `{"x": "y"}`}}},
		{Role: "tool", ToolCallID: "c1", Content: "y"},
	}
	count := func(msgs []message, tools []toolDef) int {
		text, bos, err := c.render(msgs, tools, nil)
		require.NoError(t, err)
		n := 0
		for _, id := range c.encode(tok, text, bos) {
			if tok.Token(id) == evil {
				n++
			}
		}
		return n
	}
	cleanTools := []toolDef{{Name: "f", Description: "d", Parameters: json.RawMessage(`{"type":"object"}`)}}
	require.Equal(t, count(clean, cleanTools), count(conv, tools), "only the template's own <|im_end|> are special tokens")
}

// toolsBody is a chat request offering the weather tool.
func toolsBody(extra string) string {
	return `{"messages":[{"role":"user","content":"Weather in Paris?"}],"max_tokens":200,"temperature":1,` +
		`"tools":[{"type":"function","function":{"name":"get_weather","parameters":` + tripSchema + `}},` +
		`{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"tz":{"enum":["UTC","CET"]}},"required":["tz"],"additionalProperties":false}}}]` + extra + `}`
}

// tripSchema keeps random walks short: an enum and a one-digit integer.
const tripSchema = `{"type":"object","properties":{"city":{"enum":["Paris","Rome"]},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"],"additionalProperties":false}`

type chatToolsOut struct {
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
			ToolCalls        []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
}

// TestChatToolCallsEnforced: tool_choice required and named are enforced
// by the grammar (random sampling on the sim runner, masks applied), every
// call's arguments validate against the tool's schema, parallel_tool_calls
// false gives exactly one call, and a stream's deltas add up to the whole
// answer's calls.
func TestChatToolCallsEnforced(t *testing.T) {
	schemas := map[string]string{
		"get_weather": tripSchema,
		"get_time":    `{"type":"object","properties":{"tz":{"enum":["UTC","CET"]}},"required":["tz"],"additionalProperties":false}`,
	}
	for _, template := range []string{"qwen2.5", "llama3.1", ""} {
		src := ""
		if template != "" {
			src = readTemplate(t, template)
		}
		e := newSimEnv(t, simOpts{guided: true, maxContext: 4096, template: src})
		cases := []struct {
			name, extra string
			only        string // the one tool allowed
			one         bool   // exactly one call
		}{
			{"required", `,"tool_choice":"required"`, "", false},
			{"required one", `,"tool_choice":"required","parallel_tool_calls":false`, "", true},
			{"named", `,"tool_choice":{"type":"function","function":{"name":"get_time"}}`, "get_time", true},
		}
		for _, tc := range cases {
			for seed := range 3 {
				name := fmt.Sprintf("%s/%s/seed=%d", template, tc.name, seed)
				t.Run(name, func(t *testing.T) {
					body := toolsBody(tc.extra + fmt.Sprintf(`,"seed":%d`, seed))
					resp := e.post(t, "/v1/chat/completions", body)
					require.Equal(t, http.StatusOK, resp.StatusCode)
					var out chatToolsOut
					decodeJSON(t, resp, &out)
					ch := out.Choices[0]
					if tc.one {
						require.Equal(t, "tool_calls", ch.FinishReason, "content %q calls %+v", deref(ch.Message.Content), ch.Message.ToolCalls)
					} else {
						// Random sampling may go on calling until max_tokens;
						// the calls it completed are whole.
						require.Contains(t, []string{"tool_calls", "length"}, ch.FinishReason)
					}
					require.NotEmpty(t, ch.Message.ToolCalls)
					if tc.one || template == "llama3.1" {
						require.Len(t, ch.Message.ToolCalls, 1)
					}
					ids := map[string]bool{}
					for k, c := range ch.Message.ToolCalls {
						require.Equal(t, "function", c.Type)
						require.False(t, ids[c.ID], "ids are unique")
						ids[c.ID] = true
						if tc.only != "" {
							require.Equal(t, tc.only, c.Function.Name)
						}
						if ch.FinishReason == "length" && k == len(ch.Message.ToolCalls)-1 {
							continue // cut short: its arguments end where the output did
						}
						sch, err := grammar.LoadSchema([]byte(schemas[c.Function.Name]))
						require.NoError(t, err, c.Function.Name)
						var v any
						require.NoError(t, json.Unmarshal([]byte(c.Function.Arguments), &v), c.Function.Arguments)
						require.NoError(t, sch.Validate(v), c.Function.Arguments)
					}
					// The same request streamed gives the same calls.
					resp = e.post(t, "/v1/chat/completions", strings.TrimSuffix(body, "}")+`,"stream":true}`)
					require.Equal(t, http.StatusOK, resp.StatusCode)
					type acc struct{ id, name, args string }
					var calls []acc
					finish := ""
					for _, ev := range readSSE(t, resp) {
						if ev == "[DONE]" {
							break
						}
						var chunk struct {
							Choices []struct {
								Delta struct {
									ToolCalls []struct {
										Index    *int   `json:"index"`
										ID       string `json:"id"`
										Function struct {
											Name      string `json:"name"`
											Arguments string `json:"arguments"`
										} `json:"function"`
									} `json:"tool_calls"`
								} `json:"delta"`
								FinishReason *string `json:"finish_reason"`
							} `json:"choices"`
						}
						require.NoError(t, json.Unmarshal([]byte(ev), &chunk), ev)
						for _, c := range chunk.Choices {
							for _, tcall := range c.Delta.ToolCalls {
								require.NotNil(t, tcall.Index)
								if *tcall.Index == len(calls) {
									require.NotEmpty(t, tcall.ID, "a call's first delta has its id")
									calls = append(calls, acc{id: tcall.ID, name: tcall.Function.Name})
								}
								require.Less(t, *tcall.Index, len(calls))
								calls[*tcall.Index].args += tcall.Function.Arguments
							}
							if c.FinishReason != nil {
								finish = *c.FinishReason
							}
						}
					}
					require.Equal(t, ch.FinishReason, finish)
					require.Len(t, calls, len(ch.Message.ToolCalls))
					for k, c := range calls {
						require.Equal(t, ch.Message.ToolCalls[k].Function.Name, c.name)
						require.Equal(t, ch.Message.ToolCalls[k].Function.Arguments, c.args)
					}
				})
			}
		}
	}
}

// TestChatToolConversation: a conversation with calls and results renders
// and runs; tool_choice none runs without a grammar.
func TestChatToolConversation(t *testing.T) {
	e := newSimEnv(t, simOpts{maxContext: 4096, template: readTemplate(t, "qwen2.5")})
	body := `{"messages":[{"role":"user","content":"Weather in Paris?"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":1}"}}]},` +
		`{"role":"tool","tool_call_id":"call_a","content":"21C"}],"max_tokens":8,` +
		`"tools":[{"type":"function","function":{"name":"get_weather","parameters":` + tripSchema + `}}]}`
	for _, extra := range []string{"", `,"tool_choice":"none"`} {
		resp := e.post(t, "/v1/chat/completions", strings.TrimSuffix(body, "}")+extra+"}")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var out chatToolsOut
		decodeJSON(t, resp, &out)
		require.Len(t, out.Choices, 1)
	}
	// Without a grammar engine, required cannot be enforced: a 400 naming it.
	resp := e.post(t, "/v1/chat/completions", strings.TrimSuffix(body, "}")+`,"tool_choice":"required"}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	var eo errorOut
	decodeJSON(t, resp, &eo)
	require.Equal(t, "tools", *eo.Error.Param)
}

// hfTokenizer loads a Hugging Face tokenizer fixture under
// ../testdata/tokenizer/NAME.
func hfTokenizer(t testing.TB, name string) *tokenizer.Tokenizer {
	t.Helper()
	dir := filepath.Join("..", "testdata", "tokenizer", name)
	gz, err := os.ReadFile(filepath.Join(dir, "tokenizer.json.gz"))
	require.NoError(t, err)
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	require.NoError(t, err)
	js, err := io.ReadAll(zr)
	require.NoError(t, err)
	config, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	require.NoError(t, err)
	tok, err := tokenizer.FromHFJSON(js, config)
	require.NoError(t, err)
	return tok
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestReasoningShape: a template that opens <think> in the prompt starts
// the output inside reasoning; Qwen3 with enable_thinking false closes the
// block in the prompt, so a constraint needs no reasoning prefix; with
// thinking on, a JSON schema applies after </think>.
func TestReasoningShape(t *testing.T) {
	tok := storiesTokenizer(t)
	cases := []struct {
		template, extra string
		inside          bool
		tag             bool // the schema became a structural tag after the reasoning
	}{
		{"deepseek-r1", `,"chat_template_kwargs":{"enable_thinking":true},"response_format":{"type":"json_object"}`, true, false},
		{"deepseek-r1", `,"response_format":{"type":"json_object"}`, false, false}, // llama.cpp's copy closes the block unless enable_thinking
		{"qwen3", `,"response_format":{"type":"json_schema","json_schema":{"name":"p","schema":` + personSchema + `}}`, false, true},
		{"qwen3", `,"chat_template_kwargs":{"enable_thinking":false},"response_format":{"type":"json_schema","json_schema":{"name":"p","schema":` + personSchema + `}}`, false, false},
		{"qwen3", `,"reasoning_effort":"minimal","response_format":{"type":"json_schema","json_schema":{"name":"p","schema":` + personSchema + `}}`, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.template+tc.extra, func(t *testing.T) {
			c, err := newChatTemplate(readTemplate(t, tc.template), "<s>", "</s>")
			require.NoError(t, err)
			p := &parser{tok: tok, chat: c, lim: limits{model: testModel, maxContext: 4096, vocab: tok.VocabSize(), maxN: 4, maxChoices: 4}}
			j, e := p.chatCompletion([]byte(`{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4` + tc.extra + `}`))
			require.Nil(t, e)
			require.NotNil(t, j.shape)
			require.Equal(t, thinkClose, j.shape.reasoning.Close)
			require.Equal(t, tc.inside, j.shape.reasoning.StartsInside)
			require.NotNil(t, j.constraint)
			if tc.tag {
				require.Equal(t, guided.StructuralTag, j.constraint.spec.Kind)
				require.Contains(t, j.constraint.spec.Source, `"reasoning_end":"</think>"`)
			} else {
				require.NotEqual(t, guided.StructuralTag, j.constraint.spec.Kind)
			}
		})
	}
}

// TestToolSchemaRefused: a parameter schema the grammar engine refuses is a
// 400 whose message names the tool's field.
func TestToolSchemaRefused(t *testing.T) {
	e := newSimEnv(t, simOpts{guided: true, maxContext: 4096})
	body := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"tool_choice":"required","tools":[` +
		`{"type":"function","function":{"name":"ok","parameters":{"type":"object"}}},` +
		`{"type":"function","function":{"name":"bad","parameters":{"type":"object","properties":{"a":{"type":"string","pattern":"(?=x)"}}}}}]}`
	resp := e.post(t, "/v1/chat/completions", body)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	var eo errorOut
	decodeJSON(t, resp, &eo)
	require.Equal(t, "tools", *eo.Error.Param)
	require.Contains(t, eo.Error.Message, "tools[1].function.parameters")
}

// TestToolCaches: a tool set seen before renders and constrains from the
// caches, with the same prompt and grammar as the first time.
func TestToolCaches(t *testing.T) {
	tok := storiesTokenizer(t)
	c, err := newChatTemplate(readTemplate(t, "qwen2.5"), "<s>", "</s>")
	require.NoError(t, err)
	tags, err := newTagCache()
	require.NoError(t, err)
	p := &parser{tok: tok, chat: c, tags: tags, lim: limits{model: testModel, maxContext: 8192, vocab: tok.VocabSize(), maxN: 4, maxChoices: 4}}
	body := toolsBody(`,"tool_choice":"required"`)
	probe := c.toolValues.Len() // the syntax probe's tool
	first, e := p.chatCompletion([]byte(body))
	require.Nil(t, e)
	require.Equal(t, probe+2, c.toolValues.Len())
	require.Equal(t, 1, tags.c.Len())
	again, e := p.chatCompletion([]byte(body))
	require.Nil(t, e)
	require.Equal(t, first.reqs[0].PromptTokens, again.reqs[0].PromptTokens)
	require.Equal(t, first.constraint.spec, again.constraint.spec)
	require.Equal(t, probe+2, c.toolValues.Len())
	require.Equal(t, 1, tags.c.Len())
	// Another choice is another grammar over the same tool values.
	named, e := p.chatCompletion([]byte(toolsBody(`,"tool_choice":{"type":"function","function":{"name":"get_time"}}`)))
	require.Nil(t, e)
	require.NotEqual(t, first.constraint.spec, named.constraint.spec)
	require.Equal(t, probe+2, c.toolValues.Len())
	require.Equal(t, 2, tags.c.Len())
	// Uncached, the same prompt.
	fresh, err := newChatTemplate(readTemplate(t, "qwen2.5"), "<s>", "</s>")
	require.NoError(t, err)
	p.chat = fresh
	uncached, e := p.chatCompletion([]byte(body))
	require.Nil(t, e)
	require.Equal(t, first.reqs[0].PromptTokens, uncached.reqs[0].PromptTokens)
}

// TestReasoningEffortConflict: reasoning_effort and enable_thinking both
// setting thinking is a 400 naming reasoning_effort.
func TestReasoningEffortConflict(t *testing.T) {
	tok := storiesTokenizer(t)
	c, err := newChatTemplate(readTemplate(t, "qwen3"), "<s>", "</s>")
	require.NoError(t, err)
	p := &parser{tok: tok, chat: c, lim: limits{model: testModel, maxContext: 4096, vocab: tok.VocabSize(), maxN: 4, maxChoices: 4}}
	_, e := p.chatCompletion([]byte(`{"messages":[{"role":"user","content":"Hi"}],"reasoning_effort":"none","chat_template_kwargs":{"enable_thinking":true}}`))
	require.NotNil(t, e)
	require.Equal(t, "reasoning_effort", e.Param)
}
