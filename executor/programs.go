package executor

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/turnstile-llm/turnstile/policy"
)

// This file drives the program policy (Config.Programs): the engine's calls
// into policy.Controller at each point of a request's lifecycle, and the
// policy's face to the server (ReleaseProgram, ProgramStates). Every method
// here but those two is loop-owned and a no-op for requests without a
// program id or an engine without a policy.

// tick runs the policy's step-boundary decisions. Nothing needs applying:
// admission asks Runnable per request, so a paused program's turn waits and
// a resumed one runs from this step on.
func (e *Engine) tick() {
	if e.ctl == nil {
		return
	}
	d := e.ctl.Tick()
	for _, id := range d.Expired {
		// A program with a turn registered is never on a lease; be safe.
		e.forgetTurn(id)
		e.noteProgram(id)
	}
}

// polAdmit asks the policy whether waiting s may start now and reports
// whether it is held back. The first ask registers s as its program's turn;
// later asks are made only while the program is ACTIVE (Runnable), so a
// held turn costs O(1) per step.
func (e *Engine) polAdmit(s *seq, hit int) (hold bool) {
	pid := s.programID
	if t := e.turns[pid]; t != nil && t != s {
		return true // one turn per program: it waits for the current one
	}
	if s.inPolicy && !e.ctl.Runnable(pid) {
		return true
	}
	ok, err := e.ctl.Admit(pid, len(s.tokens), hit)
	if err != nil {
		// A protocol error (an engine bug, which Check reports): run the
		// request outside the policy rather than strand it.
		e.polFail(fmt.Errorf("request %d: admit: %w", s.id, err))
		return false
	}
	if !s.inPolicy {
		s.inPolicy = true
		e.turns[pid] = s
		e.noteProgram(pid)
	}
	return !ok
}

