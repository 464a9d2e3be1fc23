// Package serveload is a closed-loop load generator for turnstile's HTTP API:
// N clients each send one streaming POST /v1/completions at a time, and the
// next as soon as the previous one ends, until a duration or a request count
// is reached. It measures what a streaming client sees — time to first
// token, end-to-end latency, output tokens from the usage chunk — and
// counts every failure (a non-200 status, malformed SSE, a missing finish,
// usage or [DONE], a transport error or a request timeout) as an error.
//
// Memory is bounded: per-request samples are kept only for successful
// requests, at most Config.MaxRequests of them, and SSE lines longer than
// MaxLineBytes are an error rather than a growing buffer.
package serveload

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/turnstile-llm/turnstile/internal/stats"
)

// MaxLineBytes bounds one SSE line (one event's data), bytes. A token's
// chunk is a few hundred bytes; a longer line is reported as malformed.
const MaxLineBytes = 64 << 10

// maxErrorBody bounds how much of a non-200 body goes into an error, bytes.
const maxErrorBody = 512

// DefaultRequestTimeout bounds one request when Config.RequestTimeout is 0.
const DefaultRequestTimeout = time.Minute

// DefaultPrompts returns short story openings, in the register of the
// TinyStories models the benchmark serves by default (a new slice each
// call; the caller owns it).
func DefaultPrompts() []string {
	return []string{
		"Once upon a time",
		"One day, a little girl named Lily",
		"The dog ran to the park and",
		"Tom had a big red ball.",
		"There was a small bird who",
		"Mom said it was time for bed, but",
		"In the garden, the flowers",
		"Sam and his friend wanted to",
	}
}

// Config configures one load run.
type Config struct {
	// BaseURL is the server, e.g. "http://127.0.0.1:8080" (no trailing
	// path; /v1/completions is appended).
	BaseURL string
	// Model is the model id sent with each request ("" omits it).
	Model string
	// Clients is the number of concurrent closed-loop clients (>= 1).
	Clients int
	// Duration bounds the run: no request starts after it has passed
	// (> 0). Requests in flight then finish, each within RequestTimeout.
	Duration time.Duration
	// MaxRequests bounds the requests started over all clients (>= 1). It
	// also bounds the samples kept.
	MaxRequests int
	// MaxTokens is each request's max_tokens (>= 1).
	MaxTokens int
	// IgnoreEOS asks the server to generate exactly MaxTokens tokens
	// (turnstile's ignore_eos extension), so every request does equal work.
	IgnoreEOS bool
	// Prompts are drawn uniformly per request (nil: DefaultPrompts()). Not
	// modified.
	Prompts []string
	// Seed seeds each client's prompt and sampling-seed draws; client i
	// uses PCG(Seed, i), so a run's request sequence is reproducible.
	Seed uint64
	// RequestTimeout bounds one request, headers to [DONE] (0:
	// DefaultRequestTimeout). A request that exceeds it is an error.
	RequestTimeout time.Duration
	// Client sends the requests (nil: a client with its own transport
	// keeping one idle connection per client, closed when Run returns).
	Client *http.Client
}

// Result is what one run measured. Rates are over Elapsed, the wall time
// from the first request's start to the last one's end.
type Result struct {
	Clients   int `json:"clients"`
	Requests  int `json:"requests"`  // finished: Successes + Errors
	Successes int `json:"successes"` // complete streams
	Errors    int `json:"errors"`
	// FirstError is the text of the first error seen ("" when none).
	FirstError string        `json:"first_error,omitempty"`
	Elapsed    time.Duration `json:"elapsed_ns"`
	// OutputTokens sums usage.completion_tokens of successful requests.
	OutputTokens int64 `json:"output_tokens"`
	// RequestsPerSec is Successes / Elapsed; OutputTokensPerSec is
	// OutputTokens / Elapsed.
	RequestsPerSec     float64 `json:"requests_per_sec"`
	OutputTokensPerSec float64 `json:"output_tokens_per_sec"`
	// TTFT is the time from sending a request to its first chunk carrying
	// a choice (the first generated text); Latency is sending to [DONE].
	// Percentiles are nearest-rank over successful requests (0 when none).
	TTFTP50    time.Duration `json:"ttft_p50_ns"`
	TTFTP99    time.Duration `json:"ttft_p99_ns"`
	LatencyP50 time.Duration `json:"latency_p50_ns"`
	LatencyP99 time.Duration `json:"latency_p99_ns"`
}

