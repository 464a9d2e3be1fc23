package serveload

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnstile-llm/turnstile/internal/testwait"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/model/tokenizer"
	"github.com/turnstile-llm/turnstile/seatpool"
	"github.com/turnstile-llm/turnstile/server"
	"github.com/turnstile-llm/turnstile/sim"
	"github.com/turnstile-llm/turnstile/step"
)

const simModel = "stories260K"

// simServer serves the sim runner (1 ms steps on the real clock) behind the
// real server with stories260K's tokenizer; at cleanup it stops the engine
// and checks its accounting.
func simServer(t *testing.T) string {
	t.Helper()
	p, err := gguf.TestModelPath()
	require.NoError(t, err, "run `make model`")
	f, err := gguf.Open(p)
	require.NoError(t, err)
	tok, err := tokenizer.FromGGUF(f)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	const mbs = 4
	seats, err := seatpool.Seats(seatpool.Sizing{MaxBatchSize: mbs, Overlap: true, DeferredTeardown: true})
	require.NoError(t, err)
	r, err := sim.New(sim.Config{
		Capacity: step.Capacity{Seats: seats, KVBlocks: 256, BlockSize: 16, MaxContext: 256,
			MaxBatchTokens: 256, Vocab: tok.VocabSize()},
		Cost: sim.Fixed(time.Millisecond), Clock: clock.Real{}, Seed: 5,
		TokenMin: 259, TokenMax: int32(tok.VocabSize()), EOS: tok.EOS(),
	})
	require.NoError(t, err)
	eng, err := executor.New(executor.Config{MaxBatchSize: mbs, Overlap: true, Model: simModel, Seed: 1}, r, tok)
	require.NoError(t, err)
	srv, err := server.New(server.Config{Model: simModel, MaxContext: 256, Tokenizer: tok, MaxInFlight: 64}, eng)
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		stop()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(testwait.Bound):
			require.FailNowf(t, "wait timed out", "waited %v for the engine's Run to return after the server closed", testwait.Bound)
		}
		require.NoError(t, eng.Check())
		m := eng.Snapshot()
		require.Zero(t, m.SeatsLive+m.SeatsRetiring+m.KVBlocksUsed, "engine holds resources after the run")
	})
	return ts.URL
}

func TestRunAgainstSimStopsAtMaxRequests(t *testing.T) {
	url := simServer(t)
	for _, tc := range []struct {
		clients, max, maxTokens int
	}{
		{1, 5, 8},
		{4, 17, 12},
		{8, 3, 4}, // fewer requests than clients
	} {
		t.Run(fmt.Sprintf("clients=%d,max=%d", tc.clients, tc.max), func(t *testing.T) {
			res, err := Run(testwait.Ctx(t), Config{BaseURL: url, Model: simModel, Clients: tc.clients,
				Duration: time.Hour, MaxRequests: tc.max, MaxTokens: tc.maxTokens, IgnoreEOS: true, Seed: 9})
			require.NoError(t, err, "the load run, bounded by %v", testwait.Bound)
			require.Empty(t, res.FirstError)
			require.Equal(t, tc.clients, res.Clients)
			require.Equal(t, tc.max, res.Requests, "every started request finishes")
			require.Equal(t, tc.max, res.Successes)
			require.Zero(t, res.Errors)
			require.Equal(t, int64(tc.max*tc.maxTokens), res.OutputTokens, "ignore_eos: max_tokens each")
			require.Positive(t, res.TTFTP50)
			require.LessOrEqual(t, res.TTFTP50, res.TTFTP99)
			require.LessOrEqual(t, res.TTFTP50, res.LatencyP50, "each latency includes its TTFT")
			require.LessOrEqual(t, res.TTFTP99, res.LatencyP99)
			require.Positive(t, res.RequestsPerSec)
			require.InDelta(t, float64(res.OutputTokens)/res.Elapsed.Seconds(), res.OutputTokensPerSec, 1e-6)
		})
	}
}

// TestRunAgainstSimStopsAtDuration: with a request budget it cannot reach,
// the run ends by its duration and its counts add up.
func TestRunAgainstSimStopsAtDuration(t *testing.T) {
	url := simServer(t)
	const max = 1 << 20
	res, err := Run(testwait.Ctx(t), Config{BaseURL: url, Clients: 3, Duration: 150 * time.Millisecond,
		MaxRequests: max, MaxTokens: 4})
	require.NoError(t, err, "the load run, bounded by %v", testwait.Bound)
	require.Zero(t, res.Errors, res.FirstError)
	require.Equal(t, res.Successes+res.Errors, res.Requests)
	require.Less(t, res.Requests, max)
	if res.Successes > 0 { // without ignore_eos a request may stop early, never at 0 tokens
		require.GreaterOrEqual(t, res.OutputTokens, int64(res.Successes))
		require.LessOrEqual(t, res.OutputTokens, int64(4*res.Successes))
	}
}

