package executor

import (
	"time"

	"github.com/turnstile-llm/turnstile/kvpool"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/seatpool"
)

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
