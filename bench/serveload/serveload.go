// Package serveload is a load generator for any OpenAI-compatible server's
// streaming POST /v1/completions (turnstile, llama-server, vLLM), or
// /v1/chat/completions with a system message and tools (Config.Chat). It runs
// closed loop — N clients each send one request at a time, and the next as
// soon as the previous one ends — or open loop — requests arrive as a
// seeded Poisson process of a given rate, with an optional bound on those
// in flight — until a duration or a request count is reached. It measures
// what a streaming client sees, with vLLM's benchmark_serving definitions
// (see metrics.go): time to first token, time per output token, inter-token
// latency, end-to-end latency, request and output-token throughput and
// goodput under an SLO, output tokens from the usage chunk; and it counts
// every failure (a non-200 status, malformed SSE, a missing finish, usage
// or [DONE], a transport error or a request timeout) as an error. Prompts
// are the story openings, or drawn from a stated word-length distribution
// (Config.PromptLen).
//
// Memory is bounded: per-request samples are kept only for successful
// requests, at most Config.MaxRequests of them; ITL gaps beyond
// MaxITLSamples are reservoir-sampled; and SSE lines longer than
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
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MaxLineBytes bounds one SSE line (one event's data), bytes. A token's
// chunk is a few hundred bytes; a longer line is reported as malformed.
const MaxLineBytes = 64 << 10

// maxErrorBody bounds how much of a non-200 body goes into an error, bytes.
const maxErrorBody = 512

// DefaultRequestTimeout bounds one request when Config.RequestTimeout is 0.
const DefaultRequestTimeout = time.Minute

// ProgressEvery is the least time between two Config.Progress calls.
const ProgressEvery = 100 * time.Millisecond

// OpenLoopStream is the PCG stream of the open loop's arrival, prompt and
// sampling-seed draws (closed-loop client i uses stream i).
const OpenLoopStream = 1<<64 - 1

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
	// Clients is the number of concurrent closed-loop clients (>= 1 when
	// RequestRate is 0; ignored, and may be 0, in open loop).
	Clients int
	// RequestRate, when > 0, runs open loop: requests arrive as a Poisson
	// process of this many per second (exponential gaps drawn from
	// PCG(Seed, OpenLoopStream)), each sent when it arrives, whatever is in
	// flight. It must be finite.
	RequestRate float64
	// MaxConcurrency bounds the open-loop requests in flight (0: no bound
	// but MaxRequests); an arrival that finds it reached waits for a slot,
	// and its TTFT starts when it is sent. It must be 0 in closed loop.
	MaxConcurrency int
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
	// PromptLen, when set, replaces Prompts with prompts of that length
	// distribution in words (see PromptLen); Prompts must then be nil.
	PromptLen PromptLen
	// Seed seeds each client's prompt and sampling-seed draws; closed-loop
	// client i uses PCG(Seed, i), the open loop's arrivals PCG(Seed,
	// OpenLoopStream), so a run's request sequence is reproducible.
	Seed uint64
	// SLO, when not zero, is the per-request bounds that goodput counts.
	SLO SLO
	// ResponseFormats, when set, constrains every request (structured
	// output) with one of these OpenAI response_format objects, each
	// client taking them in turn from its own offset: one shared by all
	// requests, or as many different ones as given. Not modified.
	ResponseFormats []json.RawMessage
	// Chat, when set, sends POST /v1/chat/completions instead: the prompt
	// is the user message, after Chat.System when that is set, with
	// Chat.Tools offered (tool_choice auto). Content, reasoning and
	// tool-call deltas all count as token-carrying chunks.
	Chat *Chat
	// Progress, when set, is called with the requests finished so far and
	// MaxRequests, at most every ProgressEvery and once at the end, from
	// one goroutine at a time.
	Progress func(done, total int)
	// RequestTimeout bounds one request, headers to [DONE] (0:
	// DefaultRequestTimeout). A request that exceeds it is an error.
	RequestTimeout time.Duration
	// Client sends the requests (nil: a client with its own transport
	// keeping one idle connection per client, closed when Run returns).
	Client *http.Client
}

// Chat is a chat-completions run's conversation around each prompt.
type Chat struct {
	// System is the system message ("": none).
	System string
	// Tools is OpenAI's tools array, sent with tool_choice "auto" (nil:
	// no tools). Not modified.
	Tools json.RawMessage
}

