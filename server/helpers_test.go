package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"github.com/turnstile-llm/turnstile/guided"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/turnstile-llm/turnstile/internal/testwait"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/model/tokenizer"
	"github.com/turnstile-llm/turnstile/policy"
	"github.com/turnstile-llm/turnstile/seatpool"
	"github.com/turnstile-llm/turnstile/sim"
	"github.com/turnstile-llm/turnstile/step"
)

const testModel = "stories260K"

// storiesTokenizer is stories260K's real tokenizer (vocab 512).
func storiesTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	p, err := gguf.TestModelPath()
	require.NoError(t, err, "run `make model`")
	f, err := gguf.Open(p)
	require.NoError(t, err)
	defer f.Close()
	tk, err := tokenizer.FromGGUF(f)
	require.NoError(t, err)
	return tk
}

// env is a Server over an engine whose Run loop runs until the test ends.
type env struct {
	srv    *Server
	ts     *httptest.Server
	eng    *executor.Engine
	tok    *tokenizer.Tokenizer
	stop   context.CancelFunc
	done   chan error
	closed bool
}

type simOpts struct {
	step        time.Duration // sim step cost on the real clock
	maxInFlight int
	maxBody     int64
	keys        []string
	template    string
	maxContext  int
	mbs         int
	programs    *policy.Config // the engine's program policy (nil: none)
	guided      bool           // structured output: a guided decoder and a grammar cache
	grammarsOff error          // with guided false: why structured output is off
	// tok is the tokenizer (nil: stories260K's); the sim samples among its
	// ordinary tokens [tokenMin, tokenMax) (both 0 with tok nil:
	// stories260K's pieces, past the control and byte tokens; both 0 with
	// tok set: the whole vocabulary).
	tok                *tokenizer.Tokenizer
	tokenMin, tokenMax int32
}

// testSeats is the seat count, derived once by seatpool.Seats, that an
// engine of mbs with overlap ovl and its runner are built with.
func testSeats(tb testing.TB, mbs int, ovl bool) int {
	tb.Helper()
	n, err := seatpool.Seats(seatpool.Sizing{MaxBatchSize: mbs, Overlap: ovl, DeferredTeardown: ovl})
	require.NoError(tb, err)
	return n
}

// newSimEnv serves the sim runner (deterministic tokens among the
// tokenizer's ordinary pieces: stories260K's unless o.tok says otherwise)
// with the real tokenizer.
func newSimEnv(t testing.TB, o simOpts) *env {
	t.Helper()
	tok := o.tok
	if tok == nil {
		tok = storiesTokenizer(t)
		if o.tokenMin == 0 && o.tokenMax == 0 {
			o.tokenMin, o.tokenMax = 259, int32(tok.VocabSize())
		}
	}
	if o.maxContext == 0 {
		o.maxContext = 256
	}
	if o.mbs == 0 {
		o.mbs = 4
	}
	if o.maxInFlight == 0 {
		o.maxInFlight = 16
	}
	seats := testSeats(t, o.mbs, true)
	r, err := sim.New(sim.Config{
		Capacity: step.Capacity{Seats: seats, KVBlocks: 512, BlockSize: 16, MaxContext: o.maxContext,
			MaxBatchTokens: 256, Vocab: tok.VocabSize()},
		Cost: sim.Fixed(o.step), Clock: clock.Real{}, Seed: 3,
		TokenMin: o.tokenMin, TokenMax: o.tokenMax, EOS: tok.EOS(),
	})
	require.NoError(t, err)
	cfg := executor.Config{MaxBatchSize: o.mbs, Overlap: true, Model: testModel, Seed: 1, Programs: o.programs}
	var grammars *guided.Cache
	if o.guided {
		cfg.Guide, grammars = guidedFor(t, tok, seats)
	}
	eng, err := executor.New(cfg, r, tok)
	require.NoError(t, err)
	return startEnv(t, eng, tok, Config{Model: testModel, MaxContext: o.maxContext, Tokenizer: tok,
		ChatTemplate: o.template, APIKeys: o.keys, MaxBodyBytes: o.maxBody, MaxInFlight: o.maxInFlight, Grammars: grammars, GrammarsOff: o.grammarsOff})
}

// guidedFor builds a guided decoder over tok's vocabulary and a grammar
// cache.
func guidedFor(t testing.TB, tok *tokenizer.Tokenizer, seats int) (*guided.Decoder, *guided.Cache) {
	t.Helper()
	v, err := guided.VocabOf(tok, []int32{tok.EOS()}, tok.VocabSize())
	require.NoError(t, err)
	d, err := guided.New(seats, v)
	require.NoError(t, err)
	c, err := guided.NewCache(guided.DefaultCacheConfig)
	require.NoError(t, err)
	return d, c
}

func startEnv(t testing.TB, eng *executor.Engine, tok *tokenizer.Tokenizer, cfg Config) *env {
	t.Helper()
	srv, err := New(cfg, eng)
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	e := &env{srv: srv, eng: eng, tok: tok, stop: stop, done: make(chan error, 1)}
	go func() { e.done <- eng.Run(ctx) }()
	e.ts = httptest.NewServer(srv.Handler())
	// Every request (headers and body, streams included) is bounded.
	e.ts.Client().Timeout = testwait.Bound
	t.Cleanup(func() { e.close(t) })
	return e
}

// close stops the HTTP server and the engine and checks the engine's
// accounting.
func (e *env) close(t testing.TB) {
	if e.closed {
		return
	}
	e.closed = true
	e.ts.Close()
	e.stop()
	require.NoError(t, testwait.Recv(t, e.done, "the engine's Run to return after the server closed"))
	require.NoError(t, e.eng.Check())
	m := e.eng.Snapshot()
	require.Zero(t, m.SeatsLive+m.SeatsRetiring+m.KVBlocksUsed, "engine holds resources after close")
}

// post sends body (a value marshalled as JSON, or []byte as is).
func (e *env) post(t testing.TB, path string, body any, hdr ...string) *http.Response {
	t.Helper()
	var b []byte
	switch v := body.(type) {
	case []byte:
		b = v
	case string:
		b = []byte(v)
	default:
		var err error
		b, err = json.Marshal(v)
		require.NoError(t, err)
	}
	req, err := http.NewRequest(http.MethodPost, e.ts.URL+path, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.ts.Client().Do(req)
	require.NoError(t, err, "POST %s", path)
	return resp
}

// decodeJSON reads resp's body into v and closes it.
func decodeJSON(t testing.TB, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "reading a JSON response body")
	require.NoError(t, json.Unmarshal(b, v), "body: %s", b)
}

// readSSE reads every data event of a stream until [DONE] (included as the
// last element) or the end of the body.
func readSSE(t testing.TB, resp *http.Response) []string {
	t.Helper()
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		require.True(t, ok, "line %q is not a data line", line)
		events = append(events, data)
		if data == "[DONE]" {
			break
		}
	}
	require.NoError(t, sc.Err(), "reading a stream's events (after %d)", len(events))
	return events
}

// completionText is a non-streamed completion's first choice.
type completionOut struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Choices []struct {
		Index        int     `json:"index"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
		Logprobs     *struct {
			Tokens        []string  `json:"tokens"`         // completions
			TokenLogprobs []float32 `json:"token_logprobs"` // completions
			Content       []struct {
				Token   string  `json:"token"`
				Logprob float32 `json:"logprob"`
				Raw     []int   `json:"bytes"`
			} `json:"content"` // chat
		} `json:"logprobs"`
		Message *struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

type errorOut struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}
