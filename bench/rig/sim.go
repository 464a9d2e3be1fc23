package rig

import (
	"fmt"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
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

// Sim is the simulated device of a row.
type Sim struct {
	// Cost prices each step (e.g. sim.H200Llama3_8B or a fitted profile).
	Cost sim.CostModel
	// MaxContext bounds a sequence in tokens; Vocab bounds token ids
	// (≥ TokenMin+1).
	MaxContext, Vocab int
	// EOSAfter makes every sequence emit EOS as its EOSAfter-th token
	// (0: never; workloads then end on max tokens).
	EOSAfter int
}

// NewSim builds the engine of c on the simulated device d, on clk: the
// device spends each step's priced time on clk when the engine collects the
// step, and the engine reads clk. It returns the engine and its KV capacity
// in tokens. The engine holds nothing beyond memory; the caller closes it.
func NewSim(c Config, d Sim, clk clock.Clock) (*executor.Engine, int, error) {
	if d.Vocab < TokenMin+1 {
		return nil, 0, fmt.Errorf("rig: vocab %d leaves no ids to generate above %d", d.Vocab, TokenMin)
	}
	seats, err := c.seats()
	if err != nil {
		return nil, 0, err
	}
	dev, err := sim.New(sim.Config{
		Capacity: step.Capacity{Seats: seats, KVBlocks: c.KVBlocks, BlockSize: c.BlockSize, MaxContext: d.MaxContext,
			MaxBatchTokens: c.MaxBatchTokens, Vocab: d.Vocab},
		Cost: d.Cost, Clock: clk, Seed: c.Seed, EOS: EOS, EOSAfter: d.EOSAfter,
		TokenMin: TokenMin, TokenMax: int32(d.Vocab), ChargeOnCollect: true,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("rig: %w", err)
	}
	tok, err := sim.NewTokenizer(d.Vocab, BOS, EOS)
	if err != nil {
		return nil, 0, fmt.Errorf("rig: %w", err)
	}
	eng, err := c.engine(clk, dev, tok, "sim")
	if err != nil {
		return nil, 0, err
	}
	return eng, c.CapacityTokens(), nil
}
