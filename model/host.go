package model

import (
	"fmt"

	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/step"
)

// seatHost is the host-side half every runner of this package shares: the
// batch contract and the seats' cursors (step.Checker), the per-seat
// sampler, and the kept logits. A runner calls begin before its forward
// pass, sample or record once per sampled sequence, and end after; the
// device-specific part (where logits are computed, which rows the device
// samples itself) stays in the runner.
type seatHost struct {
	checker *step.Checker
	sampler *sampling.Sampler
	// kept holds copies of sampled rows' logits (before penalties and
	// sampling touch them) when the runner keeps logits: [rows][Vocab].
	kept   []float32
	keptOf []int32 // per Batch.Seqs index of the latest step: kept row, or -1
	keptN  int     // kept rows written in the latest step
	seqs   int     // Batch.Seqs of the latest step
	// masks are the latest step's token masks (Batch.Masks), nil when it
	// has none; row i constrains Batch.Seqs[i].
	masks [][]uint64
}

// newSeatHost sizes the host half for capacity c; rows is the most
// sampled sequences one step holds (min(Seats, MaxBatchTokens)).
func newSeatHost(c step.Capacity, rows int, keep bool) (*seatHost, error) {
	checker, err := step.NewChecker(c)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	sampler, err := sampling.New(c.Seats, c.Vocab)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	h := &seatHost{checker: checker, sampler: sampler, keptOf: make([]int32, rows)}
	if keep {
		h.kept = make([]float32, rows*c.Vocab)
	}
	return h, nil
}

// capacity is what batches are checked against.
func (h *seatHost) capacity() step.Capacity { return h.checker.Capacity() }

// begin checks b (a bad batch changes nothing) and starts the sampler
// state of every sequence whose first step this is.
func (h *seatHost) begin(b *step.Batch) error {
	if err := h.checker.Validate(b); err != nil {
		return err
	}
	for i := range b.Seqs {
		sb := &b.Seqs[i]
		if !sb.Start {
			continue
		}
		if err := h.sampler.StartWithOutput(sb.Seat, sb.Params, sb.History, int(sb.NumOutput)); err != nil {
			return fmt.Errorf("model: seq %d (seat %d): %w", i, sb.Seat, err)
		}
	}
	return nil
}

// last is the token a FutureToken of seat s stands for.
func (h *seatHost) last(s int32) int32 { return h.checker.Seat(s).Last }

// waitMasks takes the step's token masks, waiting for the engine to
// finish them (it computes them while the forward pass runs); called after
// the forward pass, before sampling.
func (h *seatHost) waitMasks(b *step.Batch) error {
	h.masks = nil
	if b.Masks == nil {
		return nil
	}
	rows, err := b.Masks.Wait()
	if err != nil {
		return fmt.Errorf("model: token masks: %w", err)
	}
	if len(rows) != len(b.Seqs) {
		return fmt.Errorf("model: %d token mask rows for %d sequences", len(rows), len(b.Seqs))
	}
	h.masks = rows
	return nil
}

// resetOutput sizes out for b and marks every sequence unsampled until
// sample or record fills it; it also forgets the previous step's kept rows.
func (h *seatHost) resetOutput(b *step.Batch, out *step.Output) {
	out.Resize(len(b.Seqs))
	h.seqs, h.keptN = len(b.Seqs), 0
	for i := range b.Seqs {
		out.Tokens[i], out.Logprobs[i] = -1, 0
		if i < len(h.keptOf) {
			h.keptOf[i] = -1
		}
	}
}

// keepRow copies row as sequence si's kept logits when the runner keeps them.
func (h *seatHost) keepRow(si int, row []float32) {
	if h.kept == nil {
		return
	}
	v := h.capacity().Vocab
	copy(h.kept[h.keptN*v:(h.keptN+1)*v], row)
	h.keptOf[si] = int32(h.keptN)
	h.keptN++
}

// sample draws sequence si's token from its logits row (which it may
// modify), keeping a copy first when asked, and writes it to out.
func (h *seatHost) sample(b *step.Batch, out *step.Output, si int, row []float32) (int32, error) {
	sb := &b.Seqs[si]
	if v := h.capacity().Vocab; len(row) != v {
		return 0, fmt.Errorf("model: seq %d (seat %d): logits row has %d values, want vocab %d", si, sb.Seat, len(row), v)
	}
	h.keepRow(si, row)
	m := sampling.MaxTopLogprobs
	ch := sampling.Choice{TopTokens: out.TopTokens[si*m : (si+1)*m], TopLogprobs: out.TopLogprobs[si*m : (si+1)*m]}
	// A constrained sequence whose request left after the step was
	// planned has no row (its output is discarded): drawn unconstrained.
	var mask []uint64
	if h.masks != nil {
		mask = h.masks[si]
	}
	if err := h.sampler.SampleUnder(sb.Seat, row, mask, &ch); err != nil {
		return 0, fmt.Errorf("model: seq %d (seat %d): %w", si, sb.Seat, err)
	}
	return ch.Token, h.record(b, out, si, ch.Token, ch.Logprob)
}

// record writes a token chosen outside the sampler (the device's argmax)
// as sequence si's output.
func (h *seatHost) record(b *step.Batch, out *step.Output, si int, tok int32, logprob float32) error {
	if v := h.capacity().Vocab; tok < 0 || int(tok) >= v {
		return fmt.Errorf("model: seq %d (seat %d): sampled token %d outside vocab %d", si, b.Seqs[si].Seat, tok, v)
	}
	out.Tokens[si], out.Logprobs[si] = tok, logprob
	return nil
}

// end records the executed step in the seats' cursors.
func (h *seatHost) end(b *step.Batch, out *step.Output) { h.checker.Advance(b, out) }

// logits returns the kept logits of Batch.Seqs[i] of the latest step, or
// nil when logits are not kept or that sequence was not sampled. The slice
// is owned by the runner and overwritten by the next step.
func (h *seatHost) logits(i int) []float32 {
	if h.kept == nil || i < 0 || i >= h.seqs || i >= len(h.keptOf) || h.keptOf[i] < 0 {
		return nil
	}
	v := h.capacity().Vocab
	r := int(h.keptOf[i])
	return h.kept[r*v : (r+1)*v]
}

// check verifies the seats' cursors and the sampler's bookkeeping.
func (h *seatHost) check() error {
	if err := h.checker.CheckCursors(); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	return h.sampler.Check()
}
