package executor

import (
	"errors"
	"fmt"

	"github.com/turnstile-llm/turnstile/kvpool"
	"github.com/turnstile-llm/turnstile/seatpool"
	"github.com/turnstile-llm/turnstile/step"
)

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
	masks    stepMasks // the constrained sequences' token masks
}

func (st *stepRecord) reset(n uint64) {
	st.n = n
	st.batch.Reset()
	st.entries = st.entries[:0]
	st.masks.reset()
}

// plan fills st (step st.n) under the step budgets: decodes first, then the
// next chunk of partially prefilled requests, then admissions.
func (e *Engine) plan(st *stepRecord) error {
	n := st.n
	bs := e.kv.BlockSize()
	tokBudget, seqBudget := e.tokBudget, e.cfg.MaxBatchSize
	if e.cfg.Ablation.ChargeRetiring {
		tokBudget -= e.retiring
		seqBudget -= e.retiring
	}

	// Pass 1: decodes, oldest admission first.
	for i := 0; i < len(e.running) && tokBudget > 0 && seqBudget > 0; i++ {
		s := e.running[i]
		switch {
		case s.inflight > 0:
			// Sampled in the step in flight: decode its future token.
			if e.finishKnown(s) {
				continue // its last token is in flight: never planned into this step
			}
			// Its slot is reserved in kvpool (a block is allocated when it
			// opens one); the value is filled in when the step in flight is
			// processed, and the runner writes the KV into s's own block.
			p := len(s.tokens)
			opens := len(e.rows[s.seat.id])*bs <= p
			if err := e.kv.Reserve(s.kv.seq, 1); err != nil {
				var tooLarge *kvpool.TooLargeError
				if errors.Is(err, kvpool.ErrOutOfBlocks) || errors.As(err, &tooLarge) {
					// No block to spare: decode it next step with the known
					// token, where grow preempts or finishes it.
					continue
				}
				return fmt.Errorf("executor: request %d: reserving its future token's slot: %w", s.id, err)
			}
			if opens {
				e.m.Reservations++
			}
			e.syncRow(s)
			e.add(st, s, nil, p)
			s.kv.future = true
			s.kv.computed = p + 1
		case s.kv.computed == len(s.tokens)-1:
			ok, err := e.grow(s, s.tokens[s.kv.computed:], n)
			if err != nil {
				return err
			}
			if !ok {
				i-- // s left the running list
				continue
			}
			e.add(st, s, s.tokens[s.kv.computed:], s.kv.computed)
			s.kv.computed++
		default:
			continue
		}
		tokBudget--
		seqBudget--
	}

	// Pass 2: the next chunk of partially prefilled requests.
	for i := 0; i < len(e.running) && tokBudget > 0 && seqBudget > 0; i++ {
		s := e.running[i]
		if s.inflight > 0 || s.lastStep == n || s.kv.computed >= len(s.tokens)-1 {
			continue
		}
		chunk := min(tokBudget, len(s.tokens)-s.kv.computed)
		ok, err := e.grow(s, s.tokens[s.kv.computed:s.kv.computed+chunk], n)
		if err != nil {
			return err
		}
		if !ok {
			i--
			continue
		}
		e.add(st, s, s.tokens[s.kv.computed:s.kv.computed+chunk], s.kv.computed)
		s.kv.computed += chunk
		tokBudget -= chunk
		seqBudget--
	}

	// Pass 3: admissions in queue order. A request the program policy
	// holds back is skipped (a paused program must not block the queue);
	// any other refusal stops admissions, keeping arrival order.
	//
	// A running request whose last token is in flight with a finish known in
	// advance (max tokens, context) is never planned again: like a retiring
	// request it holds its seat only until teardown, so it is not charged
	// against admission either — unless Ablation.ChargeRetiring charges both.
	finishing := 0
	if !e.cfg.Ablation.ChargeRetiring && len(e.waiting) > 0 {
		for _, s := range e.running {
			if s.inflight > 0 && e.finishKnown(s) {
				finishing++
			}
		}
	}
	for i := 0; i < len(e.waiting) && tokBudget > 0 && seqBudget > 0; {
		live := len(e.running) - finishing
		if e.cfg.Ablation.ChargeRetiring {
			live += e.retiring
		}
		if live >= e.cfg.MaxBatchSize || e.seats.Free() == 0 {
			break
		}
		chunk, out, err := e.admit(st, i, tokBudget)
		if err != nil {
			return err
		}
		switch out {
		case admitted:
			tokBudget -= chunk
			seqBudget--
			continue // waiting[i] is the next request now
		case held:
			i++
			continue
		case noBlocks:
			// Nothing runs, retires or is in flight, so only program pins
			// hold blocks: end one and try again (the liveness rule).
			if len(e.running) == 0 && e.retiring == 0 && e.pipe.InFlight() == 0 && e.dropPin() {
				continue
			}
		}
		break
	}
	e.grouper.Group(&st.batch, bs)
	for _, g := range st.batch.Groups {
		e.m.CascadeGroups++
		e.m.CascadeSharedReads += uint64(g.Count-1) * uint64(g.SharedBlocks)
	}
	return nil
}

