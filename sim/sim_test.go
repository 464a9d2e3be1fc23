package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/step"
)

func testCapacity() step.Capacity {
	return step.Capacity{Seats: 4, KVBlocks: 16, BlockSize: 4, MaxContext: 32, MaxBatchTokens: 64, Vocab: 50}
}

func newRunner(t *testing.T, mod func(*Config)) (*Runner, *clock.Virtual) {
	t.Helper()
	vc := clock.NewVirtual(time.Unix(0, 0))
	cfg := Config{Capacity: testCapacity(), Clock: vc, Cost: Fixed(time.Millisecond), EOS: 2}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	require.NoError(t, err)
	return r, vc
}

// oneSeq builds a batch of one sequence.
func oneSeq(seat int32, start bool, first int32, toks []int32, blocks []int32, sample bool, p *sampling.Params) *step.Batch {
	b := &step.Batch{}
	for i, tk := range toks {
		b.Tokens = append(b.Tokens, tk)
		b.Positions = append(b.Positions, first+int32(i))
	}
	b.Seqs = []step.SeqBatch{{Seat: seat, NumTokens: int32(len(toks)), ContextLen: first + int32(len(toks)),
		BlockTable: blocks, Sample: sample, Start: start, Params: p}}
	return b
}

func TestRunnerDeterministicAcrossChunking(t *testing.T) {
	p := sampling.DefaultParams()
	p.Seed = 99
	prompt := []int32{5, 6, 7, 8, 9, 10}
	blocks := []int32{3, 7, 1}

	// One-shot prefill then 3 decodes with futures.
	r1, vc := newRunner(t, nil)
	var out step.Output
	out.Resize(1)
	require.NoError(t, r1.Execute(oneSeq(0, true, 0, prompt, blocks, true, &p), &out))
	got1 := []int32{out.Tokens[0]}
	for pos := int32(6); pos < 9; pos++ {
		require.NoError(t, r1.Execute(oneSeq(0, false, pos, []int32{step.FutureToken}, blocks, true, &p), &out))
		got1 = append(got1, out.Tokens[0])
	}
	require.Equal(t, 4, r1.Steps())
	require.Equal(t, 4*time.Millisecond, vc.Elapsed())

	// Chunked prefill (4 + 2) on another seat, explicit tokens instead of futures.
	r2, _ := newRunner(t, nil)
	require.NoError(t, r2.Execute(oneSeq(2, true, 0, prompt[:4], blocks, false, &p), &out))
	require.Equal(t, int32(-1), out.Tokens[0])
	require.NoError(t, r2.Execute(oneSeq(2, false, 4, prompt[4:], blocks, true, &p), &out))
	got2 := []int32{out.Tokens[0]}
	for pos := int32(6); pos < 9; pos++ {
		require.NoError(t, r2.Execute(oneSeq(2, false, pos, []int32{got2[len(got2)-1]}, blocks, true, &p), &out))
		got2 = append(got2, out.Tokens[0])
	}
	require.Equal(t, got1, got2)
	seq := append([]int32(nil), prompt...)
	for _, tk := range got1 {
		require.Equal(t, r1.Next(99, seq), tk, "Next predicts Execute")
		seq = append(seq, tk)
	}
	for _, tk := range got1 {
		require.NotEqual(t, int32(2), tk, "EOS must not be generated")
	}
}

func TestRunnerEOSAfterAndRange(t *testing.T) {
	r, _ := newRunner(t, func(c *Config) { c.EOSAfter = 3; c.TokenMin, c.TokenMax = 10, 12 })
	p := sampling.DefaultParams()
	var out step.Output
	out.Resize(1)
	blocks := []int32{0, 1}
	require.NoError(t, r.Execute(oneSeq(1, true, 0, []int32{1}, blocks, true, &p), &out))
	var got []int32
	got = append(got, out.Tokens[0])
	for pos := int32(1); pos < 3; pos++ {
		require.NoError(t, r.Execute(oneSeq(1, false, pos, []int32{step.FutureToken}, blocks, true, &p), &out))
		got = append(got, out.Tokens[0])
	}
	require.Equal(t, int32(2), got[2])
	require.Contains(t, []int32{10, 11}, got[0])
	require.Contains(t, []int32{10, 11}, got[1])
}

