package executor

import (
	"errors"
	"fmt"
	"maps"

	"github.com/turnstile-llm/turnstile/policy"
)

// This file drives program admission (Config.Programs): the engine's calls
// into policy.Controller at each point of a request's lifecycle, and the
// policy's face to the server (ReleaseProgram, ProgramStates). Every method
// here but those two is loop-owned and a no-op for requests without a
// program id or an engine without a policy.
//
// Program state has one owner, the Controller: the engine keeps no copy of
// it. Which programs exist and whether a program has a turn registered are
// the Controller's answers (Known, HasTurn, IDs, MostPinned); the engine
// keeps only, per request, whether that request is the one holding its
// program's turn (turnState.held), and Check proves the two agree. The one
// index the engine keeps, progReqs, is of its own requests, not of
// programs (see HoldsProgram).

// tick runs the policy's step-boundary decisions. Nothing needs applying:
// admission asks Runnable per request, so a paused program's turn waits and
// a resumed one runs from this step on; a program ended by its lease is
// between turns (no request holds a turn of it: Check proves it).
func (e *Engine) tick() {
	if e.ctl == nil {
		return
	}
	e.ctl.Tick()
}

// admitTurn is program admission: it asks the policy whether waiting s may
// start now and reports whether it is held back. The first ask registers s
// as its program's turn; later asks are made only while the program is
// ACTIVE (Runnable), so a held turn costs O(1) per step.
func (e *Engine) admitTurn(s *seq, hit int) (hold bool) {
	pid := s.turn.program
	if !s.turn.held && e.ctl.HasTurn(pid) {
		return true // one turn per program: it waits for the current one
	}
	if s.turn.held && !e.ctl.Runnable(pid) {
		return true
	}
	ok, err := e.ctl.Admit(pid, len(s.tokens), hit)
	if err != nil {
		// A protocol error (an engine bug, which Check reports): run the
		// request outside the policy rather than strand it.
		e.polFail(fmt.Errorf("request %d: admit: %w", s.id, err))
		return false
	}
	s.turn.held = true
	return !ok
}

// polUnstart tells the policy that s, admitted by admitTurn, did not start
// (blocks, an error, or the tests' running cap): its turn stays REASONING
// and is asked again.
func (e *Engine) polUnstart(s *seq) {
	if s.turn.held && !s.turn.handed {
		if err := e.ctl.Preempted(s.turn.program); err != nil {
			e.polFail(fmt.Errorf("request %d: unstart: %w", s.id, err))
		}
	}
}

// polGrew reports s's appended tokens. The turn's sequence is handed to the
// policy (Started) only once its prompt is fully appended: until then the
// policy charges the turn its estimate (its tokens less its cached prefix),
// not the blocks that chunked prefill has appended so far, which would let
// B admit programs whose prompts the pool cannot hold. The program's pin,
// if any, is kept until then too.
func (e *Engine) polGrew(s *seq) {
	if !s.turn.held {
		return
	}
	var err error
	switch {
	case s.turn.handed:
		err = e.ctl.Grew(s.turn.program)
	case s.kv.tokens >= len(s.tokens):
		err = e.ctl.Started(s.turn.program, s.kv.seq)
		s.turn.handed = err == nil
	}
	if err != nil {
		e.polFail(fmt.Errorf("request %d: grow: %w", s.id, err))
	}
}

// polPreempted tells the policy that running s is preempted (before its
// sequence is released); its program stays ACTIVE and s keeps the turn.
func (e *Engine) polPreempted(s *seq) {
	if !s.turn.held {
		return
	}
	if err := e.ctl.Preempted(s.turn.program); err != nil {
		e.polFail(fmt.Errorf("request %d: preempt: %w", s.id, err))
	}
	s.turn.handed = false
}

// turnEnded ends s's turn in the policy: finished or aborted while running
// (called before the sequence is released, which the program pins from),
// or withdrawn while waiting.
func (e *Engine) turnEnded(s *seq) {
	if !s.turn.held {
		return
	}
	pid := s.turn.program
	if err := e.ctl.TurnEnded(pid); err != nil {
		e.polFail(fmt.Errorf("request %d: end turn: %w", s.id, err))
	}
	s.turn.held, s.turn.handed = false, false
}

// endProgramRequest is end's part: the turn ends (if not already), the
// program ends when s asked for it, and s stops counting for its program.
func (e *Engine) endProgramRequest(s *seq) {
	if s.turn.program == "" {
		return
	}
	if e.ctl != nil {
		e.turnEnded(s)
		if s.turn.release {
			e.releaseProgram(s.turn.program)
		}
	}
	e.mu.Lock()
	if n := e.progReqs[s.turn.program] - 1; n > 0 {
		e.progReqs[s.turn.program] = n
	} else {
		delete(e.progReqs, s.turn.program)
	}
	e.mu.Unlock()
}

// forgetTurn detaches the request holding id's turn from the policy; it
// goes on (running) or asks again as a new program's turn (waiting). The
// Controller says whether there is one; finding it is O(requests), once
// per program ended with a turn registered (not per step).
func (e *Engine) forgetTurn(id string) {
	if !e.ctl.HasTurn(id) {
		return
	}
	for _, list := range [...][]*seq{e.running, e.waiting} {
		for _, s := range list {
			if s.turn.held && s.turn.program == id {
				s.turn.held, s.turn.handed = false, false
				return
			}
		}
	}
}

// releaseProgram ends program id: its charge and pin are dropped.
func (e *Engine) releaseProgram(id string) {
	e.forgetTurn(id)
	e.ctl.Release(id)
}

