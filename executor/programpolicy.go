package executor

import (
	"fmt"
	"iter"

	"github.com/turnstile-llm/turnstile/kvpool"
	"github.com/turnstile-llm/turnstile/policy"
)

// programPolicy is admission over policy.Controller (Config.Programs):
// requests with a program id are turns of their program, one at a time;
// requests without one bypass it (every method is a no-op for them).
// Which programs exist and whether a program has a turn registered are the
// Controller's answers (Known, HasTurn, IDs, MostPinned); a request's
// turnState says only whether it is the request holding its program's turn
// (held) and whether its sequence was handed over (handed), and check
// proves the two sides agree.
type programPolicy struct {
	ctl  *policy.Controller
	reqs iter.Seq[*seq] // the engine's requests, running then waiting
	// err is the first lifecycle call ctl refused: an engine bug that
	// check reports (the loop goes on; nothing is leaked by it).
	err error
}

// tick needs nothing applied: admission asks Runnable per request, so a
// paused program's turn waits and a resumed one runs from this step on; a
// program ended by its lease is between turns (no request holds a turn of
// it: check proves it).
func (p *programPolicy) tick() { p.ctl.Tick() }

// admit registers s as its program's turn on the first ask; later asks are
// made only while the program is ACTIVE (Runnable), so a held turn costs
// O(1) per step.
func (p *programPolicy) admit(s *seq, hit int) (hold bool) {
	pid := s.turn.program
	if pid == "" {
		return false
	}
	if !s.turn.held && p.ctl.HasTurn(pid) {
		return true // one turn per program: it waits for the current one
	}
	if s.turn.held && !p.ctl.Runnable(pid) {
		return true
	}
	ok, err := p.ctl.Admit(pid, len(s.tokens), hit)
	if err != nil {
		// A protocol error (an engine bug, which check reports): run the
		// request outside the policy rather than strand it.
		p.fail(fmt.Errorf("request %d: admit: %w", s.id, err))
		return false
	}
	s.turn.held = true
	return !ok
}

// started hands s's sequence over if its first chunk completed its prompt;
// otherwise the grew that completes it does.
func (p *programPolicy) started(s *seq) { p.grew(s) }

// grew reports s's appended tokens. The turn's sequence is handed to the
// policy (Started) only once its prompt is fully appended: until then the
// policy charges the turn its estimate (its tokens less its cached prefix),
// not the blocks that chunked prefill has appended so far, which would let
// the blocks accounting admit programs whose prompts the pool cannot hold.
// The program's pin, if any, is kept until then too.
func (p *programPolicy) grew(s *seq) {
	if !s.turn.held {
		return
	}
	var err error
	switch {
	case s.turn.handed:
		err = p.ctl.Grew(s.turn.program)
	case s.kv.tokens >= len(s.tokens):
		err = p.ctl.Started(s.turn.program, s.kv.seq)
		s.turn.handed = err == nil
	}
	if err != nil {
		p.fail(fmt.Errorf("request %d: grow: %w", s.id, err))
	}
}

// preempted keeps the program ACTIVE and s its turn, asked again by admit.
func (p *programPolicy) preempted(s *seq) {
	if !s.turn.held {
		return
	}
	if err := p.ctl.Preempted(s.turn.program); err != nil {
		p.fail(fmt.Errorf("request %d: preempt: %w", s.id, err))
	}
	s.turn.handed = false
}

func (p *programPolicy) ended(s *seq) {
	if !s.turn.held {
		return
	}
	if err := p.ctl.TurnEnded(s.turn.program); err != nil {
		p.fail(fmt.Errorf("request %d: end turn: %w", s.id, err))
	}
	s.turn.held, s.turn.handed = false, false
}

// release drops program id's charge and pin. The request holding its turn,
// if any, leaves the policy: it goes on running, or asks again as a new
// program's turn. The Controller says whether there is one; finding it is
// O(requests), once per program ended with a turn registered (not per
// step).
func (p *programPolicy) release(id string) {
	if p.ctl.HasTurn(id) {
		for s := range p.reqs {
			if s.turn.held && s.turn.program == id {
				s.turn.held, s.turn.handed = false, false
				break
			}
		}
	}
	p.ctl.Release(id)
}

