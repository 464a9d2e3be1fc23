package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/turnstile-llm/turnstile/cuda"
	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/model/gguf"
)

// engineFlags is the one engine configuration of the CLI, as vLLM's
// EngineArgs: every command that runs an engine (serve, generate, every
// bench command) and every command that sizes one (pools) takes these
// flags from here. Each flag is registered once (register), its default
// stated once (defaultEngineFlags) and checked once (validate); a command
// whose study fixes another default (bench adp's batch of two, bench
// agentic's simulated device) sets the field before register. What a
// command does with its engine (--out, --seed, --profile) is commandFlags'.
//
// validate checks only what the flag itself says (a count must be
// positive); what the packages check (executor.New, seatpool, the runners,
// the program policy) is left to them, and their errors are wrapped with
// the command's name.
type engineFlags struct {
	model        string // GGUF file or Hugging Face directory
	maxModelLen  int    // context the engine accepts; 0: the model's own
	dev          deviceOptions
	maxBatchSize int
	maxBatched   int    // tokens one step computes
	blockSize    int    // KV block size, tokens
	cascadeMin   int    // shortest shared run of blocks grouped for cascade attention; 0: off
	kvTokens     int    // KV cache size, tokens; 0: the command's default
	kvDtype      string // KV cache element type: auto, f32, f16 or bf16 (kvType resolves it)
	workers      int    // cores the CPU kernels use; 0: GOMAXPROCS
	noOverlap    bool
	// admission is the program policy's accounting: tokens, blocks,
	// pausing (or A, B, C) or none; validate normalizes it. programs are
	// its parameters (program_flags.go).
	admission string
	programs  programFlags

	// maxBatchLimit, when > 0, is the largest --max-batch-size the command
	// accepts (bench calibrate's decode passes).
	maxBatchLimit int
	// set holds the flags given on the command line (see flagsSet).
	set map[string]bool
}

// engineFlag selects the flags of engineFlags a command registers.
type engineFlag uint

const (
	flagModel engineFlag = 1 << iota
	flagDevice
	flagGPUFraction
	flagMaxBatchSize
	flagMaxBatched
	flagBlockSize
	flagCascade
	flagKVTokens
	flagKVDtype
	flagWorkers
	flagNoOverlap
	flagPrograms
)

// Defaults of the engine configuration, stated once.
const (
	// defaultGPUMemoryFraction is --gpu-memory-fraction's default (vLLM's).
	defaultGPUMemoryFraction = 0.9
	defaultMaxBatchSize      = 8
	// The CPU serving rule (serveOptions.servingDefaults): when
	// --max-batch-size is not given, serve on the CPU runs cpuSeqsPerCore
	// sequences per core, within [defaultMaxBatchSize, cpuMaxDefaultBatch].
	// A CPU decode step streams every weight once for all its rows, so a
	// batch of a few rows per core costs little more than one row, and a
	// client that finds every batch row taken waits a whole generation.
	cpuSeqsPerCore     = 8
	cpuMaxDefaultBatch = 64
	defaultMaxBatched  = 512
	defaultBlockSize   = 16
	// defaultCascadeMinBlocks: two blocks (32 tokens at the default block
	// size) is where reading a run once per group starts to pay for the
	// extra pass and merge.
	defaultCascadeMinBlocks = 2
	// defaultKVCacheDtype is --kv-cache-dtype's default: the device's own
	// choice (kvType).
	defaultKVCacheDtype = kvDtypeAuto
	// defaultAdmission is --admission's default: the blocks accounting,
	// chosen from bench agentic's measurements (admissionDefaultWhy,
	// docs/experiments.md).
	defaultAdmission = "blocks"
)

// defaultEngineFlags is the engine configuration before any flag: the one
// statement of every default.
func defaultEngineFlags() engineFlags {
	return engineFlags{model: defaultModelPath(), dev: deviceOptions{device: "auto", gpuFraction: defaultGPUMemoryFraction},
		maxBatchSize: defaultMaxBatchSize, maxBatched: defaultMaxBatched, blockSize: defaultBlockSize,
		cascadeMin: defaultCascadeMinBlocks, kvDtype: defaultKVCacheDtype, admission: defaultAdmission, programs: newProgramFlags()}
}

// defaultModelPath is the stories260K test model when it can be found from
// the working directory, else its path relative to the repository.
func defaultModelPath() string {
	if p, err := gguf.TestModelPath(); err == nil {
		return p
	}
	return gguf.TestModelFile
}

