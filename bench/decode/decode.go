// Package decode measures a runner's prefill and decode throughput with the
// definitions llama.cpp's llama-bench and llama-batched-bench use, so the two
// engines can be compared on the same model file:
//
//   - pp N: one sequence's N-token prompt computed in one step, from an
//     empty cache (llama-bench's pp512); tokens/s = N / time.
//   - tg N @ d D: one sequence generating N tokens one step at a time after a
//     D-token prompt that is not timed (llama-bench's tg128, and -d 512);
//     tokens/s = N / time.
//   - tg N × B: B sequences decoding together, N steps each after a P-token
//     prompt each that is not timed (llama-batched-bench's S_TG at npl B);
//     tokens/s = B·N / time.
//
// The runner is driven directly, without the engine: every figure is the
// runner's own work, as llama-bench's are llama.cpp's. Tokens are sampled
// greedily and fed back, so each step's input is the previous step's output
// as in real decoding. It is behind `turnstile bench decode`, which
// scripts/peer-bench.sh runs beside llama.cpp's tools.
package decode

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/step"
)

// Test is one measurement.
type Test struct {
	// Name is llama-bench's, e.g. "pp512", "tg128", "tg128@d512", "tg128x32".
	Name string
	// Prompt tokens per sequence before the timed part (pp: the timed part
	// itself), Gen decode steps timed, Seqs sequences.
	Prompt, Gen, Seqs int
}

// PP is llama-bench's pp N.
func PP(n int) Test { return Test{Name: fmt.Sprintf("pp%d", n), Prompt: n, Seqs: 1} }

// TG is llama-bench's tg N after depth d (d 0: from an empty cache, where
// the first token is the BOS-like token 1).
func TG(n, d int) Test {
	name := fmt.Sprintf("tg%d", n)
	if d > 0 {
		name += fmt.Sprintf("@d%d", d)
	}
	return Test{Name: name, Prompt: d, Gen: n, Seqs: 1}
}

// Batched is llama-batched-bench's generation at npl b: b sequences of a
// p-token prompt each, then n decode steps of all b together.
func Batched(n, p, b int) Test {
	return Test{Name: fmt.Sprintf("tg%dx%d", n, b), Prompt: p, Gen: n, Seqs: b}
}

// Validate checks the test's sizes, naming the offending value.
func (t Test) Validate() error {
	switch {
	case t.Seqs < 1:
		return fmt.Errorf("decode: test %s: %d sequences, want ≥ 1", t.Name, t.Seqs)
	case t.Prompt < 0 || t.Gen < 0:
		return fmt.Errorf("decode: test %s: prompt %d and gen %d tokens, want ≥ 0", t.Name, t.Prompt, t.Gen)
	case t.Gen == 0 && t.Prompt == 0:
		return fmt.Errorf("decode: test %s measures nothing (no prompt, no generation)", t.Name)
	case t.Gen == 0 && t.Seqs != 1:
		return fmt.Errorf("decode: test %s: a prompt test runs one sequence, not %d", t.Name, t.Seqs)
	}
	return nil
}

// Sizes is what a runner must hold for tests: seats, KV blocks of
// blockSize positions, and the step's token budget.
func Sizes(tests []Test, blockSize int) (seats, blocks, batchTokens int) {
	for _, t := range tests {
		seats = max(seats, t.Seqs)
		per := (max(t.Prompt, 1) + t.Gen + blockSize - 1) / blockSize
		blocks = max(blocks, t.Seqs*per)
		batchTokens = max(batchTokens, t.Prompt, t.Seqs)
	}
	return seats, blocks, batchTokens
}

// Result is one test's timing.
type Result struct {
	Test    Test
	Elapsed time.Duration // the timed part
	Tokens  int           // tokens the timed part computed
}

// TokensPerSecond is the test's throughput.
func (r Result) TokensPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Tokens) / r.Elapsed.Seconds()
}

// Run runs t on r, drawing prompt tokens deterministically from r's
// vocabulary and timing with now. r must hold the test (Sizes); its
// seats are reused from 0 and every sequence starts afresh, so tests can run
// one after another on one runner.
func Run(r step.Runner, t Test, now func() time.Time) (Result, error) {
	if err := t.Validate(); err != nil {
		return Result{}, err
	}
	c := r.Capacity()
	seats, blocks, budget := Sizes([]Test{t}, c.BlockSize)
	if seats > c.Seats || blocks > c.KVBlocks || budget > c.MaxBatchTokens {
		return Result{}, fmt.Errorf("decode: test %s needs %d seats, %d KV blocks and %d tokens per step; the runner holds %d, %d and %d",
			t.Name, seats, blocks, budget, c.Seats, c.KVBlocks, c.MaxBatchTokens)
	}
	if c.Vocab < 4 {
		return Result{}, fmt.Errorf("decode: vocabulary of %d tokens is too small", c.Vocab)
	}
	d := newDriver(t, c)
	// The untimed prompt of a generation test (a pp test times it).
	var t0 time.Time
	if t.Gen == 0 {
		t0 = now()
	}
	if t.Prompt > 0 {
		for i := range d.seqs {
			if err := d.prefill(r, i, t.Prompt); err != nil {
				return Result{}, err
			}
		}
	}
	if t.Gen == 0 {
		return Result{Test: t, Elapsed: now().Sub(t0), Tokens: t.Prompt}, nil
	}
	t0 = now()
	for range t.Gen {
		if err := d.decode(r); err != nil {
			return Result{}, err
		}
	}
	return Result{Test: t, Elapsed: now().Sub(t0), Tokens: t.Gen * t.Seqs}, nil
}