// validate checks cfg and fills defaults.
func (c *Config) validate() error {
	switch {
	case c.BaseURL == "":
		return errors.New("serveload: BaseURL is empty")
	case c.Clients < 1:
		return fmt.Errorf("serveload: Clients %d: must be >= 1", c.Clients)
	case c.Duration <= 0:
		return fmt.Errorf("serveload: Duration %v: must be > 0", c.Duration)
	case c.MaxRequests < 1:
		return fmt.Errorf("serveload: MaxRequests %d: must be >= 1", c.MaxRequests)
	case c.MaxTokens < 1:
		return fmt.Errorf("serveload: MaxTokens %d: must be >= 1", c.MaxTokens)
	case c.RequestTimeout < 0:
		return fmt.Errorf("serveload: RequestTimeout %v: must be >= 0", c.RequestTimeout)
	}
	if c.Prompts == nil {
		c.Prompts = DefaultPrompts()
	}
	if len(c.Prompts) == 0 {
		return errors.New("serveload: Prompts is empty (nil selects DefaultPrompts())")
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	return nil
}

// Run drives cfg.Clients closed-loop clients against cfg.BaseURL until
// cfg.Duration has passed or cfg.MaxRequests requests have started, waits
// for the requests in flight, and returns what they measured. Request
// failures are counted in the Result, not returned; the error is for an
// invalid cfg or ctx ending (then the Result covers what finished).
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	client := cfg.Client
	if client == nil {
		tr := &http.Transport{MaxIdleConns: cfg.Clients, MaxIdleConnsPerHost: cfg.Clients, DisableCompression: true}
		defer tr.CloseIdleConnections()
		client = &http.Client{Transport: tr}
	}
	url := strings.TrimSuffix(cfg.BaseURL, "/") + "/v1/completions"

	issue, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	var started atomic.Int64
	workers := make([]worker, cfg.Clients)
	var wg sync.WaitGroup
	begin := time.Now()
	for i := range workers {
		w := &workers[i]
		w.cfg, w.client, w.url = &cfg, client, url
		w.rng = rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
		w.br = bufio.NewReaderSize(nil, MaxLineBytes)
		wg.Go(func() {
			// Stop issuing once the duration has passed or the request
			// budget is spent; the request in flight always finishes.
			for issue.Err() == nil && started.Add(1) <= int64(cfg.MaxRequests) {
				w.one(ctx)
			}
		})
	}
	wg.Wait()
	res := merge(cfg.Clients, workers, time.Since(begin))
	return res, ctx.Err()
}

// worker is one closed-loop client; it owns its samples until merge.
type worker struct {
	cfg    *Config
	client *http.Client
	url    string
	rng    *rand.Rand
	br     *bufio.Reader
	body   bytes.Buffer

	successes, errs int
	firstErr        error
	firstErrAt      time.Time
	tokens          int64
	ttft, latency   []time.Duration // successful requests only
}

