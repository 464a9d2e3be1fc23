package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/cuda"
)

// errNoDriver is what cuda.ProbeCUDA reports on a machine without libcuda.
var errNoDriver = fmt.Errorf("cuda: CUDA driver: none of [libcuda.so.1] could be loaded: %w", cuda.ErrLibraryNotFound)

func TestDeviceValidate(t *testing.T) {
	tests := []struct {
		name    string
		d       deviceOptions
		kvSet   bool
		want    cuda.Selection
		wantErr string
	}{
		{"auto", deviceOptions{device: "auto", gpuFraction: 0.9}, false, cuda.Selection{Backend: cuda.BackendAuto}, ""},
		{"auto with kv tokens", deviceOptions{device: "auto", gpuFraction: 0.9}, true, cuda.Selection{Backend: cuda.BackendAuto}, ""},
		{"auto with fraction", deviceOptions{device: "auto", gpuFraction: 0.5, fractionSet: true}, false, cuda.Selection{Backend: cuda.BackendAuto}, ""},
		{"cpu", deviceOptions{device: "CPU", gpuFraction: 0.9}, true, cuda.Selection{Backend: cuda.BackendCPU}, ""},
		{"cuda:2 with fraction", deviceOptions{device: "cuda:2", gpuFraction: 1, fractionSet: true}, false, cuda.Selection{Backend: cuda.BackendCUDA, Index: 2}, ""},
		{"bad device", deviceOptions{device: "gpu", gpuFraction: 0.9}, false, cuda.Selection{}, `x: --device "gpu": want auto, cpu, cuda or cuda:N`},
		{"zero value is the defaults", deviceOptions{}, false, cuda.Selection{Backend: cuda.BackendAuto}, ""},
		{"fraction 0", deviceOptions{device: "cuda", gpuFraction: 0, fractionSet: true}, false, cuda.Selection{}, "x: --gpu-memory-fraction 0: must be in (0, 1]"},
		{"fraction negative", deviceOptions{device: "auto", gpuFraction: -0.1, fractionSet: true}, false, cuda.Selection{}, "x: --gpu-memory-fraction -0.1: must be in (0, 1]"},
		{"fraction above 1", deviceOptions{device: "cuda", gpuFraction: 1.01, fractionSet: true}, false, cuda.Selection{}, "x: --gpu-memory-fraction 1.01: must be in (0, 1]"},
		{"fraction and kv tokens", deviceOptions{device: "cuda", gpuFraction: 0.8, fractionSet: true}, true, cuda.Selection{}, "x: --kv-cache-tokens and --gpu-memory-fraction are exclusive"},
		{"fraction on explicit cpu", deviceOptions{device: "cpu", gpuFraction: 0.8, fractionSet: true}, false, cuda.Selection{}, "x: --gpu-memory-fraction 0.8: applies to the CUDA runner, but --device cpu selects the CPU"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.d.validate("x", tc.kvSet)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestDeviceResolve(t *testing.T) {
	fail := func(err error) cuda.Prober { return func(int) error { return err } }
	ok := func(int) error { return nil }
	tests := []struct {
		name     string
		d        deviceOptions
		probe    cuda.Prober
		want     cuda.Selection
		wantNote string // "" : no note
		wantErr  []string
	}{
		{"auto falls back", deviceOptions{device: "auto"}, fail(errNoDriver), cuda.Selection{Backend: cuda.BackendCPU},
			"using the CPU: CUDA unavailable: cuda: CUDA driver: none of [libcuda.so.1] could be loaded: library not found", nil},
		{"auto falls back, fraction ignored", deviceOptions{device: "auto", gpuFraction: 0.5, fractionSet: true}, fail(errors.New("cuda: device 0 out of range")),
			cuda.Selection{Backend: cuda.BackendCPU}, "using the CPU: CUDA unavailable: cuda: device 0 out of range (--gpu-memory-fraction 0.5 ignored)", nil},
		{"auto finds cuda", deviceOptions{device: "auto"}, ok, cuda.Selection{Backend: cuda.BackendCUDA}, "using cuda:0: driver, device and NVRTC found", nil},
		{"cpu never probes", deviceOptions{device: "cpu"}, func(int) error { panic("probed") }, cuda.Selection{Backend: cuda.BackendCPU}, "", nil},
		{"cuda:1 present", deviceOptions{device: "cuda:1"}, ok, cuda.Selection{Backend: cuda.BackendCUDA, Index: 1}, "", nil},
		{"cuda without driver", deviceOptions{device: "cuda"}, fail(errNoDriver), cuda.Selection{}, "",
			[]string{"x: --device cuda:0: cuda: CUDA driver: none of [libcuda.so.1]", "is the NVIDIA driver installed?"}},
		{"cuda:3 out of range", deviceOptions{device: "cuda:3"}, fail(errors.New("cuda: device 3 out of range: the driver reports 1 devices")), cuda.Selection{}, "",
			[]string{"x: --device cuda:3: cuda: device 3 out of range"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.d.probe = tc.probe
			if tc.d.gpuFraction == 0 {
				tc.d.gpuFraction = defaultGPUMemoryFraction
			}
			sel, err := tc.d.validate("x", false)
			require.NoError(t, err)
			got, note, err := tc.d.resolve("x", sel)
			if tc.wantErr != nil {
				for _, w := range tc.wantErr {
					require.ErrorContains(t, err, w)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.wantNote, note)
		})
	}
}

// syncBuffer is a bytes.Buffer the server's goroutines may log into.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeAutoFallsBackToCPU: with no usable CUDA, --device auto serves
// on the CPU, logs exactly one line saying why, and prints the device.
func TestServeAutoFallsBackToCPU(t *testing.T) {
	for _, fractionSet := range []bool{false, true} {
		t.Run(fmt.Sprintf("fraction given %v", fractionSet), func(t *testing.T) {
			o := defaultServeOptions()
			o.kvTokens = 0 // seats × context on the CPU
			o.dev = deviceOptions{device: "auto", gpuFraction: 0.7, fractionSet: fractionSet, probe: func(int) error { return errNoDriver }}
			require.NoError(t, o.validate())
			ctx, cancel := context.WithCancel(context.Background())
			var out, logs syncBuffer
			done := make(chan error, 1)
			go func() { done <- runServe(ctx, o, &out, &logs, func(string) { cancel() }) }()
			require.NoError(t, <-done)

			var deviceLines []string
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "CUDA unavailable") || strings.Contains(l, "msg=device") {
					deviceLines = append(deviceLines, l)
				}
			}
			require.Len(t, deviceLines, 1, "logs:\n%s", logs.String())
			require.Contains(t, deviceLines[0], "level=WARN msg=device device=cpu")
			require.Contains(t, deviceLines[0], "using the CPU: CUDA unavailable: cuda: CUDA driver: none of [libcuda.so.1]")
			require.Equal(t, fractionSet, strings.Contains(deviceLines[0], "--gpu-memory-fraction 0.7 ignored"))
			require.Contains(t, out.String(), "\n  device       cpu\n")
			require.Contains(t, out.String(), "KV cache     512 blocks × 16 tokens = 8192 tokens", "max-batch-size × context")
		})
	}
}

// TestDeviceCUDAWithoutDriver: on a machine without CUDA an explicit
// --device cuda fails naming the missing driver, for serve and generate,
// and generate's auto says once that it uses the CPU.
func TestDeviceCUDAWithoutDriver(t *testing.T) {
	if cuda.ProbeCUDA(0) == nil {
		t.Skip("this machine has a usable CUDA device")
	}
	for _, args := range [][]string{
		{"serve", "--device", "cuda", "--port", "0"},
		{"serve", "--device", "cuda:1", "--gpu-memory-fraction", "0.5", "--port", "0"},
		{"generate", "--device", "cuda", "-n", "2"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, err := runCLI(t, args...)
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), args[0]+": --device cuda:"), "error %q", err)
			require.ErrorContains(t, err, "CUDA driver")
			require.ErrorContains(t, err, "libcuda")
			require.NotContains(t, out, "prefill:", "nothing ran")
		})
	}
	out, err := runCLI(t, "generate", "-n", "3")
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(out, "device: cpu: using the CPU: CUDA unavailable: "), "output %q", out)
	require.Contains(t, out, "libcuda")
}