// driver builds the test's batches: sequence i at seat i with its own
// blocks.
type driver struct {
	t       Test
	bs      int
	vocab   int
	params  sampling.Params
	seqs    []seqState
	batch   step.Batch
	out     step.Output
	pending []int32 // each sequence's next input token
}

type seqState struct {
	table   []int32
	ctx     int32
	started bool
}

func newDriver(t Test, c step.Capacity) *driver {
	d := &driver{t: t, bs: c.BlockSize, vocab: c.Vocab, params: sampling.DefaultParams()}
	per := (max(t.Prompt, 1) + t.Gen + c.BlockSize - 1) / c.BlockSize
	for i := range t.Seqs {
		table := make([]int32, per)
		for j := range table {
			table[j] = int32(i*per + j)
		}
		d.seqs = append(d.seqs, seqState{table: table})
		d.pending = append(d.pending, 1)
	}
	return d
}

// token is prompt token j of sequence i: spread over the vocabulary,
// avoiding the first ids (control tokens in most vocabularies).
func (d *driver) token(i, j int) int32 {
	return int32(3 + (i*7919+j*104729)%(d.vocab-3))
}

func (d *driver) add(i int, toks []int32, sample bool) {
	s := &d.seqs[i]
	start := int32(len(d.batch.Tokens))
	for j, t := range toks {
		d.batch.Tokens = append(d.batch.Tokens, t)
		d.batch.Positions = append(d.batch.Positions, s.ctx+int32(j))
	}
	ctx := s.ctx + int32(len(toks))
	sb := step.SeqBatch{Seat: int32(i), TokenStart: start, NumTokens: int32(len(toks)), ContextLen: ctx,
		BlockTable: s.table[:(int(ctx)+d.bs-1)/d.bs], Sample: sample, Start: !s.started, Params: &d.params}
	if sb.Start {
		sb.History = toks
	}
	d.batch.Seqs = append(d.batch.Seqs, sb)
	s.ctx, s.started = ctx, true
}

func (d *driver) execute(r step.Runner) error {
	if err := r.Execute(&d.batch, &d.out); err != nil {
		return fmt.Errorf("decode: test %s: %w", d.t.Name, err)
	}
	return nil
}

// prefill computes sequence i's n-token prompt in one step and keeps its
// sampled token as the next input.
func (d *driver) prefill(r step.Runner, i, n int) error {
	toks := make([]int32, n)
	for j := range toks {
		toks[j] = d.token(i, j)
	}
	d.batch.Reset()
	d.add(i, toks, true)
	if err := d.execute(r); err != nil {
		return err
	}
	d.pending[i] = d.out.Tokens[0]
	return nil
}

// decode runs one step of every sequence's pending token.
func (d *driver) decode(r step.Runner) error {
	d.batch.Reset()
	for i := range d.seqs {
		d.add(i, d.pending[i:i+1], true)
	}
	if err := d.execute(r); err != nil {
		return err
	}
	copy(d.pending, d.out.Tokens)
	return nil
}

// Median is the median of rs' throughputs (the lower middle for an even
// count); rs must be non-empty.
func Median(rs []Result) (float64, error) {
	if len(rs) == 0 {
		return 0, errors.New("decode: median of no results")
	}
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = r.TokensPerSecond()
	}
	slices.Sort(v)
	return v[(len(v)-1)/2], nil
}

// Parse reads a test name: ppN, tgN, tgN@dD or tgNxB (the last with a
// batchedPrompt-token prompt per sequence, llama-batched-bench's npp).
func Parse(name string, batchedPrompt int) (Test, error) {
	bad := fmt.Errorf("decode: test %q: want ppN, tgN, tgN@dD or tgNxB (positive integers written plainly)", name)
	num := func(s string) (int, bool) {
		v, err := strconv.Atoi(s)
		return v, err == nil && v > 0 && strconv.Itoa(v) == s
	}
	var t Test
	if rest, ok := strings.CutPrefix(name, "pp"); ok {
		n, ok := num(rest)
		if !ok {
			return Test{}, bad
		}
		t = PP(n)
	} else if rest, ok := strings.CutPrefix(name, "tg"); ok {
		gen, tail, _ := strings.Cut(rest, "@d")
		gen, seqs, batched := strings.Cut(gen, "x")
		n, ok := num(gen)
		if !ok {
			return Test{}, bad
		}
		switch {
		case batched && strings.Contains(rest, "@d"):
			return Test{}, bad
		case batched:
			b, ok := num(seqs)
			if !ok {
				return Test{}, bad
			}
			t = Batched(n, batchedPrompt, b)
		case strings.Contains(rest, "@d"):
			d, ok := num(tail)
			if !ok {
				return Test{}, bad
			}
			t = TG(n, d)
		default:
			t = TG(n, 0)
		}
	} else {
		return Test{}, bad
	}
	if err := t.Validate(); err != nil {
		return Test{}, err
	}
	return t, nil
}
