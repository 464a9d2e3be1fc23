package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"github.com/turnstile-llm/turnstile/guided"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
)

// Defaults for Config's zero values.
const (
	DefaultMaxBodyBytes   = 16 << 20
	DefaultMaxN           = 16
	DefaultReadTimeout    = 30 * time.Second
	DefaultWriteTimeout   = 30 * time.Second
	DefaultIdleTimeout    = 60 * time.Second
	DefaultMaxConnections = 1024
	DefaultProgramIdleTTL = 30 * time.Minute
	defaultMaxPrograms    = 1 << 16
)

// abortGrace bounds shutdown after the drain deadline: aborted handlers get
// this long to send their last event, then their connections are closed,
// and Serve waits this long again for the handlers to return.
const abortGrace = 2 * time.Second

// errShutdownAbort is the cause of the requests the drain deadline aborts
// (a client that went away cancels with context.Canceled instead).
var errShutdownAbort = errors.New("the server is shutting down: the drain deadline passed")

// statusClientClosed is the outcome of a request whose client went away
// before its answer was written (nginx's 499): logged and counted on its
// own, never as a server error.
const statusClientClosed = 499

// Config configures a Server.
type Config struct {
	// Model is the served model's id (GET /v1/models; requests naming
	// another model get 404). Required.
	Model string
	// MaxContext is the model's context length, tokens (prompt + output).
	MaxContext int
	// Tokenizer encodes prompts; its VocabSize bounds token ids.
	Tokenizer Tokenizer
	// ChatTemplate is a Jinja chat template (the GGUF's
	// tokenizer.chat_template); "" selects the fallback format.
	ChatTemplate string
	// StopTokenIDs are the model's stop tokens (the tokenizer's EOS, GGUF
	// tokenizer.ggml.eot_token_id, generation_config.json's eos_token_id):
	// every request stops at them too unless it sets ignore_eos, so Llama 3
	// chat ends at <|eot_id|>. The slice is not retained.
	StopTokenIDs []int32
	// APIKeys, when non-empty, enables Bearer authentication; each key
	// also gets its own prefix-cache salt.
	APIKeys []string
	// MaxBodyBytes bounds request bodies (0: DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// MaxInFlight bounds the engine requests (choices) in flight; beyond
	// it requests get 429 with Retry-After. Required (> 0); serve uses 4×
	// the engine's seats.
	MaxInFlight int
	// MaxProgramInFlight bounds, apart from MaxInFlight, the engine
	// requests of program turns (requests with a program id): a turn may
	// wait for its program's admission for as long as the policy says,
	// and such waiting turns never take the places of requests that can
	// run (0: MaxInFlight).
	MaxProgramInFlight int
	// MaxN bounds n, the choices per prompt (0: DefaultMaxN).
	MaxN int
	// ReadTimeout bounds reading one request's headers, and again its
	// body (0: DefaultReadTimeout); a client slower than that gets 408.
	ReadTimeout time.Duration
	// WriteTimeout bounds each write of an answer (every event of a
	// stream): a client that takes nothing for this long is dropped and
	// its requests aborted (0: DefaultWriteTimeout).
	WriteTimeout time.Duration
	// IdleTimeout bounds a keep-alive connection's wait for its next
	// request (0: DefaultIdleTimeout).
	IdleTimeout time.Duration
	// MaxConnections bounds open client connections; more wait in the
	// listen backlog until one closes (0: DefaultMaxConnections).
	MaxConnections int
	// MaxParsing bounds the requests whose bodies are read, parsed and
	// tokenised at once, the only work done before the in-flight bounds
	// apply (0: 2 × GOMAXPROCS, at least 4). A request waits for a place
	// up to ReadTimeout, then gets 429.
	MaxParsing int
	// ProgramIdleTTL is how long the server's table of program ids keeps
	// an id with nothing in flight (0: DefaultProgramIdleTTL).
	ProgramIdleTTL time.Duration
	// Clock is the time source of the program table (nil: the wall clock).
	Clock clock.Clock
	// Logger receives one line per request (nil: discard).
	Logger *slog.Logger
	// Grammars compiles and caches structured output's constraints
	// (response_format, guided_json, ...); the engine needs a guided
	// decoder (executor.Config.Guide) for them. Nil: structured output is
	// off and requests asking for it get 400.
	Grammars *guided.Cache
	// GrammarsOff, with Grammars nil, says why structured output is off
	// (its 400s say it); nil: "not enabled on this server".
	GrammarsOff error
	// The store of /v1/responses (respstore.go): at most ResponsesMax
	// responses (0: DefaultResponsesMax) of at most ResponsesMaxBytes in
	// all (0: DefaultResponsesMaxBytes), the least recently used evicted
	// first; a response unused for ResponsesTTL expires (0:
	// DefaultResponsesTTL).
	ResponsesMax      int
	ResponsesMaxBytes int64
	ResponsesTTL      time.Duration
}