// admitOutcome is what admit did with a waiting request.
type admitOutcome uint8

const (
	admitted admitOutcome = iota
	held                  // the program policy holds it back: skip it
	noBlocks              // too few free blocks
	refused               // an error, or the tests' running cap
)

// admit tries to start waiting[i] with a first chunk of at most budget new
// tokens and returns the chunk's size when admitted.
func (e *Engine) admit(st *stepRecord, i int, budget int) (int, admitOutcome, error) {
	s := e.waiting[i]
	bs := e.kv.BlockSize()
	if s.kv.chain.Tokens() != len(s.tokens) {
		return 0, refused, fmt.Errorf("executor: request %d: prefix chain covers %d tokens of %d", s.id, s.kv.chain.Tokens(), len(s.tokens))
	}
	hit := e.kv.PeekChain(&s.kv.chain)
	if e.adm.admit(s, hit) {
		return 0, held, nil
	}
	// The policy let s go: a start that fails from here on is preempted.
	chunk := min(budget, len(s.tokens)-hit)
	// The first chunk's new blocks (approximate: before the prefix match).
	if need := (hit+chunk+bs-1)/bs - hit/bs; need > e.kv.Available() {
		e.adm.preempted(s)
		return 0, noBlocks, nil
	}
	if e.testRunningCap > 0 && len(e.running) >= e.testRunningCap {
		e.adm.preempted(s)
		return 0, refused, nil
	}
	kvs := e.kv.NewSeq(s.kv.keys)
	got, err := e.kv.MatchChain(kvs, &s.kv.chain)
	if err != nil {
		e.kv.Release(kvs)
		e.adm.preempted(s)
		return 0, refused, fmt.Errorf("executor: prefix lookup for request %d: %w", s.id, err)
	}
	chunk = min(budget, len(s.tokens)-got)
	if err := e.kv.Append(kvs, s.tokens[got:got+chunk]); err != nil {
		e.kv.Release(kvs)
		e.adm.preempted(s)
		if errors.Is(err, kvpool.ErrOutOfBlocks) {
			return 0, noBlocks, nil
		}
		return 0, refused, fmt.Errorf("executor: admitting request %d: %w", s.id, err)
	}
	seat, err := e.seats.Acquire()
	if err != nil {
		e.kv.Release(kvs)
		e.adm.preempted(s)
		return 0, refused, fmt.Errorf("executor: admitting request %d with %d running and %d retiring: %w",
			s.id, len(e.running), e.retiring, err)
	}
	copy(e.waiting[i:], e.waiting[i+1:])
	e.waiting[len(e.waiting)-1] = nil
	e.waiting = e.waiting[:len(e.waiting)-1]

	s.state = StateRunning
	s.kv.seq, s.kv.held, s.kv.tokens = kvs, true, got+chunk
	s.seat.id, s.seat.held, s.seat.started = seat, true, false
	e.rows[seat] = e.rows[seat][:0]
	e.syncRow(s)
	if !s.everRan {
		s.everRan = true
		s.out.usage.CachedPrompt = got
		e.m.PromptTokens += uint64(s.promptLen)
		e.m.PrefixHitTokens += uint64(got)
	}
	e.running = append(e.running, s)
	e.add(st, s, s.tokens[got:got+chunk], got)
	s.kv.computed = got + chunk
	e.adm.started(s)
	return chunk, admitted, nil
}

