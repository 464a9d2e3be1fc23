package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/grammar"
	"github.com/turnstile-llm/turnstile/guided"
)

const personSchema = `{"type":"object","properties":{"name":{"type":"string","maxLength":8},"n":{"type":"integer","minimum":0,"maximum":99}},"required":["name","n"],"additionalProperties":false}`

func TestStructuredOutputErrors(t *testing.T) {
	e := newSimEnv(t, simOpts{guided: true})
	const bad, inv = http.StatusBadRequest, errInvalidRequest
	chat := "/v1/chat/completions"
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	checkErrors(t, e, []errCase{
		{"invalid schema", chat, `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"objekt"}}}}`, nil, bad, inv, "response_format.json_schema.schema", "invalid_value"},
		{"unsupported keyword", chat, `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"array","uniqueItems":true}}}}`, nil, bad, inv, "response_format.json_schema.schema", "unsupported"},
		{"schema missing", chat, `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x"}}}`, nil, bad, inv, "response_format.json_schema.schema", "invalid_value"},
		{"json_schema missing", chat, `{` + msgs + `,"response_format":{"type":"json_schema"}}`, nil, bad, inv, "response_format.json_schema", "invalid_value"},
		{"unknown type", chat, `{` + msgs + `,"response_format":{"type":"yaml"}}`, nil, bad, inv, "response_format.type", "invalid_value"},
		{"schema not an object", chat, `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":[1]}}}`, nil, bad, inv, "response_format.json_schema.schema", "invalid_type"},
		{"two constraints", chat, `{` + msgs + `,"response_format":{"type":"json_object"},"guided_regex":"a+"}`, nil, bad, inv, "guided_regex", "invalid_value"},
		{"bad regex", "", `{"prompt":"x","guided_regex":"a(?=b)"}`, nil, bad, inv, "guided_regex", "invalid_value"},
		{"empty choice", "", `{"prompt":"x","guided_choice":["a",""]}`, nil, bad, inv, "guided_choice", "invalid_value"},
		{"bad grammar", "", `{"prompt":"x","guided_grammar":"root := \"a\""}`, nil, bad, inv, "guided_grammar", "invalid_value"},
		{"guided_json not JSON text", "", `{"prompt":"x","guided_json":"{not json"}`, nil, bad, inv, "guided_json", "invalid_value"},
		{"whitespace pattern", "", `{"prompt":"x","guided_json":{},"guided_whitespace_pattern":"[ ]*"}`, nil, bad, inv, "guided_whitespace_pattern", "unsupported"},
		{"structural tag without structures", "", `{"prompt":"x","structured_outputs":{"structural_tag":"{}"}}`, nil, bad, inv, "structured_outputs.structural_tag", "invalid_value"},
		{"structural tag unknown member", "", `{"prompt":"x","structured_outputs":{"structural_tag":{"structures":[{"begin":"<a>","end":"</a>","stop":1}],"triggers":["<a>"]}}}`, nil, bad, inv, "structured_outputs.structural_tag", "invalid_value"},
		{"ignore_eos", "", `{"prompt":"x","guided_regex":"a+","ignore_eos":true}`, nil, bad, inv, "ignore_eos", "invalid_value"},
		{"too large", "", `{"prompt":"x","guided_json":{"type":"array","minItems":1000000}}`, nil, bad, inv, "guided_json", "too_large"},
	})
	off := newSimEnv(t, simOpts{})
	checkErrors(t, off, []errCase{
		{"structured output off", chat, `{` + msgs + `,"response_format":{"type":"json_object"}}`, nil, bad, inv, "response_format", "unsupported"},
	})
	// A server told why structured output is off says so in the 400.
	why := errors.New("the deployment spans processes")
	offWhy := newSimEnv(t, simOpts{grammarsOff: why})
	checkErrors(t, offWhy, []errCase{
		{"structured output off, with the reason", "", `{"prompt":"x","guided_regex":"a+"}`, nil, bad, inv, "guided_regex", "unsupported"},
	})
	resp := offWhy.post(t, "/v1/completions", `{"prompt":"x","guided_regex":"a+"}`)
	var out errorOut
	decodeJSON(t, resp, &out)
	require.Contains(t, out.Error.Message, why.Error())
	require.Contains(t, out.Error.Message, "guided_regex")
}

