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
	"github.com/turnstile-llm/turnstile/policy"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/seatpool"
	"github.com/turnstile-llm/turnstile/step"
)

// StepSpender is implemented by runners that spend simulated time (sim.Runner
// with DeferSpend, sim.Recorder spending on a virtual clock): the engine
// calls SpendStep once per successful step, in step order, on its own
// goroutine when it processes the step's results and before it reads the
// clock to time-stamp them. Spending virtual time there, not from the
// device stream's goroutine inside Execute, makes time under overlap
// deterministic: a step's results carry the time its step ended whatever
// the goroutines' interleaving.
type StepSpender interface {
	SpendStep() error
}

// Ablation is the engine's experiment switches, each of which restores a
// rule whose absence an experiment measures: for experiments only, never
// for serving (the zero value). An attention-DP deployment's
// adp.Ablation.Engine is the one source of its engines' switches.
type Ablation struct {
	// ChargeRetiring charges retiring requests against admission and the
	// step budgets, as engines without the retiring rule do.
	ChargeRetiring bool
}

// Config configures an Engine. KV blocks, block size, vocab and context come
// from the Runner's Capacity.
type Config struct {
	// MaxBatchSize is the most sequences one step schedules (> 0).
	MaxBatchSize int
	// Seats is the seat count, derived once at start-up by whoever builds
	// the engine (Config.DeriveSeats) and delivered both here and to the
	// runner, whose Capacity.Seats was sized from it. New checks it against
	// both.
	Seats int
	// MaxNumBatchedTokens is the step's token budget; 0 means the runner's
	// Capacity.MaxBatchTokens, which it may not exceed.
	MaxNumBatchedTokens int
	// BlockSize, when set, must equal the runner's (a cross-check).
	BlockSize int
	// Overlap plans and launches step n+1 while step n runs.
	Overlap bool
	// Ablation holds the experiment switches; the zero value serves.
	Ablation Ablation
	// Clock is the time source; nil means clock.Real.
	Clock clock.Clock
	// Programs, when set, enables program admission (package policy), the
	// engine's one admission decision beyond seats, budgets and blocks, for
	// requests with a ProgramID; requests without one bypass it. New builds the Controller over the engine's KV pool with the
	// engine's clock; MaxActive 0 means MaxBatchSize (the sequences one
	// step runs), and a larger value is refused. Nil: no program policy.
	Programs *policy.Config
	// Model names the model in prefix hashes (kvpool.Keys.Model).
	Model string
	// Seed is the base of the seeds drawn for requests without one.
	Seed uint64
	// CascadeMinBlocks is the shortest leading run of block ids, in blocks,
	// that a step's sequences must share to be grouped for cascade
	// attention (step.Group: the run is read once for the group). The
	// groups come from the block tables kvpool hands out, so sequences share
	// a run exactly when they share those KV bytes. 0: never group.
	CascadeMinBlocks int
}

// ErrClosed is returned by Submit after the engine stopped.
var ErrClosed = errors.New("executor: engine closed")

// State is a request's lifecycle state (see the package doc).
type State uint8

const (
	StateWaiting State = iota
	StateRunning
	StateFinished
	StateAborted
)