// Result is what one run measured. Rates are over Elapsed, the wall time
// from the first request's start to the last one's end.
type Result struct {
	// Mode is "closed" (Clients closed-loop clients) or "open"
	// (RequestRate Poisson arrivals, at most MaxConcurrency in flight, 0
	// for no bound).
	Mode           string  `json:"mode"`
	Clients        int     `json:"clients"`
	RequestRate    float64 `json:"request_rate,omitempty"`
	MaxConcurrency int     `json:"max_concurrency,omitempty"`
	// MaxInFlight is the most requests seen in flight at once.
	MaxInFlight int `json:"max_in_flight"`
	// Prompts names the prompt set ("fixed:32 words", "uniform:16-256
	// words", "8 prompts of 3-7 words"); PromptWords is the length of
	// the prompts sent.
	Prompts     string       `json:"prompts"`
	PromptWords WordsSummary `json:"prompt_words"`
	Requests    int          `json:"requests"`  // finished: Successes + Errors
	Successes   int          `json:"successes"` // complete streams
	Errors      int          `json:"errors"`
	// FirstError is the text of the first error seen ("" when none).
	FirstError string        `json:"first_error,omitempty"`
	Elapsed    time.Duration `json:"elapsed_ns"`
	// OutputTokens sums usage.completion_tokens of successful requests;
	// InputTokens their usage.prompt_tokens (0 where a server omits it).
	OutputTokens int64 `json:"output_tokens"`
	InputTokens  int64 `json:"input_tokens"`
	// CachedTokens sums usage.prompt_tokens_details.cached_tokens: the
	// prompt tokens the server's prefix cache held (0 where it omits it).
	CachedTokens int64 `json:"cached_tokens"`
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
	// TTFT, TPOT, ITL and E2E are the distributions of vLLM's metrics
	// (metrics.go) over successful requests; E2E is Latency.
	TTFT Dist `json:"ttft"`
	TPOT Dist `json:"tpot"`
	ITL  Dist `json:"itl"`
	E2E  Dist `json:"e2e"`
	// SLO and Goodput are set when Config.SLO is: the bounds, the
	// successful requests meeting all of them and those per second of
	// Elapsed.
	SLO     *SLO    `json:"slo,omitempty"`
	SLOMet  int     `json:"slo_met,omitempty"`
	Goodput float64 `json:"goodput_per_sec,omitempty"`
	// ToolCallRequests is the successful chat requests whose stream
	// carried a tool call.
	ToolCallRequests int `json:"tool_call_requests,omitempty"`
}

// WordsSummary is the length of the prompts sent (0s when none was).
type WordsSummary struct {
	Min  int     `json:"min"`
	Max  int     `json:"max"`
	Mean float64 `json:"mean"`
}