// register adds the flags in which to f, each with the field's current
// value as its default.
func (e *engineFlags) register(f *pflag.FlagSet, which engineFlag) {
	has := func(x engineFlag) bool { return which&x != 0 }
	if has(flagModel) {
		f.StringVar(&e.model, "model", e.model, "model: a GGUF file or a Hugging Face directory (config.json, safetensors, tokenizer.json); architectures llama/Mistral, qwen2, qwen3")
		f.IntVar(&e.maxModelLen, "max-model-len", e.maxModelLen,
			"longest sequence (prompt + output) the engine accepts, tokens; 0: the model's context length; may only lower it")
	}
	if has(flagDevice) {
		f.StringVar(&e.dev.device, "device", e.dev.device,
			"where the engine runs: auto (CUDA when the driver, a device and NVRTC are found, else the CPU), cpu, cuda, cuda:N, "+
				"or sim (the simulated device; bench only); bench agentic takes a list (sim,cpu) to compare them")
	}
	if has(flagGPUFraction) {
		f.Float64Var(&e.dev.gpuFraction, "gpu-memory-fraction", e.dev.gpuFraction,
			"share of GPU memory in (0, 1] for weights, activations and KV cache (CUDA; exclusive with --kv-cache-tokens; refused with --device cpu)")
	}
	if has(flagMaxBatchSize) {
		f.IntVar(&e.maxBatchSize, "max-batch-size", e.maxBatchSize, "most sequences one engine step schedules (every rank's, under attention DP)")
	}
	if has(flagMaxBatched) {
		f.IntVar(&e.maxBatched, "max-num-batched-tokens", e.maxBatched, "most tokens one engine step computes")
	}
	if has(flagBlockSize) {
		f.IntVar(&e.blockSize, "block-size", e.blockSize, "KV block size, tokens (a power of two, 1..256)")
	}
	if has(flagCascade) {
		f.IntVar(&e.cascadeMin, "cascade-min-blocks", e.cascadeMin,
			"cascade attention: sequences of a step whose block tables begin with at least this many of the same KV blocks "+
				"(a shared prefix) attend to them once for the group (0: off)")
	}
	if has(flagKVTokens) {
		f.IntVar(&e.kvTokens, "kv-cache-tokens", e.kvTokens, "KV cache size, tokens (default: max-batch-size × model context on the CPU, --gpu-memory-fraction on CUDA)")
	}
	if has(flagKVDtype) {
		f.StringVar(&e.kvDtype, "kv-cache-dtype", e.kvDtype, "KV cache element type: auto, f32, f16 or bf16 (f16 and bf16 "+
			"take half of f32's memory; K and V are rounded to nearest even when stored). auto is the cheapest type that keeps "+
			"greedy outputs on stories260K identical to f32, else f16 as llama.cpp: on stories260K (16 prompts × 200 greedy tokens) "+
			"f16 matches f32 on 15 prompts and bf16 on 5, so auto is f16 on the CPU; on CUDA auto is bf16 (the CUDA kernels read f32 or bf16 only)")
	}
	if has(flagWorkers) {
		f.IntVar(&e.workers, "workers", e.workers, "cores the CPU kernels use (0: GOMAXPROCS)")
	}
	if has(flagNoOverlap) {
		f.BoolVar(&e.noOverlap, "no-overlap", e.noOverlap, "run the plain step loop (no overlap scheduling)")
	}
	if has(flagPrograms) {
		e.registerPrograms(f)
	}
}

// flagsSet is the set of flags given on f's command line: the one way a
// command tells a default from a value given (presets, program policy
// parameters, --gpu-memory-fraction).
func flagsSet(f *pflag.FlagSet) map[string]bool {
	set := map[string]bool{}
	f.Visit(func(fl *pflag.Flag) { set[fl.Name] = true })
	return set
}

// parsed records which flags f's command line gave; call it first in RunE.
func (e *engineFlags) parsed(f *pflag.FlagSet) {
	e.set = flagsSet(f)
	e.dev.fractionSet = e.set["gpu-memory-fraction"]
	e.programs.set = e.set
}

