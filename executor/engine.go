package executor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/kvpool"
	"github.com/turnstile-llm/turnstile/overlap"
	"github.com/turnstile-llm/turnstile/seatpool"
	"github.com/turnstile-llm/turnstile/step"
)

// ErrClosed is returned by Submit after the engine stopped.
var ErrClosed = errors.New("executor: engine closed")

// Engine runs requests on a Runner.
type Engine struct {
	cfg       Config
	runner    step.Runner
	spender   StepSpender // runner's, when it spends simulated time; else nil
	tok       Tokenizer
	capacity  step.Capacity
	clock     clock.Clock
	kv        *kvpool.Pool
	seats     *seatpool.Pool
	rows      [][]int32 // block-table row per seat
	pipe      *overlap.Pipeline[*stepRecord]
	steps     [overlap.MaxInFlight]stepRecord
	tokBudget int
	grouper   step.Grouper // finds each planned step's shared runs
	// testRunningCap, set only by this package's tests, refuses admission
	// (after the prefix lookup) while that many requests run; 0: no cap.
	// It is a test seam, not an admission interface: program admission
	// (Config.Programs) is the engine's one admission decision.
	testRunningCap int
	// spacePrefix: the tokenizer prepends a space to the text it encodes
	// (SentencePiece's add_space_prefix), so a first word's token carries a
	// leading space that stands for no text. Output that follows a prompt
	// with no text (only control tokens, e.g. just BOS) loses that one
	// space, as llama.cpp does; after prompt text the space is real.
	spacePrefix bool

	// Loop-owned.
	launched  uint64 // last launched step (0: none)
	processed uint64 // last processed step
	running   []*seq // admission order
	waiting   []*seq // FIFO; preempted requests go to the front
	retiring  int    // seats awaiting teardown
	m         Metrics
	lastEnd   time.Time
	streak    bool // the runner had work continuously since lastEnd
	scratch   []kvpool.SeqID
	queued    []*seq // swap buffers for the queues
	aborts    []*seq
	releases  []string

	// adm is the program policy, the owner of program state (noPolicy
	// without one), set once by New; its methods are loop-owned but two
	// (see admission).
	adm admission

	mu      sync.Mutex // guards the fields below
	submitQ []*seq
	abortQ  []*seq
	closed  bool
	nextID  uint64
	pub     Metrics
	wake    chan struct{}
	// releaseQ holds ReleaseProgram calls for the loop.
	releaseQ []string
	// progReqs counts the engine's requests (running, waiting, not yet
	// drained) per program id, with or without a policy: an index of the
	// engine's own requests, not program state. It is kept because
	// attention-DP's program-aware routing asks HoldsProgram for every
	// pending request on every rank at each gather: in
	// adp.BenchmarkGatherRouteEngine/ProgramAware (8 ranks × 256
	// requests, 64 pending) a scan of the requests instead takes the
	// iteration from about 20 to about 72 µs of CPU. ReleaseProgram reads
	// it off the loop. Check proves it equals a recount.
	progReqs map[string]int
}