// validate checks cfg and fills defaults.
func (c *Config) validate() error {
	switch {
	case c.BaseURL == "":
		return errors.New("serveload: BaseURL is empty")
	case math.IsNaN(c.RequestRate) || math.IsInf(c.RequestRate, 0) || c.RequestRate < 0:
		return fmt.Errorf("serveload: RequestRate %v: must be finite and >= 0", c.RequestRate)
	case c.RequestRate == 0 && c.Clients < 1:
		return fmt.Errorf("serveload: Clients %d: must be >= 1", c.Clients)
	case c.MaxConcurrency < 0:
		return fmt.Errorf("serveload: MaxConcurrency %d: must be >= 0", c.MaxConcurrency)
	case c.RequestRate == 0 && c.MaxConcurrency != 0:
		return fmt.Errorf("serveload: MaxConcurrency %d: only in open loop (RequestRate > 0)", c.MaxConcurrency)
	case c.Duration <= 0:
		return fmt.Errorf("serveload: Duration %v: must be > 0", c.Duration)
	case c.MaxRequests < 1:
		return fmt.Errorf("serveload: MaxRequests %d: must be >= 1", c.MaxRequests)
	case c.MaxTokens < 1:
		return fmt.Errorf("serveload: MaxTokens %d: must be >= 1", c.MaxTokens)
	case c.RequestTimeout < 0:
		return fmt.Errorf("serveload: RequestTimeout %v: must be >= 0", c.RequestTimeout)
	}
	if !c.PromptLen.IsZero() {
		if err := c.PromptLen.validate(); err != nil {
			return fmt.Errorf("serveload: PromptLen: %w", err)
		}
		if c.Prompts != nil {
			return errors.New("serveload: both Prompts and PromptLen are set")
		}
	} else if c.Prompts == nil {
		c.Prompts = DefaultPrompts()
	}
	for _, d := range []time.Duration{c.SLO.TTFT, c.SLO.TPOT, c.SLO.E2E} {
		if d < 0 {
			return fmt.Errorf("serveload: SLO %+v: bounds must be >= 0", c.SLO)
		}
	}
	if c.PromptLen.IsZero() && len(c.Prompts) == 0 {
		return errors.New("serveload: Prompts is empty (nil selects DefaultPrompts())")
	}
	for i, f := range c.ResponseFormats {
		if !json.Valid(f) || len(bytes.TrimSpace(f)) == 0 || bytes.TrimSpace(f)[0] != '{' {
			return fmt.Errorf("serveload: ResponseFormats[%d] is not a JSON object", i)
		}
	}
	if c.Chat != nil && len(c.Chat.Tools) > 0 {
		if t := bytes.TrimSpace(c.Chat.Tools); !json.Valid(t) || t[0] != '[' {
			return errors.New("serveload: Chat.Tools is not a JSON array")
		}
		if c.IgnoreEOS {
			return errors.New("serveload: IgnoreEOS with Chat.Tools: a tool call ends where its grammar does")
		}
	}
	if len(c.ResponseFormats) > 0 && c.IgnoreEOS {
		return errors.New("serveload: IgnoreEOS with ResponseFormats: a constrained request ends where its grammar does")
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	return nil
}

// Run drives the load against cfg.BaseURL — cfg.Clients closed-loop
// clients, or open-loop Poisson arrivals at cfg.RequestRate — until
// cfg.Duration has passed or cfg.MaxRequests requests have started, waits
// for the requests in flight, and returns what they measured. Request
// failures are counted in the Result, not returned; the error is for an
// invalid cfg or ctx ending (then the Result covers what finished).
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	path := "/v1/completions"
	if cfg.Chat != nil {
		path = "/v1/chat/completions"
	}
	r := &runner{cfg: &cfg, url: strings.TrimSuffix(cfg.BaseURL, "/") + path,
		itl: newReservoir(MaxITLSamples, cfg.Seed)}
	r.client = cfg.Client
	if r.client == nil {
		idle := cfg.Clients
		if cfg.RequestRate > 0 {
			idle = cfg.MaxConcurrency
			if idle == 0 {
				idle = 64
			}
		}
		tr := &http.Transport{MaxIdleConns: idle, MaxIdleConnsPerHost: idle, DisableCompression: true}
		defer tr.CloseIdleConnections()
		r.client = &http.Client{Transport: tr}
	}

	issue, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	stopProgress := r.progress()
	begin := time.Now()
	if cfg.RequestRate > 0 {
		r.open(ctx, issue, begin)
	} else {
		r.closed(ctx, issue)
	}
	elapsed := time.Since(begin)
	stopProgress()
	return r.merge(elapsed), ctx.Err()
}

// runner is one run's shared state.
type runner struct {
	cfg    *Config
	client *http.Client
	url    string
	itl    *reservoir

	workers            []*worker // every worker, merged at the end
	started, finished  atomic.Int64
	inFlight, peakLoad atomic.Int64
}

// closed runs cfg.Clients closed-loop clients.
func (r *runner) closed(ctx, issue context.Context) {
	var wg sync.WaitGroup
	for i := range r.cfg.Clients {
		w := r.newWorker()
		w.rng = rand.New(rand.NewPCG(r.cfg.Seed, uint64(i)))
		wg.Go(func() {
			// Stop issuing once the duration has passed or the request
			// budget is spent; the request in flight always finishes.
			for issue.Err() == nil && r.started.Add(1) <= int64(r.cfg.MaxRequests) {
				prompt, words := r.cfg.drawPrompt(w.rng)
				w.one(ctx, prompt, words, w.rng.Uint32())
			}
		})
	}
	wg.Wait()
}

