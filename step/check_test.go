package step_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/step"
)

// testCap is small enough that every bound is easy to cross in a table.
var testCap = step.Capacity{Seats: 4, KVBlocks: 8, BlockSize: 4, MaxContext: 32, MaxBatchTokens: 16, Vocab: 10}

func newChecker(t testing.TB, incremental bool) *step.Checker {
	t.Helper()
	k, err := step.NewChecker(testCap)
	require.NoError(t, err)
	k.Incremental = incremental
	return k
}

func params() *sampling.Params {
	p := sampling.DefaultParams()
	return &p
}

// starting is a first step of n prompt tokens (1, 2, ...) at seat, its
// blocks numbered from blk.
func starting(seat, n int32, blk int32) (toks []int32, sb step.SeqBatch) {
	toks = make([]int32, n)
	for i := range toks {
		toks[i] = int32(1 + i%9)
	}
	need := (n + int32(testCap.BlockSize) - 1) / int32(testCap.BlockSize)
	table := make([]int32, need)
	for i := range table {
		table[i] = blk + int32(i)
	}
	return toks, step.SeqBatch{Seat: seat, NumTokens: n, ContextLen: n, BlockTable: table, Sample: true,
		Start: true, Params: params(), History: toks}
}

// batchOf lays sequences (their tokens, then their SeqBatch) out in varlen
// order: TokenStart and Positions follow from NumTokens and ContextLen.
func batchOf(parts ...any) *step.Batch {
	b := &step.Batch{}
	for i := 0; i < len(parts); i += 2 {
		toks, sb := parts[i].([]int32), parts[i+1].(step.SeqBatch)
		sb.TokenStart = int32(len(b.Tokens))
		first := sb.ContextLen - sb.NumTokens
		for j := range toks {
			b.Tokens = append(b.Tokens, toks[j])
			b.Positions = append(b.Positions, first+int32(j))
		}
		b.Seqs = append(b.Seqs, sb)
	}
	return b
}

// startBatch starts seat 0 with 5 tokens (blocks 0, 1) and seat 1 with 2
// (block 2).
func startBatch() *step.Batch {
	t0, s0 := starting(0, 5, 0)
	t1, s1 := starting(1, 2, 2)
	return batchOf(t0, s0, t1, s1)
}

// decodeBatch continues seat 0 at position 5 and seat 1 at position 2 with
// one FutureToken each, after startBatch was advanced.
func decodeBatch() *step.Batch {
	return batchOf(
		[]int32{step.FutureToken}, step.SeqBatch{Seat: 0, NumTokens: 1, ContextLen: 6, BlockTable: []int32{0, 1}, Sample: true},
		[]int32{step.FutureToken}, step.SeqBatch{Seat: 1, NumTokens: 1, ContextLen: 3, BlockTable: []int32{2}, Sample: true},
	)
}

// advance checks b and records it as executed, every sampled token 7.
func advance(t testing.TB, k *step.Checker, b *step.Batch) {
	t.Helper()
	require.NoError(t, k.Validate(b))
	var out step.Output
	out.Resize(len(b.Seqs))
	for i := range out.Tokens {
		out.Tokens[i] = 7
	}
	k.Advance(b, &out)
	require.NoError(t, k.CheckCursors())
}

func cursors(k *step.Checker) []step.Cursor {
	c := make([]step.Cursor, k.Capacity().Seats)
	for i := range c {
		c[i] = *k.Seat(int32(i))
	}
	return c
}

