// Package cpurig builds an engine on the real CPU runner for one experiment
// row, the CPU counterpart of bench/simrig: seats sized by seatpool for the
// batch size and overlap, the model's CPU runner wrapped in a sim.Recorder
// that times each step on the real clock and spends the measured time on
// the row's virtual clock when the engine collects the step. Virtual-time
// drivers (bench/traffic, bench/agentic) can then drive the real runner at
// full speed: arrivals and tool waits cost nothing, steps cost what they
// measured.
package cpurig

import (
	"errors"
	"fmt"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/policy"
	"github.com/turnstile-llm/turnstile/seatpool"
	"github.com/turnstile-llm/turnstile/sim"
)

// Config describes one CPU engine.
type Config struct {
	// Model is the loaded model; the caller owns it and closes it after
	// every engine built on it.
	Model *model.Llama
	// MaxBatchSize is the engine's batch (seats follow from it).
	MaxBatchSize int
	// KVBlocks × BlockSize is the KV capacity in tokens; MaxBatchTokens is
	// the step's token budget; Workers is the cores the kernels use (0:
	// GOMAXPROCS).
	KVBlocks, BlockSize, MaxBatchTokens, Workers int
	// Overlap and ChargeRetiring are the executor's (seed 004's arms).
	Overlap, ChargeRetiring bool
	// Seed is the engine's base for request seeds.
	Seed uint64
	// Programs enables program-level admission (seed 000's arms A, B, C);
	// nil: none.
	Programs *policy.Config
}

// Engine is the executor engine of a CPU row. It embeds *executor.Engine
// (so it is a traffic.Engine and an agentic.Engine), and its Close also
// closes the CPU runner: executor.Engine.Close does not own its runner, and
// the runner's worker goroutines and KV cache must not outlive the row.
// Callers that need the bare engine (agentic.EngineSetup) pass e.Engine and
// keep e as the thing they close.
type Engine struct {
	*executor.Engine
	runner *model.CPURunner
}

// Close closes the engine (aborting whatever is left) and then the runner;
// it returns the first error. Calling it twice is safe.
func (e *Engine) Close() error {
	return errors.Join(e.Engine.Close(), e.runner.Close())
}

// Runner is the CPU runner under the recorder (for its Check).
func (e *Engine) Runner() *model.CPURunner { return e.runner }

// New builds the engine on virt: the engine reads virt, and the recorder
// spends each step's measured wall time on it when the step is collected.
// It returns the engine, the recorder (every step's shape and measured
// time, for sim.Calibrate) and the KV capacity in tokens. The caller closes
// the engine, which also closes the runner.
func New(c Config, virt *clock.Virtual) (*Engine, *sim.Recorder, int, error) {
	if c.Model == nil {
		return nil, nil, 0, fmt.Errorf("cpurig: no model")
	}
	if virt == nil {
		return nil, nil, 0, fmt.Errorf("cpurig: no virtual clock")
	}
	seats, err := seatpool.Seats(seatpool.Sizing{MaxBatchSize: c.MaxBatchSize, Overlap: c.Overlap, DeferredTeardown: c.Overlap})
	if err != nil {
		return nil, nil, 0, fmt.Errorf("cpurig: seats for max batch %d: %w", c.MaxBatchSize, err)
	}
	run, err := model.NewCPURunner(c.Model, model.CPURunnerConfig{Seats: seats, KVBlocks: c.KVBlocks, BlockSize: c.BlockSize,
		MaxBatchTokens: c.MaxBatchTokens, Workers: c.Workers})
	if err != nil {
		return nil, nil, 0, fmt.Errorf("cpurig: %w", err)
	}
	rec, err := sim.NewRecorder(run, clock.Real{})
	if err != nil {
		return nil, nil, 0, errors.Join(fmt.Errorf("cpurig: %w", err), run.Close())
	}
	rec.SpendOn(virt)
	eng, err := executor.New(executor.Config{MaxBatchSize: c.MaxBatchSize, Seats: seats, Overlap: c.Overlap, ChargeRetiring: c.ChargeRetiring,
		Clock: virt, Programs: c.Programs, Model: "cpu", Seed: c.Seed}, rec, c.Model.Tokenizer())
	if err != nil {
		return nil, nil, 0, errors.Join(fmt.Errorf("cpurig: %w", err), run.Close())
	}
	return &Engine{Engine: eng, runner: run}, rec, c.KVBlocks * c.BlockSize, nil
}