// TestRunCancelled: ending ctx ends the run and is returned.
func TestRunCancelled(t *testing.T) {
	url := simServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := Run(ctx, Config{BaseURL: url, Clients: 2, Duration: time.Hour, MaxRequests: 1000, MaxTokens: 4})
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, res.Requests, "no request starts after ctx ended")
}

// okStream writes a valid completions stream of n one-token chunks.
func okStream(w http.ResponseWriter, n int) {
	w.Header().Set("Content-Type", "text/event-stream")
	for i := range n {
		fin := "null"
		if i == n-1 {
			fin = `"length"`
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\"t%d\",\"finish_reason\":%s}]}\n\n", i, fin)
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", n)
}

// TestRunReportsFailingServers: every way a server can fail is counted as
// an error, with the first error's text.
func TestRunReportsFailingServers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		timeout time.Duration
		wantErr string
	}{
		{"500", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, `{"error":{"message":"engine exploded"}}`, http.StatusInternalServerError)
		}, 0, "status 500: {\"error\":{\"message\":\"engine exploded\"}}"},
		{"429", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "too many", http.StatusTooManyRequests)
		}, 0, "status 429: too many"},
		{"no DONE", func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":\"stop\"}]}\n\n"+
				"data: {\"choices\":[],\"usage\":{\"completion_tokens\":1}}\n\n")
		}, 0, "stream ended without [DONE]"},
		{"no usage", func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
		}, 0, "no usage chunk"},
		{"no finish", func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":null}]}\n\n"+
				"data: {\"choices\":[],\"usage\":{\"completion_tokens\":1}}\n\ndata: [DONE]\n\n")
		}, 0, "no choice with a finish_reason"},
		{"bad json", func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, "data: {\"choices\":[\n\ndata: [DONE]\n\n")
		}, 0, "malformed SSE: line 1"},
		{"not a data line", func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, "hello\n\n")
		}, 0, `line 1 "hello" is not a data line`},
		{"data after DONE", func(w http.ResponseWriter, r *http.Request) {
			okStream(w, 1)
			fmt.Fprint(w, "data: {}\n\n")
		}, 0, "after [DONE]"},
		{"error event", func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, "data: {\"error\":{\"message\":\"kv exhausted\"}}\n\n")
		}, 0, "error event: kv exhausted"},
		{"line too long", func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, "data: "+strings.Repeat("x", MaxLineBytes+10)+"\n\n")
		}, 0, "longer than 65536 bytes"},
		{"hangs", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			<-r.Context().Done()
		}, 20 * time.Millisecond, "request timeout 20ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := httptest.NewServer(tc.handler)
			defer ts.Close()
			res, err := Run(testwait.Ctx(t), Config{BaseURL: ts.URL, Clients: 2, Duration: time.Hour,
				MaxRequests: 3, MaxTokens: 1, RequestTimeout: tc.timeout})
			require.NoError(t, err, "the load run, bounded by %v", testwait.Bound)
			require.Equal(t, 3, res.Requests)
			require.Equal(t, 3, res.Errors)
			require.Zero(t, res.Successes)
			require.Zero(t, res.OutputTokens)
			require.Zero(t, res.TTFTP99, "no samples from failed requests")
			require.Contains(t, res.FirstError, tc.wantErr)
		})
	}
}

// TestRunCountsAddUp: a server failing every other request gives half
// successes and half errors.
func TestRunCountsAddUp(t *testing.T) {
	var n atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1)%2 == 0 {
			http.Error(w, "even", http.StatusServiceUnavailable)
			return
		}
		okStream(w, 5)
	}))
	defer ts.Close()
	res, err := Run(testwait.Ctx(t), Config{BaseURL: ts.URL, Clients: 3, Duration: time.Hour, MaxRequests: 10, MaxTokens: 5})
	require.NoError(t, err, "the load run, bounded by %v", testwait.Bound)
	require.Equal(t, 10, res.Requests)
	require.Equal(t, 5, res.Successes)
	require.Equal(t, 5, res.Errors)
	require.Equal(t, int64(25), res.OutputTokens)
	require.Equal(t, "status 503: even", res.FirstError)
}