// TestValidateRules: every rule of Checker.Validate rejects a batch that breaks
// it with an error naming the offending value, and a rejected batch leaves
// every cursor as it was.
func TestValidateRules(t *testing.T) {
	for _, tc := range []struct {
		name    string
		decode  bool // start seats 0 and 1 first and mutate decodeBatch, not startBatch
		chunk   bool // with decode: seat 1's first step is a prefill chunk (it samples nothing)
		mutate  func(b *step.Batch)
		wantErr string // "" for a batch that passes
	}{
		{name: "valid start", mutate: func(*step.Batch) {}},
		{name: "valid decode with future tokens", decode: true, mutate: func(*step.Batch) {}},
		{name: "no tokens", mutate: func(b *step.Batch) { b.Tokens = nil },
			wantErr: "batch has 0 tokens in 2 sequences, want at least one of each"},
		{name: "no sequences", mutate: func(b *step.Batch) { b.Seqs = nil },
			wantErr: "batch has 7 tokens in 0 sequences"},
		{name: "too many tokens", mutate: func(b *step.Batch) {
			b.Tokens, b.Positions = make([]int32, 17), make([]int32, 17)
		}, wantErr: "batch has 17 tokens, runner accepts at most 16"},
		{name: "positions short", mutate: func(b *step.Batch) { b.Positions = b.Positions[:6] },
			wantErr: "batch has 6 positions for 7 tokens"},
		{name: "more sequences than seats", mutate: func(b *step.Batch) {
			b.Seqs = append(b.Seqs, b.Seqs[1], b.Seqs[1], b.Seqs[1])
		}, wantErr: "batch has 5 sequences, runner holds 4 seats"},
		{name: "seat above range", mutate: func(b *step.Batch) { b.Seqs[1].Seat = 4 },
			wantErr: "seq 1: seat 4 outside [0, 4)"},
		{name: "negative seat", mutate: func(b *step.Batch) { b.Seqs[0].Seat = -1 },
			wantErr: "seq 0: seat -1 outside [0, 4)"},
		{name: "seat twice", mutate: func(b *step.Batch) { b.Seqs[1].Seat = 0 },
			wantErr: "seq 1: seat 0 appears twice in one batch"},
		{name: "no new tokens", mutate: func(b *step.Batch) { b.Seqs[1].NumTokens = 0 },
			wantErr: "seq 1 (seat 1): NumTokens = 0, want ≥ 1"},
		{name: "gap between sequences", mutate: func(b *step.Batch) { b.Seqs[1].TokenStart = 6 },
			wantErr: "seq 1 (seat 1): tokens [6, 8) do not continue the batch at 5 (batch has 7 tokens)"},
		{name: "tokens past the batch", mutate: func(b *step.Batch) { b.Seqs[1].NumTokens, b.Seqs[1].ContextLen = 3, 3 },
			wantErr: "seq 1 (seat 1): tokens [5, 8) do not continue the batch at 5 (batch has 7 tokens)"},
		{name: "context shorter than new tokens", mutate: func(b *step.Batch) { b.Seqs[0].ContextLen = 4 },
			wantErr: "seq 0 (seat 0): context length 4 with 5 new tokens (max context 32)"},
		{name: "context past max", decode: true, mutate: func(b *step.Batch) { b.Seqs[0].ContextLen = 33 },
			wantErr: "seq 0 (seat 0): context length 33 with 1 new tokens (max context 32)"},
		{name: "start without params", mutate: func(b *step.Batch) { b.Seqs[1].Params = nil },
			wantErr: "seq 1 (seat 1): Start without Params"},
		{name: "start with bad params", mutate: func(b *step.Batch) { b.Seqs[0].Params = &sampling.Params{Temperature: -1, TopP: 1} },
			wantErr: "seq 0 (seat 0): temperature -1"},
		{name: "history outside vocab", mutate: func(b *step.Batch) { b.Seqs[1].History = []int32{1, 10} },
			wantErr: "seq 1 (seat 1): history token 10 (index 1) outside vocab 10"},
		{name: "negative history token", mutate: func(b *step.Batch) { b.Seqs[1].History = []int32{-3} },
			wantErr: "seq 1 (seat 1): history token -3 (index 0) outside vocab 10"},
		{name: "output longer than history", mutate: func(b *step.Batch) { b.Seqs[1].NumOutput = 3 },
			wantErr: "seq 1 (seat 1): NumOutput 3 outside [0, 2] (the history's length)"},
		{name: "negative output", mutate: func(b *step.Batch) { b.Seqs[1].NumOutput = -1 },
			wantErr: "seq 1 (seat 1): NumOutput -1 outside [0, 2]"},
		{name: "continue an unstarted seat", mutate: func(b *step.Batch) { b.Seqs[1].Start = false },
			wantErr: "seq 1 (seat 1): continues at position 0 but the seat holds 0 positions (started false)"},
		{name: "continue at the wrong position", decode: true, mutate: func(b *step.Batch) {
			b.Seqs[1].ContextLen, b.Positions[1] = 4, 3
		}, wantErr: "seq 1 (seat 1): continues at position 3 but the seat holds 2 positions (started true)"},
		{name: "wrong position", mutate: func(b *step.Batch) { b.Positions[1] = 5 },
			wantErr: "seq 0 (seat 0): position 5 at token 1, want 1 (context 5, 5 new tokens)"},
		{name: "future token after the first", decode: true, mutate: func(b *step.Batch) {
			b.Tokens = []int32{3, step.FutureToken, step.FutureToken}
			b.Positions = []int32{5, 6, 2}
			b.Seqs[0].NumTokens, b.Seqs[0].ContextLen = 2, 7
			b.Seqs[1].TokenStart = 2
		}, wantErr: "seq 0 (seat 0): FutureToken at token 1 but the seat sampled nothing"},
		{name: "future token at start", mutate: func(b *step.Batch) { b.Tokens[5] = step.FutureToken },
			wantErr: "seq 1 (seat 1): FutureToken at token 5 but the seat sampled nothing"},
		{name: "future token after a prefill chunk", decode: true, chunk: true, mutate: func(b *step.Batch) { b.Tokens[1] = step.FutureToken },
			wantErr: "seq 1 (seat 1): FutureToken at token 1 but the seat sampled nothing"},
		{name: "token above vocab", mutate: func(b *step.Batch) { b.Tokens[2] = 10 },
			wantErr: "seq 0 (seat 0): token 10 outside vocab 10 (index 2)"},
		{name: "negative token", mutate: func(b *step.Batch) { b.Tokens[6] = -2 },
			wantErr: "seq 1 (seat 1): token -2 outside vocab 10 (index 6)"},
		{name: "block table short", mutate: func(b *step.Batch) { b.Seqs[0].BlockTable = b.Seqs[0].BlockTable[:1] },
			wantErr: "seq 0 (seat 0): block table has 1 blocks, context 5 needs 2"},
		{name: "block above range", mutate: func(b *step.Batch) { b.Seqs[0].BlockTable = []int32{0, 8} },
			wantErr: "seq 0 (seat 0): block 8 (table entry 1) outside [0, 8)"},
		{name: "negative block", decode: true, mutate: func(b *step.Batch) { b.Seqs[1].BlockTable = []int32{-1} },
			wantErr: "seq 1 (seat 1): block -1 (table entry 0) outside [0, 8)"},
		{name: "entries past the context are not read", mutate: func(b *step.Batch) {
			b.Seqs[1].BlockTable = []int32{2, -1, 99}
		}},
		{name: "tokens not covered", mutate: func(b *step.Batch) {
			b.Tokens, b.Positions = append(b.Tokens, 1), append(b.Positions, 2)
		}, wantErr: "sequences cover 7 of the batch's 8 tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, incremental := range []bool{false, true} {
				k := newChecker(t, incremental)
				// next is the batch the case breaks: the start, or the
				// decode after it (after a chunk, seat 1 continues with a
				// known token).
				next := func() *step.Batch {
					if !tc.decode {
						return startBatch()
					}
					b := decodeBatch()
					if tc.chunk {
						b.Tokens[1] = 4
					}
					return b
				}
				if tc.decode {
					b := startBatch()
					b.Seqs[1].Sample = !tc.chunk
					advance(t, k, b)
				}
				b := next()
				tc.mutate(b)
				before := cursors(k)
				err := k.Validate(b)
				require.Equal(t, before, cursors(k), "Validate changes no cursor")
				if tc.wantErr == "" {
					require.NoError(t, err)
					continue
				}
				require.ErrorContains(t, err, tc.wantErr, "incremental %v", incremental)
				// The rejection is not remembered: the unmodified batch passes.
				require.NoError(t, k.Validate(next()), "a rejected batch leaves the checker able to check the next")
			}
		})
	}
}

