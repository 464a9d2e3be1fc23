package cuda

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSelection(t *testing.T) {
	cases := []struct {
		in      string
		want    Selection
		wantErr string
	}{
		{"auto", Selection{Backend: BackendAuto}, ""},
		{"cpu", Selection{Backend: BackendCPU}, ""},
		{"CUDA", Selection{Backend: BackendCUDA}, ""},
		{"cuda:3", Selection{Backend: BackendCUDA, Index: 3}, ""},
		{"cuda:", Selection{}, `"cuda:"`},
		{"cuda:-1", Selection{}, `"cuda:-1"`},
		{"cuda:x", Selection{}, "non-negative integer"},
		{"gpu", Selection{}, `--device "gpu": want auto, cpu, cuda or cuda:N`},
		{"", Selection{}, `--device ""`},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSelection(tc.in)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestResolve(t *testing.T) {
	ok := func(int) error { return nil }
	noDriver := func(int) error { return errors.New("cuda: CUDA driver: none of [libcuda.so.1] could be loaded\nmore") }
	cases := []struct {
		name       string
		sel        Selection
		probe      Prober
		want       Selection
		wantReason string
		wantErr    string
	}{
		{"cpu", Selection{Backend: BackendCPU}, noDriver, Selection{Backend: BackendCPU}, "cpu requested", ""},
		{"auto with cuda", Selection{Backend: BackendAuto}, ok, Selection{Backend: BackendCUDA}, "using cuda:0", ""},
		{"auto falls back", Selection{Backend: BackendAuto}, noDriver, Selection{Backend: BackendCPU},
			"using the CPU: CUDA unavailable: cuda: CUDA driver: none of [libcuda.so.1] could be loaded", ""},
		{"explicit cuda fails", Selection{Backend: BackendCUDA, Index: 1}, noDriver, Selection{}, "", "--device cuda:1: cuda: CUDA driver"},
		{"explicit cuda", Selection{Backend: BackendCUDA, Index: 1}, ok, Selection{Backend: BackendCUDA, Index: 1}, "cuda:1 requested", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, reason, err := Resolve(tc.sel, tc.probe)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Contains(t, reason, tc.wantReason)
			require.NotContains(t, reason, "\n")
		})
	}
}

// On this machine: auto picks CUDA exactly when ProbeCUDA succeeds, and falls
// back to the CPU with the probe's reason otherwise (no libcuda in CI).
func TestResolveHere(t *testing.T) {
	perr := ProbeCUDA(0)
	got, reason, err := Resolve(Selection{Backend: BackendAuto}, ProbeCUDA)
	require.NoError(t, err)
	if perr != nil {
		require.Equal(t, BackendCPU, got.Backend)
		require.Contains(t, reason, "CUDA unavailable")
		_, _, err := Resolve(Selection{Backend: BackendCUDA}, ProbeCUDA)
		require.Error(t, err)
		return
	}
	require.Equal(t, BackendCUDA, got.Backend)
}

func FuzzParseSelection(f *testing.F) {
	for _, s := range []string{"auto", "cpu", "cuda", "cuda:0", "cuda:17", "cuda:", "cuda:-2", "Cuda:1", " cpu ", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := ParseSelection(s)
		if err != nil {
			require.Contains(t, err.Error(), "--device")
			return
		}
		again, err := ParseSelection(sel.String())
		require.NoError(t, err)
		require.Equal(t, sel.Backend, again.Backend)
		if sel.Backend == BackendCUDA {
			require.Equal(t, sel.Index, again.Index)
			require.GreaterOrEqual(t, sel.Index, 0)
		}
	})
}
