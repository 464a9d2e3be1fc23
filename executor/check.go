package executor

import (
	"fmt"
	"maps"

	"github.com/turnstile-llm/turnstile/overlap"
	"github.com/turnstile-llm/turnstile/seatpool"
)

// Check verifies that kvpool, seatpool and the engine's bookkeeping agree:
// every running request holds one live seat and its KV sequence with the
// token count the engine recorded; every retiring seat is awaiting a
// teardown; no step in flight uses a seat given back; the program policy
// and the requests' turns agree, and progReqs counts the requests;
// referenced blocks are exactly those the engine's sequences and the
// policy's pins hold. It is loop-owned (call it between Steps, not during Run) and allocates.
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
	if err := e.checkGuide(); err != nil {
		return err
	}
	ids := e.scratch[:0]
	seatOwner := make(map[seatpool.Seat]string)
	for _, s := range e.running {
		switch {
		case s.state != StateRunning:
			return fmt.Errorf("executor: request %d in the running list in state %v", s.id, s.state)
		case !s.seat.held || !s.kv.held:
			return fmt.Errorf("executor: running request %d without seat (%v) or KV (%v)", s.id, s.seat.held, s.kv.held)
		case e.seats.State(s.seat.id) != seatpool.Live:
			return fmt.Errorf("executor: running request %d holds seat %d in state %v", s.id, s.seat.id, e.seats.State(s.seat.id))
		case e.kv.Tokens(s.kv.seq) != s.kv.tokens:
			return fmt.Errorf("executor: request %d: kvpool has %d tokens, engine recorded %d", s.id, e.kv.Tokens(s.kv.seq), s.kv.tokens)
		case s.kv.computed != s.kv.tokens+b2i(s.kv.future):
			return fmt.Errorf("executor: request %d: computed %d != kv tokens %d + future %v",
				s.id, s.kv.computed, s.kv.tokens, s.kv.future)
		case e.kv.Reserved(s.kv.seq) != b2i(s.kv.future):
			return fmt.Errorf("executor: request %d: kvpool has %d reserved slots, future input %v",
				s.id, e.kv.Reserved(s.kv.seq), s.kv.future)
		case s.kv.computed > len(s.tokens)+s.inflight:
			return fmt.Errorf("executor: request %d: %d positions computed for %d tokens", s.id, s.kv.computed, len(s.tokens))
		case len(e.rows[s.seat.id]) != len(e.kv.Blocks(s.kv.seq)) || len(e.rows[s.seat.id])*e.kv.BlockSize() < s.kv.computed:
			return fmt.Errorf("executor: request %d: block-table row of %d blocks (kvpool: %d) for %d positions",
				s.id, len(e.rows[s.seat.id]), len(e.kv.Blocks(s.kv.seq)), s.kv.computed)
		}
		if o, dup := seatOwner[s.seat.id]; dup {
			return fmt.Errorf("executor: seat %d held by %s and request %d", s.seat.id, o, s.id)
		}
		seatOwner[s.seat.id] = fmt.Sprintf("request %d", s.id)
		ids = append(ids, s.kv.seq)
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
	if err := e.adm.check(); err != nil {
		return err
	}
	if err := e.checkProgramCounts(); err != nil {
		return err
	}
	// The program policy's pins reference blocks too: the engine's
	// sequences and the pins together own every referenced block.
	ids = e.adm.pins(ids)
	if got, want := e.kv.Referenced(), e.kv.DistinctBlocks(ids); got != want {
		return fmt.Errorf("executor: kvpool references %d blocks, the engine's sequences and program pins hold %d", got, want)
	}
	for _, s := range e.waiting {
		if s.state != StateWaiting || s.seat.held || s.kv.held {
			return fmt.Errorf("executor: waiting request %d in state %v holds seat %v / KV %v", s.id, s.state, s.seat.held, s.kv.held)
		}
		// Its chain must cover exactly its tokens (prompt, plus generated
		// ones after a preemption) and find what hashing them again finds.
		if s.kv.chain.Tokens() != len(s.tokens) || s.kv.chain.Keys() != s.kv.keys {
			return fmt.Errorf("executor: waiting request %d: prefix chain covers %d tokens under %+v, it has %d under %+v",
				s.id, s.kv.chain.Tokens(), s.kv.chain.Keys(), len(s.tokens), s.kv.keys)
		}
		// Hashing again is O(tokens): done for the head, which admission looks up next.
		if s != e.waiting[0] {
			continue
		}
		if got, want := e.kv.PeekChain(&s.kv.chain), e.kv.PeekPrefix(s.kv.keys, s.tokens); got != want {
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
				if s := en.s; s.state != StateRunning || s.epoch != en.epoch || !s.seat.held || s.seat.id != seat {
					return fmt.Errorf("executor: step %d in flight uses seat %d for request %d, which has left it (state %v, epoch %d → %d, seat %d held %v): the live seat was released and taken again",
						n, seat, s.id, s.state, en.epoch, s.epoch, s.seat.id, s.seat.held)
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

// checkProgramCounts recounts requests per program id (running, waiting,
// not yet drained) against progReqs.
func (e *Engine) checkProgramCounts() error {
	reqs := make(map[string]int)
	for s := range e.requests {
		if s.turn.program != "" {
			reqs[s.turn.program]++
		}
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

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkGuide proves the guided decoder's slots: every slot holding a
// matcher is the seat of a running constrained request (a request leaves
// its slot when it leaves RUNNING), and its matcher has read exactly the
// request's output known on the host.
func (e *Engine) checkGuide() error {
	g := e.cfg.Guide
	if g == nil {
		return nil
	}
	if err := g.Check(); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	owned := 0
	for _, s := range e.running {
		seat := int32(s.seat.id)
		if !g.Active(seat) {
			continue
		}
		if s.grammar == nil {
			return fmt.Errorf("executor: seat %d holds a matcher, but its request %d has no grammar", seat, s.id)
		}
		if got, want := g.Matcher(seat).Accepted(), len(s.tokens)-s.promptLen; got != want {
			return fmt.Errorf("executor: request %d's matcher read %d tokens, its output has %d", s.id, got, want)
		}
		owned++
	}
	if owned != g.Live() {
		return fmt.Errorf("executor: %d matcher slots held, %d by running requests", g.Live(), owned)
	}
	return nil
}
