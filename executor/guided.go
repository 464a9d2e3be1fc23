package executor

import (
	"errors"
	"fmt"
	"time"

	"github.com/turnstile-llm/turnstile/step"
)

// This file is structured output's side of the step loop: the guided
// decoder (Config.Guide) holds a matcher per constrained request's seat;
// each step's masks are a step.Masks the runner waits on before sampling.
//
// A constrained request's mask for step n+1 depends on the token it
// sampled in step n. Under overlap step n+1 is planned and launched before
// step n's tokens reach the host, so planMasks fills at plan time only the
// masks whose request has no token in flight, and fillPending fills the
// others right after step n is processed (its tokens accepted into the
// matchers), while step n+1's forward pass runs. Without overlap every
// mask is ready when its step is launched.

// stepMasks is one step's step.Masks, aligned with its batch.
type stepMasks struct {
	rows    [][]uint64
	pending []int // Seqs indices filled when the previous step is processed
	done    chan struct{}
	err     error
}

func (m *stepMasks) Wait() ([][]uint64, error) {
	<-m.done
	return m.rows, m.err
}

// reset forgets the masks of the step record's previous use.
func (m *stepMasks) reset() {
	m.rows = m.rows[:0]
	m.pending = m.pending[:0]
	m.done, m.err = nil, nil
}

// ready publishes the masks (or err) to the runner, once.
func (m *stepMasks) ready(err error) {
	if m.done == nil {
		return
	}
	select {
	case <-m.done:
	default:
		m.err = err
		close(m.done)
	}
}

// errMasksAbandoned fails a step whose masks will never be computed (the
// engine stopped with the step in flight).
var errMasksAbandoned = errors.New("executor: the engine stopped before this step's token masks were computed")

// planMasks attaches the masks of planned step st: a matcher is started
// for a constrained request's seat on its first sampled step (and fed the
// output it already has, after a preemption); masks of requests whose
// last token is known are filled now, the others after the step in flight
// is processed.
func (e *Engine) planMasks(st *stepRecord) {
	g := e.cfg.Guide
	if g == nil {
		return
	}
	m := &st.masks
	constrained := false
	for i, en := range st.entries {
		s := en.s
		sb := &st.batch.Seqs[i]
		m.rows = append(m.rows, nil)
		if s.grammar == nil || !sb.Sample || s.epoch != en.epoch {
			continue
		}
		constrained = true
		sb.Constrained = true
		if !g.Active(sb.Seat) {
			if err := e.startGuide(s); err != nil {
				e.guideFailed(s, err)
				continue
			}
		}
		if sb.NumTokens == 1 && st.batch.Tokens[sb.TokenStart] == step.FutureToken {
			m.pending = append(m.pending, i)
			continue
		}
		e.fillMask(st, i)
	}
	if !constrained {
		m.rows = m.rows[:0]
		return
	}
	st.batch.Masks = m
	m.done = make(chan struct{})
	if len(m.pending) == 0 {
		m.ready(nil)
	}
}

// startGuide gives s's seat a matcher and replays s's output so far.
func (e *Engine) startGuide(s *seq) error {
	g := e.cfg.Guide
	seat := int32(s.seat.id)
	if err := g.Start(seat, s.grammar); err != nil {
		return err
	}
	for _, tok := range s.tokens[s.promptLen:] {
		if err := g.Accept(seat, tok); err != nil {
			return fmt.Errorf("replaying its output after a preemption: %w", err)
		}
	}
	return nil
}

// fillMask computes row i of st's masks (nil when its request left).
func (e *Engine) fillMask(st *stepRecord, i int) {
	en := st.entries[i]
	s := en.s
	if s.epoch != en.epoch || s.state != StateRunning {
		return // left since it was planned: its output is discarded
	}
	t0 := time.Now()
	row, err := e.cfg.Guide.Fill(st.batch.Seqs[i].Seat)
	e.m.GuidedMasks++
	e.m.GuidedMaskTime += time.Since(t0)
	if err != nil {
		e.guideFailed(s, err)
		return
	}
	st.masks.rows[i] = row
}

// fillPending fills the masks of step n+1 that waited for step n's tokens
// (called right after step n is processed) and releases the runner.
func (e *Engine) fillPending(n uint64) {
	if e.launched <= n {
		return
	}
	st := &e.steps[(n+1)%uint64(len(e.steps))]
	if st.n != n+1 || st.masks.done == nil {
		return
	}
	for _, i := range st.masks.pending {
		e.fillMask(st, i)
	}
	st.masks.pending = st.masks.pending[:0]
	st.masks.ready(nil)
}

// abandonMasks releases every runner still waiting for masks, with err:
// on the way out of the loop nobody will fill them.
func (e *Engine) abandonMasks(err error) {
	for i := range e.steps {
		e.steps[i].masks.ready(err)
	}
}

// guideFailed ends a constrained request whose matcher failed (a grammar
// too ambiguous to follow, or a token it refused): its step output is
// discarded, its stream ends as aborted.
func (e *Engine) guideFailed(s *seq, err error) {
	if s.state != StateRunning {
		return
	}
	e.m.GuidedFailures++
	s.out.stream.fail(fmt.Errorf("structured output: %w", err))
	e.leave(s, FinishAbort)
}

// acceptGuided feeds a delivered token to s's matcher.
func (e *Engine) acceptGuided(s *seq, tok int32) {
	g := e.cfg.Guide
	if g == nil || s.grammar == nil || !g.Active(int32(s.seat.id)) {
		return
	}
	if err := g.Accept(int32(s.seat.id), tok); err != nil {
		e.guideFailed(s, err)
	}
}

// endGuide frees s's matcher slot (detach).
func (e *Engine) endGuide(s *seq) {
	if g := e.cfg.Guide; g != nil && s.grammar != nil {
		_ = g.End(int32(s.seat.id)) // the seat is s's own; End of a free slot is a no-op
	}
}