// TestNewChecker: every capacity field must be in [1, MaxInt32]; the error
// names the field and its value.
func TestNewChecker(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(c *step.Capacity)
		want string
	}{
		{"seats", func(c *step.Capacity) { c.Seats = 0 }, "Capacity.Seats = 0"},
		{"kv blocks", func(c *step.Capacity) { c.KVBlocks = -1 }, "Capacity.KVBlocks = -1"},
		{"block size", func(c *step.Capacity) { c.BlockSize = 0 }, "Capacity.BlockSize = 0"},
		{"max context", func(c *step.Capacity) { c.MaxContext = math.MaxInt32 + 1 }, "Capacity.MaxContext = 2147483648"},
		{"max batch tokens", func(c *step.Capacity) { c.MaxBatchTokens = 0 }, "Capacity.MaxBatchTokens = 0"},
		{"vocab", func(c *step.Capacity) { c.Vocab = 0 }, "Capacity.Vocab = 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testCap
			tc.mod(&c)
			_, err := step.NewChecker(c)
			require.ErrorContains(t, err, tc.want)
		})
	}
	k, err := step.NewChecker(testCap)
	require.NoError(t, err)
	require.Equal(t, testCap, k.Capacity())
	require.Equal(t, make([]step.Cursor, testCap.Seats), cursors(k), "every seat starts unstarted")
}