func TestRunnerRejectsContractViolations(t *testing.T) {
	p := sampling.DefaultParams()
	tests := []struct {
		name  string
		setup bool // run a 2-token prefill at seat 0 first
		batch *step.Batch
		want  string
	}{
		{"seat out of range", false, oneSeq(4, true, 0, []int32{1}, []int32{0}, true, &p), "seat 4 outside [0, 4)"},
		{"block out of range", false, oneSeq(0, true, 0, []int32{1}, []int32{16}, true, &p), "block 16 (table entry 0) outside [0, 16)"},
		// A continuing sequence: the block its new tokens go to is checked
		// again (copy-on-write may have replaced it), and a new one too.
		{"written block rewritten", true, oneSeq(0, false, 2, []int32{1, 2, 3}, []int32{16, 1}, true, &p), "block 16 (table entry 0) outside"},
		{"new block out of range", true, oneSeq(0, false, 2, []int32{1, 2, 3}, []int32{0, 16}, true, &p), "block 16 (table entry 1) outside"},
		{"short block table", false, oneSeq(0, true, 0, []int32{1, 2, 3, 4, 5}, []int32{0}, true, &p), "context 5 needs 2"},
		{"token outside vocab", false, oneSeq(0, true, 0, []int32{50}, []int32{0}, true, &p), "token 50 outside vocab 50"},
		{"future without sample", false, oneSeq(0, true, 0, []int32{step.FutureToken}, []int32{0}, true, &p), "future token"},
		{"gap in positions", true, oneSeq(0, false, 3, []int32{1}, []int32{0}, true, &p), "continues at position 3 but the seat holds 2"},
		{"not started", false, oneSeq(1, false, 0, []int32{1}, []int32{0}, true, &p), "started false"},
		{"context too long", false, oneSeq(0, true, 32, []int32{1}, make([]int32, 9), true, &p), "max context 32"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newRunner(t, nil)
			var out step.Output
			out.Resize(1)
			if tc.setup {
				require.NoError(t, r.Execute(oneSeq(0, true, 0, []int32{1, 2}, []int32{0}, false, &p), &out))
			}
			require.ErrorContains(t, r.Execute(tc.batch, &out), tc.want)
		})
	}

	// The middle block a decode reads is checked although it was validated
	// when it was written: here the table handed in later holds a bad id.
	r, _ := newRunner(t, nil)
	var out step.Output
	out.Resize(1)
	require.NoError(t, r.Execute(oneSeq(0, true, 0, make([]int32, 12), []int32{0, 1, 2}, true, &p), &out))
	require.ErrorContains(t, r.Execute(oneSeq(0, false, 12, []int32{1}, []int32{0, 16, 2, 3}, true, &p), &out),
		"block 16 (table entry 1) outside")
}

func TestNewValidates(t *testing.T) {
	vc := clock.NewVirtual(time.Unix(0, 0))
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"zero seats", func(c *Config) { c.Capacity.Seats = 0 }, "Capacity.Seats must be > 0, got 0"},
		{"no clock", func(c *Config) { c.Clock = nil }, "Clock is required"},
		{"range outside vocab", func(c *Config) { c.TokenMin, c.TokenMax = 10, 51 }, "[10, 51) not inside vocab [0, 50)"},
		{"negative EOSAfter", func(c *Config) { c.EOSAfter = -1 }, "EOSAfter must be >= 0, got -1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Capacity: testCapacity(), Clock: vc}
			tc.mod(&cfg)
			_, err := New(cfg)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