// validate checks the flags of the configuration that need no model,
// naming the offending value; errors start with command.
func (e *engineFlags) validate(command string) error {
	switch {
	case e.model == "":
		return fmt.Errorf("%s: --model is empty", command)
	case e.maxModelLen < 0:
		return fmt.Errorf("%s: --max-model-len %d: must be >= 0", command, e.maxModelLen)
	case e.maxBatchLimit > 0 && (e.maxBatchSize < 1 || e.maxBatchSize > e.maxBatchLimit):
		return fmt.Errorf("%s: --max-batch-size %d: must be in [1, %d]", command, e.maxBatchSize, e.maxBatchLimit)
	case e.maxBatchSize < 1:
		return fmt.Errorf("%s: --max-batch-size %d: must be >= 1", command, e.maxBatchSize)
	case e.maxBatched < 1:
		return fmt.Errorf("%s: --max-num-batched-tokens %d: must be >= 1", command, e.maxBatched)
	case e.blockSize < 1 || e.blockSize > 256 || e.blockSize&(e.blockSize-1) != 0:
		return fmt.Errorf("%s: --block-size %d: must be a power of two in 1..256", command, e.blockSize)
	case e.cascadeMin < 0:
		return fmt.Errorf("%s: --cascade-min-blocks %d: must be >= 0", command, e.cascadeMin)
	case e.kvTokens < 0:
		return fmt.Errorf("%s: --kv-cache-tokens %d: must be >= 0", command, e.kvTokens)
	case e.workers < 0:
		return fmt.Errorf("%s: --workers %d: must be >= 0", command, e.workers)
	}
	if _, err := e.kvType(cuda.BackendCPU); err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	if err := e.validatePrograms(); err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	return nil
}

// kvDtypeAuto is --kv-cache-dtype's name of the device's own choice.
const kvDtypeAuto = "auto"

// kvType resolves --kv-cache-dtype for a runner on backend: auto is
// model.DefaultCPUKVType on the CPU (f16: the auto rule applied to the
// evidence of model.TestKVTypeGreedyStories — neither 16-bit type keeps
// every greedy output of f32, f16 comes closest and is llama.cpp's
// default) and model.DefaultCUDAKVType on CUDA (bf16). An explicit f16 on
// CUDA is left to the CUDA runner to refuse, naming the types it has.
func (e *engineFlags) kvType(backend cuda.Backend) (kernels.DType, error) {
	if strings.EqualFold(strings.TrimSpace(e.kvDtype), kvDtypeAuto) || e.kvDtype == "" {
		if backend == cuda.BackendCUDA {
			return model.DefaultCUDAKVType, nil
		}
		return model.DefaultCPUKVType, nil
	}
	t, err := kernels.ParseKVType(e.kvDtype)
	if err != nil {
		return t, fmt.Errorf("--kv-cache-dtype %q: want auto, f32, f16 or bf16", e.kvDtype)
	}
	return t, nil
}

// simDevice is --device's name of the simulated device.
const simDevice = "sim"

// simulated reports whether --device names the simulated device.
func (e *engineFlags) simulated() bool {
	return strings.EqualFold(strings.TrimSpace(e.dev.device), simDevice)
}

// selectDevice parses --device for a command that runs a real runner
// (sim refused) and checks --gpu-memory-fraction against it.
func (e *engineFlags) selectDevice(command string) (cuda.Selection, error) {
	if e.simulated() {
		return cuda.Selection{}, fmt.Errorf("%s: --device %s: the simulated device has no weights; %s runs on auto, cpu, cuda or cuda:N",
			command, e.dev.device, command)
	}
	return e.dev.validate(command, e.set["kv-cache-tokens"])
}

// devices parses --device as a comma list of names in allowed, each at
// most once (bench agentic's comparison).
func (e *engineFlags) devices(allowed ...string) ([]string, error) {
	var out []string
	for _, d := range strings.Split(e.dev.device, ",") {
		d = strings.ToLower(strings.TrimSpace(d))
		if !slices.Contains(allowed, d) {
			return nil, fmt.Errorf("--device %q: want %s, or a list of them", d, strings.Join(allowed, " or "))
		}
		if slices.Contains(out, d) {
			return nil, fmt.Errorf("--device %s: %s listed twice", e.dev.device, d)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, errors.New("--device: no device")
	}
	return out, nil
}

// executorConfig is the engine's configuration from the flags; the
// command adds what is its own (programs, the model's name).
func (e *engineFlags) executorConfig() executor.Config {
	return executor.Config{MaxBatchSize: e.maxBatchSize, MaxNumBatchedTokens: e.maxBatched, BlockSize: e.blockSize,
		Overlap: !e.noOverlap, CascadeMinBlocks: e.cascadeMin}
}

// llamaOptions are the model-loading options from the flags for a runner
// on backend: the CUDA runner uploads the weights from the file mapping, so
// it needs no host copy of them (model.LlamaOptions.Mmap).
func (e *engineFlags) llamaOptions(backend cuda.Backend) model.LlamaOptions {
	return model.LlamaOptions{MaxContext: e.maxModelLen, Mmap: backend == cuda.BackendCUDA}
}
