package server

// Tests of what a hostile or careless client can do to the server: each
// reproduces one finding of the hardening review on real loopback sockets
// where the finding is about sockets, and every wait is bounded.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/internal/testwait"
	"github.com/turnstile-llm/turnstile/policy"
)

// served is a Server running Serve on a loopback listener.
type served struct {
	srv  *Server
	addr string
	stop context.CancelFunc
	done chan error
	once sync.Once
	err  error
}

// wait stops the server and returns what Serve returned.
func (s *served) wait(t *testing.T) error {
	s.stop()
	s.once.Do(func() { s.err = testwait.Recv(t, s.done, "Serve to return") })
	return s.err
}

// serveReal rebuilds e's server with mut applied to its configuration and
// runs it through Serve (the production path: timeouts, connection bound,
// drain) with drain as its deadline. The server stops when the test ends.
func serveReal(t *testing.T, e *env, drain time.Duration, mut func(*Config)) *served {
	t.Helper()
	cfg := e.srv.cfg
	mut(&cfg)
	srv, err := New(cfg, e.eng)
	require.NoError(t, err)
	ln, err := netListen()
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	s := &served{srv: srv, addr: ln.Addr().String(), stop: stop, done: make(chan error, 1)}
	go func() { s.done <- srv.Serve(ctx, ln, drain) }()
	t.Cleanup(func() { s.wait(t) })
	return s
}

func (s *served) url() string { return "http://" + s.addr }

