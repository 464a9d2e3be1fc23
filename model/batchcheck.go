package model

import "fmt"

// seatCursor is where a seat's sequence stands, as every runner tracks it
// and as batch validation needs it.
type seatCursor struct {
	started bool
	// kvLen is the number of positions the seat's sequence has in the cache.
	kvLen int32
	// last is the token sampled for the seat in its latest step, valid
	// when hasLast: the value FutureToken stands for.
	last    int32
	hasLast bool
}

// cursorSource gives the cursor of a seat in [0, Capacity.Seats).
type cursorSource interface {
	cursor(seat int32) *seatCursor
}

// batchChecker validates batches against a runner's capacity and seat
// cursors — the one statement of the Batch contract all runners enforce.
type batchChecker struct {
	stamp   []uint32 // per seat: the batch number that last used it (duplicate check)
	batchNo uint32
}

func newBatchChecker(seats int) batchChecker {
	return batchChecker{stamp: make([]uint32, seats)}
}

// check validates b against the capacity c (c.Seats must not exceed the
// checker's seats) without changing any seat: every error names the
// sequence, its seat and the offending value.
func (bc *batchChecker) check(b *Batch, c Capacity, seats cursorSource) error {
	T := len(b.Tokens)
	if T == 0 || len(b.Seqs) == 0 {
		return fmt.Errorf("model: batch has %d tokens in %d sequences, want at least one of each", T, len(b.Seqs))
	}
	if T > c.MaxBatchTokens {
		return fmt.Errorf("model: batch has %d tokens, runner accepts at most %d", T, c.MaxBatchTokens)
	}
	if len(b.Positions) != T {
		return fmt.Errorf("model: batch has %d positions for %d tokens", len(b.Positions), T)
	}
	if c.Seats > len(bc.stamp) {
		return fmt.Errorf("model: capacity of %d seats exceeds the checker's %d", c.Seats, len(bc.stamp))
	}
	if len(b.Seqs) > c.Seats {
		return fmt.Errorf("model: batch has %d sequences, runner holds %d seats", len(b.Seqs), c.Seats)
	}
	for i, cp := range b.Copies {
		if cp.Src < 0 || int(cp.Src) >= c.KVBlocks || cp.Dst < 0 || int(cp.Dst) >= c.KVBlocks {
			return fmt.Errorf("model: copy %d: block %d -> %d outside [0, %d)", i, cp.Src, cp.Dst, c.KVBlocks)
		}
	}
	bc.batchNo++
	if bc.batchNo == 0 { // wrapped: old stamps could collide
		clear(bc.stamp)
		bc.batchNo = 1
	}
	bs := int32(c.BlockSize)
	next := int32(0)
	for i := range b.Seqs {
		sb := &b.Seqs[i]
		if sb.Seat < 0 || int(sb.Seat) >= c.Seats {
			return fmt.Errorf("model: seq %d: seat %d outside [0, %d)", i, sb.Seat, c.Seats)
		}
		if bc.stamp[sb.Seat] == bc.batchNo {
			return fmt.Errorf("model: seq %d: seat %d appears twice in one batch", i, sb.Seat)
		}
		bc.stamp[sb.Seat] = bc.batchNo
		if sb.NumTokens < 1 {
			return fmt.Errorf("model: seq %d (seat %d): NumTokens = %d, want ≥ 1", i, sb.Seat, sb.NumTokens)
		}
		if sb.TokenStart != next || int(sb.TokenStart)+int(sb.NumTokens) > T {
			return fmt.Errorf("model: seq %d (seat %d): tokens [%d, %d) do not continue the batch at %d (batch has %d tokens)",
				i, sb.Seat, sb.TokenStart, int(sb.TokenStart)+int(sb.NumTokens), next, T)
		}
		next += sb.NumTokens
		if sb.ContextLen < sb.NumTokens || int(sb.ContextLen) > c.MaxContext {
			return fmt.Errorf("model: seq %d (seat %d): context length %d with %d new tokens (max context %d)",
				i, sb.Seat, sb.ContextLen, sb.NumTokens, c.MaxContext)
		}
		first := sb.ContextLen - sb.NumTokens
		st := seats.cursor(sb.Seat)
		if sb.Start {
			if err := checkStart(i, sb, c.Vocab); err != nil {
				return err
			}
		} else if !st.started || st.kvLen != first {
			return fmt.Errorf("model: seq %d (seat %d): continues at position %d but the seat holds %d positions (started %v)",
				i, sb.Seat, first, st.kvLen, st.started)
		}
		for j := int32(0); j < sb.NumTokens; j++ {
			idx := sb.TokenStart + j
			if p := b.Positions[idx]; p != first+j {
				return fmt.Errorf("model: seq %d (seat %d): position %d at token %d, want %d (context %d, %d new tokens)",
					i, sb.Seat, p, idx, first+j, sb.ContextLen, sb.NumTokens)
			}
			t := b.Tokens[idx]
			if t == FutureToken {
				if j != 0 || sb.Start || !st.hasLast {
					return fmt.Errorf("model: seq %d (seat %d): FutureToken at token %d but the seat sampled nothing in its previous step", i, sb.Seat, idx)
				}
			} else if t < 0 || int(t) >= c.Vocab {
				return fmt.Errorf("model: seq %d (seat %d): token %d (index %d) outside vocab %d", i, sb.Seat, t, idx, c.Vocab)
			}
		}
		need := int((sb.ContextLen + bs - 1) / bs)
		if len(sb.BlockTable) < need {
			return fmt.Errorf("model: seq %d (seat %d): block table has %d blocks, context %d needs %d",
				i, sb.Seat, len(sb.BlockTable), sb.ContextLen, need)
		}
		for j, blk := range sb.BlockTable[:need] {
			if blk < 0 || int(blk) >= c.KVBlocks {
				return fmt.Errorf("model: seq %d (seat %d): block table entry %d is block %d, outside [0, %d)", i, sb.Seat, j, blk, c.KVBlocks)
			}
		}
	}
	if int(next) != T {
		return fmt.Errorf("model: sequences cover %d of the batch's %d tokens", next, T)
	}
	return nil
}

// checkStart validates what a sequence's first step at its seat brings:
// sampling parameters and the history the sampler is reset from.
func checkStart(i int, sb *SeqBatch, vocab int) error {
	if sb.Params == nil {
		return fmt.Errorf("model: seq %d (seat %d): Start without Params", i, sb.Seat)
	}
	p := *sb.Params // Validate normalises; keep the caller's value intact
	if err := p.Validate(vocab); err != nil {
		return fmt.Errorf("model: seq %d (seat %d): %w", i, sb.Seat, err)
	}
	for j, t := range sb.History {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("model: seq %d (seat %d): history token %d (index %d) outside vocab %d", i, sb.Seat, t, j, vocab)
		}
	}
	if sb.NumOutput < 0 || int(sb.NumOutput) > len(sb.History) {
		return fmt.Errorf("model: seq %d (seat %d): NumOutput %d outside [0, %d] (the history's length)", i, sb.Seat, sb.NumOutput, len(sb.History))
	}
	return nil
}