// TestAdvance: a starting sequence's seat is reset, every seat then holds
// ContextLen positions, and a sampled token becomes the seat's last token.
func TestAdvance(t *testing.T) {
	type want struct {
		started, hasLast bool
		kvLen, last      int32
	}
	view := func(c *step.Cursor) want { return want{c.Started, c.HasLast, c.KVLen, c.Last} }
	for _, tc := range []struct {
		name  string
		steps []*step.Batch // each advanced with out.Tokens[i] = 7
		seat  int32
		want  want
	}{
		{"start samples", []*step.Batch{startBatch()}, 0, want{true, true, 5, 7}},
		{"untouched seat", []*step.Batch{startBatch()}, 2, want{}},
		{"decode", []*step.Batch{startBatch(), decodeBatch()}, 1, want{true, true, 3, 7}},
		{"prefill chunk without sampling", func() []*step.Batch {
			toks, sb := starting(2, 3, 4)
			sb.Sample = false
			return []*step.Batch{batchOf(toks, sb)}
		}(), 2, want{true, false, 3, 0}},
		{"restart resets the seat", func() []*step.Batch {
			toks, sb := starting(0, 2, 5)
			sb.Sample = false
			return []*step.Batch{startBatch(), batchOf(toks, sb)}
		}(), 0, want{true, false, 2, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newChecker(t, false)
			for _, b := range tc.steps {
				advance(t, k, b)
			}
			require.Equal(t, tc.want, view(k.Seat(tc.seat)))
		})
	}
	// The sampled token is out.Tokens of the sequence's index, not its seat.
	k := newChecker(t, false)
	t0, s0 := starting(3, 1, 0)
	t1, s1 := starting(1, 1, 1)
	b := batchOf(t0, s0, t1, s1)
	require.NoError(t, k.Validate(b))
	k.Advance(b, &step.Output{Tokens: []int32{4, 9}})
	require.Equal(t, int32(4), k.Seat(3).Last)
	require.Equal(t, int32(9), k.Seat(1).Last)
}