// TestRunRequestsAreSeeded: the same seed sends the same requests, a
// different seed other ones, and each request asks for a streamed usage.
func TestRunRequestsAreSeeded(t *testing.T) {
	var mu sync.Mutex
	var bodies []request
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.URL.Path != "/v1/completions" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		bodies = append(bodies, req)
		mu.Unlock()
		okStream(w, req.MaxTokens)
	}))
	defer ts.Close()
	run := func(seed uint64) []request {
		mu.Lock()
		bodies = nil
		mu.Unlock()
		res, err := Run(testwait.Ctx(t), Config{BaseURL: ts.URL + "/", Model: "m", Clients: 1, Duration: time.Hour,
			MaxRequests: 12, MaxTokens: 3, IgnoreEOS: true, Seed: seed})
		require.NoError(t, err, "the load run, bounded by %v", testwait.Bound)
		require.Zero(t, res.Errors, res.FirstError)
		mu.Lock()
		defer mu.Unlock()
		return append([]request(nil), bodies...)
	}
	a, b, c := run(1), run(1), run(2)
	require.Len(t, a, 12)
	require.Equal(t, a, b)
	require.NotEqual(t, a, c)
	prompts := map[string]bool{}
	for _, r := range a {
		require.True(t, r.Stream && r.StreamOptions.IncludeUsage && r.IgnoreEOS)
		require.Equal(t, "m", r.Model)
		require.Equal(t, 3, r.MaxTokens)
		require.Contains(t, DefaultPrompts(), r.Prompt)
		prompts[r.Prompt] = true
	}
	require.Greater(t, len(prompts), 1, "prompts are drawn, not fixed")
}

