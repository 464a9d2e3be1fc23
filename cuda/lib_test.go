package cuda

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLoadMissingLibrary(t *testing.T) {
	const name = "libturnstile-no-such-library.so.1"
	cases := []struct {
		what string
		load func(...string) error
	}{
		{"driver", func(n ...string) error { _, err := LoadDriver(n...); return err }},
		{"nvrtc", func(n ...string) error { _, err := LoadNVRTC(n...); return err }},
		{"cublaslt", func(n ...string) error { _, err := LoadCublasLt(n...); return err }},
	}
	for _, tc := range cases {
		t.Run(tc.what, func(t *testing.T) {
			err := tc.load(name, "/nonexistent/"+name)
			require.ErrorIs(t, err, ErrLibraryNotFound)
			require.Contains(t, err.Error(), name)
			require.Contains(t, err.Error(), "/nonexistent/"+name)
		})
	}
}

// A library lacking the entry points (libc stands in for a too-old or wrong
// libcuda) must give an error naming the first missing symbol, not a crash.
func TestLoadMissingSymbol(t *testing.T) {
	cases := []struct {
		what, symbol string
		load         func(...string) error
	}{
		{"driver", "cuInit", func(n ...string) error { _, err := LoadDriver(n...); return err }},
		{"nvrtc", "nvrtcVersion", func(n ...string) error { _, err := LoadNVRTC(n...); return err }},
		{"cublaslt", "cublasLtGetVersion", func(n ...string) error { _, err := LoadCublasLt(n...); return err }},
	}
	for _, tc := range cases {
		t.Run(tc.what, func(t *testing.T) {
			err := tc.load("libc.so.6")
			require.ErrorIs(t, err, ErrMissingSymbol)
			require.Contains(t, err.Error(), tc.symbol)
			require.Contains(t, err.Error(), "libc.so.6")
		})
	}
}

// Without libcuda (CI and developer machines) the default load reports it
// clearly; with it, the driver answers.
func TestDefaultDriver(t *testing.T) {
	drv, err := LoadDriver()
	if err != nil {
		require.ErrorIs(t, err, ErrLibraryNotFound)
		require.Contains(t, err.Error(), DriverLibrary)
		return
	}
	defer drv.Close()
	require.Equal(t, DriverLibrary, drv.Path())
	v, err := drv.Version()
	require.NoError(t, err)
	require.Greater(t, v, 0)
}

func TestCandidates(t *testing.T) {
	got := NVRTCCandidates("/opt/cuda")
	require.Equal(t, []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"}, got[:4])
	require.Contains(t, got, "/opt/cuda/lib64/libnvrtc.so.12")
	require.Contains(t, got, "/usr/local/cuda/lib64/libnvrtc.so.11.2")
	require.Len(t, NVRTCCandidates("/usr/local/cuda"), 4+2*4, "/usr/local/cuda is not listed twice")
	require.Contains(t, CublasLtCandidates(""), "/usr/local/cuda/lib64/libcublasLt.so.12")
}

func TestDiscover(t *testing.T) {
	gpus, err := Discover()
	if err != nil {
		require.Contains(t, err.Error(), "NVML")
		return
	}
	for _, g := range gpus {
		require.NotEmpty(t, g.Name)
		require.NotEmpty(t, g.UUID)
		require.Greater(t, g.TotalMemory, uint64(0))
		require.Greater(t, g.Major, 0)
	}
}

func TestArgsLayout(t *testing.T) {
	cases := []struct {
		name string
		fill func(a *Args)
		want []byte
	}{
		{"i32 then ptr aligns to 8", func(a *Args) { a.I32(-1).Ptr(0x0102030405060708) },
			[]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1}},
		{"f32 pair packs", func(a *Args) { a.F32(1).U32(2) },
			[]byte{0, 0, 0x80, 0x3f, 2, 0, 0, 0}},
		{"ptr then i32", func(a *Args) { a.Ptr(1).I32(3) },
			[]byte{1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0}},
	}
	var a Args
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.fill(a.Reset())
			require.Equal(t, tc.want, a.Bytes())
			require.Equal(t, len(tc.want), a.Len())
		})
	}
}

func TestErrorText(t *testing.T) {
	require.Equal(t, "cuda: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2)",
		(&Error{Op: "cuMemAlloc", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY"}).Error())
	require.Equal(t, "cuda: cuInit: CUresult 999", (&Error{Op: "cuInit", Code: 999}).Error())
	var e *Error
	require.True(t, errors.As(error(&Error{Op: "x"}), &e))
}