// polUnstart tells the policy that s, admitted by polAdmit, did not start
// (blocks, the Admission hook, or an error): its turn stays REASONING and is
// asked again.
func (e *Engine) polUnstart(s *seq) {
	if s.inPolicy && !s.polLive {
		if err := e.ctl.Preempted(s.programID); err != nil {
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
	if !s.inPolicy {
		return
	}
	var err error
	switch {
	case s.polLive:
		err = e.ctl.Grew(s.programID)
	case s.kvTokens >= len(s.tokens):
		err = e.ctl.Started(s.programID, s.kvSeq)
		s.polLive = err == nil
	}
	if err != nil {
		e.polFail(fmt.Errorf("request %d: grow: %w", s.id, err))
	}
}

// polPreempted tells the policy that running s is preempted (before its
// sequence is released); its program stays ACTIVE and s keeps the turn.
func (e *Engine) polPreempted(s *seq) {
	if !s.inPolicy {
		return
	}
	if err := e.ctl.Preempted(s.programID); err != nil {
		e.polFail(fmt.Errorf("request %d: preempt: %w", s.id, err))
	}
	s.polLive = false
}

// turnEnded ends s's turn in the policy: finished or aborted while running
// (called before the sequence is released, which the program pins from),
// or withdrawn while waiting.
func (e *Engine) turnEnded(s *seq) {
	if !s.inPolicy {
		return
	}
	pid := s.programID
	if err := e.ctl.TurnEnded(pid); err != nil {
		e.polFail(fmt.Errorf("request %d: end turn: %w", s.id, err))
	}
	s.inPolicy, s.polLive = false, false
	delete(e.turns, pid)
	e.noteProgram(pid)
}

// endProgramRequest is end's part: the turn ends (if not already), the
// program ends when s asked for it, and s stops counting for its program.
func (e *Engine) endProgramRequest(s *seq) {
	if s.programID == "" {
		return
	}
	if e.ctl != nil {
		e.turnEnded(s)
		if s.release {
			e.releaseProgram(s.programID)
		}
	}
	e.mu.Lock()
	if n := e.progReqs[s.programID] - 1; n > 0 {
		e.progReqs[s.programID] = n
	} else {
		delete(e.progReqs, s.programID)
	}
	e.mu.Unlock()
}

// forgetTurn detaches the request holding id's turn from the policy; it
// goes on (running) or asks again as a new program's turn (waiting).
func (e *Engine) forgetTurn(id string) {
	if t := e.turns[id]; t != nil {
		t.inPolicy, t.polLive = false, false
		delete(e.turns, id)
	}
}

// releaseProgram ends program id: its charge and pin are dropped.
func (e *Engine) releaseProgram(id string) {
	e.forgetTurn(id)
	e.ctl.Release(id)
	e.noteProgram(id)
}

// releaseAllPrograms ends every program (Close): nothing stays pinned.
func (e *Engine) releaseAllPrograms() {
	if e.ctl == nil {
		return
	}
	// The loop is progKnown's only writer: reading it here needs no lock.
	for _, id := range slices.Sorted(maps.Keys(e.progKnown)) {
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
	best, most := "", -1
	for id := range e.progKnown {
		if p, ok := e.ctl.Program(id); ok && p.Pinned && (p.Tokens > most || p.Tokens == most && id < best) {
			best, most = id, p.Tokens
		}
	}
	if most < 0 {
		return false
	}
	e.releaseProgram(best)
	e.m.PinsDropped++
	return true
}

// noteProgram mirrors whether the policy knows id, for ReleaseProgram.
func (e *Engine) noteProgram(id string) {
	_, known := e.ctl.Program(id)
	e.mu.Lock()
	if known {
		e.progKnown[id] = struct{}{}
	} else {
		delete(e.progKnown, id)
	}
	e.mu.Unlock()
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
// and the engine's side of the protocol (one registered request per
// program, handed-over sequences that are live, the mirrors exact).
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
	registered, reqs := 0, make(map[string]int)
	check := func(s *seq) error {
		reqs[s.programID]++
		if !s.inPolicy {
			if s.polLive {
				return fmt.Errorf("executor: request %d: sequence handed to the policy without a turn", s.id)
			}
			return nil
		}
		registered++
		info, ok := e.ctl.Program(s.programID)
		switch {
		case e.turns[s.programID] != s:
			return fmt.Errorf("executor: request %d holds a turn of program %q that is filed under another request", s.id, s.programID)
		case !ok:
			return fmt.Errorf("executor: request %d holds a turn of program %q, which the policy does not know", s.id, s.programID)
		case s.polLive != info.Running || (s.polLive && (s.state != StateRunning || !s.hasKV)):
			return fmt.Errorf("executor: request %d (state %d) of program %q: handed over %v, the policy sees a live turn %v",
				s.id, s.state, s.programID, s.polLive, info.Running)
		case s.polLive && info.State != policy.StateActive:
			return fmt.Errorf("executor: request %d runs a turn of program %q, which is %v", s.id, s.programID, info.State)
		}
		return nil
	}
	for _, list := range [][]*seq{e.running, e.waiting} {
		for _, s := range list {
			if s.programID == "" {
				continue
			}
			if err := check(s); err != nil {
				return err
			}
		}
	}
	if registered != len(e.turns) {
		return fmt.Errorf("executor: %d requests hold program turns, %d turns filed", registered, len(e.turns))
	}
	m := e.ctl.Metrics()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.submitQ {
		if s.programID != "" {
			reqs[s.programID]++
		}
	}
	if n := m.Waiting + m.Active + m.Paused; n != len(e.progKnown) {
		return fmt.Errorf("executor: the policy knows %d programs, the engine's mirror %d", n, len(e.progKnown))
	}
	for id := range e.progKnown {
		if _, ok := e.ctl.Program(id); !ok {
			return fmt.Errorf("executor: program %q is mirrored but unknown to the policy", id)
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
	e.mu.Lock()
	_, known := e.progKnown[id]
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
	return map[string]int{"waiting": m.Waiting, "active": m.Active, "paused": m.Paused}, m.Pauses, m.Resumes
}

// checkProgramCounts recounts requests per program id (running, waiting,
// not yet drained) against progReqs, for an engine without a policy.
func (e *Engine) checkProgramCounts() error {
	reqs := make(map[string]int)
	for _, list := range [][]*seq{e.running, e.waiting} {
		for _, s := range list {
			if s.programID != "" {
				reqs[s.programID]++
			}
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.submitQ {
		if s.programID != "" {
			reqs[s.programID]++
		}
	}
	if !maps.Equal(reqs, e.progReqs) {
		return fmt.Errorf("executor: requests per program %v, counted %v", reqs, e.progReqs)
	}
	return nil
}
