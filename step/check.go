package step

import (
	"errors"
	"fmt"
	"math"
)

// Cursor is where a seat's sequence stands between steps, as every runner
// tracks it and as batch validation needs it.
type Cursor struct {
	// Started is set by the sequence's first step at the seat (Start).
	Started bool
	// KVLen is the number of positions the seat's sequence has in the cache.
	KVLen int32
	// Last is the token sampled for the seat in its latest step, valid when
	// HasLast: the value FutureToken stands for.
	Last    int32
	HasLast bool
	// tableOK is how many leading block-table entries Validate has checked
	// since Start (see Checker.Incremental).
	tableOK int32
}

// Checker is the one statement of the Batch contract: every runner (CPU,
// CUDA, simulated) validates each batch with it (Validate) before touching anything, and
// records each executed step with Advance. It owns the seats' cursors.
// Not safe for concurrent use; runners call it from their Execute.
type Checker struct {
	capacity Capacity
	seats    []Cursor
	stamp    []uint32 // per seat: the batch number that last used it (duplicate check)
	member   []bool   // per batch sequence: seen in a group (validateGroups' scratch)
	batchNo  uint32
	// Incremental validates a running sequence's block table from the block
	// of its first new token on, not from entry 0 again: a running
	// sequence's table only grows at its end (the engine never rewrites an
	// entry before the block its new tokens go to), so each entry is checked
	// once. It is for the simulated device, whose steps cost little else;
	// runners whose kernels read every entry leave it off.
	Incremental bool
}

// NewChecker returns a checker for a runner of capacity c, every seat
// unstarted. Every field of c must be > 0 and fit int32.
func NewChecker(c Capacity) (*Checker, error) {
	for _, f := range []struct {
		name string
		v    int
	}{{"Seats", c.Seats}, {"KVBlocks", c.KVBlocks}, {"BlockSize", c.BlockSize}, {"MaxContext", c.MaxContext},
		{"MaxBatchTokens", c.MaxBatchTokens}, {"Vocab", c.Vocab}} {
		if f.v <= 0 || f.v > math.MaxInt32 {
			return nil, fmt.Errorf("step: Capacity.%s = %d, want in [1, %d]", f.name, f.v, math.MaxInt32)
		}
	}
	return &Checker{capacity: c, seats: make([]Cursor, c.Seats), stamp: make([]uint32, c.Seats), member: make([]bool, c.Seats)}, nil
}

// Capacity is the capacity batches are checked against.
func (k *Checker) Capacity() Capacity { return k.capacity }

// Seat is the cursor of seat s in [0, Capacity.Seats); the pointer stays
// valid for the checker's life.
func (k *Checker) Seat(s int32) *Cursor { return &k.seats[s] }

