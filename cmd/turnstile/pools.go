package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/turnstile-llm/turnstile/kvpool"
	"github.com/turnstile-llm/turnstile/seatpool"
)

// Per-sequence constants of the two program accountings (policy A and B)
// the sharing table compares, in tokens.
const (
	policyABuffer  = 100 // policy A: each program is charged its tokens + this buffer
	policyBReserve = 512 // policy B: distinct blocks × block size + this reserve per program
)

// demoMaxBlocks caps the KV pool the demo builds (blocks), so a typo in a
// flag cannot ask for gigabytes.
const demoMaxBlocks = 1 << 20

// poolsOptions are the flags of `turnstile pools`.
type poolsOptions struct {
	demo         bool
	sequences    int // sequences in the sharing table
	tokens       int // tokens per sequence
	blockSize    int // KV block size, tokens
	maxBatchSize int // sequences one step may schedule
}

func newPoolsCmd() *cobra.Command {
	o := poolsOptions{sequences: 32, tokens: 2048}
	// The engine's --block-size and --max-batch-size, sizing the demo's
	// pools (whose bounds the demo checks: it allocates them).
	e := defaultEngineFlags()
	cmd := &cobra.Command{
		Use:   "pools --demo",
		Short: "Show seat sizing and KV prefix sharing, measured on the real pools",
		Long: "pools --demo prints (1) the seat pool size with overlap off and on, the derivation,\n" +
			"what one teardown iteration does to the real seat pool, and start-up validation failing\n" +
			"in both directions; (2) for shared-prefix ratios 0, 0.5 and 0.9, the blocks N sequences\n" +
			"hold per sequence versus distinct in the KV pool, and what per-sequence (policy A)\n" +
			"and distinct-block (B) accounting would charge for them.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.blockSize, o.maxBatchSize = e.blockSize, e.maxBatchSize
			if !o.demo {
				return errors.New("pools: nothing to show without --demo")
			}
			if err := o.validate(); err != nil {
				return err
			}
			return runPoolsDemo(cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.demo, "demo", false, "run the demonstration")
	f.IntVar(&o.sequences, "sequences", o.sequences, "sequences in the sharing table (1..4096)")
	f.IntVar(&o.tokens, "tokens", o.tokens, "tokens per sequence (> 1)")
	e.register(f, flagBlockSize|flagMaxBatchSize)
	return cmd
}

// validate checks every flag, naming the offending value.
func (o poolsOptions) validate() error {
	switch {
	case o.sequences < 1 || o.sequences > 4096:
		return fmt.Errorf("pools: --sequences %d: must be in 1..4096", o.sequences)
	case o.tokens < 2:
		// One token cannot show a prefix hit: a hit always leaves the last token to compute.
		return fmt.Errorf("pools: --tokens %d: must be > 1", o.tokens)
	case o.blockSize < 1 || o.blockSize > 256 || o.blockSize&(o.blockSize-1) != 0:
		return fmt.Errorf("pools: --block-size %d: must be a power of two in 1..256", o.blockSize)
	case o.maxBatchSize < 1 || o.maxBatchSize > 4096:
		return fmt.Errorf("pools: --max-batch-size %d: must be in 1..4096", o.maxBatchSize)
	}
	// Divide instead of multiplying so huge values cannot overflow.
	if perSeq := (o.tokens + o.blockSize - 1) / o.blockSize; perSeq > demoMaxBlocks/o.sequences {
		return fmt.Errorf("pools: --sequences %d × --tokens %d at --block-size %d needs more than %d KV blocks",
			o.sequences, o.tokens, o.blockSize, demoMaxBlocks)
	}
	return nil
}

func runPoolsDemo(w io.Writer, o poolsOptions) error {
	if err := seatDemo(w, o.maxBatchSize); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(w); err != nil {
		return err
	}
	return sharingDemo(w, o)
}

// seatScenario is one seat-pool configuration of the sizing table.
type seatScenario struct {
	name   string
	sizing seatpool.Sizing
	// noHeadroom sizes the pool from MaxBatchSize alone, ignoring Seats: the
	// seed-004 bug, shown for contrast.
	noHeadroom bool
}

// teardownResult is what one iteration of teardown did to a real pool.
type teardownResult struct {
	seats, headroom      int
	admitted             int // of MaxBatchSize new sequences in step n+1
	live, retiring, free int
}

// simulateTeardown fills a pool with one full batch (step n), finishes every
// sequence in it, and admits up to a full batch in step n+1. With deferred
// teardown under overlap the finished sequences stay retiring through step
// n+1; otherwise they are torn down before it.
func simulateTeardown(sc seatScenario) (teardownResult, error) {
	var r teardownResult
	seats, err := seatpool.Seats(sc.sizing)
	if err != nil {
		return r, err
	}
	r.headroom = sc.sizing.Headroom()
	if sc.noHeadroom {
		seats, r.headroom = sc.sizing.MaxBatchSize, 0
	}
	p, err := seatpool.New(seats)
	if err != nil {
		return r, err
	}
	batch := sc.sizing.MaxBatchSize
	stepN := make([]seatpool.Seat, 0, batch)
	for range batch {
		s, err := p.Acquire()
		if err != nil {
			return r, fmt.Errorf("step n: %w", err)
		}
		stepN = append(stepN, s)
	}
	deferred := sc.sizing.Overlap && sc.sizing.DeferredTeardown
	for _, s := range stepN {
		if err := p.Retire(s); err != nil {
			return r, err
		}
		if !deferred {
			if err := p.Release(s); err != nil {
				return r, err
			}
		}
	}
	for range batch {
		if _, err := p.Acquire(); errors.Is(err, seatpool.ErrNoSeat) {
			break
		} else if err != nil {
			return r, err
		}
		r.admitted++
	}
	if err := p.Check(); err != nil {
		return r, err
	}
	r.seats, r.live, r.retiring, r.free = p.Seats(), p.Live(), p.Retiring(), p.Free()
	return r, nil
}

func seatDemo(w io.Writer, maxBatch int) error {
	ew := &errWriter{w: w}
	ew.printf("Seat sizing (max batch size %d)\n", maxBatch)
	ew.printf("  seats    = max_batch_size + teardown headroom\n")
	ew.printf("  headroom = max_batch_size when overlap is on and a finished request is torn down\n")
	ew.printf("             one iteration after its last token (it stays resident, retiring); else 0\n")
	ew.printf("  Step n schedules a full batch and every sequence in it finishes; step n+1 then admits:\n\n")
	scenarios := []seatScenario{
		{name: "overlap off (either teardown)", sizing: seatpool.Sizing{MaxBatchSize: maxBatch, DeferredTeardown: true}},
		{name: "overlap on, immediate teardown", sizing: seatpool.Sizing{MaxBatchSize: maxBatch, Overlap: true}},
		{name: "overlap on, deferred teardown", sizing: seatpool.Sizing{MaxBatchSize: maxBatch, Overlap: true, DeferredTeardown: true}},
		{name: "  same, pool without headroom (bug)", sizing: seatpool.Sizing{MaxBatchSize: maxBatch, Overlap: true, DeferredTeardown: true}, noHeadroom: true},
	}
	tw := tabwriter.NewWriter(ew, 2, 0, 2, ' ', tabwriter.AlignRight)
	// Pad the config names to one width so that they read left-aligned in a
	// right-aligned table.
	width := 0
	for _, sc := range scenarios {
		width = max(width, len(sc.name))
	}
	fmt.Fprintf(tw, "  %-*s\tseats\tbatch + headroom\tstep n+1 admits\tlive\tretiring\tresident\tfree\t\n", width, "config")
	var overlapSeats int
	for _, sc := range scenarios {
		r, err := simulateTeardown(sc)
		if err != nil {
			return fmt.Errorf("pools: %s: %w", sc.name, err)
		}
		if sc.sizing.Overlap && sc.sizing.DeferredTeardown && !sc.noHeadroom {
			overlapSeats = r.seats
		}
		fmt.Fprintf(tw, "  %-*s\t%d\t%d + %d\t%d of %d\t%d\t%d\t%d\t%d\t\n", width, sc.name, r.seats, maxBatch, r.headroom,
			r.admitted, maxBatch, r.live, r.retiring, r.live+r.retiring, r.free)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	ew.printf("  Admission charges live seats only; liveness counts resident (live + retiring).\n\n")

	p, err := seatpool.New(overlapSeats)
	if err != nil {
		return err
	}
	ew.printf("Start-up validation (seat pool of %d seats: overlap on, deferred teardown)\n", p.Seats())
	cases := []struct {
		what      string
		consumers []seatpool.Consumer
	}{
		{"every consumer sized from seatpool.Seats", []seatpool.Consumer{
			{Owner: "sampler state", Holds: overlapSeats},
			{Owner: "block-table rows", Holds: overlapSeats},
			{Owner: "runner buffers", Holds: overlapSeats},
		}},
		{"sampler sized from max batch alone (pool larger: a crash mid-run)", []seatpool.Consumer{
			{Owner: "sampler state", Holds: maxBatch},
		}},
		{"block table with its own +1 (pool smaller: lost throughput)", []seatpool.Consumer{
			{Owner: "block-table rows", Holds: overlapSeats + 1},
		}},
	}
	for _, c := range cases {
		ew.printf("  %s:\n", c.what)
		if err := p.Validate(c.consumers...); err != nil {
			ew.printf("    error: %s\n", strings.ReplaceAll(err.Error(), "\n", "\n    error: "))
		} else {
			ew.printf("    ok\n")
		}
	}
	return ew.err
}

// sharingRow is one line of the sharing table, every number read from the
// real kvpool after the sequences were admitted.
type sharingRow struct {
	ratio        float64
	prefixTokens int // tokens every sequence shares
	hitTokens    int // Σ prefix-cache hits (tokens not recomputed)
	sum          int // Σ per-sequence blocks
	distinct     int // distinct blocks referenced
	chargeA      int // policy A: Σ (tokens + buffer)
	chargeB      int // policy B: distinct blocks × block size + reserve per sequence
}

// measureSharing admits o.sequences sequences of o.tokens tokens whose first
// ratio·tokens tokens are identical into a fresh kvpool, through the prefix
// cache, and reads the counts back.
func measureSharing(o poolsOptions, ratio float64) (sharingRow, error) {
	row := sharingRow{ratio: ratio, prefixTokens: int(math.Round(ratio * float64(o.tokens)))}
	perSeq := (o.tokens + o.blockSize - 1) / o.blockSize
	// Room for every sequence with no sharing at all, plus the null block.
	kv, err := kvpool.New(kvpool.Config{NumBlocks: o.sequences*perSeq + 1, BlockSize: o.blockSize, NullBlock: true})
	if err != nil {
		return row, err
	}
	keys := kvpool.Keys{Model: "demo"}
	seqs := make([]kvpool.SeqID, 0, o.sequences)
	toks := make([]int32, o.tokens)
	for i := range o.sequences {
		for j := range toks {
			if j < row.prefixTokens {
				toks[j] = int32(j)
			} else {
				// Distinct from every prefix token and from other sequences' suffixes.
				toks[j] = int32(o.tokens + i*o.tokens + j)
			}
		}
		s := kv.NewSeq(keys)
		if s == kvpool.InvalidSeq {
			return row, fmt.Errorf("kvpool: no sequence handle for sequence %d", i)
		}
		hit, err := kv.MatchPrefix(s, toks)
		if err != nil {
			return row, err
		}
		if err := kv.Append(s, toks[hit:]); err != nil {
			return row, fmt.Errorf("sequence %d: %w", i, err)
		}
		if err := kv.Check(); err != nil {
			return row, err
		}
		row.hitTokens += hit
		row.chargeA += kv.Tokens(s) + policyABuffer
		seqs = append(seqs, s)
	}
	row.sum = kv.SumBlocks(seqs)
	row.distinct = kv.DistinctBlocks(seqs)
	if got := kv.Referenced(); got != row.distinct {
		return row, fmt.Errorf("kvpool: %d referenced blocks but the sequences hold %d distinct", got, row.distinct)
	}
	row.chargeB = row.distinct*kv.BlockSize() + policyBReserve*len(seqs)
	for _, s := range seqs {
		kv.Release(s)
	}
	if got := kv.Referenced(); got != 0 {
		return row, fmt.Errorf("kvpool: %d blocks still referenced after releasing every sequence", got)
	}
	return row, kv.Check()
}

func sharingDemo(w io.Writer, o poolsOptions) error {
	ew := &errWriter{w: w}
	ew.printf("KV prefix sharing (%d sequences × %d tokens, block size %d; measured in kvpool)\n",
		o.sequences, o.tokens, o.blockSize)
	ew.printf("  A = per-sequence charge (policy A): Σ (tokens + %d buffer)\n", policyABuffer)
	ew.printf("  B = distinct-block charge (policy B): distinct blocks × %d + %d reserve per sequence\n\n",
		o.blockSize, policyBReserve)
	tw := tabwriter.NewWriter(ew, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  share\tprefix tokens\tcache hits\tΣ per-seq blocks\tdistinct blocks\tsaved\tsaved %%\tA tokens\tB tokens\tA / B\t\n")
	for _, ratio := range []float64{0, 0.5, 0.9} {
		r, err := measureSharing(o, ratio)
		if err != nil {
			return fmt.Errorf("pools: sharing %.1f: %w", ratio, err)
		}
		saved := r.sum - r.distinct
		fmt.Fprintf(tw, "  %.1f\t%d\t%d\t%d\t%d\t%d\t%.1f\t%d\t%d\t%.2f\t\n", r.ratio, r.prefixTokens, r.hitTokens,
			r.sum, r.distinct, saved, 100*float64(saved)/float64(r.sum), r.chargeA, r.chargeB,
			float64(r.chargeA)/float64(r.chargeB))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return ew.err
}

// errWriter remembers the first write error so the demo checks it once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(b)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) {
	fmt.Fprintf(e, format, args...)
}