func (p *programPolicy) close() {
	for _, id := range p.ctl.IDs(nil) {
		p.release(id)
	}
}

// dropMostPinned ends the pinned program with the most tokens: its next
// turn arrives as a new program and recomputes what was evicted.
// O(programs), only when stuck.
func (p *programPolicy) dropMostPinned() bool {
	id, ok := p.ctl.MostPinned()
	if ok {
		p.release(id)
	}
	return ok
}

func (p *programPolicy) polls(waiting int) bool {
	if waiting > 0 {
		return true
	}
	m := p.ctl.Metrics()
	return m.Active+m.Paused > 0
}

func (p *programPolicy) pins(dst []kvpool.SeqID) []kvpool.SeqID { return p.ctl.Pins(dst) }

func (p *programPolicy) metrics(m *policy.Metrics) { *m = p.ctl.Metrics() }

// known is the one Controller method safe off the loop.
func (p *programPolicy) known(id string) (bool, error) { return p.ctl.Known(id), nil }

func (p *programPolicy) byState(m *policy.Metrics) map[string]int { return m.ByState() }

func (p *programPolicy) fail(err error) {
	if p.err == nil {
		p.err = fmt.Errorf("executor: program policy: %w", err)
	}
}

// check runs the Controller's own Check and proves the engine's side of
// the protocol against it: a request holds a program's turn exactly when
// the Controller says the program has one (HasTurn), one request per
// program; handed-over sequences are live.
func (p *programPolicy) check() error {
	if p.err != nil {
		return p.err
	}
	if err := p.ctl.Check(); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	registered, holder := 0, make(map[string]uint64)
	for s := range p.reqs {
		if s.turn.program == "" {
			continue
		}
		if err := p.checkTurn(s, holder); err != nil {
			return err
		}
		if s.turn.held {
			registered++
		}
	}
	turns := 0
	for _, id := range p.ctl.IDs(nil) {
		if p.ctl.HasTurn(id) {
			if _, ok := holder[id]; !ok {
				return fmt.Errorf("executor: program %q has a turn in the policy that no request holds", id)
			}
			turns++
		}
	}
	if registered != turns {
		return fmt.Errorf("executor: %d requests hold program turns, the policy has %d", registered, turns)
	}
	return nil
}

// checkTurn is check's part for s, a request of a program; holder maps each
// program to the request seen holding its turn.
func (p *programPolicy) checkTurn(s *seq, holder map[string]uint64) error {
	pid := s.turn.program
	if !s.turn.held {
		if s.turn.handed {
			return fmt.Errorf("executor: request %d: sequence handed to the policy without a turn", s.id)
		}
		return nil
	}
	info, ok := p.ctl.Program(pid)
	other, dup := holder[pid]
	holder[pid] = s.id
	switch {
	case dup:
		return fmt.Errorf("executor: requests %d and %d both hold the turn of program %q", other, s.id, pid)
	case !ok:
		return fmt.Errorf("executor: request %d holds a turn of program %q, which the policy does not know", s.id, pid)
	case !p.ctl.HasTurn(pid):
		return fmt.Errorf("executor: request %d holds a turn of program %q, which has none in the policy (%v/%v)",
			s.id, pid, info.State, info.Status)
	case s.turn.handed != info.Running || (s.turn.handed && (s.state != StateRunning || !s.kv.held)):
		return fmt.Errorf("executor: request %d (state %v) of program %q: handed over %v, the policy sees a live turn %v",
			s.id, s.state, pid, s.turn.handed, info.Running)
	case s.turn.handed && info.State != policy.StateActive:
		return fmt.Errorf("executor: request %d runs a turn of program %q, which is %v", s.id, pid, info.State)
	}
	return nil
}
