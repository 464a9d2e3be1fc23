package executor

import "github.com/turnstile-llm/turnstile/overlap"

// This file is a request's transitions out of RUNNING and its end (see the
// package doc's Lifecycle): each gives back exactly what the request holds,
// once.

// preempt sends running s back to the front of the queue to be recomputed:
// its blocks are released now (a later step may reuse them: steps execute in
// order), its seat retires if a step in flight still uses it.
func (e *Engine) preempt(s *seq) {
	e.adm.preempted(s) // before its sequence is released
	e.detach(s, true)
	// Its tokens so far become its prompt: hash the generated ones once now.
	s.kv.chain.Extend(s.tokens[s.kv.chain.Tokens():])
	s.state = StateWaiting
	s.inflight, s.kv.future, s.kv.computed, s.kv.tokens, s.seat.started = 0, false, 0, 0, false
	e.waiting = append(e.waiting, nil)
	copy(e.waiting[1:], e.waiting)
	e.waiting[0] = s
	e.m.Preemptions++
}

// leave ends running s with reason.
func (e *Engine) leave(s *seq, reason FinishReason) {
	e.adm.ended(s) // before its sequence is released: the program pins from it
	e.detach(s, false)
	e.end(s, reason)
}

// detach takes running s off the running list and gives back what it holds:
// its seat and blocks now, unless a step in
// flight still uses them, in which case the seat retires until that step's
// teardown (and the blocks with it, unless releaseKVNow).
func (e *Engine) detach(s *seq, releaseKVNow bool) {
	s.epoch++
	e.endGuide(s)
	for i, r := range e.running {
		if r == s {
			copy(e.running[i:], e.running[i+1:])
			e.running[len(e.running)-1] = nil
			e.running = e.running[:len(e.running)-1]
			break
		}
	}
	if releaseKVNow && s.kv.held {
		e.kv.Release(s.kv.seq)
		s.kv.held = false
	}
	if s.lastStep > e.processed {
		// In a step still in flight: retire until its teardown.
		_ = e.seats.Retire(s.seat.id) // live by construction; Check proves it
		st := &e.steps[s.lastStep%overlap.MaxInFlight]
		st.teardown = append(st.teardown, retired{seat: s.seat.id, kv: s.kv.seq, hasKV: s.kv.held})
		e.retiring++
	} else {
		_ = e.seats.Release(s.seat.id)
		if s.kv.held {
			e.kv.Release(s.kv.seq)
		}
	}
	s.seat.held, s.kv.held = false, false
}

// end delivers s's finish to its stream (and ends its program's turn, and
// the program itself when it asked to be released).
func (e *Engine) end(s *seq, reason FinishReason) {
	e.adm.ended(s)
	if s.turn.release {
		e.adm.release(s.turn.program)
	}
	e.uncountProgram(s)
	if reason == FinishAbort {
		s.state = StateAborted
		e.m.Aborted++
	} else {
		s.state = StateFinished
		e.m.Finished++
	}
	var tail []byte
	if reason != FinishStop {
		tail = s.out.text.flush()
	}
	stop := ""
	if reason == FinishStop {
		stop = s.out.text.matched
	}
	s.out.stream.end(tail, reason, s.out.usage, stop)
	if s.stopWatch != nil {
		s.stopWatch()
	}
}
