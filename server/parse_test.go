package server

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func testParser(t testing.TB, template string) *parser {
	t.Helper()
	tok := storiesTokenizer(t)
	chat, err := newChatTemplate(template, tok.Token(tok.BOS()), tok.Token(tok.EOS()))
	require.NoError(t, err)
	return &parser{tok: tok, chat: chat.withSpecial(tok), lim: limits{model: testModel, maxContext: 64, vocab: tok.VocabSize(), maxN: 4, maxChoices: 8, maxPiece: maxPieceBytes(tok)}}
}

func TestParseFields(t *testing.T) {
	p := testParser(t, "")
	j, e := p.completion([]byte(`{"model":"stories260K","prompt":["a","b"],"n":2,"max_tokens":5,"temperature":0.5,"top_p":0.9,
		"top_k":-1,"min_p":0.1,"seed":-1,"stop":"x","presence_penalty":0.5,"frequency_penalty":-0.5,"repetition_penalty":1.1,
		"ignore_eos":true,"stop_token_ids":[2],"cache_salt":"s","program_id":"p","program_release":true,"user":"u",
		"logprobs":0,"stream":true,"stream_options":{"include_usage":true}}`))
	require.Nil(t, e)
	require.Len(t, j.reqs, 4)
	require.Equal(t, 2, j.n)
	require.True(t, j.stream && j.includeUsage && j.logprobs && j.programRelease)
	require.Equal(t, "p", j.programID)
	r := j.reqs[1]
	require.Equal(t, 5, r.MaxTokens)
	require.InDelta(t, 0.5, r.Params.Temperature, 1e-6)
	require.InDelta(t, 0.9, r.Params.TopP, 1e-6)
	require.Zero(t, r.Params.TopK, "-1 means off")
	require.True(t, r.Params.HasSeed)
	require.Zero(t, r.Params.Seed, "seed -1 is 2^64-1; choice 1 adds 1 and wraps")
	require.Equal(t, uint64(1<<64-1), j.reqs[0].Params.Seed)
	require.Equal(t, []string{"x"}, r.Stop)
	require.Equal(t, []int32{2}, r.StopTokenIDs)
	require.True(t, r.IgnoreEOS && r.Params.Logprobs)
	require.Equal(t, "s", r.CacheSalt)
	require.Equal(t, p.tok.Encode("b", true), j.reqs[2].PromptTokens)

	j, e = p.completion([]byte(`{"prompt":[[1,5],[1,6,7]]}`))
	require.Nil(t, e)
	require.Equal(t, [][]int32{{1, 5}, {1, 6, 7}}, [][]int32{j.reqs[0].PromptTokens, j.reqs[1].PromptTokens})
	require.InDelta(t, 1, j.reqs[0].Params.Temperature, 0, "OpenAI's default temperature")
	require.Zero(t, j.reqs[0].MaxTokens, "absent max_tokens: up to the context")

	j, e = p.chatCompletion([]byte(`{"messages":[{"role":"user","content":null}],"max_tokens":3,"max_completion_tokens":4}`))
	require.Nil(t, e)
	require.Equal(t, 4, j.reqs[0].MaxTokens, "max_completion_tokens wins")
	require.Equal(t, p.tok.Encode("User: \nAssistant:", true), j.reqs[0].PromptTokens)
}

