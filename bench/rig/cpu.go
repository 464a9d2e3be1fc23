package rig

import (
	"errors"
	"fmt"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/sim"
)

// CPU is the real CPU runner of a row.
type CPU struct {
	// Model is the loaded model; the caller owns it and closes it after
	// every engine built on it.
	Model *model.Llama
	// Workers is the cores the kernels use (0: GOMAXPROCS).
	Workers int
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
// wall time on virt when the engine collects the step, and the engine reads
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
		MaxBatchTokens: c.MaxBatchTokens, Workers: d.Workers})
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
	return &CPUEngine{Engine: eng, runner: run}, rec, c.CapacityTokens(), nil
}