// Validate checks b against the capacity and the seats' cursors without
// changing any seat: every error names the sequence, its seat and the
// offending value.
func (k *Checker) Validate(b *Batch) error {
	c := k.capacity
	T := len(b.Tokens)
	if T == 0 || len(b.Seqs) == 0 {
		return fmt.Errorf("step: batch has %d tokens in %d sequences, want at least one of each", T, len(b.Seqs))
	}
	if T > c.MaxBatchTokens {
		return fmt.Errorf("step: batch has %d tokens, runner accepts at most %d", T, c.MaxBatchTokens)
	}
	if len(b.Positions) != T {
		return fmt.Errorf("step: batch has %d positions for %d tokens", len(b.Positions), T)
	}
	if len(b.Seqs) > c.Seats {
		return fmt.Errorf("step: batch has %d sequences, runner holds %d seats", len(b.Seqs), c.Seats)
	}
	k.batchNo++
	if k.batchNo == 0 { // wrapped: old stamps could collide
		clear(k.stamp)
		k.batchNo = 1
	}
	bs := int32(c.BlockSize)
	next := int32(0)
	for i := range b.Seqs {
		sb := &b.Seqs[i]
		if sb.Seat < 0 || int(sb.Seat) >= c.Seats {
			return fmt.Errorf("step: seq %d: seat %d outside [0, %d)", i, sb.Seat, c.Seats)
		}
		if k.stamp[sb.Seat] == k.batchNo {
			return fmt.Errorf("step: seq %d: seat %d appears twice in one batch", i, sb.Seat)
		}
		k.stamp[sb.Seat] = k.batchNo
		if sb.NumTokens < 1 {
			return fmt.Errorf("step: seq %d (seat %d): NumTokens = %d, want ≥ 1", i, sb.Seat, sb.NumTokens)
		}
		if sb.TokenStart != next || int(sb.TokenStart)+int(sb.NumTokens) > T {
			return fmt.Errorf("step: seq %d (seat %d): tokens [%d, %d) do not continue the batch at %d (batch has %d tokens)",
				i, sb.Seat, sb.TokenStart, int(sb.TokenStart)+int(sb.NumTokens), next, T)
		}
		next += sb.NumTokens
		if sb.ContextLen < sb.NumTokens || int(sb.ContextLen) > c.MaxContext {
			return fmt.Errorf("step: seq %d (seat %d): context length %d with %d new tokens (max context %d)",
				i, sb.Seat, sb.ContextLen, sb.NumTokens, c.MaxContext)
		}
		first := sb.ContextLen - sb.NumTokens
		st := &k.seats[sb.Seat]
		if sb.Start {
			if err := validateStart(i, sb, c.Vocab); err != nil {
				return err
			}
		} else if !st.Started || st.KVLen != first {
			return fmt.Errorf("step: seq %d (seat %d): continues at position %d but the seat holds %d positions (started %v)",
				i, sb.Seat, first, st.KVLen, st.Started)
		}
		for j := int32(0); j < sb.NumTokens; j++ {
			idx := sb.TokenStart + j
			if p := b.Positions[idx]; p != first+j {
				return fmt.Errorf("step: seq %d (seat %d): position %d at token %d, want %d (context %d, %d new tokens)",
					i, sb.Seat, p, idx, first+j, sb.ContextLen, sb.NumTokens)
			}
			t := b.Tokens[idx]
			if t == FutureToken {
				if j != 0 || sb.Start || !st.HasLast {
					return fmt.Errorf("step: seq %d (seat %d): FutureToken at token %d but the seat sampled nothing in its previous step for the future token to stand for", i, sb.Seat, idx)
				}
			} else if t < 0 || int(t) >= c.Vocab {
				return fmt.Errorf("step: seq %d (seat %d): token %d outside vocab %d (index %d)", i, sb.Seat, t, c.Vocab, idx)
			}
		}
		need := (sb.ContextLen + bs - 1) / bs
		if len(sb.BlockTable) < int(need) {
			return fmt.Errorf("step: seq %d (seat %d): block table has %d blocks, context %d needs %d",
				i, sb.Seat, len(sb.BlockTable), sb.ContextLen, need)
		}
		from := int32(0)
		if k.Incremental && !sb.Start {
			from = min(st.tableOK, first/bs)
		}
		for j, blk := range sb.BlockTable[from:need] {
			if blk < 0 || int(blk) >= c.KVBlocks {
				return fmt.Errorf("step: seq %d (seat %d): block %d (table entry %d) outside [0, %d)", i, sb.Seat, blk, int(from)+j, c.KVBlocks)
			}
		}
	}
	if int(next) != T {
		return fmt.Errorf("step: sequences cover %d of the batch's %d tokens", next, T)
	}
	return validateGroups(b, bs, k.member)
}

// validateStart checks what a sequence's first step at its seat brings:
// sampling parameters and the history the sampler is reset from.
func validateStart(i int, sb *SeqBatch, vocab int) error {
	if sb.Params == nil {
		return fmt.Errorf("step: seq %d (seat %d): Start without Params", i, sb.Seat)
	}
	p := *sb.Params // Validate normalises; keep the caller's value intact
	if err := p.Validate(vocab); err != nil {
		return fmt.Errorf("step: seq %d (seat %d): %w", i, sb.Seat, err)
	}
	for j, t := range sb.History {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("step: seq %d (seat %d): history token %d (index %d) outside vocab %d", i, sb.Seat, t, j, vocab)
		}
	}
	if sb.NumOutput < 0 || int(sb.NumOutput) > len(sb.History) {
		return fmt.Errorf("step: seq %d (seat %d): NumOutput %d outside [0, %d] (the history's length)", i, sb.Seat, sb.NumOutput, len(sb.History))
	}
	return nil
}

// Advance records an executed step of the checked batch b in the seats'
// cursors: a starting sequence's seat is reset, every seat then holds
// ContextLen positions, and a sampled sequence's token (out.Tokens, sized
// by the runner) becomes what its next FutureToken stands for.
func (k *Checker) Advance(b *Batch, out *Output) {
	bs := int32(k.capacity.BlockSize)
	for i := range b.Seqs {
		sb := &b.Seqs[i]
		st := &k.seats[sb.Seat]
		*st = Cursor{Started: true, KVLen: sb.ContextLen, tableOK: (sb.ContextLen + bs - 1) / bs}
		if sb.Sample {
			st.Last, st.HasLast = out.Tokens[i], true
		}
	}
}

// CheckCursors verifies every seat's cursor against the capacity.
func (k *Checker) CheckCursors() error {
	var errs []error
	for i, s := range k.seats {
		if !s.Started && (s.KVLen != 0 || s.HasLast) {
			errs = append(errs, fmt.Errorf("step: seat %d is not started but holds %d positions (has last token %v)", i, s.KVLen, s.HasLast))
		}
		if s.KVLen < 0 || int(s.KVLen) > k.capacity.MaxContext {
			errs = append(errs, fmt.Errorf("step: seat %d holds %d positions, outside [0, %d]", i, s.KVLen, k.capacity.MaxContext))
		}
		if s.HasLast && (s.Last < 0 || int(s.Last) >= k.capacity.Vocab) {
			errs = append(errs, fmt.Errorf("step: seat %d last token %d outside vocab %d", i, s.Last, k.capacity.Vocab))
		}
	}
	return errors.Join(errs...)
}
