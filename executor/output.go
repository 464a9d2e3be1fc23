package executor

import (
	"fmt"
	"time"

	"github.com/turnstile-llm/turnstile/sampling"
)

// deliver hands each token step st sampled, as of now, to its request,
// when the request is still in the state the step was planned in (same
// epoch): the token joins its tokens, fills its reserved input slot when
// it had one, and goes to its output (emit).
func (e *Engine) deliver(st *stepRecord, now time.Time) error {
	for i, en := range st.entries {
		s := en.s
		if en.epoch != s.epoch || !st.batch.Seqs[i].Sample {
			continue
		}
		s.inflight--
		tok := st.out.Tokens[i]
		if tok < 0 || int(tok) >= e.capacity.Vocab {
			return fmt.Errorf("executor: step %d: runner sampled token %d for request %d, outside vocab %d",
				st.n, tok, s.id, e.capacity.Vocab)
		}
		s.tokens = append(s.tokens, tok)
		s.generated++
		if s.kv.future {
			// The value of its reserved input slot in the next step.
			if err := e.kv.Fill(s.kv.seq, s.tokens[len(s.tokens)-1:]); err != nil {
				return fmt.Errorf("executor: request %d: recording future token: %w", s.id, err)
			}
			s.kv.tokens++
			s.kv.future = false
			e.adm.grew(s)
		}
		if e.acceptGuided(s, tok); s.state != StateRunning {
			continue // its matcher refused the token: it was ended
		}
		var topIDs []int32
		var topLPs []float32
		if n := s.params.TopLogprobs; n > 0 {
			at := i * sampling.MaxTopLogprobs
			topIDs, topLPs = st.out.TopTokens[at:at+n], st.out.TopLogprobs[at:at+n]
		}
		e.emit(s, tok, st.out.Logprobs[i], topIDs, topLPs, now)
	}
	return nil
}

// emit delivers one sampled token (with its log-probability and, when the
// request asked, its top alternatives: views into the step's output, copied
// by the stream) and applies the stop conditions.
func (e *Engine) emit(s *seq, tok int32, lp float32, topIDs []int32, topLPs []float32, now time.Time) {
	e.m.GeneratedTokens++
	s.out.usage.Completion++
	if s.generated == 1 {
		e.m.TTFT.Observe(now.Sub(s.out.arrival))
	} else {
		e.m.ITL.Observe(now.Sub(s.out.lastTok))
	}
	s.out.lastTok = now
	reason := FinishNone
	if (tok == e.tok.EOS() && !s.out.ignoreEOS) || s.out.isStopID(tok) {
		s.out.stream.push(nil, tok, lp, topIDs, topLPs)
		reason = FinishStop
	} else {
		piece := e.tok.Piece(tok)
		if s.out.stripSpace && len(piece) > 0 {
			s.out.stripSpace = false
			if piece[0] == ' ' {
				piece = piece[1:]
			}
		}
		text, stopped := s.out.text.add(piece)
		s.out.stream.push(text, tok, lp, topIDs, topLPs)
		if stopped {
			reason = FinishStop
		} else {
			s.out.text.commit(len(text))
		}
	}
	if reason == FinishNone {
		if (s.out.maxTokens > 0 && s.generated >= s.out.maxTokens) || len(s.tokens) >= e.capacity.MaxContext {
			reason = FinishLength
		}
	}
	if reason != FinishNone {
		e.leave(s, reason)
	}
}

// isStopID reports whether tok is one of the request's stop tokens.
func (o *outState) isStopID(tok int32) bool {
	for _, t := range o.stopIDs {
		if t == tok {
			return true
		}
	}
	return false
}