// post sends a JSON body on a fresh connection.
func (s *served) post(t *testing.T, body string) *http.Response {
	t.Helper()
	c := &http.Client{Timeout: testwait.Bound, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Post(s.url()+"/v1/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	return resp
}

// stalledStream opens a connection with a 4 KiB receive buffer, sends a
// streaming chat request of n choices whose answer is tens of megabytes
// (top-20 log-probabilities per token: more than loopback's socket buffers
// hold) and never reads it.
func stalledStream(t *testing.T, addr string, n, maxTokens int) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	body := fmt.Sprintf(`{"messages":[{"role":"user","content":"Once upon a time"}],"n":%d,"max_tokens":%d,"logprobs":true,"top_logprobs":20,"stream":true,"ignore_eos":true}`,
		n, maxTokens)
	_, err = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	require.NoError(t, err)
	return conn
}

// count is the number of requests answered with code.
func count(t *testing.T, srv *Server, code string) float64 {
	t.Helper()
	fams, err := srv.metrics.reg.Gather()
	require.NoError(t, err)
	var n float64
	for _, f := range fams {
		if f.GetName() != "turnstile_http_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "code" && l.GetValue() == code {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

func (e *env) engSubmitted() uint64 { return e.eng.Snapshot().Submitted }

// Finding 3: a client that never reads its stream no longer holds the
// server's capacity once the engine is done with its requests (its write
// timeout is far away: the places are freed while it is still connected).
func TestStalledReaderFreesCapacity(t *testing.T) {
	const prompts = 64
	e := newSimEnv(t, simOpts{mbs: 16, maxContext: 512, maxInFlight: prompts})
	s := serveReal(t, e, 50*time.Millisecond, func(c *Config) { c.WriteTimeout, c.MaxN = time.Hour, prompts })
	stalledStream(t, s.addr, prompts, 400)

	require.Eventually(t, func() bool { return e.eng.Snapshot().Finished == prompts }, testwait.Bound, time.Millisecond,
		"the engine finishes every choice of the stalled stream")
	require.Eventually(t, func() bool { return s.srv.InFlight() == 0 }, testwait.Bound, time.Millisecond,
		"the stalled stream still holds %d places after the engine finished", s.srv.InFlight())
	resp := s.post(t, `{"prompt":"hi","max_tokens":2}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "a new request is served while the stalled client is connected")
	resp.Body.Close()
	require.Zero(t, count(t, s.srv, "499"), "the stalled client is still connected")
}

// Finding 6: a client that takes nothing is dropped after the write
// timeout, and counted as a client close.
func TestStalledReaderDropped(t *testing.T) {
	const prompts = 64
	e := newSimEnv(t, simOpts{mbs: 16, maxContext: 512, maxInFlight: prompts})
	s := serveReal(t, e, time.Minute, func(c *Config) { c.WriteTimeout, c.MaxN = 300*time.Millisecond, prompts })
	stalledStream(t, s.addr, prompts, 400)
	require.Eventually(t, func() bool { return count(t, s.srv, "499") == 1 }, testwait.Bound, 5*time.Millisecond,
		"the stalled client is dropped after the write timeout")
}

// Finding 4: shutdown ends with a client that reads nothing connected, even
// when its write timeout is far away.
func TestShutdownEndsWithStalledClient(t *testing.T) {
	const prompts = 64
	e := newSimEnv(t, simOpts{mbs: 16, maxContext: 512, maxInFlight: prompts})
	s := serveReal(t, e, 50*time.Millisecond, func(c *Config) { c.WriteTimeout, c.MaxN = time.Hour, prompts })
	stalledStream(t, s.addr, prompts, 400)
	require.Eventually(t, func() bool { return e.eng.Snapshot().Finished == prompts }, testwait.Bound, time.Millisecond)
	require.NoError(t, s.wait(t), "Serve returns with a stalled client connected")
}

// Finding 2: program turns waiting for their program's admission have a
// bound of their own and never take the places of plain requests.
func TestWaitingProgramTurnsKeepToTheirBound(t *testing.T) {
	pc := policy.DefaultConfig(policy.TokenAccounting, 1) // one ACTIVE program: the others' turns wait
	e := newSimEnv(t, simOpts{maxInFlight: 4, programs: &pc})
	resp := e.post(t, "/v1/completions", `{"prompt":"hi","max_tokens":2}`, "X-Program-Id", "A")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp.Body.Close() // A stays ACTIVE (not released): B..E wait behind it

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, id := range []string{"B", "C", "D", "E"} {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.ts.URL+"/v1/completions",
				strings.NewReader(`{"prompt":"hi","max_tokens":2}`))
			if err != nil {
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Program-Id", id)
			if resp, err := e.ts.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	require.Eventually(t, func() bool { return e.srv.program.inFlight() == 4 }, testwait.Bound, time.Millisecond)

	resp = e.post(t, "/v1/completions", `{"prompt":"hi","max_tokens":2}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "a plain request runs beside 4 waiting program turns")
	resp.Body.Close()
	resp = e.post(t, "/v1/completions", `{"prompt":"hi","max_tokens":2}`, "X-Program-Id", "F")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "program turns beyond their own bound are refused")
	var out errorOut
	decodeJSON(t, resp, &out)
	require.Contains(t, out.Error.Message, "4 program turns in flight")
}

// Finding 6: headers, bodies and trickled bodies are bounded in time.
func TestReadTimeouts(t *testing.T) {
	e := newSimEnv(t, simOpts{})
	s := serveReal(t, e, time.Minute, func(c *Config) { c.ReadTimeout, c.MaxParsing = 300*time.Millisecond, 32 })
	for _, tc := range []struct {
		name    string
		send    string
		trickle bool
		want    string // the status line's start; "" when the server closes without an answer
	}{
		{"headers never end", "POST /v1/completions HTTP/1.1\r\nHost: x\r\n", false, ""},
		{"16 of 1000 body bytes", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"prompt\":\"aaaa", false, "HTTP/1.1 408"},
		{"body trickled", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n", true, "HTTP/1.1 408"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var conns []net.Conn
			for range 20 {
				conn, err := net.Dial("tcp", s.addr)
				require.NoError(t, err)
				defer conn.Close()
				_, err = io.WriteString(conn, tc.send)
				require.NoError(t, err)
				conns = append(conns, conn)
			}
			if tc.trickle { // one byte per 10 ms until the server gives up
				go func() {
					for range 1000 {
						for _, c := range conns {
							if _, err := c.Write([]byte("a")); err != nil {
								return
							}
						}
						time.Sleep(10 * time.Millisecond)
					}
				}()
			}
			for _, conn := range conns {
				got := testwait.Within(t, "the server to end a slow request", func() string {
					b, _ := io.ReadAll(conn) // ends when the server closes the connection
					return string(b)
				})
				if tc.want == "" {
					require.Empty(t, got)
				} else {
					require.True(t, strings.HasPrefix(got, tc.want), "answer %q", got)
					require.Contains(t, got, "request_timeout")
				}
			}
		})
	}
	require.Zero(t, e.eng.Snapshot().Submitted)
}

// Finding 6: connections beyond the bound wait until one closes.
func TestMaxConnections(t *testing.T) {
	e := newSimEnv(t, simOpts{})
	s := serveReal(t, e, time.Minute, func(c *Config) { c.MaxConnections = 2 })
	var idle []net.Conn
	for range 2 {
		conn, err := net.Dial("tcp", s.addr)
		require.NoError(t, err)
		idle = append(idle, conn)
	}
	c := &http.Client{Timeout: 300 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	_, err := c.Get(s.url() + "/health")
	require.Error(t, err, "a third connection is not served while two are open")
	for _, conn := range idle {
		conn.Close()
	}
	resp, err := (&http.Client{Timeout: testwait.Bound}).Get(s.url() + "/health")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp.Body.Close()
}

// The read/parse/tokenise bound: while a slow body holds the one parsing
// place, another request waits for it and is served after.
func TestParsingBound(t *testing.T) {
	e := newSimEnv(t, simOpts{})
	s := serveReal(t, e, time.Minute, func(c *Config) { c.MaxParsing = 1; c.ReadTimeout = time.Minute })
	body := `{"prompt":"hi","max_tokens":2}`
	slow, err := net.Dial("tcp", s.addr)
	require.NoError(t, err)
	defer slow.Close()
	_, err = fmt.Fprintf(slow, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:5])
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(s.srv.parsing) == 1 }, testwait.Bound, time.Millisecond, "the slow body holds the one place")

	second := make(chan int, 1)
	go func() {
		c := &http.Client{Timeout: testwait.Bound, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Post(s.url()+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			second <- 0
			return
		}
		resp.Body.Close()
		second <- resp.StatusCode
	}()
	time.Sleep(200 * time.Millisecond) // unbounded, the second request would be served by now
	require.Zero(t, e.engSubmitted(), "the second request waits for the parsing place")

	_, err = io.WriteString(slow, body[5:])
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(slow), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, testwait.Recv(t, second, "the second request's answer"))
	require.Equal(t, uint64(2), e.engSubmitted())
}