// New validates cfg against the runner and builds the engine: kvpool from
// the runner's KV capacity, seatpool of cfg.DeriveSeats seats, and the
// start-up check, once, of every seat-indexed consumer (the runner's
// buffers, the engine's block-table rows) against the seat pool in both
// directions.
func New(cfg Config, runner step.Runner, tok Tokenizer) (*Engine, error) {
	if runner == nil || tok == nil {
		return nil, errors.New("executor: runner and tokenizer are required")
	}
	capy := runner.Capacity()
	if cfg.MaxBatchSize <= 0 {
		return nil, fmt.Errorf("executor: MaxBatchSize must be > 0, got %d", cfg.MaxBatchSize)
	}
	if cfg.CascadeMinBlocks < 0 {
		return nil, fmt.Errorf("executor: CascadeMinBlocks must be >= 0, got %d", cfg.CascadeMinBlocks)
	}
	if cfg.MaxNumBatchedTokens < 0 {
		return nil, fmt.Errorf("executor: MaxNumBatchedTokens must be >= 0, got %d", cfg.MaxNumBatchedTokens)
	}
	if cfg.MaxNumBatchedTokens == 0 {
		cfg.MaxNumBatchedTokens = capy.MaxBatchTokens
	}
	if cfg.MaxNumBatchedTokens > capy.MaxBatchTokens {
		return nil, fmt.Errorf("executor: MaxNumBatchedTokens %d exceeds the runner's MaxBatchTokens %d",
			cfg.MaxNumBatchedTokens, capy.MaxBatchTokens)
	}
	if cfg.BlockSize != 0 && cfg.BlockSize != capy.BlockSize {
		return nil, fmt.Errorf("executor: BlockSize %d differs from the runner's %d", cfg.BlockSize, capy.BlockSize)
	}
	if capy.MaxContext <= 1 || capy.Vocab <= 0 {
		return nil, fmt.Errorf("executor: runner capacity has MaxContext %d and Vocab %d", capy.MaxContext, capy.Vocab)
	}
	if tv := tok.VocabSize(); tv > capy.Vocab {
		return nil, fmt.Errorf("executor: tokenizer vocab %d exceeds the runner's vocab %d", tv, capy.Vocab)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	kv, err := kvpool.New(kvpool.Config{NumBlocks: capy.KVBlocks, BlockSize: capy.BlockSize})
	if err != nil {
		return nil, fmt.Errorf("executor: KV pool from runner capacity: %w", err)
	}
	// The seat count has one source, this configuration; every
	// seat-indexed consumer is checked against the pool sized from it.
	n, err := cfg.DeriveSeats()
	if err != nil {
		return nil, err
	}
	seats, err := seatpool.New(n)
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	e := &Engine{
		cfg: cfg, runner: runner, tok: tok, capacity: capy, clock: cfg.Clock,
		kv: kv, seats: seats, rows: make([][]int32, n), tokBudget: cfg.MaxNumBatchedTokens,
		wake: make(chan struct{}, 1),
	}
	e.spender, _ = runner.(StepSpender)
	consumers := []seatpool.Consumer{
		{Owner: "runner buffers", Holds: capy.Seats},
		{Owner: "executor block-table rows", Holds: len(e.rows)},
	}
	if g := cfg.Guide; g != nil {
		consumers = append(consumers, seatpool.Consumer{Owner: "guided decoder matcher slots", Holds: g.Seats()})
		if v := g.Vocab().Size(); v != capy.Vocab {
			return nil, fmt.Errorf("executor: the guided decoder's vocabulary has %d tokens, the runner's logits %d", v, capy.Vocab)
		}
	}
	if err := seats.Validate(consumers...); err != nil {
		return nil, fmt.Errorf("executor: start-up validation (seatpool.Seats derives %d seats for MaxBatchSize %d with overlap %v: Config.DeriveSeats sizes the runner): %w",
			n, cfg.MaxBatchSize, cfg.Overlap, err)
	}
	e.pipe, err = overlap.New(e.execute, e.clock.Now, cfg.Overlap)
	if err != nil {
		return nil, err
	}
	// Pre-size the block-table rows (one backing array, full-slice
	// expressions so a row that outgrows its share reallocates on its own).
	w := min((capy.MaxContext+capy.BlockSize-1)/capy.BlockSize, 512)
	backing := make([]int32, n*w)
	for i := range e.rows {
		e.rows[i] = backing[i*w : i*w : (i+1)*w]
	}
	e.spacePrefix = addsSpacePrefix(tok)
	if e.adm, err = newAdmission(cfg, kv, e.clock, e.requests); err != nil {
		return nil, err
	}
	e.progReqs = make(map[string]int)
	e.grouper.MinBlocks = int32(min(cfg.CascadeMinBlocks, math.MaxInt32))
	e.m.KVBlocksTotal = kv.NumBlocks()
	e.pub = e.m
	return e, nil
}

func (e *Engine) execute(st *stepRecord) error { return e.runner.Execute(&st.batch, &st.out) }

// requests yields the engine's running requests, then its waiting ones.
func (e *Engine) requests(yield func(*seq) bool) {
	for _, s := range e.running {
		if !yield(s) {
			return
		}
	}
	for _, s := range e.waiting {
		if !yield(s) {
			return
		}
	}
}

// Seats is the seat pool's size (MaxBatchSize plus the overlap headroom).
func (e *Engine) Seats() int { return e.seats.Seats() }

// Submit validates r and queues it; the returned Stream yields its output.
// Cancelling ctx aborts the request by the next step boundary. Errors name
// the offending field and value; nothing is queued on error.
func (e *Engine) Submit(ctx context.Context, r *Request) (*Stream, error) {
	prompt, err := e.validate(r)
	if err != nil {
		return nil, err
	}
	s := &seq{
		params:    r.Params,
		promptLen: len(prompt),
		grammar:   r.Grammar,
		kv:        kvState{keys: kvpool.Keys{Model: e.cfg.Model, Salt: r.CacheSalt}},
		turn:      turnState{program: r.ProgramID, release: r.ProgramRelease && r.ProgramID != ""},
		out: outState{
			maxTokens: r.MaxTokens,
			ignoreEOS: r.IgnoreEOS,
			stopIDs:   append([]int32(nil), r.StopTokenIDs...),
			stream:    newStream(r.Params),
			arrival:   e.clock.Now(),
		},
	}
	s.tokens = make([]int32, len(prompt), len(prompt)+min(max(r.MaxTokens, 16), 1024))
	copy(s.tokens, prompt)
	// Hashed here, on the submitter's goroutine, not on the step loop.
	if err := s.kv.chain.Reset(s.kv.keys, e.capacity.BlockSize, prompt); err != nil {
		return nil, fmt.Errorf("executor: prefix hashes of the prompt: %w", err)
	}
	s.out.text.reset(r.Stop)
	if e.spacePrefix {
		s.out.stripSpace = true
		for _, t := range prompt {
			if len(e.tok.Piece(t)) > 0 {
				s.out.stripSpace = false
				break
			}
		}
	}
	s.out.usage.Prompt = len(prompt)

	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	e.nextID++
	s.id = e.nextID
	if s.turn.program != "" {
		e.progReqs[s.turn.program]++
	}
	if !s.params.HasSeed {
		s.params.Seed, s.params.HasSeed = mix64(e.cfg.Seed^mix64(s.id)), true
	}
	// Registered under mu: the loop may read stopWatch as soon as s is
	// queued, and an abort (run on its own goroutine, taking mu) is then
	// queued after the submission, never before it.
	s.stopWatch = context.AfterFunc(ctx, func() { e.abort(s) })
	e.submitQ = append(e.submitQ, s)
	e.mu.Unlock()
	e.Wake()
	return s.out.stream, nil
}

// abort queues s for abortion at the next step boundary.
func (e *Engine) abort(s *seq) {
	e.mu.Lock()
	e.abortQ = append(e.abortQ, s)
	e.mu.Unlock()
	e.Wake()
}

// Wake makes a blocked Run loop look for work again.
func (e *Engine) Wake() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// addsSpacePrefix reports whether tok prepends a space when it encodes text:
// the pieces of Encode("a", false) begin with a space. (Probing through
// Encode keeps the Tokenizer interface small; a vocabulary without a "▁"
// or "▁a" piece would read as having no prefix and keep the space.)
func addsSpacePrefix(tok Tokenizer) bool {
	for _, t := range tok.Encode("a", false) {
		if p := tok.Piece(t); len(p) > 0 {
			return p[0] == ' '
		}
	}
	return false
}

func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