// seq is the engine's record of one request. Loop-owned except where noted.
type seq struct {
	id     uint64
	params sampling.Params
	keys   kvpool.Keys
	// chain is the prefix-hash chain of the tokens admission computes
	// (the prompt; extended by the generated tokens at preemption), hashed
	// once at Submit so each lookup while waiting is index probes only.
	chain     kvpool.Chain
	programID string
	// release ends the program when this request ends (Request.ProgramRelease).
	release bool
	// inPolicy: this request holds its program's turn in the Controller
	// (Admit was called for it), until TurnEnded or the program's end; at
	// most one request per program, exactly while the Controller's HasTurn
	// says so (Check proves it). polLive: the Controller
	// was told its sequence (Started), so Grew and a pin at TurnEnded apply.
	inPolicy, polLive bool
	maxTokens         int
	ignoreEOS         bool
	stopIDs           []int32
	// stripSpace: the first text-bearing output token loses one leading
	// space (see Engine.spacePrefix).
	stripSpace bool
	stream     *Stream
	stopWatch  func() bool // unregisters the context watch

	state     State
	epoch     uint32  // bumped whenever the request leaves RUNNING; stale step entries are ignored
	tokens    []int32 // prompt + generated tokens known on the host
	promptLen int
	generated int
	inflight  int // samples in launched, unprocessed steps
	// futureIn: scheduled with a future input, whose slot is reserved in
	// kvpool (kvpool.Pool.Reserve) until its value is known (kvpool.Pool.Fill).
	futureIn bool
	computed int // positions whose KV is written by launched steps
	kvTokens int // == kv.Tokens(kvSeq)
	kvSeq    kvpool.SeqID
	hasKV    bool
	seat     seatpool.Seat
	hasSeat  bool
	started  bool   // the seat has seen Start
	lastStep uint64 // the last step this request is in
	everRan  bool
	text     textMatcher
	arrival  time.Time
	lastTok  time.Time
	usage    Usage
}

// retired is a seat (and KV sequence) released at its step's teardown.
type retired struct {
	seat  seatpool.Seat
	kv    kvpool.SeqID
	hasKV bool
}

type entry struct {
	s     *seq
	epoch uint32
}

// stepRecord is one double-buffered step record.
type stepRecord struct {
	n        uint64
	batch    step.Batch
	out      step.Output
	entries  []entry   // aligned with batch.Seqs
	teardown []retired // released when this step is processed
}

func (st *stepRecord) reset(n uint64) {
	st.n = n
	st.batch.Reset()
	st.entries = st.entries[:0]
}

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

	// Program policy (nil ctl: none), the owner of program state: the
	// engine keeps none of its own (see programs.go). Loop-owned.
	ctl *policy.Controller
	// polErr is the first lifecycle call ctl refused: an engine bug that
	// Check reports (the loop goes on; nothing is leaked by it).
	polErr error

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
// the runner's KV capacity, seatpool of cfg.Seats seats, and the start-up
// check, once, of the seat count in both directions: cfg.Seats against its
// definition (seatpool.Seats), and every seat-indexed consumer (the runner's
// buffers, the engine's block-table rows) against the seat pool.
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
	// The seat count is the builder's; here it is only checked: against its
	// definition, then (Validate) against every seat-indexed consumer.
	want, err := cfg.DeriveSeats()
	if err != nil {
		return nil, err
	}
	if cfg.Seats != want {
		return nil, fmt.Errorf("executor: Seats %d, but seatpool.Seats derives %d for MaxBatchSize %d with overlap %v",
			cfg.Seats, want, cfg.MaxBatchSize, cfg.Overlap)
	}
	n := cfg.Seats
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
	if err := seats.Validate(
		seatpool.Consumer{Owner: "runner buffers", Holds: capy.Seats},
		seatpool.Consumer{Owner: "executor block-table rows", Holds: len(e.rows)},
	); err != nil {
		return nil, fmt.Errorf("executor: start-up validation: %w", err)
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
	if cfg.Programs != nil {
		pc := *cfg.Programs
		switch {
		case pc.MaxActive == 0:
			pc.MaxActive = cfg.MaxBatchSize
		case pc.MaxActive > cfg.MaxBatchSize:
			return nil, fmt.Errorf("executor: program policy MaxActive %d exceeds MaxBatchSize %d (the sequences one step runs)",
				pc.MaxActive, cfg.MaxBatchSize)
		}
		pc.Clock = e.clock
		if e.ctl, err = policy.New(pc, kv); err != nil {
			return nil, fmt.Errorf("executor: program policy: %w", err)
		}
	}
	e.progReqs = make(map[string]int)
	e.grouper.MinBlocks = int32(min(cfg.CascadeMinBlocks, math.MaxInt32))
	e.m.KVBlocksTotal = kv.NumBlocks()
	e.pub = e.m
	return e, nil
}

