package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/turnstile-llm/turnstile/executor"
)

// Defaults for Config's zero values.
const (
	DefaultMaxBodyBytes = 16 << 20
	DefaultMaxN         = 16
	defaultMaxPrograms  = 1 << 16
)

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
	// APIKeys, when non-empty, enables Bearer authentication; each key
	// also gets its own prefix-cache salt.
	APIKeys []string
	// MaxBodyBytes bounds request bodies (0: DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// MaxInFlight bounds the engine requests (choices) in flight; beyond
	// it requests get 429 with Retry-After. Required (> 0); serve uses 4×
	// the engine's seats.
	MaxInFlight int
	// MaxN bounds n, the choices per prompt (0: DefaultMaxN).
	MaxN int
	// Logger receives one line per request (nil: discard).
	Logger *slog.Logger
}

// Server is the OpenAI-compatible HTTP front of an Engine.
type Server struct {
	cfg     Config
	eng     Engine
	parse   parser
	keys    *keyring
	progs   *programs
	metrics *metrics
	log     *slog.Logger
	mux     *http.ServeMux

	inFlightMu sync.Mutex
	inFlight   int // engine requests in flight

	draining atomic.Bool
	cancelMu sync.Mutex
	cancels  map[*context.CancelFunc]struct{} // in-flight requests, aborted when draining times out
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
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxN == 0 {
		cfg.MaxN = DefaultMaxN
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	tok := cfg.Tokenizer
	chat, err := newChatTemplate(cfg.ChatTemplate, tok.Token(tok.BOS()), tok.Token(tok.EOS()))
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, eng: eng, keys: newKeyring(cfg.APIKeys), progs: newPrograms(defaultMaxPrograms),
		log: cfg.Logger, cancels: make(map[*context.CancelFunc]struct{}),
		parse: parser{tok: tok, chat: chat, lim: limits{
			model: cfg.Model, maxContext: cfg.MaxContext, vocab: tok.VocabSize(),
			maxN: cfg.MaxN, maxChoices: cfg.MaxInFlight,
		}},
	}
	s.metrics = newMetrics(eng, s.progs)
	s.mux = http.NewServeMux()
	s.route("POST /v1/completions", "completions", s.handleCompletions)
	s.route("POST /v1/chat/completions", "chat", s.handleChat)
	s.route("GET /v1/models", "models", s.handleModels)
	s.route("DELETE /v1/programs/{id}", "programs", s.handleDeleteProgram)
	s.route("GET /health", "health", s.handleHealth)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	// Everything else is answered as JSON too: 405 for a known path with
	// another method, else 404.
	allow := map[string]string{"/v1/completions": "POST", "/v1/chat/completions": "POST", "/v1/models": "GET",
		"/health": "GET", "/metrics": "GET"}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if m, ok := allow[r.URL.Path]; ok {
			w.Header().Set("Allow", m)
			writeError(w, &APIError{Status: http.StatusMethodNotAllowed, Type: errInvalidRequest, Code: "method_not_allowed",
				Message: fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, m)})
			return
		}
		writeError(w, &APIError{Status: http.StatusNotFound, Type: errInvalidRequest, Code: "not_found",
			Message: fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path)})
	})
	return s, nil
}

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

// statusWriter records the status code for logs and metrics.
type statusWriter struct {
	http.ResponseWriter
	code int
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
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's Flush.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// route registers h under pattern with logging and request counting.
func (s *Server) route(pattern, endpoint string, h http.HandlerFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h(sw, r)
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		s.metrics.requests.WithLabelValues(endpoint, fmt.Sprint(code)).Inc()
		if code < 300 && (endpoint == "completions" || endpoint == "chat") {
			s.metrics.latency.WithLabelValues(endpoint).Observe(time.Since(start).Seconds())
		}
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "request", slog.String("method", r.Method),
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
	if !ok || errors.Is(err, executor.ErrNoPrograms) {
		s.progs.release(id)
		writeError(w, &APIError{Status: http.StatusNotFound, Type: errInvalidRequest, Param: "id", Code: "not_supported",
			Message: fmt.Sprintf("program %q: this engine does not track programs", id)})
		return
	}
	if err != nil {
		writeError(w, &APIError{Status: http.StatusInternalServerError, Type: errServer, Message: fmt.Sprintf("program %q: %v", id, err)})
		return
	}
	// The engine's policy owns program state: its answer decides. The
	// server's table only forgets its HTTP view of id.
	s.progs.release(id)
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

// readBody reads a request body of at most the configured size.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *APIError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, badRequest("", "request_too_large", "request body exceeds %d bytes", mbe.Limit)
	case err != nil:
		return nil, badRequest("", "invalid_body", "reading the request body: %v", err)
	}
	return body, nil
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	s.serveJob(w, r, s.parse.completion)
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	s.serveJob(w, r, s.parse.chatCompletion)
}

