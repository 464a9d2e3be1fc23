package main

import (
	"errors"
	"fmt"

	"github.com/turnstile-llm/turnstile/cuda"
	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/step"
)

// deviceOptions are --device and, for serve, --gpu-memory-fraction (registered
// by engineFlags).
//
// --gpu-memory-fraction with an explicit --device cpu is refused (the CPU
// runner sizes KV with --kv-cache-tokens, so accepting it would silently
// drop a setting); when --device auto falls back to the CPU the fraction is
// ignored and the one fallback log line says so, since the user asked for
// the GPU only if there is one.
type deviceOptions struct {
	device      string  // auto, cpu, cuda or cuda:N
	gpuFraction float64 // share of GPU memory for weights, activations and KV, (0, 1]
	fractionSet bool    // --gpu-memory-fraction was given on the command line
	// probe says whether a CUDA device can be used; nil: cuda.ProbeCUDA.
	// Tests inject one to pin the outcome on machines with a GPU.
	probe cuda.Prober
}

// validate parses --device and checks --gpu-memory-fraction against it and
// against --kv-cache-tokens (kvSet: given on the command line). Errors are
// prefixed with the command's name and name the offending values. Zero
// values take the flags' defaults (auto, 0.9), so callers that build
// serveOptions themselves (bench serve) get serve's behaviour.
func (d *deviceOptions) validate(command string, kvSet bool) (cuda.Selection, error) {
	if d.device == "" {
		d.device = "auto"
	}
	if d.gpuFraction == 0 && !d.fractionSet {
		d.gpuFraction = defaultGPUMemoryFraction
	}
	sel, err := cuda.ParseSelection(d.device)
	if err != nil {
		return cuda.Selection{}, fmt.Errorf("%s: %w", command, err)
	}
	f := d.gpuFraction
	switch {
	case !(f > 0 && f <= 1): // also refuses NaN
		return cuda.Selection{}, fmt.Errorf("%s: --gpu-memory-fraction %g: must be in (0, 1]", command, f)
	case d.fractionSet && kvSet:
		return cuda.Selection{}, fmt.Errorf("%s: --kv-cache-tokens and --gpu-memory-fraction are exclusive: size the KV cache in tokens or as a share of GPU memory, not both", command)
	case d.fractionSet && sel.Backend == cuda.BackendCPU:
		return cuda.Selection{}, fmt.Errorf("%s: --gpu-memory-fraction %g: applies to the CUDA runner, but --device %s selects the CPU (size its KV cache with --kv-cache-tokens)",
			command, f, d.device)
	}
	return sel, nil
}

// resolve turns sel into the CPU or a CUDA device: auto probes device 0
// and falls back to the CPU; an explicit cuda fails when the probe does,
// with the probe's reason (e.g. the driver library that is missing). note,
// when the choice came from auto, is the one line saying why; it is "" for
// an explicit choice.
func (d *deviceOptions) resolve(command string, sel cuda.Selection) (resolved cuda.Selection, note string, err error) {
	probe := d.probe
	if probe == nil {
		probe = cuda.ProbeCUDA
	}
	resolved, reason, err := cuda.Resolve(sel, probe)
	if err != nil {
		if errors.Is(err, cuda.ErrLibraryNotFound) {
			return resolved, "", fmt.Errorf("%s: %w (is the NVIDIA driver installed? --device auto or cpu runs on the CPU)", command, err)
		}
		return resolved, "", fmt.Errorf("%s: %w", command, err)
	}
	if sel.Backend != cuda.BackendAuto {
		return resolved, "", nil
	}
	if resolved.Backend == cuda.BackendCPU && d.fractionSet {
		reason += fmt.Sprintf(" (--gpu-memory-fraction %g ignored)", d.gpuFraction)
	}
	return resolved, reason, nil
}

// runner is what serve and generate need of the CPU and CUDA runners.
type runner interface {
	step.Runner
	Close() error
}

// runnerSizes size a runner on either device.
type runnerSizes struct {
	seats, blockSize, maxBatchTokens int
	// kvBlocks fixes the KV cache; 0 (CUDA only) sizes it from fraction.
	kvBlocks int
	fraction float64 // CUDA: share of device memory when kvBlocks is 0
	workers  int     // CPU: cores the kernels use (0: GOMAXPROCS)
	// kvType is the KV cache's element type (engineFlags.kvType resolved
	// for the device).
	kvType kernels.DType
	// mlp, when set, makes the CPU runner's MLP tensor-parallel across the
	// attention-DP ranks of this group (one per process).
	mlp model.MLPComm
}

// newRunner builds the runner for the resolved device sel; mem is the CUDA
// runner's memory plan (nil on the CPU).
func newRunner(command string, sel cuda.Selection, m *model.Llama, s runnerSizes) (r runner, mem *model.CUDAMemory, err error) {
	if sel.Backend != cuda.BackendCUDA {
		if s.kvBlocks <= 0 {
			return nil, nil, fmt.Errorf("%s: the CPU runner needs a KV size (got %d blocks)", command, s.kvBlocks)
		}
		cpu, err := model.NewCPURunner(m, model.CPURunnerConfig{Seats: s.seats, KVBlocks: s.kvBlocks, BlockSize: s.blockSize,
			MaxBatchTokens: s.maxBatchTokens, Workers: s.workers, MLP: s.mlp, KVType: s.kvType})
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", command, err)
		}
		return cpu, nil, nil
	}
	if s.mlp != nil {
		return nil, nil, fmt.Errorf("%s: --device %s: the sharded MLP runs on the CPU runner only so far (use --shard-mlp=false on GPUs)", command, sel)
	}
	cfg := model.CUDARunnerConfig{Device: sel.Index, Seats: s.seats, BlockSize: s.blockSize, MaxBatchTokens: s.maxBatchTokens,
		KVBlocks: s.kvBlocks, KVType: s.kvType}
	if s.kvBlocks == 0 {
		cfg.GPUMemoryFraction = s.fraction
	}
	gpu, err := model.NewCUDARunner(m, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: --device %s: %w", command, sel, err)
	}
	plan := gpu.Memory()
	return gpu, &plan, nil
}
