package executor

import (
	"fmt"
	"time"

	"github.com/turnstile-llm/turnstile/grammar"
	"github.com/turnstile-llm/turnstile/kvpool"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/seatpool"
)

// State is a request's lifecycle state, as the package doc draws it. It has
// no RETIRING: that is the state of a seat a step in flight still uses
// after its request left RUNNING (seatpool.Retiring).
type State uint8

const (
	// StateWaiting: queued for admission, new or preempted (its tokens so
	// far to be recomputed); holds no seat and no KV sequence.
	StateWaiting State = iota
	// StateRunning: admitted; holds a seat and a KV sequence and is
	// scheduled until it ends or is preempted.
	StateRunning
	// StateFinished: ended with stop or length; its stream has the finish.
	StateFinished
	// StateAborted: ended by its request context or the engine's shutdown.
	StateAborted
)

// String names the state as the package doc's diagram does.
func (s State) String() string {
	switch s {
	case StateWaiting:
		return "WAITING"
	case StateRunning:
		return "RUNNING"
	case StateFinished:
		return "FINISHED"
	case StateAborted:
		return "ABORTED"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// seq is the engine's record of one request: what it is and where it is in
// its lifecycle, then its state grouped by the part of the engine that owns
// it (KV, seat, program turn, output). Loop-owned except where noted.
type seq struct {
	id     uint64
	params sampling.Params // sampling settings; the runner reads them at the seat (step.SeqBatch.Params)
	state  State
	// epoch is bumped whenever the request leaves RUNNING; step entries of
	// an older epoch are ignored.
	epoch     uint32
	tokens    []int32 // prompt + generated tokens known on the host
	promptLen int
	generated int
	inflight  int         // samples in launched, unprocessed steps
	lastStep  uint64      // the last step this request is in
	everRan   bool        // admitted at least once (first-admission counts taken)
	stopWatch func() bool // unregisters the context watch
	// grammar constrains the output (Request.Grammar); its matcher is the
	// guided decoder's slot at the request's seat.
	grammar *grammar.Grammar

	kv   kvState
	seat seatState
	turn turnState
	out  outState
}

// kvState is what the request holds in kvpool: its KV sequence while
// RUNNING, and the prefix hashes admission looks up while WAITING.
type kvState struct {
	keys kvpool.Keys // model and cache salt: requests share blocks only under equal keys
	// chain is the prefix-hash chain of the tokens admission computes
	// (the prompt; extended by the generated tokens at preemption), hashed
	// once at Submit so each lookup while waiting is index probes only.
	chain  kvpool.Chain
	seq    kvpool.SeqID
	held   bool // seq is the request's
	tokens int  // == kvpool.Pool.Tokens(seq)
	// computed is the positions whose KV is written by launched steps.
	computed int
	// future: scheduled with a future input, whose slot is reserved in
	// kvpool (kvpool.Pool.Reserve) until its value is known (kvpool.Pool.Fill).
	future bool
}

// seatState is the request's seat (seatpool) while it holds one: its row in
// every seat-indexed structure (the runner's buffers and sampler state, the
// engine's block-table row Engine.rows). It is taken at admission (admit)
// and given back when the request leaves RUNNING (detach), at once or, when
// a step in flight still uses it, at that step's teardown (process).
//
// A per-seat consumer (the guided decoder's matcher and token-mask row,
// speculative-decoding state) is a seat-indexed structure beside
// Engine.rows, sized and validated with them in New, and follows these
// same points: started when the seat first runs (add: Start, with the
// request's output so far after a preemption), advanced by each token
// delivered (deliver), released with the seat.
type seatState struct {
	id      seatpool.Seat
	held    bool // id is the request's
	started bool // the runner has seen Start for this seat
}

// turnState is the request's part in its program's turn (Request.ProgramID),
// kept by the admission hook (admission): the engine's side of the protocol
// with the program policy, which Check proves against the policy's own
// state.
type turnState struct {
	program string // Request.ProgramID; "" bypasses the policy
	release bool   // end the program when this request ends (Request.ProgramRelease)
	// held: this request holds its program's turn in the policy (admitted
	// once), until the turn ends or the program does; at most one request
	// per program. handed: the policy was told its sequence (Started), so
	// growth and a pin at the turn's end apply.
	held, handed bool
}

// outState is the request's output: its stop conditions, the text held
// back for stop strings, its stream, usage and token timing.
type outState struct {
	maxTokens int
	ignoreEOS bool
	stopIDs   []int32
	text      textMatcher
	// stripSpace: the first text-bearing output token loses one leading
	// space (see Engine.spacePrefix).
	stripSpace bool
	stream     *Stream
	usage      Usage
	arrival    time.Time
	lastTok    time.Time
}