// open sends requests at Poisson arrivals from begin: the first at begin,
// each next one an exponential gap after the previous arrival (arrival
// times are absolute, so a late send does not shift the ones after it).
// With cfg.MaxConcurrency set an arrival waits for a free slot.
func (r *runner) open(ctx, issue context.Context, begin time.Time) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, OpenLoopStream))
	var sem chan struct{}
	if r.cfg.MaxConcurrency > 0 {
		sem = make(chan struct{}, r.cfg.MaxConcurrency)
	}
	var mu sync.Mutex
	var free []*worker
	var wg sync.WaitGroup
	timer := time.NewTimer(0)
	defer timer.Stop()
	at := begin
	for i := range r.cfg.MaxRequests {
		if i > 0 {
			at = at.Add(poissonGap(rng, r.cfg.RequestRate))
		}
		prompt, words := r.cfg.drawPrompt(rng)
		seed := rng.Uint32()
		if wait := time.Until(at); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-issue.Done():
			}
		}
		if sem != nil && issue.Err() == nil {
			select {
			case sem <- struct{}{}:
			case <-issue.Done():
			}
		}
		if issue.Err() != nil {
			break
		}
		mu.Lock()
		var w *worker
		if n := len(free); n > 0 {
			w, free = free[n-1], free[:n-1]
		} else {
			w = r.newWorker() // only this goroutine appends to r.workers
		}
		mu.Unlock()
		r.started.Add(1)
		wg.Go(func() {
			w.one(ctx, prompt, words, seed)
			mu.Lock()
			free = append(free, w)
			mu.Unlock()
			if sem != nil {
				<-sem
			}
		})
	}
	wg.Wait()
}

// newWorker adds a worker to r.
func (r *runner) newWorker() *worker {
	w := &worker{r: r, id: len(r.workers), br: bufio.NewReaderSize(nil, MaxLineBytes)}
	r.workers = append(r.workers, w)
	return w
}

// progress starts the Progress calls, if any; the function it returns
// stops them and makes the last one.
func (r *runner) progress() func() {
	f := r.cfg.Progress
	if f == nil {
		return func() {}
	}
	total := r.cfg.MaxRequests
	f(0, total)
	quit, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(ProgressEvery)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				f(int(r.finished.Load()), total)
			case <-quit:
				return
			}
		}
	}()
	return func() {
		close(quit)
		<-exited
		f(int(r.finished.Load()), total)
	}
}

// worker sends one request at a time (a closed-loop client, or an open
// loop's concurrency slot); it owns its samples until merge.
type worker struct {
	r    *runner
	id   int        // the worker's index: its offset into Config.ResponseFormats
	rng  *rand.Rand // closed loop only
	br   *bufio.Reader
	body bytes.Buffer
	gaps []time.Duration // the current request's ITL gaps

	successes, errs int
	firstErr        error
	firstErrAt      time.Time
	tokens, input   int64
	cached          int64
	toolCalls       int      // successful requests that streamed a tool call
	samples         []sample // successful requests only
	words           WordsSummary
	wordsSum, sent  int
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
	// ResponseFormat constrains the output (Config.ResponseFormats).
	ResponseFormat json.RawMessage `json:"response_format,omitempty"`
}

