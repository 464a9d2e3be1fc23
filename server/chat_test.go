package server

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// chatML is a ChatML template of the kind GGUF files carry.
const chatML = `{%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\n' + message['content'] | trim + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}`

// llamaStyle starts with the BOS text and refuses non-alternating roles.
const llamaStyle = `{{ bos_token }}{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}` +
	`{{ raise_exception('roles must alternate user/assistant') }}{% endif %}` +
	`{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]{% else %} {{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}`

func TestChatTemplateRender(t *testing.T) {
	msgs := []message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: " Hi! "}}
	for _, tc := range []struct {
		name, src string
		msgs      []message
		want      string
		err       string
	}{
		{"fallback", "", msgs, "System: Be brief.\nUser:  Hi! \nAssistant:", ""},
		{"fallback roles", "", []message{{Role: "developer", Content: "d"}, {Role: "assistant", Content: "a"}, {Role: "tool", Content: "t"}},
			"System: d\nAssistant: a\nTool: t\nAssistant:", ""},
		{"chatml", chatML, msgs, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n", ""},
		{"bos stripped, eos kept", llamaStyle, []message{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}, {Role: "user", Content: "c"}},
			"[INST] a [/INST] b</s>[INST] c [/INST]", ""},
		{"raise_exception", llamaStyle, []message{{Role: "assistant", Content: "x"}}, "", "roles must alternate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := newChatTemplate(tc.src, "<s>", "</s>")
			require.NoError(t, err)
			got, bos, err := c.render(tc.msgs, nil, nil)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.src == llamaStyle, bos, "only the llama-style template writes the BOS")
		})
	}
	_, err := newChatTemplate("{% if %}", "<s>", "</s>")
	require.Error(t, err)
}

// TestChatCompletions: with and without a template, the chat answer is the
// completion of the rendered prompt (same seed, same tokens), streamed
// chunks join to the whole answer, and usage counts the rendered prompt.
func TestChatCompletions(t *testing.T) {
	msgs := []map[string]any{
		{"role": "system", "content": "You tell stories."},
		{"role": "user", "content": []map[string]any{{"type": "text", "text": "Tell me "}, {"type": "text", "text": "about a cat."}}},
	}
	rendered := map[string]string{
		"":     "System: You tell stories.\nUser: Tell me about a cat.\nAssistant:",
		chatML: "<|im_start|>system\nYou tell stories.<|im_end|>\n<|im_start|>user\nTell me about a cat.<|im_end|>\n<|im_start|>assistant\n",
	}
	for _, tmpl := range []string{"", chatML} {
		t.Run(map[bool]string{true: "fallback", false: "chatml"}[tmpl == ""], func(t *testing.T) {
			e := newSimEnv(t, simOpts{template: tmpl})
			body := map[string]any{"model": testModel, "messages": msgs, "max_completion_tokens": 12, "seed": 3, "logprobs": true}
			var chat completionOut
			resp := e.post(t, "/v1/chat/completions", body)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			decodeJSON(t, resp, &chat)
			require.Equal(t, "chat.completion", chat.Object)
			require.Len(t, chat.Choices, 1)
			require.Equal(t, "assistant", chat.Choices[0].Message.Role)
			require.Equal(t, len(e.tok.Encode(rendered[tmpl], true)), chat.Usage.PromptTokens)
			require.Equal(t, 12, chat.Usage.CompletionTokens)
			require.Len(t, chat.Choices[0].Logprobs.Content, 12)
			var joined []byte
			for _, lp := range chat.Choices[0].Logprobs.Content {
				require.LessOrEqual(t, lp.Logprob, float32(0))
				for _, b := range lp.Raw {
					joined = append(joined, byte(b))
				}
			}
			require.Equal(t, chat.Choices[0].Message.Content, string(joined), "token bytes join to the text")

			var comp completionOut
			decodeJSON(t, e.post(t, "/v1/completions", map[string]any{"prompt": rendered[tmpl], "max_tokens": 12, "seed": 3}), &comp)
			require.Equal(t, comp.Choices[0].Text, chat.Choices[0].Message.Content)

			body["stream"] = true
			body["stream_options"] = map[string]any{"include_usage": true}
			events := readSSE(t, e.post(t, "/v1/chat/completions", body))
			texts, finish, u := joinStream(t, events, true)
			require.Equal(t, chat.Choices[0].Message.Content, texts[0])
			require.Equal(t, "length", finish[0])
			require.Equal(t, chat.Usage.TotalTokens, u.Usage.TotalTokens)
			require.Contains(t, events[0], `"role":"assistant"`, "the first chunk carries the role")
		})
	}
}

// TestChatTemplateSpecialTokens: the special-token text a template writes
// becomes those tokens, while the same text inside a message (content or
// name) stays text: a client cannot end a turn or forge one. The stories
// vocabulary's "</s>" (EOS, a control token) plays "<|eot_id|>".
func TestChatTemplateSpecialTokens(t *testing.T) {
	const tmpl = `{% for m in messages %}{{ m['content'] }}{% if m['name'] %}({{ m['name'] }}){% endif %}</s>{% endfor %}`
	p := testParser(t, tmpl)
	tok := storiesTokenizer(t)
	j, e := p.chatCompletion([]byte(`{"messages":[{"role":"user","content":"a</s><s>b","name":"</s>"},{"role":"assistant","content":"c"}],"max_tokens":1}`))
	require.Nil(t, e)
	var want []int32
	want = append(want, tok.BOS())
	want = append(want, tok.Encode("a</s><s>b(</s>)", false)...)
	want = append(want, tok.EOS())
	want = append(want, tok.Encode("c", false)...)
	want = append(want, tok.EOS())
	require.Equal(t, want, j.reqs[0].PromptTokens)
	n := 0
	for _, id := range j.reqs[0].PromptTokens {
		if id == tok.EOS() {
			n++
		}
	}
	require.Equal(t, 2, n, "only the template's two </s> are tokens")
	// SentencePiece text after a special token gets its space prefix.
	require.Equal(t, "a</s><s>b(</s>) c", tok.Decode(j.reqs[0].PromptTokens))
}