// releaseAllPrograms ends every program (Close): nothing stays pinned.
func (e *Engine) releaseAllPrograms() {
	if e.ctl == nil {
		return
	}
	for _, id := range e.ctl.IDs(nil) {
		e.releaseProgram(id)
	}
}

// dropPin is the liveness rule: when nothing runs, retires or is in flight
// and the next request still lacks blocks, or a lone request cannot grow,
// only program pins hold the pool. It ends the pinned program with the most
// tokens (its next turn arrives as a new program and recomputes what was
// evicted) and reports whether it found one. O(programs), only when stuck.
func (e *Engine) dropPin() bool {
	if e.ctl == nil {
		return false
	}
	best, ok := e.ctl.MostPinned()
	if !ok {
		return false
	}
	e.releaseProgram(best)
	e.m.PinsDropped++
	return true
}

func (e *Engine) polFail(err error) {
	if e.polErr == nil {
		e.polErr = fmt.Errorf("executor: program policy: %w", err)
	}
}

// holdsPrograms reports whether the policy knows ACTIVE or PAUSED programs
// (whose leases and resumes are decided with time).
func (e *Engine) holdsPrograms() bool {
	m := e.ctl.Metrics()
	return m.Active+m.Paused > 0
}

// checkPrograms is Check's part for the policy: the Controller's own Check,
// and the engine's side of the protocol against the Controller, the owner:
// a request holds a program's turn exactly when the Controller says the
// program has one (HasTurn), one request per program; handed-over sequences
// are live; progReqs equals a recount of the engine's requests.
func (e *Engine) checkPrograms() error {
	if e.polErr != nil {
		return e.polErr
	}
	if e.ctl == nil {
		return e.checkProgramCounts()
	}
	if err := e.ctl.Check(); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	registered, reqs, holder := 0, make(map[string]int), make(map[string]uint64)
	check := func(s *seq) error {
		reqs[s.turn.program]++
		if !s.turn.held {
			if s.turn.handed {
				return fmt.Errorf("executor: request %d: sequence handed to the policy without a turn", s.id)
			}
			return nil
		}
		registered++
		info, ok := e.ctl.Program(s.turn.program)
		other, dup := holder[s.turn.program]
		holder[s.turn.program] = s.id
		switch {
		case dup:
			return fmt.Errorf("executor: requests %d and %d both hold the turn of program %q", other, s.id, s.turn.program)
		case !ok:
			return fmt.Errorf("executor: request %d holds a turn of program %q, which the policy does not know", s.id, s.turn.program)
		case !e.ctl.HasTurn(s.turn.program):
			return fmt.Errorf("executor: request %d holds a turn of program %q, which has none in the policy (%v/%v)",
				s.id, s.turn.program, info.State, info.Status)
		case s.turn.handed != info.Running || (s.turn.handed && (s.state != StateRunning || !s.kv.held)):
			return fmt.Errorf("executor: request %d (state %d) of program %q: handed over %v, the policy sees a live turn %v",
				s.id, s.state, s.turn.program, s.turn.handed, info.Running)
		case s.turn.handed && info.State != policy.StateActive:
			return fmt.Errorf("executor: request %d runs a turn of program %q, which is %v", s.id, s.turn.program, info.State)
		}
		return nil
	}
	for _, list := range [][]*seq{e.running, e.waiting} {
		for _, s := range list {
			if s.turn.program == "" {
				continue
			}
			if err := check(s); err != nil {
				return err
			}
		}
	}
	turns := 0
	for _, id := range e.ctl.IDs(nil) {
		if e.ctl.HasTurn(id) {
			if _, ok := holder[id]; !ok {
				return fmt.Errorf("executor: program %q has a turn in the policy that no request holds", id)
			}
			turns++
		}
	}
	if registered != turns {
		return fmt.Errorf("executor: %d requests hold program turns, the policy has %d", registered, turns)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.submitQ {
		if s.turn.program != "" {
			reqs[s.turn.program]++
		}
	}
	if !maps.Equal(reqs, e.progReqs) {
		return fmt.Errorf("executor: requests per program %v, counted %v", reqs, e.progReqs)
	}
	return nil
}

// ErrNoPrograms is returned by ReleaseProgram when the engine has no
// program policy (Config.Programs): it does not track programs.
var ErrNoPrograms = errors.New("executor: no program policy: programs are not tracked")

// ReleaseProgram ends program id at the next step boundary (the server's
// DELETE /v1/programs/{id}): its pinned KV is unpinned and its charge
// dropped; a turn in flight finishes outside the policy, a waiting one
// later asks as a new program's. found is false when neither the policy
// nor a request in the engine knows id; without a program policy the error
// is ErrNoPrograms. Safe from any goroutine.
func (e *Engine) ReleaseProgram(id string) (found bool, err error) {
	if e.ctl == nil {
		return false, ErrNoPrograms
	}
	known := e.ctl.Known(id) // the one Controller method safe off the loop
	e.mu.Lock()
	found = known || e.progReqs[id] > 0
	if found && !e.closed {
		e.releaseQ = append(e.releaseQ, id)
	}
	e.mu.Unlock()
	if found {
		e.Wake()
	}
	return found, nil
}

// ProgramStates counts programs by state ("waiting", "active", "paused")
// with the pauses and resumes since start, as of the last step boundary.
// Without a program policy byState is nil.
func (e *Engine) ProgramStates() (byState map[string]int, pauses, resumes uint64) {
	m := e.Snapshot().Programs
	if e.ctl == nil {
		return nil, 0, 0
	}
	return m.ByState(), m.Pauses, m.Resumes
}