func (e *Engine) execute(st *stepRecord) error { return e.runner.Execute(&st.batch, &st.out) }

// SeatSizing is what the engine of this configuration needs of the seat
// pool: MaxBatchSize sequences, with overlap headroom and deferred teardown
// exactly when Overlap is on (a retiring request keeps its seat for one
// step).
func (c Config) SeatSizing() seatpool.Sizing {
	return seatpool.Sizing{MaxBatchSize: c.MaxBatchSize, Overlap: c.Overlap, DeferredTeardown: c.Overlap}
}

// DeriveSeats is the seat count of an engine of this configuration
// (seatpool.Seats of SeatSizing): the builder calls it once at start-up and
// delivers the number to the runner and to Config.Seats.
func (c Config) DeriveSeats() (int, error) {
	n, err := seatpool.Seats(c.SeatSizing())
	if err != nil {
		return 0, fmt.Errorf("executor: seats for max batch %d: %w", c.MaxBatchSize, err)
	}
	return n, nil
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
		keys:      kvpool.Keys{Model: e.cfg.Model, Salt: r.CacheSalt},
		programID: r.ProgramID,
		release:   r.ProgramRelease && r.ProgramID != "",
		maxTokens: r.MaxTokens,
		ignoreEOS: r.IgnoreEOS,
		stopIDs:   append([]int32(nil), r.StopTokenIDs...),
		stream:    newStream(r.Params),
		promptLen: len(prompt),
		arrival:   e.clock.Now(),
	}
	s.tokens = make([]int32, len(prompt), len(prompt)+min(max(r.MaxTokens, 16), 1024))
	copy(s.tokens, prompt)
	// Hashed here, on the submitter's goroutine, not on the step loop.
	if err := s.chain.Reset(s.keys, e.capacity.BlockSize, prompt); err != nil {
		return nil, fmt.Errorf("executor: prefix hashes of the prompt: %w", err)
	}
	s.text.reset(r.Stop)
	if e.spacePrefix {
		s.stripSpace = true
		for _, t := range prompt {
			if len(e.tok.Piece(t)) > 0 {
				s.stripSpace = false
				break
			}
		}
	}
	s.usage.Prompt = len(prompt)

	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	e.nextID++
	s.id = e.nextID
	if s.programID != "" {
		e.progReqs[s.programID]++
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
	return s.stream, nil
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

// programPoll is how often an idle Run loop steps while the program policy
// holds turns or programs, so time-based decisions (leases, forced resumes,
// aging) take effect without a wake-up.
const programPoll = 100 * time.Millisecond

// Run is the step loop. It returns nil when ctx ends, after aborting every
// request left and releasing everything, or the runner's error (requests
// likewise aborted). The engine is closed afterwards.
func (e *Engine) Run(ctx context.Context) error {
	for {
		if ctx.Err() != nil {
			return e.Close()
		}
		progressed, err := e.Step()
		if err != nil {
			_ = e.Close()
			return err
		}
		if !progressed {
			e.streak = false
			// The program policy decides with time too (leases, forced
			// resumes, aging): while it holds turns or programs, look again
			// now and then, not only when woken.
			var poll *time.Timer
			var pollC <-chan time.Time
			if e.ctl != nil && (len(e.waiting) > 0 || e.holdsPrograms()) {
				poll = time.NewTimer(programPoll)
				pollC = poll.C
			}
			select {
			case <-e.wake:
			case <-ctx.Done():
			case <-pollC:
			}
			if poll != nil {
				poll.Stop()
			}
		}
	}
}

// Step runs one iteration of the loop without blocking for work: take new
// submissions and aborts, plan and launch the next step, then process the
// steps that must complete (with overlap, all but the one just launched).
// It reports whether anything was launched or processed. Step must not be
// called concurrently with Run or itself.
func (e *Engine) Step() (bool, error) {
	e.drainQueues()
	e.tick()
	if len(e.running) == 0 && len(e.waiting) == 0 && e.pipe.InFlight() == 0 {
		e.publish()
		return false, nil
	}
	progressed := false
	n := e.launched + 1
	st := &e.steps[n%overlap.MaxInFlight]
	st.reset(n)
	if err := e.plan(st); err != nil {
		return false, err
	}
	keep := 0
	if len(st.batch.Seqs) > 0 {
		st.out.Resize(len(st.batch.Seqs))
		if err := e.pipe.Launch(st); err != nil {
			return false, err
		}
		e.launched = n
		progressed = true
		if e.cfg.Overlap {
			keep = 1
		}
	}
	for e.pipe.InFlight() > keep {
		d, err := e.pipe.Wait()
		if err != nil {
			return false, err
		}
		if err := e.process(d); err != nil {
			return false, err
		}
		progressed = true
	}
	e.publish()
	return progressed, nil
}

// Close stops the engine: refuses new submissions, aborts every request,
// waits for steps in flight and releases every seat and block. Idempotent.
// Like Step it is loop-owned: with Run active, cancel Run's context instead
// (Run closes the engine on its way out).
func (e *Engine) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.drainQueues()
	for len(e.waiting) > 0 {
		s := e.waiting[0]
		e.removeWaiting(s)
		e.end(s, FinishAbort)
	}
	for len(e.running) > 0 {
		e.leave(e.running[len(e.running)-1], FinishAbort)
	}
	e.releaseAllPrograms()
	var first error
	for e.pipe.InFlight() > 0 {
		d, err := e.pipe.Wait()
		if err == nil {
			err = e.process(d)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	e.pipe.Close()
	e.publish()
	return first
}

// drainQueues moves submissions into the waiting queue and applies aborts.
func (e *Engine) drainQueues() {
	e.mu.Lock()
	e.queued, e.submitQ = e.submitQ, e.queued[:0]
	e.aborts, e.abortQ = e.abortQ, e.aborts[:0]
	e.releases, e.releaseQ = e.releaseQ, e.releases[:0]
	closed := e.closed
	e.mu.Unlock()
	for i, s := range e.queued {
		e.m.Submitted++
		if closed {
			e.end(s, FinishAbort)
		} else {
			e.waiting = append(e.waiting, s)
		}
		e.queued[i] = nil
	}
	for i, s := range e.aborts {
		switch s.state {
		case StateWaiting:
			if e.removeWaiting(s) {
				e.end(s, FinishAbort)
			}
		case StateRunning:
			e.leave(s, FinishAbort)
		}
		e.aborts[i] = nil
	}
	for _, id := range e.releases {
		e.releaseProgram(id)
	}
}

// removeWaiting takes s out of the waiting queue; false if it was not there
// (still in the submit queue: it is aborted when that is drained).
func (e *Engine) removeWaiting(s *seq) bool {
	for i, w := range e.waiting {
		if w == s {
			copy(e.waiting[i:], e.waiting[i+1:])
			e.waiting[len(e.waiting)-1] = nil
			e.waiting = e.waiting[:len(e.waiting)-1]
			return true
		}
	}
	return false
}

// publish copies the loop's metrics for Snapshot.
func (e *Engine) publish() {
	e.m.Running, e.m.Waiting, e.m.Retiring = len(e.running), len(e.waiting), e.retiring
	e.m.SeatsLive, e.m.SeatsRetiring = e.seats.Live(), e.seats.Retiring()
	e.m.KVBlocksUsed = e.kv.Referenced()
	e.m.KVBlocksCached = e.kv.CachedFree()
	if e.ctl != nil {
		e.m.Programs = e.ctl.Metrics()
	}
	if e.m.KVBlocksTotal > 0 {
		e.m.KVUsage = float64(e.m.KVBlocksUsed) / float64(e.m.KVBlocksTotal)
	}
	e.mu.Lock()
	e.pub = e.m
	e.mu.Unlock()
}

// Snapshot returns the metrics as of the last step boundary.
func (e *Engine) Snapshot() Metrics {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pub
}

// Check verifies that kvpool, seatpool and the engine's bookkeeping agree:
// every running request holds one live seat and its KV sequence with the
// token count the engine recorded; every retiring seat is awaiting a
// teardown; referenced blocks are exactly those the engine's sequences hold.
// It is loop-owned (call it between Steps, not during Run) and allocates.
func (e *Engine) Check() error {
	if err := e.kv.Check(); err != nil {
		return fmt.Errorf("executor: kvpool: %w", err)
	}
	if err := e.seats.Check(); err != nil {
		return fmt.Errorf("executor: seatpool: %w", err)
	}
	if got, want := e.seats.Live(), len(e.running); got != want {
		return fmt.Errorf("executor: %d live seats for %d running requests", got, want)
	}
	ids := e.scratch[:0]
	seatOwner := make(map[seatpool.Seat]string)
	for _, s := range e.running {
		switch {
		case s.state != StateRunning:
			return fmt.Errorf("executor: request %d in the running list in state %d", s.id, s.state)
		case !s.hasSeat || !s.hasKV:
			return fmt.Errorf("executor: running request %d without seat (%v) or KV (%v)", s.id, s.hasSeat, s.hasKV)
		case e.seats.State(s.seat) != seatpool.Live:
			return fmt.Errorf("executor: running request %d holds seat %d in state %v", s.id, s.seat, e.seats.State(s.seat))
		case e.kv.Tokens(s.kvSeq) != s.kvTokens:
			return fmt.Errorf("executor: request %d: kvpool has %d tokens, engine recorded %d", s.id, e.kv.Tokens(s.kvSeq), s.kvTokens)
		case s.computed != s.kvTokens+b2i(s.futureIn):
			return fmt.Errorf("executor: request %d: computed %d != kv tokens %d + future %v",
				s.id, s.computed, s.kvTokens, s.futureIn)
		case e.kv.Reserved(s.kvSeq) != b2i(s.futureIn):
			return fmt.Errorf("executor: request %d: kvpool has %d reserved slots, future input %v",
				s.id, e.kv.Reserved(s.kvSeq), s.futureIn)
		case s.computed > len(s.tokens)+s.inflight:
			return fmt.Errorf("executor: request %d: %d positions computed for %d tokens", s.id, s.computed, len(s.tokens))
		case len(e.rows[s.seat]) != len(e.kv.Blocks(s.kvSeq)) || len(e.rows[s.seat])*e.kv.BlockSize() < s.computed:
			return fmt.Errorf("executor: request %d: block-table row of %d blocks (kvpool: %d) for %d positions",
				s.id, len(e.rows[s.seat]), len(e.kv.Blocks(s.kvSeq)), s.computed)
		}
		if o, dup := seatOwner[s.seat]; dup {
			return fmt.Errorf("executor: seat %d held by %s and request %d", s.seat, o, s.id)
		}
		seatOwner[s.seat] = fmt.Sprintf("request %d", s.id)
		ids = append(ids, s.kvSeq)
	}
	nRetired := 0
	for i := range e.steps {
		for _, r := range e.steps[i].teardown {
			nRetired++
			if e.seats.State(r.seat) != seatpool.Retiring {
				return fmt.Errorf("executor: retired seat %d is %v", r.seat, e.seats.State(r.seat))
			}
			if o, dup := seatOwner[r.seat]; dup {
				return fmt.Errorf("executor: seat %d held by %s and a teardown", r.seat, o)
			}
			seatOwner[r.seat] = "teardown"
			if r.hasKV {
				ids = append(ids, r.kv)
			}
		}
	}
	if nRetired != e.retiring || e.seats.Retiring() != e.retiring {
		return fmt.Errorf("executor: %d retiring recorded, %d awaiting teardown, %d retiring seats",
			e.retiring, nRetired, e.seats.Retiring())
	}
	if err := e.checkStepsInFlight(); err != nil {
		return err
	}
	if err := e.checkPrograms(); err != nil {
		return err
	}
	// The program policy's pins reference blocks too: the engine's
	// sequences and the pins together own every referenced block.
	if e.ctl != nil {
		ids = e.ctl.Pins(ids)
	}
	if got, want := e.kv.Referenced(), e.kv.DistinctBlocks(ids); got != want {
		return fmt.Errorf("executor: kvpool references %d blocks, the engine's sequences and program pins hold %d", got, want)
	}
	for _, s := range e.waiting {
		if s.state != StateWaiting || s.hasSeat || s.hasKV {
			return fmt.Errorf("executor: waiting request %d in state %d holds seat %v / KV %v", s.id, s.state, s.hasSeat, s.hasKV)
		}
		// Its chain must cover exactly its tokens (prompt, plus generated
		// ones after a preemption) and find what hashing them again finds.
		if s.chain.Tokens() != len(s.tokens) || s.chain.Keys() != s.keys {
			return fmt.Errorf("executor: waiting request %d: prefix chain covers %d tokens under %+v, it has %d under %+v",
				s.id, s.chain.Tokens(), s.chain.Keys(), len(s.tokens), s.keys)
		}
		// Hashing again is O(tokens): done for the head, which admission looks up next.
		if s != e.waiting[0] {
			continue
		}
		if got, want := e.kv.PeekChain(&s.chain), e.kv.PeekPrefix(s.keys, s.tokens); got != want {
			return fmt.Errorf("executor: waiting request %d: prefix chain hits %d tokens, its tokens hit %d", s.id, got, want)
		}
	}
	e.scratch = ids[:0]
	return nil
}

// checkStepsInFlight proves that no seat a launched, unprocessed step uses
// has been given back: each is still live for the request the step planned
// it for (running, in the same epoch, on that seat), or retiring until the
// teardown of that step or a later one. A seat released early would let the
// next admission reuse its runner rows while the device still writes them.
func (e *Engine) checkStepsInFlight() error {
	if e.launched < e.processed || e.launched-e.processed > overlap.MaxInFlight {
		return fmt.Errorf("executor: steps %d to %d in flight, at most %d can be", e.processed+1, e.launched, overlap.MaxInFlight)
	}
	for n := e.processed + 1; n <= e.launched; n++ {
		st := &e.steps[n%overlap.MaxInFlight]
		if st.n != n || len(st.entries) != len(st.batch.Seqs) {
			return fmt.Errorf("executor: step %d in flight: its record is of step %d with %d entries for %d sequences",
				n, st.n, len(st.entries), len(st.batch.Seqs))
		}
		for i := range st.batch.Seqs {
			seat, en := seatpool.Seat(st.batch.Seqs[i].Seat), st.entries[i]
			switch state := e.seats.State(seat); state {
			case seatpool.Live:
				if s := en.s; s.state != StateRunning || s.epoch != en.epoch || !s.hasSeat || s.seat != seat {
					return fmt.Errorf("executor: step %d in flight uses seat %d for request %d, which has left it (state %d, epoch %d → %d, seat %d held %v): the live seat was released and taken again",
						n, seat, s.id, s.state, en.epoch, s.epoch, s.seat, s.hasSeat)
				}
			case seatpool.Retiring:
				if !e.tornDownAtOrAfter(seat, n) {
					return fmt.Errorf("executor: step %d in flight uses seat %d (request %d), retiring with no teardown at step %d or later",
						n, seat, en.s.id, n)
				}
			default:
				return fmt.Errorf("executor: step %d in flight uses seat %d (request %d), which is %v: released before the step was processed",
					n, seat, en.s.id, state)
			}
		}
	}
	return nil
}

// tornDownAtOrAfter reports whether the teardown of an in-flight step m ≥ n
// releases seat.
func (e *Engine) tornDownAtOrAfter(seat seatpool.Seat, n uint64) bool {
	for i := range e.steps {
		st := &e.steps[i]
		if st.n < n || st.n <= e.processed || st.n > e.launched {
			continue
		}
		for _, r := range st.teardown {
			if r.seat == seat {
				return true
			}
		}
	}
	return false
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