// FuzzParse: any body either parses into requests the engine accepts, or
// is refused with a 4xx OpenAI error; never a panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"prompt":"hi","max_tokens":3}`,
		`{"prompt":[1,2,3],"n":2,"stop":["a","b"],"seed":5}`,
		`{"prompt":[[1],[2,3]],"temperature":0,"top_k":5,"min_p":0.2}`,
		`{"prompt":["x"],"logprobs":0,"stream":true,"stream_options":{"include_usage":false}}`,
		`{"messages":[{"role":"user","content":"hello"}],"max_completion_tokens":5}`,
		`{"messages":[{"role":"system","content":[{"type":"text","text":"s"}]},{"role":"assistant","content":null}]}`,
		`{"prompt":"\u00e9\ud800","stop":"\u0000"}`,
		`{"prompt":1e999}`, `[]`, `null`, `{"prompt":"a","max_tokens":9223372036854775807}`,
		`{"prompt":"x","logprobs":5}`, `{"prompt":"x","logprobs":-1}`,
		`{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":20}`,
		`{"messages":[{"role":"user","content":"hi"}],"top_logprobs":3}`,
		// Bounds and element errors.
		`1`, `"x"`, `true`, ` null `, `{"prompt":"hi","temperature":100}`, `{"prompt":"hi","temperature":2}`,
		`{"prompt":"hi","top_k":100000}`, `{"prompt":"hi","top_k":512}`,
		`{"prompt":"hi","stop":["a",1]}`, `{"prompt":"hi","stop":[null]}`, `{"prompt":"hi","stop_token_ids":[1,"x"]}`,
		`{"prompt":"hi","stop_token_ids":[1,null]}`, `{"prompt":[1,null]}`, `{"prompt":[[1],null]}`, `{"prompt":["a",null]}`,
		`{"prompt":["a","b","c","d","e","f","g","h","i"]}`, `{"prompt":[[1],[2],[3],[4],[5],[6],[7],[8],[9]]}`,
		`{"messages":[{"role":1,"content":"hi"}]}`, `{"messages":[null]}`, `{"messages":[{"role":"user","content":"hi"},7]}`,
		`{"prompt":"` + strings.Repeat("Once upon a time. ", 30) + `"}`,
		`{"messages":[{"role":"user","content":"` + strings.Repeat("Once upon a time. ", 30) + `"}]}`,
		`{"prompt":"hi","stop":"` + strings.Repeat("x", maxStopBytes+1) + `"}`,
	} {
		f.Add([]byte(s))
	}
	p := testParser(f, chatML)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, parse := range []func([]byte) (*job, *APIError){p.completion, p.chatCompletion} {
			j, e := parse(body)
			if e != nil {
				require.Nil(t, j)
				require.True(t, e.Status >= 400 && e.Status < 500, "status %d", e.Status)
				require.NotEmpty(t, e.Message)
				require.NotEmpty(t, e.Type)
				continue
			}
			require.NotEmpty(t, j.reqs)
			require.LessOrEqual(t, len(j.reqs), p.lim.maxChoices)
			require.Equal(t, j.n*j.prompts, len(j.reqs))
			for _, r := range j.reqs {
				require.NotEmpty(t, r.PromptTokens)
				require.Less(t, len(r.PromptTokens), p.lim.maxContext)
				require.GreaterOrEqual(t, r.MaxTokens, 0)
				require.LessOrEqual(t, len(r.PromptTokens)+r.MaxTokens, p.lim.maxContext)
				for _, tk := range r.PromptTokens {
					require.True(t, tk >= 0 && int(tk) < p.lim.vocab)
				}
				ps := r.Params
				require.NoError(t, ps.Validate(p.lim.vocab))
				// Alternatives only with logprobs; completions' legacy bound is 5.
				require.True(t, ps.TopLogprobs == 0 || ps.Logprobs, "top_logprobs %d without logprobs", ps.TopLogprobs)
				require.True(t, j.chat || ps.TopLogprobs <= maxCompletionLogprobs, "completions logprobs %d", ps.TopLogprobs)
				require.Equal(t, ps.Logprobs, j.logprobs)
				for _, s := range r.Stop {
					require.NotEmpty(t, s)
					require.LessOrEqual(t, len(s), maxStopBytes)
				}
				require.LessOrEqual(t, ps.Temperature, float32(maxTemperature))
				require.LessOrEqual(t, ps.TopK, p.lim.vocab)
			}
		}
	})
}

// TestParseModelStopTokens: the model's stop tokens (EOS, end of turn)
// join each request's own stop_token_ids unless it sets ignore_eos.
func TestParseModelStopTokens(t *testing.T) {
	p := testParser(t, "")
	p.stops = []int32{2, 7}
	for _, tc := range []struct {
		body string
		want []int32
	}{
		{`{"model":"stories260K","prompt":"a"}`, []int32{2, 7}},
		{`{"model":"stories260K","prompt":"a","stop_token_ids":[5]}`, []int32{5, 2, 7}},
		{`{"model":"stories260K","prompt":"a","stop_token_ids":[5],"ignore_eos":true}`, []int32{5}},
		{`{"model":"stories260K","prompt":"a","ignore_eos":true}`, nil},
	} {
		j, e := p.completion([]byte(tc.body))
		require.Nil(t, e, tc.body)
		require.Equal(t, tc.want, j.reqs[0].StopTokenIDs, tc.body)
	}
	j, e := p.chatCompletion([]byte(`{"model":"stories260K","messages":[{"role":"user","content":"hi"}]}`))
	require.Nil(t, e)
	require.Equal(t, []int32{2, 7}, j.reqs[0].StopTokenIDs, "chat too")
}