// Finding 7: streams the drain deadline cuts, running or still queued,
// end with an error event and [DONE].
func TestDrainCutStreamsSaySo(t *testing.T) {
	e := newSimEnv(t, simOpts{step: 2 * time.Millisecond, mbs: 1})
	s := serveReal(t, e, 50*time.Millisecond, func(*Config) {})
	body := `{"prompt":"Once","stream":true,"ignore_eos":true}`
	type result struct {
		rest string
		err  error
	}
	results := make(chan result, 2)
	for range 2 {
		go func() {
			resp, err := (&http.Client{Timeout: testwait.Bound}).Post(s.url()+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				results <- result{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			results <- result{string(b), err}
		}()
	}
	// One runs, one waits in the engine's queue (one sequence per step).
	require.Eventually(t, func() bool { m := e.eng.Snapshot(); return m.Running == 1 && m.Submitted == 2 }, testwait.Bound, time.Millisecond)
	s.stop()
	for range 2 {
		r := testwait.Recv(t, results, "a cut stream to end")
		require.NoError(t, r.err)
		require.Contains(t, r.rest, `data: {"error":{"message":"the request was aborted: the server is shutting down"`)
		require.True(t, strings.HasSuffix(r.rest, "data: [DONE]\n\n"), "stream %q", r.rest)
	}
}

// Finding 8: a client that goes away is counted as 499, never as 503.
func TestClientDisconnectIs499(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			e := newSimEnv(t, simOpts{step: 2 * time.Millisecond})
			ctx, cancel := context.WithCancel(context.Background())
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.ts.URL+"/v1/completions",
				strings.NewReader(fmt.Sprintf(`{"prompt":"Once","stream":%v,"ignore_eos":true}`, stream)))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			go func() {
				if resp, err := e.ts.Client().Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
			require.Eventually(t, func() bool { return e.eng.Snapshot().Running == 1 }, testwait.Bound, time.Millisecond)
			cancel()
			require.Eventually(t, func() bool { return count(t, e.srv, "499") == 1 }, testwait.Bound, time.Millisecond)
			require.Zero(t, count(t, e.srv, "503"))
		})
	}
}