// withDefaults fills cfg's zero values.
func (cfg Config) withDefaults() Config {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.ReadTimeout, DefaultReadTimeout)
	def(&cfg.WriteTimeout, DefaultWriteTimeout)
	def(&cfg.IdleTimeout, DefaultIdleTimeout)
	def(&cfg.ProgramIdleTTL, DefaultProgramIdleTTL)
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxN == 0 {
		cfg.MaxN = DefaultMaxN
	}
	if cfg.MaxProgramInFlight == 0 {
		cfg.MaxProgramInFlight = cfg.MaxInFlight
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.MaxParsing == 0 {
		cfg.MaxParsing = max(4, 2*runtime.GOMAXPROCS(0))
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.ResponsesMax == 0 {
		cfg.ResponsesMax = DefaultResponsesMax
	}
	if cfg.ResponsesMaxBytes == 0 {
		cfg.ResponsesMaxBytes = DefaultResponsesMaxBytes
	}
	def(&cfg.ResponsesTTL, DefaultResponsesTTL)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// Server is the OpenAI-compatible HTTP front of an Engine.
type Server struct {
	cfg     Config
	eng     Engine
	parse   parser
	keys    *keyring
	progs   *programs
	metrics *metrics
	// responses stores /v1/responses answers (store: true).
	responses *respStore
	log       *slog.Logger
	mux       *http.ServeMux

	// plain and program bound the engine requests in flight: those
	// without and with a program id.
	plain, program *bound
	parsing        chan struct{} // a place per request being read, parsed and tokenised
	handlers       sync.WaitGroup

	draining atomic.Bool
	cancelMu sync.Mutex
	cancels  map[*context.CancelCauseFunc]struct{} // in-flight requests, aborted when draining times out
}

// New builds a Server over eng. The chat template is compiled here, so a
// broken template fails start-up.
func New(cfg Config, eng Engine) (*Server, error) {
	switch {
	case eng == nil || cfg.Tokenizer == nil:
		return nil, errors.New("server: engine and tokenizer are required")
	case cfg.Model == "":
		return nil, errors.New("server: Model (the served model id) is required")
	case cfg.MaxContext <= 1:
		return nil, fmt.Errorf("server: MaxContext %d: must be > 1", cfg.MaxContext)
	case cfg.MaxInFlight <= 0:
		return nil, fmt.Errorf("server: MaxInFlight %d: must be > 0", cfg.MaxInFlight)
	case cfg.MaxN < 0 || cfg.MaxBodyBytes < 0:
		return nil, fmt.Errorf("server: MaxN %d and MaxBodyBytes %d must be >= 0", cfg.MaxN, cfg.MaxBodyBytes)
	case cfg.MaxProgramInFlight < 0 || cfg.MaxConnections < 0 || cfg.MaxParsing < 0:
		return nil, fmt.Errorf("server: MaxProgramInFlight %d, MaxConnections %d and MaxParsing %d must be >= 0",
			cfg.MaxProgramInFlight, cfg.MaxConnections, cfg.MaxParsing)
	case cfg.ReadTimeout < 0 || cfg.WriteTimeout < 0 || cfg.IdleTimeout < 0 || cfg.ProgramIdleTTL < 0:
		return nil, fmt.Errorf("server: ReadTimeout %v, WriteTimeout %v, IdleTimeout %v and ProgramIdleTTL %v must be >= 0",
			cfg.ReadTimeout, cfg.WriteTimeout, cfg.IdleTimeout, cfg.ProgramIdleTTL)
	case cfg.ResponsesMax < 0 || cfg.ResponsesMaxBytes < 0 || cfg.ResponsesTTL < 0:
		return nil, fmt.Errorf("server: ResponsesMax %d, ResponsesMaxBytes %d and ResponsesTTL %v must be >= 0",
			cfg.ResponsesMax, cfg.ResponsesMaxBytes, cfg.ResponsesTTL)
	}
	cfg = cfg.withDefaults()
	tok := cfg.Tokenizer
	chat, err := newChatTemplate(cfg.ChatTemplate, tok.Token(tok.BOS()), tok.Token(tok.EOS()))
	if err != nil {
		return nil, err
	}
	chat = chat.withSpecial(tok)
	tags, err := newTagCache()
	if err != nil {
		return nil, fmt.Errorf("server: tool grammar cache: %w", err)
	}
	s := &Server{
		cfg: cfg, eng: eng, keys: newKeyring(cfg.APIKeys), progs: newPrograms(defaultMaxPrograms, cfg.ProgramIdleTTL, cfg.Clock),
		log: cfg.Logger, cancels: make(map[*context.CancelCauseFunc]struct{}),
		plain: &bound{max: cfg.MaxInFlight}, program: &bound{max: cfg.MaxProgramInFlight},
		parsing: make(chan struct{}, cfg.MaxParsing),
		parse: parser{tok: tok, chat: chat, stops: slices.Clone(cfg.StopTokenIDs), tags: tags, lim: limits{
			model: cfg.Model, maxContext: cfg.MaxContext, vocab: tok.VocabSize(), maxPiece: maxPieceBytes(tok),
			maxN: cfg.MaxN, maxChoices: min(cfg.MaxInFlight, cfg.MaxProgramInFlight),
		}},
	}
	s.responses = newRespStore(cfg.ResponsesMax, cfg.ResponsesMaxBytes, cfg.ResponsesTTL, cfg.Clock, s.releaseChain)
	s.metrics = newMetrics(eng, s.progs, cfg.Grammars)
	s.metrics.reg.MustRegister(newRespStoreCollector(s.responses))
	s.mux = http.NewServeMux()
	s.route("POST /v1/completions", "completions", s.handleCompletions)
	s.route("POST /v1/chat/completions", "chat", s.handleChat)
	s.route("POST /v1/messages", "messages", s.handleMessages)
	s.route("POST /v1/messages/count_tokens", "count_tokens", s.handleCountTokens)
	s.route("POST /tokenize", "tokenize", s.handleTokenize)
	s.route("POST /detokenize", "detokenize", s.handleDetokenize)
	s.route("GET /v1/models", "models", s.handleModels)
	s.route("POST /v1/responses", "responses", s.handleResponses)
	s.route("GET /v1/responses/{id}", "responses", s.handleGetResponse)
	s.route("DELETE /v1/responses/{id}", "responses", s.handleDeleteResponse)
	s.route("DELETE /v1/programs/{id}", "programs", s.handleDeleteProgram)
	s.route("GET /health", "health", s.handleHealth)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	// Everything else is answered as JSON too: 405 for a known path with
	// another method, else 404.
	allow := map[string]string{"/v1/completions": "POST", "/v1/chat/completions": "POST", "/v1/responses": "POST", "/v1/models": "GET",
		"/v1/messages": "POST", "/v1/messages/count_tokens": "POST", "/tokenize": "POST", "/detokenize": "POST",
		"/health": "GET", "/metrics": "GET"}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		var errs errorStyle = openAIErrors{}
		if strings.HasPrefix(r.URL.Path, "/v1/messages") {
			errs = anthropicErrors{}
		}
		if m, ok := allow[r.URL.Path]; ok {
			w.Header().Set("Allow", m)
			errs.whole(w, &APIError{Status: http.StatusMethodNotAllowed, Type: errInvalidRequest, Code: "method_not_allowed",
				Message: fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, m)})
			return
		}
		errs.whole(w, &APIError{Status: http.StatusNotFound, Type: errInvalidRequest, Code: "not_found",
			Message: fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path)})
	})
	return s, nil
}

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

