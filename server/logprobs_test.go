package server

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// lpChoice is the part of a choice (whole or chunk) the log-probability
// tests read, for both endpoints.
type lpChoice struct {
	Text    string `json:"text"`
	Message *struct {
		Content string `json:"content"`
	} `json:"message"`
	Delta *struct {
		Content *string `json:"content"`
	} `json:"delta"`
	Logprobs *struct {
		Tokens        []string             `json:"tokens"`
		TokenLogprobs []float32            `json:"token_logprobs"`
		TopLogprobs   []map[string]float32 `json:"top_logprobs"`
		TextOffset    []int                `json:"text_offset"`
		Content       []struct {
			Token       string  `json:"token"`
			Logprob     float32 `json:"logprob"`
			Bytes       []int   `json:"bytes"`
			TopLogprobs []struct {
				Token   string  `json:"token"`
				Logprob float32 `json:"logprob"`
				Bytes   []int   `json:"bytes"`
			} `json:"top_logprobs"`
		} `json:"content"`
	} `json:"logprobs"`
}

// lpToken is one generated token as either endpoint rendered it.
type lpToken struct {
	token   string
	logprob float32
	offset  int // completions only
	top     []lpAlt
}

type lpAlt struct {
	token   string
	logprob float32
}

// lpTokens flattens a choice's logprobs (appending to acc) and returns its
// text delta.
func lpTokens(t *testing.T, c lpChoice, chat bool, acc *[]lpToken) string {
	t.Helper()
	text := c.Text
	if c.Message != nil {
		text = c.Message.Content
	}
	if c.Delta != nil && c.Delta.Content != nil {
		text = *c.Delta.Content
	}
	if c.Logprobs == nil {
		return text
	}
	lp := c.Logprobs
	if chat {
		for _, ct := range lp.Content {
			raw := make([]byte, len(ct.Bytes))
			for i, b := range ct.Bytes {
				raw[i] = byte(b)
			}
			require.Equal(t, ct.Token, string(raw), "bytes are the token's bytes")
			tk := lpToken{token: ct.Token, logprob: ct.Logprob}
			for _, alt := range ct.TopLogprobs {
				tk.top = append(tk.top, lpAlt{alt.Token, alt.Logprob})
			}
			*acc = append(*acc, tk)
		}
		return text
	}
	require.Len(t, lp.TokenLogprobs, len(lp.Tokens))
	require.Len(t, lp.TextOffset, len(lp.Tokens))
	require.Len(t, lp.TopLogprobs, len(lp.Tokens))
	for k, s := range lp.Tokens {
		tk := lpToken{token: s, logprob: lp.TokenLogprobs[k], offset: lp.TextOffset[k]}
		for p, v := range lp.TopLogprobs[k] {
			tk.top = append(tk.top, lpAlt{p, v})
		}
		// A map has no order: sort most likely first, as chat's list is.
		sort.Slice(tk.top, func(a, b int) bool { return tk.top[a].logprob > tk.top[b].logprob })
		*acc = append(*acc, tk)
	}
	return text
}

// TestStoriesTopLogprobs asks stories260K for top alternatives under
// greedy on both endpoints, whole and streamed: the first alternative is
// the chosen token with its log-probability, alternatives are ≤ 0 and
// sorted, text offsets add up, and streaming agrees with the whole answer.
func TestStoriesTopLogprobs(t *testing.T) {
	e := newStoriesEnv(t, "")
	msgs := []map[string]any{{"role": "user", "content": "Tell me a story."}}
	tests := []struct {
		name string
		path string
		body map[string]any
		top  int // alternatives asked for
	}{
		{"completions 5", "/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0, "logprobs": 5}, 5},
		{"completions 1", "/v1/completions", map[string]any{"prompt": "The little bird", "max_tokens": 12, "temperature": 0, "logprobs": 1}, 1},
		{"chat 20", "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 12, "temperature": 0, "logprobs": true, "top_logprobs": 20}, 20},
		{"chat 3", "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 12, "temperature": 0, "logprobs": true, "top_logprobs": 3}, 3},
		{"chat 0", "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 8, "temperature": 0, "logprobs": true, "top_logprobs": 0}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			chat := strings.Contains(tc.path, "chat")
			var runs [2][]lpToken
			var texts [2]string
			for mode, stream := range []bool{false, true} {
				tc.body["stream"] = stream
				resp := e.post(t, tc.path, tc.body)
				require.Equal(t, http.StatusOK, resp.StatusCode)
				if !stream {
					var out struct {
						Choices []lpChoice `json:"choices"`
					}
					decodeJSON(t, resp, &out)
					require.Len(t, out.Choices, 1)
					texts[mode] = lpTokens(t, out.Choices[0], chat, &runs[mode])
					continue
				}
				for _, ev := range readSSE(t, resp) {
					if ev == "[DONE]" {
						break
					}
					var chunk struct {
						Choices []lpChoice `json:"choices"`
					}
					require.NoError(t, json.Unmarshal([]byte(ev), &chunk), ev)
					for _, c := range chunk.Choices {
						texts[mode] += lpTokens(t, c, chat, &runs[mode])
					}
				}
			}
			require.Equal(t, texts[0], texts[1], "streamed text")
			require.Len(t, runs[1], len(runs[0]), "streamed tokens")
			require.NotEmpty(t, runs[0])
			for mode, run := range runs {
				var joined strings.Builder
				for k, tk := range run {
					where := []any{"mode %d token %d %q", mode, k, tk.token}
					require.LessOrEqual(t, tk.logprob, float32(0), where...)
					if !chat {
						require.Equal(t, joined.Len(), tk.offset, where...)
					}
					joined.WriteString(tk.token)
					if chat {
						require.Len(t, tk.top, tc.top, where...)
					} else {
						// The chosen token is always listed; under greedy it is the top one.
						require.True(t, len(tk.top) >= 1 && len(tk.top) <= tc.top, where...)
					}
					for a, alt := range tk.top {
						require.LessOrEqual(t, alt.logprob, float32(0), where...)
						if a > 0 {
							require.LessOrEqual(t, alt.logprob, tk.top[a-1].logprob, where...)
						}
					}
					if tc.top > 0 {
						require.Equal(t, tk.token, tk.top[0].token, where...)
						require.InDelta(t, tk.logprob, tk.top[0].logprob, 1e-5, where...)
					}
					// Streamed and whole agree (a prefix-cache hit may move the
					// last float bits, not the choice).
					other := runs[1-mode][k]
					require.Equal(t, other.token, tk.token, where...)
					require.InDelta(t, other.logprob, tk.logprob, 1e-4, where...)
					require.Len(t, other.top, len(tk.top), where...)
					for a := range tk.top {
						require.InDelta(t, other.top[a].logprob, tk.top[a].logprob, 1e-4, where...)
					}
				}
				require.Equal(t, texts[mode], joined.String(), "tokens join to the text")
			}
		})
	}
}
