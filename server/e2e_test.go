package server

import (
	"context"
	"net/http"
	"testing"

	"github.com/turnstile-llm/turnstile/internal/testwait"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/sampling"
)

// storiesEngine builds an engine over the CPU runner and stories260K. The
// model and runner are closed when the test ends, after the engine.
func storiesEngine(t testing.TB, overlap bool) (*executor.Engine, *model.Llama) {
	t.Helper()
	path, err := gguf.TestModelPath()
	require.NoError(t, err, "run `make model`")
	m, err := model.LoadLlama(path, model.LlamaOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	const mbs = 4
	seats := testSeats(t, mbs, overlap)
	r, err := model.NewCPURunner(m, model.CPURunnerConfig{Seats: seats, KVBlocks: 256, BlockSize: 16, MaxBatchTokens: 256, Workers: 1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	eng, err := executor.New(executor.Config{MaxBatchSize: mbs, Overlap: overlap, Model: testModel}, r, m.Tokenizer())
	require.NoError(t, err)
	return eng, m
}

func newStoriesEnv(t testing.TB, template string) *env {
	t.Helper()
	eng, m := storiesEngine(t, true)
	return startEnv(t, eng, m.Tokenizer(), Config{Model: testModel, MaxContext: m.MaxContext(), Tokenizer: m.Tokenizer(),
		ChatTemplate: template, MaxInFlight: 16})
}

// greedyReference runs prompt greedily on a separate engine (plain loop,
// no overlap) driven step by step: what `turnstile generate` prints.
func greedyReference(t *testing.T, prompt string, maxTokens int) executor.Delta {
	t.Helper()
	eng, _ := storiesEngine(t, false)
	st, err := eng.Submit(context.Background(), &executor.Request{Prompt: prompt, MaxTokens: maxTokens, Params: sampling.DefaultParams()})
	require.NoError(t, err)
	for i := 0; ; i++ {
		require.Less(t, i, 10_000, "stepped %d times waiting for the reference engine to go idle", i)
		progressed, err := eng.Step()
		require.NoError(t, err)
		if !progressed {
			break
		}
	}
	d, err := st.ReadAll(testwait.Ctx(t))
	require.NoError(t, err, "reading the reference output")
	require.NoError(t, eng.Close())
	return d
}

func TestStoriesGreedyMatchesReference(t *testing.T) {
	e := newStoriesEnv(t, "")
	for _, tc := range []struct {
		prompt    string
		maxTokens int
	}{
		{"Once upon a time", 40},
		{"Lily and Ben went to the park. They", 25},
	} {
		ref := greedyReference(t, tc.prompt, tc.maxTokens)
		require.NotEmpty(t, ref.Text)
		t.Logf("%q → %q", tc.prompt, ref.Text)
		body := map[string]any{"model": testModel, "prompt": tc.prompt, "max_tokens": tc.maxTokens, "temperature": 0}
		var out completionOut
		resp := e.post(t, "/v1/completions", body)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		decodeJSON(t, resp, &out)
		require.Equal(t, ref.Text, out.Choices[0].Text, "prompt %q", tc.prompt)
		require.Equal(t, string(ref.FinishReason), *out.Choices[0].FinishReason)
		require.Equal(t, len(e.tok.Encode(tc.prompt, true)), out.Usage.PromptTokens)
		require.Equal(t, ref.Usage.Completion, out.Usage.CompletionTokens)
		require.Equal(t, len(ref.TokenIDs), out.Usage.CompletionTokens)

		body["stream"] = true
		body["stream_options"] = map[string]any{"include_usage": true}
		texts, finish, u := joinStream(t, readSSE(t, e.post(t, "/v1/completions", body)), false)
		require.Equal(t, ref.Text, texts[0])
		require.Equal(t, string(ref.FinishReason), finish[0])
		require.Equal(t, out.Usage.TotalTokens, u.Usage.TotalTokens)
	}
}

func TestStoriesChat(t *testing.T) {
	for _, tmpl := range []string{"", chatML} {
		e := newStoriesEnv(t, tmpl)
		body := map[string]any{"messages": []map[string]any{{"role": "user", "content": "Tell me a story."}},
			"max_tokens": 20, "temperature": 0}
		var out completionOut
		resp := e.post(t, "/v1/chat/completions", body)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		decodeJSON(t, resp, &out)
		c, err := newChatTemplate(tmpl, "<s>", "</s>")
		require.NoError(t, err)
		rendered, _, err := c.render([]message{{Role: "user", Content: "Tell me a story."}}, nil, nil)
		require.NoError(t, err)
		ref := greedyReference(t, rendered, 20)
		require.Equal(t, ref.Text, out.Choices[0].Message.Content)
		require.Equal(t, len(e.tok.Encode(rendered, true)), out.Usage.PromptTokens)
	}
}