// TestCheckCursors: each kind of corrupt cursor is reported, naming the
// seat and the value; several are reported together.
func TestCheckCursors(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(k *step.Checker)
		want []string
	}{
		{"fresh", func(*step.Checker) {}, nil},
		{"after steps", func(k *step.Checker) {}, nil},
		{"positions without start", func(k *step.Checker) { k.Seat(2).KVLen = 3 },
			[]string{"seat 2 is not started but holds 3 positions (has last token false)"}},
		{"last token without start", func(k *step.Checker) { k.Seat(3).HasLast = true },
			[]string{"seat 3 is not started but holds 0 positions (has last token true)"}},
		{"past max context", func(k *step.Checker) { k.Seat(0).KVLen = 33 },
			[]string{"seat 0 holds 33 positions, outside [0, 32]"}},
		{"negative positions", func(k *step.Checker) { k.Seat(1).KVLen = -1 },
			[]string{"seat 1 holds -1 positions, outside [0, 32]"}},
		{"last token above vocab", func(k *step.Checker) { k.Seat(0).Last = 10 },
			[]string{"seat 0 last token 10 outside vocab 10"}},
		{"negative last token", func(k *step.Checker) { k.Seat(1).Last = -1 },
			[]string{"seat 1 last token -1 outside vocab 10"}},
		{"several", func(k *step.Checker) { k.Seat(0).Last, k.Seat(1).KVLen = 12, 40 },
			[]string{"seat 0 last token 12", "seat 1 holds 40 positions"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newChecker(t, false)
			if tc.name != "fresh" {
				advance(t, k, startBatch())
			}
			tc.mod(k)
			err := k.CheckCursors()
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

// TestIncremental: with Incremental set, a running sequence's table entries
// before the block of its first new token are not checked again (the engine
// never rewrites them), that block and every later one are, and a starting
// sequence's whole table is; without it every entry is checked every step.
func TestIncremental(t *testing.T) {
	// After startBatch and one decode, seat 0 holds 6 positions in blocks
	// {0, 1}; its next token (position 6) goes to block 1.
	for _, tc := range []struct {
		name   string
		table  []int32
		start  bool
		wantOK bool // under Incremental; without it every case fails
	}{
		{"entry before the first new token's block", []int32{-5, 1}, false, true},
		{"the first new token's block", []int32{0, 99}, false, false},
		{"a restart's whole table", []int32{-5, 1}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, incremental := range []bool{false, true} {
				k := newChecker(t, incremental)
				advance(t, k, startBatch())
				advance(t, k, decodeBatch())
				var b *step.Batch
				if tc.start {
					toks, sb := starting(0, 7, 0)
					sb.BlockTable = tc.table
					b = batchOf(toks, sb)
				} else {
					b = batchOf([]int32{step.FutureToken},
						step.SeqBatch{Seat: 0, NumTokens: 1, ContextLen: 7, BlockTable: tc.table, Sample: true})
				}
				err := k.Validate(b)
				if incremental && tc.wantOK {
					require.NoError(t, err)
					continue
				}
				require.ErrorContains(t, err, "outside [0, 8)", "incremental %v", incremental)
			}
		})
	}
	// A sequence that crosses into a new block: the new block is checked,
	// the full one before it is not.
	k := newChecker(t, true)
	advance(t, k, startBatch()) // seat 1: 2 positions in block 2
	b := batchOf([]int32{3, 4, 5}, step.SeqBatch{Seat: 1, NumTokens: 3, ContextLen: 5, BlockTable: []int32{2, 8}})
	require.ErrorContains(t, k.Validate(b), "seq 0 (seat 1): block 8 (table entry 1) outside [0, 8)")
	b.Seqs[0].BlockTable = []int32{2, 3}
	advance(t, k, b)
	b = batchOf([]int32{6}, step.SeqBatch{Seat: 1, NumTokens: 1, ContextLen: 6, BlockTable: []int32{-1, 3}})
	require.NoError(t, k.Validate(b), "block 0 was checked when the sequence was in it")
}

// fuzzBytes hands out the fuzzer's bytes, then zeros.
type fuzzBytes struct{ b []byte }

func (f *fuzzBytes) next() int {
	if len(f.b) == 0 {
		return 0
	}
	v := f.b[0]
	f.b = f.b[1:]
	return int(v)
}

// genBatch builds a batch from f that is mostly valid against k's cursors,
// with rare faults in every field Validate checks (a zero byte, as after the
// input ends, is never a fault). tables are the seats' block tables as of
// the last accepted batch; as the engine's, they only grow at their end,
// except that a Start begins a new one.
func genBatch(f *fuzzBytes, k *step.Checker, tables [][]int32) *step.Batch {
	c := k.Capacity()
	b := &step.Batch{}
	n := 1 + f.next()%(c.Seats+1)
	if f.next() == 255 {
		n = 0
	}
	for range n {
		seat := int32(f.next() % (c.Seats + 1)) // c.Seats: out of range
		if f.next() == 254 {
			seat = -1
		}
		var cur step.Cursor
		if seat >= 0 && int(seat) < c.Seats {
			cur = *k.Seat(seat)
		}
		r := f.next()
		start := !cur.Started || r%8 == 0
		first := cur.KVLen
		if start {
			first = 0
		}
		switch r >> 5 {
		case 6:
			first++
		case 7:
			first--
		}
		num := 1 + int32(f.next()%4)
		if r == 246 {
			num = 0
		}
		sb := step.SeqBatch{Seat: seat, TokenStart: int32(len(b.Tokens)), NumTokens: num,
			ContextLen: first + num, Start: start, Sample: r&1 == 0}
		if f.next() == 247 {
			sb.ContextLen += 40 // past MaxContext
		}
		for j := range num {
			tok := int32(f.next() % (c.Vocab + 1)) // Vocab: out of range
			if j == 0 && r&4 != 0 {
				tok = step.FutureToken
			}
			b.Tokens = append(b.Tokens, tok)
			pos := first + j
			if f.next() == 253 {
				pos++
			}
			b.Positions = append(b.Positions, pos)
		}
		if start {
			p := sampling.DefaultParams()
			if f.next() == 249 {
				p.TopP = 2
			}
			if sb.Params = &p; f.next() == 248 {
				sb.Params = nil
			}
			for range f.next() % 4 {
				sb.History = append(sb.History, int32(f.next()%(c.Vocab+1)))
			}
			sb.NumOutput = int32(f.next()%(len(sb.History)+2)) - int32(f.next()%2)
		}
		if seat >= 0 && int(seat) < c.Seats {
			// The seat's committed table, extended at its end (a copy, so a
			// rejected batch rewrites nothing); a Start begins a new one.
			var tab []int32
			if !start {
				tab = tables[seat][:len(tables[seat]):len(tables[seat])]
			}
			for int32(len(tab)*c.BlockSize) < sb.ContextLen && len(tab) < 64 {
				tab = append(tab, int32(f.next()%(c.KVBlocks+1))) // KVBlocks: out of range
			}
			if f.next() == 252 && len(tab) > 0 {
				tab = tab[:len(tab)-1]
			}
			sb.BlockTable = tab
		}
		b.Seqs = append(b.Seqs, sb)
	}
	switch f.next() {
	case 251:
		b.Tokens, b.Positions = append(b.Tokens, 1), append(b.Positions, 0)
	case 250:
		b.Positions = append(b.Positions, 0)
	}
	return b
}

// satisfies is the contract stated independently of Checker.Validate: what a
// runner may rely on in a batch that passed, given the seats' cursors
// before it.
func satisfies(t *testing.T, c step.Capacity, before []step.Cursor, b *step.Batch) {
	t.Helper()
	T := len(b.Tokens)
	require.True(t, T >= 1 && T <= c.MaxBatchTokens, "tokens %d", T)
	require.Len(t, b.Positions, T)
	require.True(t, len(b.Seqs) >= 1 && len(b.Seqs) <= c.Seats, "sequences %d", len(b.Seqs))
	seen := map[int32]bool{}
	covered := int32(0)
	for i, sb := range b.Seqs {
		require.True(t, sb.Seat >= 0 && int(sb.Seat) < c.Seats, "seq %d seat %d", i, sb.Seat)
		require.False(t, seen[sb.Seat], "seat %d twice", sb.Seat)
		seen[sb.Seat] = true
		require.Equal(t, covered, sb.TokenStart, "seq %d starts where the previous ended", i)
		require.GreaterOrEqual(t, sb.NumTokens, int32(1))
		covered += sb.NumTokens
		require.LessOrEqual(t, int(covered), T)
		require.True(t, sb.ContextLen >= sb.NumTokens && int(sb.ContextLen) <= c.MaxContext, "seq %d context %d", i, sb.ContextLen)
		first := sb.ContextLen - sb.NumTokens
		cur := before[sb.Seat]
		if sb.Start {
			require.NotNil(t, sb.Params)
			p := *sb.Params
			require.NoError(t, p.Validate(c.Vocab))
			for _, h := range sb.History {
				require.True(t, h >= 0 && int(h) < c.Vocab, "history token %d", h)
			}
			require.True(t, sb.NumOutput >= 0 && int(sb.NumOutput) <= len(sb.History))
		} else {
			require.True(t, cur.Started, "seq %d continues an unstarted seat", i)
			require.Equal(t, cur.KVLen, first, "seq %d continues where its seat stands", i)
		}
		for j := int32(0); j < sb.NumTokens; j++ {
			require.Equal(t, first+j, b.Positions[sb.TokenStart+j])
			tok := b.Tokens[sb.TokenStart+j]
			if tok == step.FutureToken {
				require.True(t, j == 0 && !sb.Start && cur.HasLast, "seq %d future token %d", i, j)
				continue
			}
			require.True(t, tok >= 0 && int(tok) < c.Vocab, "token %d", tok)
		}
		need := int((sb.ContextLen + int32(c.BlockSize) - 1) / int32(c.BlockSize))
		require.GreaterOrEqual(t, len(sb.BlockTable), need)
		for _, blk := range sb.BlockTable[:need] {
			require.True(t, blk >= 0 && int(blk) < c.KVBlocks, "block %d", blk)
		}
	}
	require.Equal(t, T, int(covered))
}

// FuzzChecker: random batches either fail Validate, changing no cursor, or
// satisfy the contract; Advance after a passing Validate keeps CheckCursors
// nil. An Incremental checker fed the same grow-only tables agrees with the
// full one on every batch. Nothing panics.
func FuzzChecker(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 3, 1, 2, 3, 0, 0, 0, 1, 2, 1, 1, 3, 0, 1, 4, 5, 0, 2, 0, 1, 0, 0, 0})
	f.Add([]byte{3, 0, 0, 8, 4, 1, 1, 1, 1, 5, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 2, 0, 16, 4, 9, 9, 9, 9, 255, 254, 253, 252})
	f.Fuzz(func(t *testing.T, data []byte) {
		full, incr := newChecker(t, false), newChecker(t, true)
		tables := make([][]int32, testCap.Seats)
		in := &fuzzBytes{data}
		for range 64 {
			if len(in.b) == 0 {
				break
			}
			b := genBatch(in, full, tables)
			before := cursors(full)
			err := full.Validate(b)
			ierr := incr.Validate(b)
			require.Equal(t, err == nil, ierr == nil, "full: %v; incremental: %v", err, ierr)
			if err != nil {
				require.Equal(t, before, cursors(full), "a rejected batch changes no cursor")
				continue
			}
			satisfies(t, testCap, before, b)
			for _, sb := range b.Seqs {
				tables[sb.Seat] = sb.BlockTable
			}
			var out step.Output
			out.Resize(len(b.Seqs))
			for i := range out.Tokens {
				out.Tokens[i] = int32(in.next() % testCap.Vocab)
			}
			full.Advance(b, &out)
			incr.Advance(b, &out)
			require.NoError(t, full.CheckCursors())
			require.Equal(t, cursors(full), cursors(incr))
		}
	})
}
