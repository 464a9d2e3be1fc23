package executor

import (
	"fmt"
	"iter"

	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/kvpool"
	"github.com/turnstile-llm/turnstile/policy"
)

// admission is the program policy as the engine sees it: what the engine
// tells it at each point of a request's lifecycle, and the few things it
// asks of it. programPolicy implements it over policy.Controller
// (Config.Programs); noPolicy is an engine without one, so the engine never
// asks whether there is a policy.
//
// Program state has one owner, the policy: the engine keeps no copy of it.
// What the engine keeps per request is its side of the protocol
// (turnState), written only by the implementation and proved against the
// policy by check. Every method is loop-owned except known and byState,
// which any goroutine may call.
type admission interface {
	// tick runs the step boundary's decisions (pauses, resumes, leases);
	// every Step begins with it.
	tick()
	// admit asks whether waiting s, hit of whose tokens the prefix cache
	// serves, may start now. hold: skip it this step (a paused program's
	// turn, or another turn of a program that runs one) without blocking
	// the queue behind it.
	admit(s *seq, hit int) (hold bool)
	// started: s, admitted, took its seat and KV sequence with its first
	// chunk appended.
	started(s *seq)
	// grew: running s's KV sequence grew (a chunk or token appended, a
	// future token's slot filled).
	grew(s *seq)
	// preempted: s lost its start, before its sequence is released:
	// running s preempted by recompute, or waiting s, admitted, unable to
	// start (blocks, an error, the tests' running cap).
	preempted(s *seq)
	// ended: s's turn is over: finished or aborted while running (before
	// its sequence is released: the program pins from it), or withdrawn
	// while waiting. Again after that, a no-op.
	ended(s *seq)
	// release ends program id: Request.ProgramRelease, ReleaseProgram at
	// the next step boundary.
	release(id string)
	// close ends every program (Engine.Close): nothing stays pinned.
	close()
	// dropMostPinned ends the pinned program with the most tokens, for the
	// liveness rule (Engine.dropPin); false when no program holds a pin.
	dropMostPinned() bool

	// polls reports whether a loop with nothing to run must still step
	// after programPoll: the policy decides with time (leases, forced
	// resumes, aging) while it holds turns or programs. waiting is the
	// engine's waiting requests.
	polls(waiting int) bool
	// pins appends the kvpool handles the policy holds to dst (Check).
	pins(dst []kvpool.SeqID) []kvpool.SeqID
	// metrics writes the policy's snapshot into m (publish).
	metrics(m *policy.Metrics)
	// check proves the policy's own accounting and the engine's side of
	// the protocol against it (Check).
	check() error
	// known reports whether the policy knows program id; ErrNoPrograms
	// without a policy. Any goroutine.
	known(id string) (bool, error)
	// byState counts m's programs by state, nil without a policy. Any
	// goroutine.
	byState(m *policy.Metrics) map[string]int
}

// newAdmission builds cfg's admission: the program policy over kv with clk
// when cfg.Programs is set (MaxActive 0 means cfg.MaxBatchSize, and a
// larger value is refused), else noPolicy. reqs yields the engine's
// requests, running then waiting.
func newAdmission(cfg Config, kv *kvpool.Pool, clk clock.Clock, reqs iter.Seq[*seq]) (admission, error) {
	if cfg.Programs == nil {
		return noPolicy{}, nil
	}
	pc := *cfg.Programs
	switch {
	case pc.MaxActive == 0:
		pc.MaxActive = cfg.MaxBatchSize
	case pc.MaxActive > cfg.MaxBatchSize:
		return nil, fmt.Errorf("executor: program policy MaxActive %d exceeds MaxBatchSize %d (the sequences one step runs)",
			pc.MaxActive, cfg.MaxBatchSize)
	}
	pc.Clock = clk
	ctl, err := policy.New(pc, kv)
	if err != nil {
		return nil, fmt.Errorf("executor: program policy: %w", err)
	}
	return &programPolicy{ctl: ctl, reqs: reqs}, nil
}

// noPolicy is an engine without a program policy: every request starts as
// soon as seats, budgets and blocks allow; no program is tracked and
// nothing is pinned.
type noPolicy struct{}

func (noPolicy) tick()                                  {}
func (noPolicy) admit(*seq, int) bool                   { return false }
func (noPolicy) started(*seq)                           {}
func (noPolicy) grew(*seq)                              {}
func (noPolicy) preempted(*seq)                         {}
func (noPolicy) ended(*seq)                             {}
func (noPolicy) release(string)                         {}
func (noPolicy) close()                                 {}
func (noPolicy) dropMostPinned() bool                   { return false }
func (noPolicy) polls(int) bool                         { return false }
func (noPolicy) pins(dst []kvpool.SeqID) []kvpool.SeqID { return dst }
func (noPolicy) metrics(*policy.Metrics)                {}
func (noPolicy) check() error                           { return nil }
func (noPolicy) known(string) (bool, error)             { return false, ErrNoPrograms }
func (noPolicy) byState(*policy.Metrics) map[string]int { return nil }
