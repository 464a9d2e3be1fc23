package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

type tokenizeOut struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []int32  `json:"tokens"`
	TokenStrs   []string `json:"token_strs"`
}

// TestTokenizeRoundTrip: /tokenize encodes a prompt as completions does
// (BOS as the tokenizer adds it unless add_special_tokens is false), and
// /detokenize gives the text back.
func TestTokenizeRoundTrip(t *testing.T) {
	e := newSimEnv(t, simOpts{})
	const text = "Once upon a time, there was a little dog."
	var out tokenizeOut
	resp := e.post(t, "/tokenize", map[string]any{"model": testModel, "prompt": text, "return_token_strs": true})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	decodeJSON(t, resp, &out)
	want := e.tok.Encode(text, e.tok.AddBOS())
	require.Equal(t, want, out.Tokens)
	require.Equal(t, len(want), out.Count)
	require.Equal(t, 256, out.MaxModelLen)
	require.Len(t, out.TokenStrs, len(want))
	for i, id := range want {
		require.Equal(t, e.tok.Token(id), out.TokenStrs[i])
	}

	var plain tokenizeOut
	decodeJSON(t, e.post(t, "/tokenize", map[string]any{"prompt": text, "add_special_tokens": false}), &plain)
	require.Equal(t, e.tok.Encode(text, false), plain.Tokens)
	require.Nil(t, plain.TokenStrs, "token_strs only when asked")

	// The prompt the completion's usage counts.
	var c completionOut
	decodeJSON(t, e.post(t, "/v1/completions", map[string]any{"prompt": text, "max_tokens": 1}), &c)
	require.Equal(t, c.Usage.PromptTokens, out.Count)

	var back struct {
		Prompt string `json:"prompt"`
	}
	resp = e.post(t, "/detokenize", map[string]any{"model": testModel, "tokens": out.Tokens})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	decodeJSON(t, resp, &back)
	require.Equal(t, text, back.Prompt)
	decodeJSON(t, e.post(t, "/detokenize", map[string]any{"tokens": []int32{}}), &back)
	require.Empty(t, back.Prompt)
}

// TestTokenizeMessages: messages are rendered as chat completions renders
// them: by default the tokens are the prompt chat completions submits;
// add_generation_prompt false drops the assistant's cue; tools are
// rendered too.
func TestTokenizeMessages(t *testing.T) {
	for _, tmpl := range []string{"", chatML} {
		e := newSimEnv(t, simOpts{template: tmpl, maxContext: 2048})
		msgs := []map[string]any{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}}
		var out tokenizeOut
		resp := e.post(t, "/tokenize", map[string]any{"messages": msgs})
		require.Equal(t, http.StatusOK, resp.StatusCode)
		decodeJSON(t, resp, &out)
		var chat completionOut
		decodeJSON(t, e.post(t, "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 1}), &chat)
		require.Equal(t, chat.Usage.PromptTokens, out.Count, "template %q", tmpl)

		c, err := newChatTemplate(tmpl, "<s>", "</s>")
		require.NoError(t, err)
		rendered, _, err := c.renderCue([]message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi!"}}, nil, nil, false)
		require.NoError(t, err)
		var noCue tokenizeOut
		decodeJSON(t, e.post(t, "/tokenize", map[string]any{"messages": msgs, "add_generation_prompt": false}), &noCue)
		require.Less(t, noCue.Count, out.Count, "the cue is left out")
		want := e.tok.Encode(rendered, e.tok.AddBOS())
		if tmpl != "" {
			want = e.tok.EncodeSpecial(rendered, e.tok.AddBOS())
		}
		require.Equal(t, want, noCue.Tokens)

		var tools tokenizeOut
		decodeJSON(t, e.post(t, "/tokenize", map[string]any{"messages": msgs,
			"tools": []map[string]any{{"type": "function", "function": map[string]any{"name": "get", "parameters": map[string]any{"type": "object"}}}}}), &tools)
		require.Greater(t, tools.Count, out.Count, "the tools are rendered")

		var bos tokenizeOut
		decodeJSON(t, e.post(t, "/tokenize", map[string]any{"messages": msgs, "add_special_tokens": true}), &bos)
		require.Equal(t, e.tok.BOS(), bos.Tokens[0])
	}
}

// TestTokenizeErrors: bad bodies are OpenAI-style 400s naming the field;
// both routes authenticate.
func TestTokenizeErrors(t *testing.T) {
	e := newSimEnv(t, simOpts{})
	const bad, inv = http.StatusBadRequest, errInvalidRequest
	checkErrors(t, e, []errCase{
		{"no prompt", "/tokenize", `{}`, nil, bad, inv, "prompt", "missing"},
		{"both", "/tokenize", `{"prompt":"a","messages":[{"role":"user","content":"b"}]}`, nil, bad, inv, "messages", "invalid_value"},
		{"prompt not a string", "/tokenize", `{"prompt":[1,2]}`, nil, bad, inv, "prompt", "invalid_type"},
		{"chat fields on a prompt", "/tokenize", `{"prompt":"a","add_generation_prompt":false}`, nil, bad, inv, "prompt", "invalid_value"},
		{"bad message role", "/tokenize", `{"messages":[{"role":"robot","content":"b"}]}`, nil, bad, inv, "messages[0].role", "invalid_value"},
		{"image part", "/tokenize", `{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, nil, bad, inv, "messages[0].content[0].type", "unsupported"},
		{"reserved kwarg", "/tokenize", `{"messages":[{"role":"user","content":"b"}],"chat_template_kwargs":{"messages":1}}`, nil, bad, inv, "chat_template_kwargs.messages", "invalid_value"},
		{"prompt too long", "/tokenize", map[string]any{"prompt": strings.Repeat("a", 256*e.srv.parse.lim.maxPiece+1)}, nil, bad, inv, "prompt", "context_length_exceeded"},
		{"unknown model", "/tokenize", `{"model":"x","prompt":"a"}`, nil, http.StatusNotFound, inv, "model", "model_not_found"},
		{"no tokens", "/detokenize", `{}`, nil, bad, inv, "tokens", "missing"},
		{"token out of vocabulary", "/detokenize", `{"tokens":[1,2,512]}`, nil, bad, inv, "tokens[2]", "invalid_value"},
		{"negative token", "/detokenize", `{"tokens":[-1]}`, nil, bad, inv, "tokens[0]", "invalid_value"},
		{"token not a number", "/detokenize", `{"tokens":[1,"a"]}`, nil, bad, inv, "tokens[1]", "invalid_type"},
		{"malformed", "/detokenize", `{"tokens":`, nil, bad, inv, "", "invalid_json"},
	})
	r, err := e.ts.Client().Get(e.ts.URL + "/tokenize")
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, r.StatusCode)

	k := newSimEnv(t, simOpts{keys: []string{"k1"}})
	for _, path := range []string{"/tokenize", "/detokenize"} {
		body := `{"prompt":"a"}`
		if path == "/detokenize" {
			body = `{"tokens":[300]}`
		}
		resp := k.post(t, path, body)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)
		resp.Body.Close()
		for _, hdr := range [][]string{{"Authorization", "Bearer k1"}, {"x-api-key", "k1"}} {
			resp = k.post(t, path, body, hdr...)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s %q", path, hdr)
			resp.Body.Close()
		}
	}
}
