package model

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/step"
)

// byteReader hands out fuzz bytes, zeros once they run out.
type byteReader struct{ b []byte }

func (r *byteReader) next() byte {
	if len(r.b) == 0 {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// fuzzBatch decodes a batch from bytes. It is well-formed unless a
// sequence's flags byte asks for a defect: by default a sequence continues
// its seat (or starts it), positions follow the context, tokens are in the
// vocabulary and the block table covers the context, so fuzzing reaches the
// forward pass as well as every refusal.
func fuzzBatch(data []byte, r *CPURunner, p *sampling.Params) *step.Batch {
	in := &byteReader{data}
	b := &step.Batch{}
	nseq := 1 + int(in.next()%4)
	for i := 0; i < nseq; i++ {
		flags := in.next()
		defect := in.next() // which field goes wrong when flags&1
		bad := func(k byte) bool { return flags&1 != 0 && defect%10 == k }
		seat := int32(in.next() % 4)
		if bad(0) {
			seat = int32(int8(in.next()))
		}
		sb := step.SeqBatch{Seat: seat, TokenStart: int32(len(b.Tokens)), NumTokens: 1 + int32(in.next()%5),
			Sample: flags&2 != 0, Start: flags&4 != 0, Params: p}
		first := int32(in.next() % 24)
		if seat >= 0 && int(seat) < r.capacity.Seats && r.host.checker.Seat(seat).Started && !sb.Start {
			first = r.host.checker.Seat(seat).KVLen
		}
		if bad(1) {
			sb.NumTokens = int32(int8(in.next())) % 3
		}
		sb.ContextLen = first + sb.NumTokens
		if bad(2) {
			sb.ContextLen = int32(int16(uint16(in.next())<<8 | uint16(in.next())))
		}
		if bad(3) {
			sb.TokenStart += int32(int8(in.next())) % 3
		}
		need := (int(first+sb.NumTokens) + 3) / 4
		for j := 0; j < need; j++ {
			sb.BlockTable = append(sb.BlockTable, int32(in.next()%16))
		}
		if bad(4) {
			sb.BlockTable = sb.BlockTable[:len(sb.BlockTable)/2]
		}
		if bad(5) && len(sb.BlockTable) > 0 {
			sb.BlockTable[0] = int32(int8(in.next()))
		}
		for j := int32(0); j < max(sb.NumTokens, 0); j++ {
			tok := int32(in.next()) * 2
			if flags&8 != 0 && j == 0 {
				tok = step.FutureToken
			}
			if bad(6) {
				tok = int32(int16(uint16(in.next())<<8 | uint16(in.next())))
			}
			pos := first + j
			if bad(7) {
				pos = int32(int8(in.next()))
			}
			b.Tokens = append(b.Tokens, tok)
			b.Positions = append(b.Positions, pos)
		}
		if bad(8) {
			sb.History = []int32{int32(int8(in.next())) * 5}
		}
		if bad(9) {
			sb.Params = nil
		}
		b.Seqs = append(b.Seqs, sb)
	}
	return b
}

// FuzzExecute: no batch panics the runner or breaks its bookkeeping; a
// refused batch leaves Check passing.
func FuzzExecute(f *testing.F) {
	m := loadStories(f)
	r := newTestRunner(f, m, CPURunnerConfig{Seats: 4, KVBlocks: 16, BlockSize: 4, MaxBatchTokens: 16})
	p := sampling.DefaultParams()
	p.Temperature, p.RepetitionPenalty = 0.7, 1.1
	// Layout per sequence: flags, defect, seat, NumTokens-1, first position,
	// block ids, tokens/2; then the copy count and copies.
	f.Add([]byte{0, 6, 0, 0, 2, 0, 1, 5, 6, 7, 0})                            // start seat 0, 3 tokens, sample
	f.Add([]byte{0, 10, 0, 0, 0, 0, 1, 0})                                    // seat 0 decodes its future token
	f.Add([]byte{1, 6, 0, 1, 4, 3, 2, 3, 9, 9, 9, 9, 9, 4, 0, 2, 0, 4, 8, 1}) // two sequences
	f.Add([]byte{0, 1, 6, 2, 0, 0, 3, 0xff, 0xff, 1, 3, 4})                   // bad token, one copy
	f.Add([]byte{0, 1, 0, 0x80, 0, 0, 0, 0})                                  // seat -128
	f.Add([]byte{0, 1, 2, 1, 0, 0, 0x7f, 0xff, 0, 0})                         // context 32767
	f.Add([]byte{0, 1, 9, 1, 0, 0, 0, 0})                                     // start without params
	f.Fuzz(func(t *testing.T, data []byte) {
		var out step.Output
		err := r.Execute(fuzzBatch(data, r, &p), &out)
		require.NoError(t, r.Check(), "after Execute returned %v", err)
	})
}