// TestStructuredOutputServes: every way of asking for a constraint, on
// both endpoints, streamed and whole, with n = 2, gives text the
// constraint's grammar accepts: whole when it stopped, a prefix when
// max_tokens cut it.
func TestStructuredOutputServes(t *testing.T) {
	e := newSimEnv(t, simOpts{guided: true, maxContext: 512})
	compile := func(s guided.Spec) *grammar.Grammar {
		g, err := guided.Compile(s, grammar.DefaultLimits)
		require.NoError(t, err)
		return g
	}
	v := e.srv.cfg.Grammars
	require.NotNil(t, v)
	dec, _ := guidedFor(t, e.tok, 1)
	vocab := dec.Vocab()
	cases := []struct {
		name, fields string
		g            *grammar.Grammar
	}{
		{"response_format json_schema", `"response_format":{"type":"json_schema","json_schema":{"name":"p","schema":` + personSchema + `,"strict":true}}`,
			compile(guided.Spec{Kind: guided.JSONSchema, Source: personSchema})},
		{"response_format json_object", `"response_format":{"type":"json_object"}`, compile(guided.Spec{Kind: guided.JSONObject})},
		{"structured_outputs json compact", `"structured_outputs":{"json":` + personSchema + `,"disable_any_whitespace":true}`,
			compile(guided.Spec{Kind: guided.JSONSchema, Source: personSchema, Whitespace: grammar.WhitespaceCompact})},
		{"guided_json as text", `"guided_json":` + mustQuote(personSchema), compile(guided.Spec{Kind: guided.JSONSchema, Source: personSchema})},
		{"guided_regex", `"guided_regex":"(yes|no) [0-9]{1,3}"`, compile(guided.Spec{Kind: guided.Regex, Source: "(yes|no) [0-9]{1,3}"})},
		{"guided_choice", `"guided_choice":["red","green","blue"]`, compile(guided.Spec{Kind: guided.Choice, Choices: []string{"red", "green", "blue"}})},
		{"guided_grammar", `"guided_grammar":"root ::= \"x\" [a-c]+ \".\""`, compile(guided.Spec{Kind: guided.GBNF, Source: `root ::= "x" [a-c]+ "."`})},
		{"structured_outputs structural_tag", `"structured_outputs":{"structural_tag":` + mustQuote(weatherTag) + `}`,
			compile(guided.Spec{Kind: guided.StructuralTag, Source: weatherTag})},
		{"structured_outputs choice", `"structured_outputs":{"choice":["up","down"]},"guided_decoding_backend":"xgrammar"`, compile(guided.Spec{Kind: guided.Choice, Choices: []string{"up", "down"}})},
	}
	for _, tc := range cases {
		for _, chat := range []bool{false, true} {
			for _, stream := range []bool{false, true} {
				name := fmt.Sprintf("%s/chat=%v/stream=%v", tc.name, chat, stream)
				t.Run(name, func(t *testing.T) {
					path, head := "/v1/completions", `"prompt":"Once upon a time"`
					if chat {
						path, head = "/v1/chat/completions", `"messages":[{"role":"user","content":"Tell me"}]`
					}
					body := fmt.Sprintf(`{%s,%s,"max_tokens":40,"n":2,"seed":5,"temperature":1,"stream":%v,"logprobs":%v}`,
						head, tc.fields, stream, map[bool]string{false: "1", true: "true"}[chat])
					texts, finishes := e.choiceTexts(t, path, body, chat, stream, 2)
					for i, text := range texts {
						m := grammar.NewMatcher(tc.g, vocab)
						require.NoError(t, m.AcceptBytes([]byte(text)), "choice %d: %q", i, text)
						switch finishes[i] {
						case "stop":
							require.True(t, m.Complete(), "choice %d stopped on %q", i, text)
						case "length":
						default:
							t.Fatalf("choice %d: finish_reason %q", i, finishes[i])
						}
					}
				})
			}
		}
	}
	require.Positive(t, e.eng.Snapshot().GuidedMasks)
	require.Positive(t, v.Stats().Hits, "requests with one schema share its grammar")
	fams := scrape(t, e)
	require.Positive(t, value(t, fams, "turnstile_guided_masks_total"))
	require.Positive(t, value(t, fams, "turnstile_guided_mask_seconds_total"))
	require.Positive(t, value(t, fams, "turnstile_grammar_cache_hits_total"))
	require.Equal(t, float64(len(cases)-1), value(t, fams, "turnstile_grammar_compiles_total"), "one compile per distinct constraint (two cases share one)")
	require.Positive(t, value(t, fams, "turnstile_grammar_compile_seconds_total"))
}

// weatherTag is xgrammar's structural tag format, as vLLM passes it.
const weatherTag = `{"type":"structural_tag","structures":[{"begin":"<function=w>","schema":{"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":9}},"required":["n"],"additionalProperties":false},"end":"</function>"}],"triggers":["<function="]}`

func mustQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// choiceTexts posts body and returns each choice's text and finish reason.
func (e *env) choiceTexts(t *testing.T, path, body string, chat, stream bool, n int) ([]string, []string) {
	t.Helper()
	resp := e.post(t, path, body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	texts, finishes := make([]string, n), make([]string, n)
	if !stream {
		var out completionOut
		decodeJSON(t, resp, &out)
		require.Len(t, out.Choices, n)
		for _, c := range out.Choices {
			if chat {
				texts[c.Index] = c.Message.Content
			} else {
				texts[c.Index] = c.Text
			}
			finishes[c.Index] = *c.FinishReason
		}
		return texts, finishes
	}
	var sb [8]strings.Builder
	for _, ev := range readSSE(t, resp) {
		if ev == "[DONE]" {
			break
		}
		var out completionOut
		require.NoError(t, json.Unmarshal([]byte(ev), &out), ev)
		for _, c := range out.Choices {
			switch {
			case chat && c.Delta != nil && c.Delta.Content != nil:
				sb[c.Index].WriteString(*c.Delta.Content)
			case !chat:
				sb[c.Index].WriteString(c.Text)
			}
			if c.FinishReason != nil {
				finishes[c.Index] = *c.FinishReason
			}
		}
	}
	for i := range n {
		texts[i] = sb[i].String()
	}
	return texts, finishes
}