// serveJob authenticates, parses and admits one request, submits its
// choices and answers them (streamed or whole).
func (s *Server) serveJob(w http.ResponseWriter, r *http.Request, parse func([]byte) (*job, *APIError)) {
	if s.draining.Load() {
		writeError(w, &APIError{Status: http.StatusServiceUnavailable, Type: errUnavailable, Code: "shutting_down",
			Message: "the server is shutting down"})
		return
	}
	salt, e := s.keys.check(r)
	if e != nil {
		writeError(w, e)
		return
	}
	body, e := s.readBody(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	j, e := parse(body)
	if e == nil {
		e = s.applyHeaders(j, r, salt)
	}
	if e != nil {
		writeError(w, e)
		return
	}
	if !s.acquire(len(j.reqs)) {
		writeError(w, &APIError{Status: http.StatusTooManyRequests, Type: errRateLimit, Code: "queue_full", RetryAfter: 1,
			Message: fmt.Sprintf("the server has %d requests in flight; retry later", s.cfg.MaxInFlight)})
		return
	}
	defer s.release(len(j.reqs))
	if j.programID != "" {
		s.progs.begin(j.programID)
		defer s.endProgram(j)
	}

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	s.track(&cancel, true)
	defer s.track(&cancel, false)

	streams := make([]*executor.Stream, len(j.reqs))
	for i := range j.reqs {
		st, err := s.eng.Submit(ctx, &j.reqs[i])
		if err != nil {
			cancel() // aborts the choices already submitted
			writeError(w, submitError(err))
			return
		}
		streams[i] = st
	}
	a := s.newAnswer(j)
	if j.stream {
		s.stream(ctx, w, a, streams)
	} else {
		s.whole(ctx, w, a, streams)
	}
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

// acquire takes n of the in-flight bound, or none when that would exceed the bound.
func (s *Server) acquire(n int) bool {
	s.inFlightMu.Lock()
	defer s.inFlightMu.Unlock()
	if s.inFlight+n > s.cfg.MaxInFlight {
		return false
	}
	s.inFlight += n
	return true
}

func (s *Server) release(n int) {
	s.inFlightMu.Lock()
	s.inFlight -= n
	s.inFlightMu.Unlock()
}

// InFlight is the number of engine requests the server has in flight.
func (s *Server) InFlight() int {
	s.inFlightMu.Lock()
	defer s.inFlightMu.Unlock()
	return s.inFlight
}

func (s *Server) track(c *context.CancelFunc, add bool) {
	s.cancelMu.Lock()
	defer s.cancelMu.Unlock()
	if add {
		s.cancels[c] = struct{}{}
	} else {
		delete(s.cancels, c)
	}
}

// abortAll cancels every request in flight; the engine aborts them by its
// next step boundary.
func (s *Server) abortAll() int {
	s.cancelMu.Lock()
	defer s.cancelMu.Unlock()
	for c := range s.cancels {
		(*c)()
	}
	return len(s.cancels)
}

// Serve answers HTTP on ln until ctx ends, then drains: it stops accepting,
// lets requests in flight finish for up to drain, aborts the rest, and
// returns nil once every handler has returned. /health answers 503 while
// draining.
func (s *Server) Serve(ctx context.Context, ln net.Listener, drain time.Duration) error {
	hs := &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
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
		err = hs.Shutdown(context.Background()) // handlers return promptly once aborted
		if errors.Is(err, net.ErrClosed) {
			err = nil // the listener was closed by the first Shutdown
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

// newID is a random response id with prefix.
func newID(prefix string) string { return prefix + rand.Text() }
