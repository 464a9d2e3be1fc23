// Package simrig builds an engine on the simulated device for one
// experiment row: seats sized by seatpool for the batch size and overlap,
// a sim.Runner priced by a cost model on the row's virtual clock, and the
// simulated tokenizer. The bench commands and the harness tests share it,
// so every simulated row is built the same way.
package simrig

import (
	"fmt"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/policy"
	"github.com/turnstile-llm/turnstile/seatpool"
	"github.com/turnstile-llm/turnstile/sim"
	"github.com/turnstile-llm/turnstile/step"
)

// Token ids of the simulated vocabulary: 1 is BOS, 2 is EOS, and
// generated tokens are drawn from [TokenMin, Vocab), which matches the
// workload package's default range.
const (
	BOS      = 1
	EOS      = 2
	TokenMin = 3
)

// Config describes one simulated engine.
type Config struct {
	// Cost prices each step (e.g. sim.H200Llama3_8B or a fitted profile).
	Cost sim.CostModel
	// MaxBatchSize is the engine's batch (seats follow from it).
	MaxBatchSize int
	// KVBlocks × BlockSize is the KV capacity in tokens; MaxContext bounds
	// a sequence; MaxBatchTokens is the step's token budget; Vocab bounds
	// token ids (≥ 4).
	KVBlocks, BlockSize, MaxContext, MaxBatchTokens, Vocab int
	// Overlap and ChargeRetiring are the executor's (seed 004's arms).
	Overlap, ChargeRetiring bool
	// EOSAfter makes every sequence emit EOS as its EOSAfter-th token
	// (0: never; workloads then end on max tokens).
	EOSAfter int
	// Seed is mixed into generated tokens and the engine's request seeds.
	Seed uint64
	// Programs enables program-level admission (seed 000's arms A, B, C);
	// nil: none.
	Programs *policy.Config
}

// New builds the engine on clk (the runner spends step time on it and the
// engine reads it). It returns the engine and its KV capacity in tokens.
func New(c Config, clk clock.Clock) (*executor.Engine, int, error) {
	if c.Vocab < TokenMin+1 {
		return nil, 0, fmt.Errorf("simrig: vocab %d leaves no ids to generate above %d", c.Vocab, TokenMin)
	}
	seats, err := seatpool.Seats(seatpool.Sizing{MaxBatchSize: c.MaxBatchSize, Overlap: c.Overlap, DeferredTeardown: c.Overlap})
	if err != nil {
		return nil, 0, fmt.Errorf("simrig: seats for max batch %d: %w", c.MaxBatchSize, err)
	}
	dev, err := sim.New(sim.Config{
		Capacity: step.Capacity{Seats: seats, KVBlocks: c.KVBlocks, BlockSize: c.BlockSize, MaxContext: c.MaxContext,
			MaxBatchTokens: c.MaxBatchTokens, Vocab: c.Vocab},
		Cost: c.Cost, Clock: clk, Seed: c.Seed, EOS: EOS, EOSAfter: c.EOSAfter,
		TokenMin: TokenMin, TokenMax: int32(c.Vocab), ChargeOnCollect: true,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("simrig: %w", err)
	}
	tok, err := sim.NewTokenizer(c.Vocab, BOS, EOS)
	if err != nil {
		return nil, 0, fmt.Errorf("simrig: %w", err)
	}
	eng, err := executor.New(executor.Config{MaxBatchSize: c.MaxBatchSize, Seats: seats, Overlap: c.Overlap, ChargeRetiring: c.ChargeRetiring,
		Clock: clk, Programs: c.Programs, Model: "sim", Seed: c.Seed}, dev, tok)
	if err != nil {
		return nil, 0, fmt.Errorf("simrig: %w", err)
	}
	return eng, c.KVBlocks * c.BlockSize, nil
}