func TestConfigErrors(t *testing.T) {
	ok := Config{BaseURL: "http://127.0.0.1:1", Clients: 1, Duration: time.Second, MaxRequests: 1, MaxTokens: 1}
	for _, tc := range []struct {
		name    string
		edit    func(*Config)
		wantErr string
	}{
		{"url", func(c *Config) { c.BaseURL = "" }, "BaseURL is empty"},
		{"clients", func(c *Config) { c.Clients = 0 }, "Clients 0: must be >= 1"},
		{"duration", func(c *Config) { c.Duration = -time.Second }, "Duration -1s: must be > 0"},
		{"max requests", func(c *Config) { c.MaxRequests = 0 }, "MaxRequests 0: must be >= 1"},
		{"max tokens", func(c *Config) { c.MaxTokens = -3 }, "MaxTokens -3: must be >= 1"},
		{"timeout", func(c *Config) { c.RequestTimeout = -time.Millisecond }, "RequestTimeout -1ms"},
		{"prompts", func(c *Config) { c.Prompts = []string{} }, "Prompts is empty"},
		{"rate negative", func(c *Config) { c.RequestRate = -1 }, "RequestRate -1: must be finite and >= 0"},
		{"rate NaN", func(c *Config) { c.RequestRate = math.NaN() }, "RequestRate NaN"},
		{"rate Inf", func(c *Config) { c.RequestRate = math.Inf(1) }, "RequestRate +Inf"},
		{"concurrency negative", func(c *Config) { c.RequestRate, c.MaxConcurrency = 1, -2 }, "MaxConcurrency -2: must be >= 0"},
		{"concurrency closed loop", func(c *Config) { c.MaxConcurrency = 4 }, "MaxConcurrency 4: only in open loop"},
		{"prompt len", func(c *Config) { c.PromptLen = PromptLen{"uniform", 5, 2} }, "PromptLen: length 5-2 words"},
		{"prompt len dist", func(c *Config) { c.PromptLen = PromptLen{"zipf", 1, 2} }, `PromptLen: distribution "zipf"`},
		{"prompts and prompt len", func(c *Config) { c.Prompts, c.PromptLen = []string{"x"}, PromptLen{"fixed", 2, 2} },
			"both Prompts and PromptLen"},
		{"slo", func(c *Config) { c.SLO.TPOT = -1 }, "bounds must be >= 0"},
		{"chat tools", func(c *Config) { c.Chat = &Chat{Tools: json.RawMessage(`{}`)} }, "Chat.Tools is not a JSON array"},
		{"chat tools ignore eos", func(c *Config) { c.Chat, c.IgnoreEOS = &Chat{Tools: json.RawMessage(`[]`)}, true },
			"IgnoreEOS with Chat.Tools"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			_, err := Run(context.Background(), c)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestReadStream(t *testing.T) {
	for _, tc := range []struct {
		name       string
		in         string
		wantTokens int
		wantErr    string
	}{
		{"minimal", "data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":\"length\"}]}\n\n" +
			"data: {\"choices\":[],\"usage\":{\"completion_tokens\":7}}\n\ndata: [DONE]\n\n", 7, ""},
		{"crlf, comments and fields", ": hi\r\nevent: x\r\nid: 1\r\ndata:{\"choices\":[{\"finish_reason\":\"stop\"}]}\r\n\r\n" +
			"data: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\r\n\r\ndata: [DONE]", 2, ""},
		{"empty", "", 0, "without [DONE]"},
		{"only done", "data: [DONE]\n\n", 0, "no choice"},
		{"two usages", "data: {\"usage\":{\"completion_tokens\":1}}\n\ndata: {\"usage\":{\"completion_tokens\":1}}\n\n", 0, "second usage"},
		{"zero tokens", "data: {\"choices\":[{\"finish_reason\":\"stop\"}]}\n\n" +
			"data: {\"usage\":{\"completion_tokens\":0}}\n\ndata: [DONE]\n\n", 0, "completion_tokens 0"},
		{"junk line", "retry: 3\nfoo: bar\n", 0, `line 2 "foo: bar" is not a data line`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tokens, err := readAll(tc.in)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantTokens, tokens)
		})
	}
}

// TestReadStreamChat: in a chat stream the role chunk carries no token;
// TTFT is the first content delta's, and content, reasoning and tool-call
// deltas are token chunks (their gaps the ITL's).
func TestReadStreamChat(t *testing.T) {
	in := `data: {"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"reasoning_content":"hm"},"finish_reason":null}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":""}}]},"finish_reason":null}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]},"finish_reason":null}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\n" +
		`data: {"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":16}}}` + "\n\ndata: [DONE]\n\n"
	t0 := time.Unix(0, 0)
	tick := t0
	now := func() time.Time { tick = tick.Add(time.Millisecond); return tick }
	st, gaps, err := readStream(bufio.NewReaderSize(strings.NewReader(in), MaxLineBytes), t0, now, nil)
	require.NoError(t, err)
	require.Equal(t, 9, st.tokens)
	require.Equal(t, 30, st.promptTokens)
	require.Equal(t, 16, st.cachedTokens)
	require.True(t, st.toolCall)
	require.Equal(t, 2*time.Millisecond, st.ttft, "the role chunk's time, replaced by the first delta with text")
	require.Len(t, gaps, 3, "content, the call's name, its arguments")
}

func readAll(s string) (int, error) {
	st, _, err := readStream(bufio.NewReaderSize(strings.NewReader(s), MaxLineBytes), time.Now(), time.Now, nil)
	return st.tokens, err
}

// FuzzReadStream: any input is parsed without panicking, and an accepted
// stream always reports at least one token.
func FuzzReadStream(f *testing.F) {
	f.Add("data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":\"length\"}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"completion_tokens\":7}}\n\ndata: [DONE]\n\n")
	f.Add("data: [DONE]\n\ndata: [DONE]\n\n")
	f.Add(": c\r\ndata:{\"error\":{\"message\":\"x\"}}\n")
	f.Add("data: {\"usage\":{\"completion_tokens\":-1}}\n")
	f.Fuzz(func(t *testing.T, s string) {
		tokens, err := readAll(s)
		if err == nil {
			require.GreaterOrEqual(t, tokens, 1)
			require.Contains(t, s, "[DONE]")
		}
	})
}

func TestParseVmRSS(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     int64
		wantErr  string
	}{
		{"ok", "Name:\tx\nVmPeak:\t  900 kB\nVmRSS:\t   12345 kB\nThreads: 3\n", 12345 << 10, ""},
		{"missing", "Name:\tx\n", 0, "no VmRSS line"},
		{"unit", "VmRSS:\t1 MB\n", 0, `VmRSS line "VmRSS:\t1 MB"`},
		{"value", "VmRSS:\tx kB\n", 0, `VmRSS value "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseVmRSS(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	rss, err := ResidentBytes()
	require.NoError(t, err)
	require.Positive(t, rss)
}

func TestParseLoadAvg(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    float64
		wantErr string
	}{
		{"13.51 13.15 11.23 10/168 24404\n", 13.51, ""},
		{"", 0, "empty"},
		{"x 1 2", 0, `field "x"`},
	} {
		got, err := parseLoadAvg([]byte(tc.in))
		if tc.wantErr != "" {
			require.ErrorContains(t, err, tc.wantErr)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
	_, err := LoadAverage()
	require.NoError(t, err)
}
