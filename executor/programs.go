package executor

import "errors"

// This file is the engine's side of programs: the program policy's face to
// the server (ReleaseProgram, ProgramStates), the liveness rule that ends a
// pinned program, and progReqs, the engine's index of its own requests per
// program (see HoldsProgram). The policy itself is the admission hook
// (admission.go).

// dropPin is the liveness rule: when nothing runs, retires or is in flight
// and the next request still lacks blocks, or a lone request cannot grow,
// only program pins hold the pool. It ends the pinned program with the most
// tokens (Metrics.PinsDropped) and reports whether it found one.
func (e *Engine) dropPin() bool {
	if !e.adm.dropMostPinned() {
		return false
	}
	e.m.PinsDropped++
	return true
}

// uncountProgram takes ended s out of progReqs.
func (e *Engine) uncountProgram(s *seq) {
	if s.turn.program == "" {
		return
	}
	e.mu.Lock()
	if n := e.progReqs[s.turn.program] - 1; n > 0 {
		e.progReqs[s.turn.program] = n
	} else {
		delete(e.progReqs, s.turn.program)
	}
	e.mu.Unlock()
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
	known, err := e.adm.known(id)
	if err != nil {
		return false, err
	}
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
	return e.adm.byState(&m), m.Pauses, m.Resumes
}
