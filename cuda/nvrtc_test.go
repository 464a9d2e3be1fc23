package cuda

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// loadNVRTC returns NVRTC, or skips saying why when this machine has none
// (scripts/install-deps.sh installs Debian's libnvrtc11.2).
func loadNVRTC(t *testing.T) *NVRTC {
	t.Helper()
	n, err := LoadNVRTC()
	if errors.Is(err, ErrLibraryNotFound) {
		t.Skipf("NVRTC not installed, skipping cubin compile test (run scripts/install-deps.sh as root): %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(n.Close)
	return n
}

const trivialKernel = `
extern "C" __global__ void scale(float *x, float a, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) x[i] *= a;
}
`

func TestNVRTCCompileCubin(t *testing.T) {
	n := loadNVRTC(t)
	major, _ := n.Version()
	require.GreaterOrEqual(t, major, 11)
	for _, arch := range []string{"sm_80", "sm_90"} {
		t.Run(arch, func(t *testing.T) {
			cubin, _, err := n.Compile(trivialKernel, "scale.cu", arch, nil)
			require.NoError(t, err)
			require.Equal(t, "\x7fELF", string(cubin[:4]))
			fns, err := CubinFunctions(cubin)
			require.NoError(t, err)
			require.Contains(t, fns, "scale")
		})
	}
}

func TestNVRTCCompileErrors(t *testing.T) {
	n := loadNVRTC(t)
	cases := []struct {
		name, src, arch string
		opts            []string
		want            string
	}{
		{"syntax error", "extern \"C\" __global__ void k() { undeclared_thing = 1; }", "sm_80", nil, "undeclared_thing"},
		{"bad arch", trivialKernel, "compute_80", nil, `architecture "compute_80"`},
		{"bad option", trivialKernel, "sm_80", []string{"--no-such-option"}, "nvrtcCompileProgram"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cubin, _, err := n.Compile(tc.src, "k.cu", tc.arch, tc.opts)
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, cubin)
		})
	}
	_, _, err := n.Compile("extern \"C\" __global__ void k() { x; }", "bad.cu", "sm_90", nil)
	var ce *CompileError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "bad.cu", ce.Name)
	require.Equal(t, "sm_90", ce.Arch)
	require.NotEmpty(t, ce.Log)
}

func TestCubinCache(t *testing.T) {
	n := loadNVRTC(t)
	dir := t.TempDir()
	cc, err := NewCubinCache(n, dir)
	require.NoError(t, err)

	type step struct {
		src, arch         string
		compiles, hits    int64
		damageBeforeFetch bool
	}
	other := trivialKernel + "\n// changed\n"
	steps := []step{
		{src: trivialKernel, arch: "sm_80", compiles: 1, hits: 0},
		{src: trivialKernel, arch: "sm_80", compiles: 1, hits: 1},
		{src: trivialKernel, arch: "sm_90", compiles: 2, hits: 1},
		{src: other, arch: "sm_80", compiles: 3, hits: 1},
		{src: trivialKernel, arch: "sm_90", compiles: 3, hits: 2},
		{src: trivialKernel, arch: "sm_80", compiles: 4, hits: 2, damageBeforeFetch: true},
		{src: trivialKernel, arch: "sm_80", compiles: 4, hits: 3},
	}
	for i, s := range steps {
		if s.damageBeforeFetch {
			path := filepath.Join(dir, CacheKey(s.src, s.arch, n.VersionString(), nil)+".cubin")
			require.NoError(t, os.WriteFile(path, []byte("garbage"), 0o644))
		}
		cubin, err := cc.Get(s.src, "scale.cu", s.arch, nil)
		require.NoError(t, err, "step %d", i)
		require.Equal(t, "\x7fELF", string(cubin[:4]), "step %d", i)
		compiles, hits := cc.Stats()
		require.Equal(t, s.compiles, compiles, "step %d compiles", i)
		require.Equal(t, s.hits, hits, "step %d hits", i)
	}

	// A second cache on the same directory (a warm restart) compiles nothing.
	warm, err := NewCubinCache(n, dir)
	require.NoError(t, err)
	_, err = warm.Get(trivialKernel, "scale.cu", "sm_90", nil)
	require.NoError(t, err)
	compiles, hits := warm.Stats()
	require.Equal(t, int64(0), compiles)
	require.Equal(t, int64(1), hits)

	// Compile errors are returned and nothing is cached.
	_, err = cc.Get("not cuda", "bad.cu", "sm_80", nil)
	var ce *CompileError
	require.ErrorAs(t, err, &ce)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 3, "sm_80, sm_90 and the changed source; no temporary files")
}

func TestCacheKey(t *testing.T) {
	base := CacheKey("src", "sm_80", "11.8", []string{"-O3"})
	require.Len(t, base, 64)
	require.Equal(t, base, CacheKey("src", "sm_80", "11.8", []string{"-O3"}))
	differ := []string{
		CacheKey("src2", "sm_80", "11.8", []string{"-O3"}),
		CacheKey("src", "sm_90", "11.8", []string{"-O3"}),
		CacheKey("src", "sm_80", "12.4", []string{"-O3"}),
		CacheKey("src", "sm_80", "11.8", nil),
		CacheKey("src", "sm_80", "11.8", []string{"-O3", ""}),
		CacheKey("srcsm_80", "", "11.8", []string{"-O3"}),
	}
	for i, k := range differ {
		require.NotEqual(t, base, k, "variant %d", i)
	}
}

func TestCubinFunctionsRejectsNonELF(t *testing.T) {
	_, err := CubinFunctions([]byte("not elf"))
	require.ErrorIs(t, err, errNotELF)
	_, err = CubinFunctions([]byte("\x7fELF truncated"))
	require.ErrorContains(t, err, "parse cubin")
}

func FuzzCubinFunctions(f *testing.F) {
	f.Add([]byte("\x7fELF"))
	f.Add([]byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xbe\x00"))
	f.Add([]byte{})
	if n, err := LoadNVRTC(); err == nil { // a real cubin as a seed when NVRTC is here
		if cubin, _, err := n.Compile(trivialKernel, "scale.cu", "sm_80", nil); err == nil {
			f.Add(cubin)
		}
		n.Close()
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fns, err := CubinFunctions(b)
		if err != nil {
			require.Nil(t, fns)
		}
	})
}
