// Package rig builds the engines of bench's experiment rows and holds what
// every workload driver in bench does to them on a virtual clock.
//
// One Config states the engine's side of a row once: batch size, KV
// geometry, token budget, overlap arms, seed and admission. A constructor
// per runner kind adds the device: NewSim the simulated device priced by a
// cost model on the row's virtual clock, NewCPU the real CPU runner timed
// on the real clock and spent on the row's virtual clock. Both size seats by
// seatpool for the batch size and overlap and build the executor engine the
// same way, so every row, simulated or measured, is wired alike.
//
// The drivers (bench/traffic, bench/agentic, bench/adprun) consume the
// Engine interface, drain streams without blocking (Drain) and settle the
// engine after their last request (Settle) before they audit it (Idle).
package rig

import (
	"fmt"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/policy"
	"github.com/turnstile-llm/turnstile/seatpool"
	"github.com/turnstile-llm/turnstile/step"
)

// Config is the engine's side of one row, whatever the runner.
type Config struct {
	// MaxBatchSize is the engine's batch in sequences (seats follow from
	// it and Overlap).
	MaxBatchSize int
	// KVBlocks × BlockSize is the KV capacity in tokens (BlockSize in
	// tokens per block); MaxBatchTokens is the step's token budget.
	KVBlocks, BlockSize, MaxBatchTokens int
	// Overlap and ChargeRetiring are the executor's (seed 004's arms).
	Overlap, ChargeRetiring bool
	// Seed is the engine's base for request seeds (the simulated device
	// also mixes it into generated tokens).
	Seed uint64
	// Admission is the engine's admission hook; nil admits all.
	Admission executor.Admission
	// Programs enables program-level admission (seed 000's arms A, B, C);
	// nil: none. The engine reads it; the caller keeps ownership.
	Programs *policy.Config
}

// CapacityTokens is the KV capacity in tokens, KVBlocks × BlockSize.
func (c Config) CapacityTokens() int { return c.KVBlocks * c.BlockSize }

// seats sizes the runner's seats for the batch size and overlap.
func (c Config) seats() (int, error) {
	seats, err := seatpool.Seats(seatpool.Sizing{MaxBatchSize: c.MaxBatchSize, Overlap: c.Overlap, DeferredTeardown: c.Overlap})
	if err != nil {
		return 0, fmt.Errorf("rig: seats for max batch %d: %w", c.MaxBatchSize, err)
	}
	return seats, nil
}

// engine builds the executor engine on run and tok, reading clk; name is
// the engine's model name. The engine does not own run.
func (c Config) engine(clk clock.Clock, run step.Runner, tok executor.Tokenizer, name string) (*executor.Engine, error) {
	eng, err := executor.New(executor.Config{MaxBatchSize: c.MaxBatchSize, Overlap: c.Overlap, ChargeRetiring: c.ChargeRetiring,
		Clock: clk, Admission: c.Admission, Programs: c.Programs, Model: name, Seed: c.Seed}, run, tok)
	if err != nil {
		return nil, fmt.Errorf("rig: %w", err)
	}
	return eng, nil
}