// statusWriter records the status code for logs and metrics, and gives
// every write its deadline: a client that takes nothing for WriteTimeout
// is dropped, whatever the handler is writing.
type statusWriter struct {
	http.ResponseWriter
	rc          *http.ResponseController
	timeout     time.Duration
	deadlineSet time.Time // when the write deadline was last moved
	code        int
	// outcome, when set, is what the request is logged and counted as
	// instead of code (statusClientClosed).
	outcome int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	// The deadline moves at most every timeout/8 (setting it costs a timer
	// reset in the poller, per event otherwise), so a write may wait
	// between 7/8 of the timeout and all of it. An error only means the
	// connection cannot take deadlines; the write then fails or succeeds
	// on its own.
	if now := time.Now(); now.Sub(w.deadlineSet) >= w.timeout/8 {
		w.deadlineSet = now
		_ = w.rc.SetWriteDeadline(now.Add(w.timeout))
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's Flush.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// clientGone records that w's client went away before its answer was
// complete.
func clientGone(w http.ResponseWriter) {
	if sw, ok := w.(*statusWriter); ok {
		sw.outcome = statusClientClosed
	}
}

// route registers h under pattern with logging and request counting.
func (s *Server) route(pattern, endpoint string, h http.HandlerFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		s.handlers.Add(1)
		defer s.handlers.Done()
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: s.cfg.WriteTimeout}
		h(sw, r)
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		if sw.outcome != 0 {
			code = sw.outcome
		}
		s.metrics.requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
		if code < 300 && (endpoint == "completions" || endpoint == "chat" || endpoint == "messages" || (endpoint == "responses" && r.Method == http.MethodPost)) {
			s.metrics.latency.WithLabelValues(endpoint).Observe(time.Since(start).Seconds())
		}
		msg := "request"
		if code == statusClientClosed {
			msg = "client closed the connection before the answer was complete"
		}
		s.log.LogAttrs(r.Context(), slog.LevelInfo, msg, slog.String("method", r.Method),
			slog.String("path", r.URL.Path), slog.Int("status", code), slog.Duration("duration", time.Since(start)),
			slog.String("remote", r.RemoteAddr))
	})
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if s.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"status":"draining"}`+"\n")
		return
	}
	_, _ = io.WriteString(w, `{"status":"ok"}`+"\n")
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	if _, e := s.keys.check(r); e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, modelList{Object: "list", Data: []modelCard{{
		ID: s.cfg.Model, Object: "model", Created: time.Now().Unix(), OwnedBy: "turnstile", MaxLength: s.cfg.MaxContext,
	}}})
}

func (s *Server) handleDeleteProgram(w http.ResponseWriter, r *http.Request) {
	if _, e := s.keys.check(r); e != nil {
		writeError(w, e)
		return
	}
	id := r.PathValue("id")
	if err := validProgramID(id); err != nil {
		writeError(w, badRequest("id", "invalid_value", "%v", err))
		return
	}
	rel, ok := s.eng.(ProgramReleaser)
	var found bool
	var err error
	if ok {
		found, err = rel.ReleaseProgram(id)
	}
	switch {
	case !ok || errors.Is(err, executor.ErrNoPrograms):
		// No program policy: the server's table is all there is of the
		// program, and DELETE ends it there, answered like the policy's.
		found = s.progs.release(id)
	case err != nil:
		writeError(w, &APIError{Status: http.StatusInternalServerError, Type: errServer, Message: fmt.Sprintf("program %q: %v", id, err)})
		return
	default:
		// The engine's policy owns program state: its answer decides. The
		// server's table only forgets its HTTP view of id.
		s.progs.release(id)
	}
	if !found {
		writeError(w, &APIError{Status: http.StatusNotFound, Type: errInvalidRequest, Param: "id", Code: "program_not_found",
			Message: fmt.Sprintf("program %q is not known", id)})
		return
	}
	writeJSON(w, map[string]any{"id": id, "object": "program", "deleted": true})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := jsonEncoder(w)
	_ = enc.Encode(v)
}

// checkJSON refuses a request body that does not say it is JSON: a
// browser can send text/plain, form and multipart bodies to any origin
// without a CORS preflight, application/json only after one.
func checkJSON(r *http.Request) *APIError {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		return nil
	}
	if ct == "" {
		ct = "(none)"
	}
	return &APIError{Status: http.StatusUnsupportedMediaType, Type: errInvalidRequest, Code: "unsupported_media_type",
		Message: fmt.Sprintf("Content-Type %s: this endpoint takes a JSON body; send Content-Type: application/json", ct)}
}

// readBody reads a request body of at most the configured size within
// ReadTimeout of start.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, start time.Time) ([]byte, *APIError) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(start.Add(s.cfg.ReadTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err == nil {
		// Cleared at once: the server's background read, which notices a
		// client going away, must not time out during a long answer. On
		// an error it stays: what is left of the body is discarded when
		// the handler returns, and that must not wait on the client.
		_ = rc.SetReadDeadline(time.Time{})
	}
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		return nil, badRequest("", "request_too_large", "request body exceeds %d bytes", mbe.Limit)
	case errors.As(err, &ne) && ne.Timeout():
		return nil, &APIError{Status: http.StatusRequestTimeout, Type: errInvalidRequest, Code: "request_timeout",
			Message: fmt.Sprintf("the request body took longer than %v to arrive", s.cfg.ReadTimeout)}
	case err != nil:
		return nil, badRequest("", "invalid_body", "reading the request body: %v", err)
	}
	return body, nil
}

// protocol is one endpoint's way of reading a request and writing its
// answer: every protocol runs the same job machinery in between.
type protocol struct {
	// parse decodes and validates a body into a job.
	parse func(body []byte) (*job, *APIError)
	// answer writes the submitted job's answer (whole or streamed, as
	// the job says).
	answer func(ctx context.Context, w http.ResponseWriter, a *answer, streams []*executor.Stream)
	// errs answers failures.
	errs errorStyle
	// idPrefix starts the answer's id ("" : OpenAI's cmpl- / chatcmpl-).
	idPrefix string
}

// openAI answers OpenAI's completions and chat completions.
func (s *Server) openAI(parse func([]byte) (*job, *APIError)) protocol {
	return protocol{parse: parse, answer: s.openAIAnswer, errs: openAIErrors{}}
}

// openAIAnswer writes an OpenAI answer, streamed or whole.
func (s *Server) openAIAnswer(ctx context.Context, w http.ResponseWriter, a *answer, streams []*executor.Stream) {
	if a.j.stream {
		s.stream(ctx, w, a, streams)
	} else {
		s.whole(ctx, w, a, streams)
	}
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	s.serveJob(w, r, s.openAI(s.parse.completion))
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	s.serveJob(w, r, s.openAI(s.parse.chatCompletion))
}

// readJob authenticates, reads and parses one request, holding a parsing
// place meanwhile: reading, parsing and tokenising are all the work a
// request costs before the in-flight bounds apply. (nil, nil) means the
// client went away.
func (s *Server) readJob(w http.ResponseWriter, r *http.Request, parse func([]byte) (*job, *APIError)) (*job, *APIError) {
	start := time.Now()
	// A refusal before the whole body is read closes the connection and
	// ends its reads now: the server would otherwise read (and discard) up
	// to 256 KiB of the rest of the body, unbounded in time, before it
	// answered or let the connection go.
	refuse := func(e *APIError) (*job, *APIError) {
		w.Header().Set("Connection", "close")
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
		return nil, e
	}
	salt, e := s.keys.check(r)
	if e != nil {
		return refuse(e)
	}
	if e := checkJSON(r); e != nil {
		return refuse(e)
	}
	wait := time.NewTimer(s.cfg.ReadTimeout)
	defer wait.Stop()
	select {
	case s.parsing <- struct{}{}:
		defer func() { <-s.parsing }()
	case <-wait.C:
		return refuse(&APIError{Status: http.StatusTooManyRequests, Type: errRateLimit, Code: "server_busy", RetryAfter: 1,
			Message: fmt.Sprintf("%d requests are being read and parsed; none finished within %v; retry later", s.cfg.MaxParsing, s.cfg.ReadTimeout)})
	case <-r.Context().Done():
		return nil, nil
	}
	body, e := s.readBody(w, r, start)
	if e != nil {
		return refuse(e)
	}
	j, e := parse(body)
	if e == nil {
		e = s.applyHeaders(j, r, salt)
	}
	return j, e
}

// serveJob authenticates, parses and admits one request, submits its
// choices and answers them (streamed or whole).
func (s *Server) serveJob(w http.ResponseWriter, r *http.Request, pr protocol) {
	if s.draining.Load() {
		pr.errs.whole(w, &APIError{Status: http.StatusServiceUnavailable, Type: errUnavailable, Code: "shutting_down",
			Message: "the server is shutting down"})
		return
	}
	j, e := s.readJob(w, r, pr.parse)
	if e == nil && j != nil {
		// Compiled after the parsing place is given back: it may take
		// longer than reading and parsing (a cached grammar is instant).
		e = s.compileConstraint(r.Context(), j)
		if e == nil && r.Context().Err() != nil {
			j = nil
		}
	}
	switch {
	case e != nil:
		pr.errs.whole(w, e)
		return
	case j == nil:
		clientGone(w)
		return
	}
	b, what := s.plain, "requests"
	if j.programID != "" {
		b, what = s.program, "program turns"
	}
	h, ok := b.hold(len(j.reqs))
	if !ok {
		pr.errs.whole(w, &APIError{Status: http.StatusTooManyRequests, Type: errRateLimit, Code: "queue_full", RetryAfter: 1,
			Message: fmt.Sprintf("the server has %d %s in flight; retry later", b.max, what)})
		return
	}
	defer h.freeAll()
	if j.programID != "" {
		s.progs.begin(j.programID)
		defer s.endProgram(j)
	}

	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	s.track(&cancel, true)
	defer s.track(&cancel, false)

	streams := make([]*executor.Stream, len(j.reqs))
	for i := range j.reqs {
		st, err := s.eng.Submit(ctx, &j.reqs[i])
		if err != nil {
			cancel(nil) // aborts the choices already submitted
			pr.errs.whole(w, submitError(err))
			return
		}
		streams[i] = st
		// The place is the engine's: it is freed when the engine is done
		// with the choice, even while this handler is still writing.
		go h.freeWhen(i, st.Ended(), ctx.Done())
	}
	a := s.newAnswer(j, h, pr)
	pr.answer(ctx, w, a, streams)
}

// applyHeaders merges the program and tenant headers into j.
func (s *Server) applyHeaders(j *job, r *http.Request, keySalt string) *APIError {
	if h := r.Header.Get("X-Program-Id"); h != "" {
		if j.programID != "" && j.programID != h {
			return badRequest("program_id", "invalid_value", "program_id %q differs from the X-Program-Id header %q", j.programID, h)
		}
		j.programID = h
	}
	if j.programID != "" {
		if err := validProgramID(j.programID); err != nil {
			return badRequest("program_id", "invalid_value", "%v", err)
		}
	}
	switch strings.ToLower(r.Header.Get("X-Program-Release")) {
	case "":
	case "1", "true", "yes":
		j.programRelease = true
	case "0", "false", "no":
	default:
		return badRequest("X-Program-Release", "invalid_value", "X-Program-Release %q: must be true or false", r.Header.Get("X-Program-Release"))
	}
	if j.programRelease && j.programID == "" {
		return badRequest("program_release", "invalid_value", "program_release needs a program_id (or the X-Program-Id header)")
	}
	if j.programID != "" && len(j.reqs) > s.program.max {
		return badRequest("n", "invalid_value", "%d sequences exceed this server's limit of %d program turns in flight",
			len(j.reqs), s.program.max)
	}
	for i := range j.reqs {
		rq := &j.reqs[i]
		rq.ProgramID = j.programID
		// The program ends with the last of its choices (the engine runs a
		// program's requests one at a time, in order).
		rq.ProgramRelease = j.programRelease && i == len(j.reqs)-1
		if keySalt != "" {
			// The key's salt always applies; a body salt subdivides it.
			rq.CacheSalt = keySalt + "\x00" + rq.CacheSalt
		}
	}
	return nil
}

// endProgram records the end of j's request and forwards a release flag.
func (s *Server) endProgram(j *job) {
	s.progs.end(j.programID, j.programRelease)
	if !j.programRelease {
		return
	}
	if rel, ok := s.eng.(ProgramReleaser); ok {
		// Usually the engine has ended it already (Request.ProgramRelease);
		// this covers choices that were never submitted.
		if _, err := rel.ReleaseProgram(j.programID); err != nil && !errors.Is(err, executor.ErrNoPrograms) {
			s.log.Warn("program release", slog.String("program", j.programID), slog.Any("err", err))
		}
	}
}

// submitError maps an engine refusal: a closed engine is 503, anything else
// is the request's fault (the engine validates what the parser did not).
func submitError(err error) *APIError {
	if errors.Is(err, executor.ErrClosed) {
		return &APIError{Status: http.StatusServiceUnavailable, Type: errUnavailable, Code: "shutting_down",
			Message: "the engine is shut down"}
	}
	return badRequest("", "invalid_value", "%v", err)
}

// MaxParsing is the bound on requests read, parsed and tokenised at once
// (Config.MaxParsing, its default resolved).
func (s *Server) MaxParsing() int { return s.cfg.MaxParsing }

// InFlight is the number of engine requests the server has in flight, with
// and without a program id.
func (s *Server) InFlight() int { return s.plain.inFlight() + s.program.inFlight() }

func (s *Server) track(c *context.CancelCauseFunc, add bool) {
	s.cancelMu.Lock()
	defer s.cancelMu.Unlock()
	if add {
		s.cancels[c] = struct{}{}
	} else {
		delete(s.cancels, c)
	}
}

// abortAll cancels every request in flight; the engine aborts them by its
// next step boundary, and their answers end with an abort.
func (s *Server) abortAll() int {
	s.cancelMu.Lock()
	defer s.cancelMu.Unlock()
	for c := range s.cancels {
		(*c)(errShutdownAbort)
	}
	return len(s.cancels)
}

// httpServer is the HTTP server Serve runs: its timeouts bound every
// client (the body's read deadline and each write's are set per request).
func (s *Server) httpServer() *http.Server {
	return &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: s.cfg.ReadTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// Serve answers HTTP on ln (at most MaxConnections at once) until ctx
// ends, then drains: it stops accepting, lets requests in flight finish
// for up to drain, aborts the rest (their streams end with an error event
// and [DONE]), closes the connections still open abortGrace later, and
// returns once every handler has returned, or abortGrace after that. It
// always returns within drain + 2 × abortGrace of ctx ending. /health
// answers 503 while draining.
func (s *Server) Serve(ctx context.Context, ln net.Listener, drain time.Duration) error {
	hs := s.httpServer()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(netutil.LimitListener(ln, s.cfg.MaxConnections)) }()
	select {
	case err := <-errc:
		return fmt.Errorf("server: %w", err)
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.log.Info("draining", slog.Duration("deadline", drain), slog.Int("in_flight", s.InFlight()))
	dctx, cancel := context.WithTimeout(context.Background(), drain)
	err := hs.Shutdown(dctx)
	cancel()
	if errors.Is(err, context.DeadlineExceeded) {
		n := s.abortAll()
		s.log.Warn("drain deadline passed; aborting requests", slog.Int("requests", n))
		gctx, cancel := context.WithTimeout(context.Background(), abortGrace)
		err = hs.Shutdown(gctx)
		cancel()
		if errors.Is(err, net.ErrClosed) {
			err = nil // the listener was closed by the first Shutdown
		}
		if errors.Is(err, context.DeadlineExceeded) {
			// A handler still blocked writes to a client that takes
			// nothing: closing its connection ends the write.
			s.log.Warn("closing connections that did not end after the abort", slog.Duration("grace", abortGrace))
			if err = hs.Close(); errors.Is(err, net.ErrClosed) {
				err = nil
			}
			s.waitHandlers(abortGrace)
		}
	}
	if err != nil {
		return fmt.Errorf("server: shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}

// waitHandlers waits up to d for every handler to return.
func (s *Server) waitHandlers(d time.Duration) {
	done := make(chan struct{})
	go func() { s.handlers.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.log.Warn("handlers still running after their connections closed", slog.Duration("waited", d))
	}
}

// newID is a random response id with prefix.
func newID(prefix string) string { return prefix + rand.Text() }