// request is the body of each POST /v1/completions.
type request struct {
	Model         string        `json:"model,omitempty"`
	Prompt        string        `json:"prompt"`
	MaxTokens     int           `json:"max_tokens"`
	Seed          uint32        `json:"seed"`
	IgnoreEOS     bool          `json:"ignore_eos,omitempty"`
	Stream        bool          `json:"stream"`
	StreamOptions streamOptions `json:"stream_options"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chunk is the part of a completions stream chunk the client checks.
type chunk struct {
	Choices []struct {
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// one sends one request and records its outcome.
func (w *worker) one(ctx context.Context) {
	r := request{Model: w.cfg.Model, Prompt: w.cfg.Prompts[w.rng.IntN(len(w.cfg.Prompts))],
		MaxTokens: w.cfg.MaxTokens, Seed: w.rng.Uint32(), IgnoreEOS: w.cfg.IgnoreEOS, Stream: true,
		StreamOptions: streamOptions{IncludeUsage: true}}
	w.body.Reset()
	if err := json.NewEncoder(&w.body).Encode(r); err != nil {
		w.fail(fmt.Errorf("encoding the request: %w", err))
		return
	}
	rctx, cancel := context.WithTimeout(ctx, w.cfg.RequestTimeout)
	defer cancel()
	t0 := time.Now()
	ttft, tokens, err := w.send(rctx, t0)
	if err != nil {
		if rctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("request timeout %v: %w", w.cfg.RequestTimeout, err)
		}
		w.fail(err)
		return
	}
	w.successes++
	w.tokens += int64(tokens)
	w.ttft = append(w.ttft, ttft)
	w.latency = append(w.latency, time.Since(t0))
}

// send posts w.body and reads the stream to its end.
func (w *worker) send(ctx context.Context, t0 time.Time) (ttft time.Duration, tokens int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(w.body.Bytes()))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return 0, 0, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	w.br.Reset(resp.Body)
	return readStream(w.br, t0)
}

// readStream parses a completions event stream from br: data lines of
// chunks, at least one choice with a finish reason, a usage chunk, then
// [DONE] and the end of the body. ttft is measured from t0 to the first
// chunk carrying a choice; tokens is usage.completion_tokens.
func readStream(br *bufio.Reader, t0 time.Time) (ttft time.Duration, tokens int, err error) {
	var sawChoice, finished, done bool
	var usage *int
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return 0, 0, fmt.Errorf("malformed SSE: line %d longer than %d bytes", n, MaxLineBytes)
		}
		if errors.Is(err, io.EOF) && len(line) == 0 {
			break
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, 0, fmt.Errorf("reading the stream at line %d: %w", n, err)
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0 || line[0] == ':': // event separator or comment
			continue
		case hasField(line, "event:", "id:", "retry:"): // fields a completions stream does not need
			continue
		case !bytes.HasPrefix(line, []byte("data:")):
			return 0, 0, fmt.Errorf("malformed SSE: line %d %q is not a data line", n, clip(line))
		}
		if done {
			return 0, 0, fmt.Errorf("malformed SSE: line %d %q after [DONE]", n, clip(line))
		}
		data := bytes.TrimSpace(line[len("data:"):])
		if string(data) == "[DONE]" {
			done = true
			continue
		}
		var c chunk
		if err := json.Unmarshal(data, &c); err != nil {
			return 0, 0, fmt.Errorf("malformed SSE: line %d %q: %w", n, clip(data), err)
		}
		if c.Error != nil {
			return 0, 0, fmt.Errorf("error event: %s", c.Error.Message)
		}
		if len(c.Choices) > 0 && !sawChoice {
			sawChoice, ttft = true, time.Since(t0)
		}
		for _, ch := range c.Choices {
			if ch.FinishReason != nil {
				finished = true
			}
		}
		if c.Usage != nil {
			if usage != nil {
				return 0, 0, fmt.Errorf("malformed SSE: line %d: a second usage chunk", n)
			}
			usage = &c.Usage.CompletionTokens
		}
	}
	switch {
	case !done:
		return 0, 0, errors.New("stream ended without [DONE]")
	case !sawChoice || !finished:
		return 0, 0, errors.New("stream has no choice with a finish_reason")
	case usage == nil:
		return 0, 0, errors.New("stream has no usage chunk (stream_options.include_usage)")
	case *usage < 1:
		return 0, 0, fmt.Errorf("usage.completion_tokens %d: want >= 1", *usage)
	}
	return ttft, *usage, nil
}

// hasField reports whether line starts with one of the field prefixes.
func hasField(line []byte, prefixes ...string) bool {
	for _, p := range prefixes {
		if bytes.HasPrefix(line, []byte(p)) {
			return true
		}
	}
	return false
}

// clip shortens b for an error message.
func clip(b []byte) string {
	const n = 120
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

func (w *worker) fail(err error) {
	if w.firstErr == nil {
		w.firstErr, w.firstErrAt = err, time.Now()
	}
	w.errs++
}

// merge combines the workers' counts and samples into a Result.
func merge(clients int, ws []worker, elapsed time.Duration) Result {
	r := Result{Clients: clients, Elapsed: elapsed}
	var ttft, lat []float64
	var firstAt time.Time
	for i := range ws {
		w := &ws[i]
		r.Successes += w.successes
		r.Errors += w.errs
		r.OutputTokens += w.tokens
		if w.firstErr != nil && (r.FirstError == "" || w.firstErrAt.Before(firstAt)) {
			r.FirstError, firstAt = w.firstErr.Error(), w.firstErrAt
		}
		for j := range w.ttft {
			ttft = append(ttft, float64(w.ttft[j]))
			lat = append(lat, float64(w.latency[j]))
		}
	}
	r.Requests = r.Successes + r.Errors
	if s := elapsed.Seconds(); s > 0 {
		r.RequestsPerSec = float64(r.Successes) / s
		r.OutputTokensPerSec = float64(r.OutputTokens) / s
	}
	if len(ttft) > 0 {
		// Both slices are non-empty and NaN-free, so Percentiles cannot fail.
		t, _ := stats.Percentiles(ttft, 50, 99)
		l, _ := stats.Percentiles(lat, 50, 99)
		r.TTFTP50, r.TTFTP99 = time.Duration(t[0]), time.Duration(t[1])
		r.LatencyP50, r.LatencyP99 = time.Duration(l[0]), time.Duration(l[1])
	}
	return r
}
