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
	"errors"
	"fmt"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/policy"
	"github.com/turnstile-llm/turnstile/sim"
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
	// Overlap and Ablation are the executor's (seed 004's arms).
	Overlap  bool
	Ablation executor.Ablation
	// Seed is the engine's base for request seeds (the simulated device
	// also mixes it into generated tokens).
	Seed uint64
	// Programs enables program-level admission (seed 000's arms A, B, C);
	// nil: none. The engine reads it; the caller keeps ownership.
	Programs *policy.Config
	// CascadeMinBlocks is the executor's (0: no cascade attention groups).
	CascadeMinBlocks int
}

// seats sizes the runner's seats for the batch size and overlap.
func (c Config) seats() (int, error) {
	seats, err := executor.Config{MaxBatchSize: c.MaxBatchSize, Overlap: c.Overlap}.DeriveSeats()
	if err != nil {
		return 0, fmt.Errorf("rig: %w", err)
	}
	return seats, nil
}

// engine builds the executor engine on run (sized by seats) and tok, reading clk; name is
// the engine's model name. The engine does not own run.
func (c Config) engine(clk clock.Clock, run step.Runner, tok executor.Tokenizer, name string) (*executor.Engine, error) {
	eng, err := executor.New(executor.Config{MaxBatchSize: c.MaxBatchSize, Overlap: c.Overlap,
		Ablation: c.Ablation, Clock: clk, Programs: c.Programs, Model: name, Seed: c.Seed,
		CascadeMinBlocks: c.CascadeMinBlocks}, run, tok)
	if err != nil {
		return nil, fmt.Errorf("rig: %w", err)
	}
	return eng, nil
}

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
// device spends each step's priced time on clk when the engine processes the
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
		TokenMin: TokenMin, TokenMax: int32(d.Vocab), DeferSpend: true,
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
	return eng, c.KVBlocks * c.BlockSize, nil
}

// CPU is the real CPU runner of a row.
type CPU struct {
	// Model is the loaded model; the caller owns it and closes it after
	// every engine built on it.
	Model *model.Llama
	// Workers is the cores the kernels use (0: GOMAXPROCS).
	Workers int
	// KVType is the KV cache's element type (kernels.F32, the zero value,
	// F16 or BF16; see model.CPURunnerConfig.KVType).
	KVType kernels.DType
}

// CPUEngine is the executor engine of a CPU row. It embeds
// *executor.Engine (so it is an Engine), and its Close also closes the CPU
// runner: executor.Engine.Close does not own its runner, and the runner's
// worker goroutines and KV cache must not outlive the row. Callers that
// need the bare engine (agentic.EngineSetup) pass e.Engine and keep e as
// the thing they close.
type CPUEngine struct {
	*executor.Engine
	runner *model.CPURunner
}

// Close closes the engine (aborting whatever is left) and then the runner;
// it returns the first error. Calling it twice is safe.
func (e *CPUEngine) Close() error {
	return errors.Join(e.Engine.Close(), e.runner.Close())
}

// Runner is the CPU runner under the recorder (for its Check); e owns it.
func (e *CPUEngine) Runner() *model.CPURunner { return e.runner }

// NewCPU builds the engine of c on the CPU runner d, on virt: a
// sim.Recorder times each step on the real clock and spends the measured
// wall time on virt when the engine processes the step, and the engine reads
// virt. Virtual-time drivers (bench/traffic, bench/agentic) can then drive
// the real runner at full speed: arrivals and tool waits cost nothing,
// steps cost what they measured. It returns the engine, the recorder
// (every step's shape and measured time, for sim.Calibrate) and the KV
// capacity in tokens. The caller closes the engine, which also closes the
// runner.
func NewCPU(c Config, d CPU, virt *clock.Virtual) (*CPUEngine, *sim.Recorder, int, error) {
	if d.Model == nil {
		return nil, nil, 0, fmt.Errorf("rig: no model")
	}
	if virt == nil {
		return nil, nil, 0, fmt.Errorf("rig: no virtual clock")
	}
	seats, err := c.seats()
	if err != nil {
		return nil, nil, 0, err
	}
	run, err := model.NewCPURunner(d.Model, model.CPURunnerConfig{Seats: seats, KVBlocks: c.KVBlocks, BlockSize: c.BlockSize,
		MaxBatchTokens: c.MaxBatchTokens, Workers: d.Workers, KVType: d.KVType})
	if err != nil {
		return nil, nil, 0, fmt.Errorf("rig: %w", err)
	}
	rec, err := sim.NewRecorder(run, clock.Real{})
	if err != nil {
		return nil, nil, 0, errors.Join(fmt.Errorf("rig: %w", err), run.Close())
	}
	rec.SpendOn(virt)
	eng, err := c.engine(virt, rec, d.Model.Tokenizer(), "cpu")
	if err != nil {
		return nil, nil, 0, errors.Join(err, run.Close())
	}
	return &CPUEngine{Engine: eng, runner: run}, rec, c.KVBlocks * c.BlockSize, nil
}