// grow appends toks (known values) to s's KV sequence, preempting the newest
// running requests not in step n when blocks run out. It returns false when
// s itself left the running list (preempted, or finished "length" because it
// cannot grow even alone).
func (e *Engine) grow(s *seq, toks []int32, n uint64) (bool, error) {
	for {
		err := e.kv.Append(s.kv.seq, toks)
		if err == nil {
			s.kv.tokens += len(toks)
			e.syncRow(s)
			e.adm.grew(s)
			return true, nil
		}
		var tooLarge *kvpool.TooLargeError
		if errors.As(err, &tooLarge) {
			e.leave(s, FinishLength)
			return false, nil
		}
		if !errors.Is(err, kvpool.ErrOutOfBlocks) {
			return false, fmt.Errorf("executor: growing request %d by %d tokens: %w", s.id, len(toks), err)
		}
		victim := s
		for i := len(e.running) - 1; i >= 0; i-- {
			if v := e.running[i]; v.lastStep != n || v == s {
				victim = v
				break
			}
		}
		if victim == s {
			if len(e.running) == 1 && e.retiring == 0 {
				// Alone and still short: only program pins can hold the
				// rest (the liveness rule); else no preemption can help.
				if e.dropPin() {
					continue
				}
				e.leave(s, FinishLength)
			} else {
				e.preempt(s)
			}
			return false, nil
		}
		e.preempt(victim)
	}
}

// syncRow copies s's new block ids into its seat's block-table row. Ids
// already in the row never change (kvpool does not swap blocks), so a step
// in flight that reads a prefix of the row is never disturbed.
func (e *Engine) syncRow(s *seq) {
	blocks := e.kv.Blocks(s.kv.seq)
	row := e.rows[s.seat.id]
	if len(blocks) > len(row) {
		e.rows[s.seat.id] = append(row, blocks[len(row):]...)
	}
}

// add appends s's new tokens (nil: one future token) at positions
// [first, first+len) to st, with s's block-table row.
func (e *Engine) add(st *stepRecord, s *seq, toks []int32, first int) {
	b := &st.batch
	start := int32(len(b.Tokens))
	num := len(toks)
	if toks == nil {
		num = 1
		b.Tokens = append(b.Tokens, step.FutureToken)
		b.Positions = append(b.Positions, int32(first))
	} else {
		for j, t := range toks {
			b.Tokens = append(b.Tokens, t)
			b.Positions = append(b.Positions, int32(first+j))
		}
	}
	ctxLen := first + num
	bs := e.kv.BlockSize()
	table := e.rows[s.seat.id][:(ctxLen+bs-1)/bs]
	sb := step.SeqBatch{
		Seat:       int32(s.seat.id),
		TokenStart: start,
		NumTokens:  int32(num),
		ContextLen: int32(ctxLen),
		BlockTable: table,
		Sample:     toks == nil || ctxLen == len(s.tokens),
		Start:      !s.seat.started,
		Params:     &s.params,
	}
	if sb.Start {
		// After a preemption its generated tokens are part of the context
		// recomputed now; the runner must still count them as output.
		sb.History = s.tokens
		sb.NumOutput = int32(len(s.tokens) - s.promptLen)
	}
	b.Seqs = append(b.Seqs, sb)
	st.entries = append(st.entries, entry{s: s, epoch: s.epoch})
	s.seat.started = true
	s.lastStep = st.n
	if sb.Sample {
		s.inflight++
	}
}

// finishKnown: the token in flight for s will be its last (max tokens or
// model context), so s must not be planned again.
func (e *Engine) finishKnown(s *seq) bool {
	if s.out.maxTokens > 0 && s.generated+s.inflight >= s.out.maxTokens {
		return true
	}
	return len(s.tokens)+s.inflight >= e.capacity.MaxContext
}