// chatRequest is the body of each POST /v1/chat/completions (Config.Chat).
type chatRequest struct {
	Model          string          `json:"model,omitempty"`
	Messages       []chatMessage   `json:"messages"`
	MaxTokens      int             `json:"max_tokens"`
	Seed           uint32          `json:"seed"`
	IgnoreEOS      bool            `json:"ignore_eos,omitempty"`
	Stream         bool            `json:"stream"`
	StreamOptions  streamOptions   `json:"stream_options"`
	ResponseFormat json.RawMessage `json:"response_format,omitempty"`
	Tools          json.RawMessage `json:"tools,omitempty"`
	ToolChoice     string          `json:"tool_choice,omitempty"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chunk is the part of a completions or chat completions stream chunk the
// client checks.
type chunk struct {
	Choices []struct {
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
		// Delta is a chat chunk's.
		Delta *struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			ToolCalls        []struct {
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// one sends one request of prompt (words long) and records its outcome.
func (w *worker) one(ctx context.Context, prompt string, words int, seed uint32) {
	cfg, r := w.r.cfg, w.r
	defer r.finished.Add(1)
	if w.sent == 0 || words < w.words.Min {
		w.words.Min = words
	}
	w.words.Max = max(w.words.Max, words)
	w.wordsSum += words
	w.sent++
	var rf json.RawMessage
	if n := len(cfg.ResponseFormats); n > 0 {
		rf = cfg.ResponseFormats[(w.id+w.sent)%n]
	}
	var req any = request{Model: cfg.Model, Prompt: prompt, MaxTokens: cfg.MaxTokens, Seed: seed,
		IgnoreEOS: cfg.IgnoreEOS, Stream: true, StreamOptions: streamOptions{IncludeUsage: true}, ResponseFormat: rf}
	if c := cfg.Chat; c != nil {
		cr := chatRequest{Model: cfg.Model, MaxTokens: cfg.MaxTokens, Seed: seed, IgnoreEOS: cfg.IgnoreEOS, Stream: true,
			StreamOptions: streamOptions{IncludeUsage: true}, ResponseFormat: rf, Tools: c.Tools}
		if c.System != "" {
			cr.Messages = append(cr.Messages, chatMessage{Role: "system", Content: c.System})
		}
		cr.Messages = append(cr.Messages, chatMessage{Role: "user", Content: prompt})
		if len(c.Tools) > 0 {
			cr.ToolChoice = "auto"
		}
		req = cr
	}
	w.body.Reset()
	if err := json.NewEncoder(&w.body).Encode(req); err != nil {
		w.fail(fmt.Errorf("encoding the request: %w", err))
		return
	}
	rctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	n := r.inFlight.Add(1)
	for p := r.peakLoad.Load(); n > p && !r.peakLoad.CompareAndSwap(p, n); p = r.peakLoad.Load() {
	}
	t0 := time.Now()
	st, err := w.send(rctx, t0)
	e2e := time.Since(t0)
	r.inFlight.Add(-1)
	if err != nil {
		if rctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("request timeout %v: %w", cfg.RequestTimeout, err)
		}
		w.fail(err)
		return
	}
	w.successes++
	w.tokens += int64(st.tokens)
	w.input += int64(st.promptTokens)
	w.cached += int64(st.cachedTokens)
	if st.toolCall {
		w.toolCalls++
	}
	w.samples = append(w.samples, sample{ttft: st.ttft, e2e: e2e, tokens: st.tokens})
	r.itl.add(w.gaps)
}

// send posts w.body and reads the stream to its end, its ITL gaps into
// w.gaps.
func (w *worker) send(ctx context.Context, t0 time.Time) (streamStats, error) {
	w.gaps = w.gaps[:0]
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.r.url, bytes.NewReader(w.body.Bytes()))
	if err != nil {
		return streamStats{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	// Servers close kept-alive connections when they like (llama-server
	// after a few requests): a request that meets a connection closed before
	// any answer is resent on a new one. An empty idempotency key marks the
	// POST safe for net/http to retry, and is not sent on the wire.
	req.Header["X-Idempotency-Key"] = []string{}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := w.r.client.Do(req)
	if err != nil {
		return streamStats{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return streamStats{}, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	w.br.Reset(resp.Body)
	st, gaps, err := readStream(w.br, t0, time.Now, w.gaps)
	w.gaps = gaps
	return st, err
}

// streamStats is what one stream measured.
type streamStats struct {
	ttft                 time.Duration
	tokens, promptTokens int
	cachedTokens         int
	toolCall             bool // a chat delta carried a tool call
}

// readStream parses a completions (or chat completions: a choice's delta
// content, reasoning or tool-call fragment is its text) event stream from
// br: data lines of
// chunks, at least one choice with a finish reason, a usage chunk, then
// [DONE] and the end of the body. TTFT is measured with now from t0 to the
// first token-carrying chunk (a choice with text; the first chunk with a
// choice when none has text); the gaps between successive token-carrying
// chunks are appended to gaps (at most MaxITLSamples per stream); tokens
// is usage.completion_tokens.
func readStream(br *bufio.Reader, t0 time.Time, now func() time.Time, gaps []time.Duration) (streamStats, []time.Duration, error) {
	var st streamStats
	var sawChoice, sawText, finished, done bool
	var usage *int
	var last time.Time
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return streamStats{}, gaps, fmt.Errorf("malformed SSE: line %d longer than %d bytes", n, MaxLineBytes)
		}
		if errors.Is(err, io.EOF) && len(line) == 0 {
			break
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return streamStats{}, gaps, fmt.Errorf("reading the stream at line %d: %w", n, err)
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0 || line[0] == ':': // event separator or comment
			continue
		case hasField(line, "event:", "id:", "retry:"): // fields a completions stream does not need
			continue
		case !bytes.HasPrefix(line, []byte("data:")):
			return streamStats{}, gaps, fmt.Errorf("malformed SSE: line %d %q is not a data line", n, clip(line))
		}
		if done {
			return streamStats{}, gaps, fmt.Errorf("malformed SSE: line %d %q after [DONE]", n, clip(line))
		}
		data := bytes.TrimSpace(line[len("data:"):])
		if string(data) == "[DONE]" {
			done = true
			continue
		}
		var c chunk
		if err := json.Unmarshal(data, &c); err != nil {
			return streamStats{}, gaps, fmt.Errorf("malformed SSE: line %d %q: %w", n, clip(data), err)
		}
		if c.Error != nil {
			return streamStats{}, gaps, fmt.Errorf("error event: %s", c.Error.Message)
		}
		text := false
		for _, ch := range c.Choices {
			if ch.FinishReason != nil {
				finished = true
			}
			text = text || ch.Text != ""
			if d := ch.Delta; d != nil {
				text = text || d.Content != "" || d.ReasoningContent != ""
				for _, tc := range d.ToolCalls {
					st.toolCall = true
					text = text || tc.Function.Name != "" || tc.Function.Arguments != ""
				}
			}
		}
		switch {
		case text:
			t := now()
			if !sawText {
				st.ttft = t.Sub(t0) // replaces a text-less first choice's
			} else if len(gaps) < MaxITLSamples {
				gaps = append(gaps, t.Sub(last))
			}
			sawChoice, sawText, last = true, true, t
		case len(c.Choices) > 0 && !sawChoice:
			sawChoice, st.ttft = true, now().Sub(t0)
		}
		if c.Usage != nil {
			if usage != nil {
				return streamStats{}, gaps, fmt.Errorf("malformed SSE: line %d: a second usage chunk", n)
			}
			usage, st.promptTokens = &c.Usage.CompletionTokens, c.Usage.PromptTokens
			if d := c.Usage.PromptTokensDetails; d != nil {
				st.cachedTokens = d.CachedTokens
			}
		}
	}
	switch {
	case !done:
		return streamStats{}, gaps, errors.New("stream ended without [DONE]")
	case !sawChoice || !finished:
		return streamStats{}, gaps, errors.New("stream has no choice with a finish_reason")
	case usage == nil:
		return streamStats{}, gaps, errors.New("stream has no usage chunk (stream_options.include_usage)")
	case *usage < 1:
		return streamStats{}, gaps, fmt.Errorf("usage.completion_tokens %d: want >= 1", *usage)
	}
	st.tokens = *usage
	return st, gaps, nil
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
func (r *runner) merge(elapsed time.Duration) Result {
	cfg := r.cfg
	res := Result{Mode: "closed", Clients: cfg.Clients, Elapsed: elapsed, Prompts: cfg.promptsLabel(),
		MaxInFlight: int(r.peakLoad.Load())}
	if cfg.RequestRate > 0 {
		res.Mode, res.Clients, res.RequestRate, res.MaxConcurrency = "open", 0, cfg.RequestRate, cfg.MaxConcurrency
	}
	var samples []sample
	var firstAt time.Time
	sent, wordsSum := 0, 0
	for _, w := range r.workers {
		res.Successes += w.successes
		res.Errors += w.errs
		res.OutputTokens += w.tokens
		res.InputTokens += w.input
		res.CachedTokens += w.cached
		res.ToolCallRequests += w.toolCalls
		if w.firstErr != nil && (res.FirstError == "" || w.firstErrAt.Before(firstAt)) {
			res.FirstError, firstAt = w.firstErr.Error(), w.firstErrAt
		}
		samples = append(samples, w.samples...)
		if w.sent > 0 {
			if sent == 0 || w.words.Min < res.PromptWords.Min {
				res.PromptWords.Min = w.words.Min
			}
			res.PromptWords.Max = max(res.PromptWords.Max, w.words.Max)
			sent, wordsSum = sent+w.sent, wordsSum+w.wordsSum
		}
	}
	if sent > 0 {
		res.PromptWords.Mean = float64(wordsSum) / float64(sent)
	}
	res.Requests = res.Successes + res.Errors
	m := summarize(samples, cfg.SLO)
	res.TTFT, res.TPOT, res.E2E, res.ITL = m.ttft, m.tpot, m.e2e, r.itl.dist()
	res.TTFTP50, res.TTFTP99 = m.ttft.Median, m.ttft.P99
	res.LatencyP50, res.LatencyP99 = m.e2e.Median, m.e2e.P99
	if !cfg.SLO.IsZero() {
		slo := cfg.SLO
		res.SLO, res.SLOMet = &slo, m.met
	}
	if s := elapsed.Seconds(); s > 0 {
		res.RequestsPerSec = float64(res.Successes) / s
		res.OutputTokensPerSec = float64(res.OutputTokens) / s
		if res.SLO != nil {
			res.Goodput = float64(res.SLOMet) / s
		}
	}
	return res
}