// Finding 9: a client that has read [DONE] finds its place free: its next
// request, on a new connection, is never refused for a request that has
// finished.
func TestFinishedStreamFreesItsPlaceFirst(t *testing.T) {
	e := newSimEnv(t, simOpts{maxInFlight: 1})
	c := &http.Client{Timeout: testwait.Bound, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 2000 {
		resp, err := c.Post(e.ts.URL+"/v1/completions", "application/json",
			strings.NewReader(`{"prompt":"hi","max_tokens":2,"stream":true,"ignore_eos":true}`))
		require.NoError(t, err)
		events := readSSE(t, resp)
		require.Equal(t, "[DONE]", events[len(events)-1])
		require.Zero(t, e.srv.InFlight(), "request %d: its place is still held after [DONE]", i)
	}
}

// Finding 10: JSON endpoints take JSON only.
func TestContentType(t *testing.T) {
	e := newSimEnv(t, simOpts{})
	body := `{"prompt":"hi","max_tokens":2}`
	for _, tc := range []struct {
		ct   string
		want int
	}{
		{"text/plain", http.StatusUnsupportedMediaType},
		{"application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
		{"multipart/form-data; boundary=x", http.StatusUnsupportedMediaType},
		{"", http.StatusUnsupportedMediaType},
		{"application/json; charset=utf-8", http.StatusOK},
		{"Application/JSON", http.StatusOK},
	} {
		for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
			b := body
			if path == "/v1/chat/completions" {
				b = `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
			}
			req, err := http.NewRequest(http.MethodPost, e.ts.URL+path, strings.NewReader(b))
			require.NoError(t, err)
			if tc.ct != "" {
				req.Header.Set("Content-Type", tc.ct)
			}
			resp, err := e.ts.Client().Do(req)
			require.NoError(t, err)
			require.Equal(t, tc.want, resp.StatusCode, "%s with Content-Type %q", path, tc.ct)
			if tc.want != http.StatusOK {
				var out errorOut
				decodeJSON(t, resp, &out)
				require.Equal(t, "unsupported_media_type", *out.Error.Code)
				require.Contains(t, out.Error.Message, "application/json")
			} else {
				resp.Body.Close()
			}
		}
	}
	require.Equal(t, uint64(4), e.eng.Snapshot().Submitted, "only the JSON requests reached the engine")
}

// Finding 11: two Authorization headers are refused, whichever comes first.
func TestDuplicateAuthorization(t *testing.T) {
	e := newSimEnv(t, simOpts{keys: []string{"k1"}})
	for _, pair := range [][2]string{{"Bearer k1", "Bearer bad"}, {"Bearer bad", "Bearer k1"}, {"Bearer k1", "Bearer k1"}} {
		req, err := http.NewRequest(http.MethodPost, e.ts.URL+"/v1/completions", strings.NewReader(`{"prompt":"hi","max_tokens":2}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Add("Authorization", pair[0])
		req.Header.Add("Authorization", pair[1])
		resp, err := e.ts.Client().Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%q", pair)
		var out errorOut
		decodeJSON(t, resp, &out)
		require.Equal(t, "duplicate_authorization", *out.Error.Code)
	}
	resp := e.post(t, "/v1/completions", `{"prompt":"hi","max_tokens":2}`, "Authorization", "Bearer k1")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp.Body.Close()
}

// Finding 13: without a program policy the server's table of program ids
// is bounded in time: ids never released are forgotten after the idle TTL.
func TestProgramTableExpires(t *testing.T) {
	e := newSimEnv(t, simOpts{})
	clk := clock.NewVirtual(time.Unix(0, 0))
	cfg := e.srv.cfg
	cfg.Clock, cfg.ProgramIdleTTL = clk, time.Minute
	srv, err := New(cfg, e.eng)
	require.NoError(t, err)
	e.ts.Config.Handler = srv.Handler()
	const ids = 200
	for i := range ids {
		resp := e.post(t, "/v1/completions", `{"prompt":"hi","max_tokens":1}`, "X-Program-Id", fmt.Sprintf("p%d", i))
		require.Equal(t, http.StatusOK, resp.StatusCode)
		resp.Body.Close()
	}
	require.Equal(t, ids, srv.progs.size())
	require.NoError(t, clk.Advance(59*time.Second))
	require.Equal(t, ids, srv.progs.size(), "nothing expires before the TTL")
	require.NoError(t, clk.Advance(time.Minute/8))
	require.Zero(t, srv.progs.size(), "every idle id is forgotten by an eighth past the TTL")

	// An id with a request in flight is never expired; it is once idle.
	srv.progs.begin("busy")
	require.NoError(t, clk.Advance(time.Hour))
	require.Equal(t, 1, srv.progs.size())
	srv.progs.end("busy", false)
	require.NoError(t, clk.Advance(time.Minute+time.Minute/8))
	require.Zero(t, srv.progs.size())
}
