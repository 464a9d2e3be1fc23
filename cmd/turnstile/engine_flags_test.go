package main

import (
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/cuda"
	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/model"
)

func TestEngineFlagsValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(e *engineFlags)
		wantErr string
	}{
		{"defaults", func(*engineFlags) {}, ""},
		{"model", func(e *engineFlags) { e.model = "" }, "x: --model is empty"},
		{"batch", func(e *engineFlags) { e.maxBatchSize = 0 }, "x: --max-batch-size 0: must be >= 1"},
		{"batch limit", func(e *engineFlags) { e.maxBatchSize, e.maxBatchLimit = 9, 8 }, "x: --max-batch-size 9: must be in [1, 8]"},
		{"batched tokens", func(e *engineFlags) { e.maxBatched = -1 }, "x: --max-num-batched-tokens -1: must be >= 1"},
		{"block size", func(e *engineFlags) { e.blockSize = 24 }, "x: --block-size 24: must be a power of two in 1..256"},
		{"kv tokens", func(e *engineFlags) { e.kvTokens = -1 }, "x: --kv-cache-tokens -1: must be >= 0"},
		{"workers", func(e *engineFlags) { e.workers = -2 }, "x: --workers -2: must be >= 0"},
		{"kv dtype", func(e *engineFlags) { e.kvDtype = "q8_0" }, `x: --kv-cache-dtype "q8_0": want auto, f32, f16 or bf16`},
		{"kv dtype f32", func(e *engineFlags) { e.kvDtype = "F32" }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := defaultEngineFlags()
			tc.edit(&e)
			err := e.validate("x")
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.wantErr)
		})
	}
}

// TestEngineFlagsKVType: --kv-cache-dtype resolved per device, auto to
// each runner's default.
func TestEngineFlagsKVType(t *testing.T) {
	for _, tc := range []struct {
		flag    string
		backend cuda.Backend
		want    kernels.DType
	}{
		{"auto", cuda.BackendCPU, model.DefaultCPUKVType},
		{"auto", cuda.BackendCUDA, model.DefaultCUDAKVType},
		{"f32", cuda.BackendCUDA, kernels.F32},
		{"bf16", cuda.BackendCPU, kernels.BF16},
		{"f16", cuda.BackendCPU, kernels.F16},
	} {
		e := defaultEngineFlags()
		require.Equal(t, "auto", e.kvDtype, "the default")
		e.kvDtype = tc.flag
		got, err := e.kvType(tc.backend)
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "%s on %v", tc.flag, tc.backend)
	}
	e := defaultEngineFlags()
	f := pflag.NewFlagSet("x", pflag.ContinueOnError)
	e.register(f, flagKVDtype)
	require.Equal(t, "auto", f.Lookup("kv-cache-dtype").DefValue)
	require.NoError(t, f.Parse([]string{"--kv-cache-dtype", "bf16"}))
	require.Equal(t, "bf16", e.kvDtype)
}

// TestEngineFlagsRegister: the flags a command selects, engine and
// command flags apart, with the fields' values as defaults, and parsed
// records the ones given.
func TestEngineFlagsRegister(t *testing.T) {
	e, c := defaultEngineFlags(), defaultCommandFlags()
	e.maxBatchSize = 2 // a command's own default, set before register
	f := pflag.NewFlagSet("x", pflag.ContinueOnError)
	e.register(f, flagMaxBatchSize)
	c.register(f, flagSeed|flagOut)
	require.Nil(t, f.Lookup("model"), "not selected")
	require.Equal(t, "2", f.Lookup("max-batch-size").DefValue)
	require.NoError(t, f.Parse([]string{"--seed", "9", "--out", "d"}))
	e.parsed(f)
	require.Equal(t, map[string]bool{"seed": true, "out": true}, e.set)
	require.Equal(t, uint64(9), c.seed)
	require.Equal(t, "d", c.out)
	require.Equal(t, 2, e.maxBatchSize)
}

func TestEngineFlagsDevices(t *testing.T) {
	for _, tc := range []struct {
		device  string
		want    []string
		wantErr string
	}{
		{"sim", []string{"sim"}, ""},
		{"sim,cpu", []string{"sim", "cpu"}, ""},
		{" CPU ", []string{"cpu"}, ""},
		{"cuda", nil, `--device "cuda": want sim or cpu, or a list of them`},
		{"sim,sim", nil, "--device sim,sim: sim listed twice"},
		{"", nil, `--device "": want sim or cpu`},
	} {
		t.Run(tc.device, func(t *testing.T) {
			e := defaultEngineFlags()
			e.dev.device = tc.device
			got, err := e.devices(simDevice, "cpu")
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestSimRefusedWhereAModelRuns: serve and generate name the simulated
// device as the offending value.
func TestSimRefusedWhereAModelRuns(t *testing.T) {
	for _, args := range [][]string{{"serve", "--device", "sim"}, {"generate", "--device", "sim"}} {
		_, err := runCLI(t, args...)
		require.ErrorContains(t, err, args[0]+": --device sim: the simulated device has no weights")
	}
}
