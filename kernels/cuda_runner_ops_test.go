package kernels

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/cuda"
)

// The runner's glue kernels compile through NVRTC for sm_80 and sm_90 without
// warnings and define exactly their entry list. Needs only NVRTC.
func TestCUDARunnerOpsCompile(t *testing.T) {
	s := CUDARunnerOpsSource()
	for _, e := range s.Entries {
		require.Contains(t, s.Source, "extern \"C\" __global__ void "+e+"(", "entry %s not defined", e)
	}
	nv, err := cuda.LoadNVRTC()
	if errors.Is(err, cuda.ErrLibraryNotFound) {
		t.Skipf("NVRTC not installed, skipping the runner kernels' compile test (run scripts/install-deps.sh as root): %v", err)
	}
	require.NoError(t, err)
	defer nv.Close()
	for _, arch := range []string{"sm_80", "sm_90"} {
		t.Run(arch, func(t *testing.T) {
			cubin, log, err := nv.Compile(s.Source, s.Name, arch, CUDAOptions())
			require.NoError(t, err, log)
			require.Empty(t, log, "NVRTC warnings")
			fns, err := cuda.CubinFunctions(cubin)
			require.NoError(t, err)
			slices.Sort(fns)
			want := slices.Clone(s.Entries)
			slices.Sort(want)
			require.Equal(t, want, fns)
		})
	}
}

// Shape errors are reported before anything is launched, so they need no GPU.
func TestCUDARunnerOpsShapeErrors(t *testing.T) {
	o := &CUDARunnerOps{}
	var c cuda.Ctx
	var s cuda.Stream
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"resolve", o.Resolve(c, s, 0, 0, 0, 0), "Resolve n"},
		{"norm rows", o.AddRMSNorm(c, s, 0, 0, 0, 0, 0, 8, 1e-5, cuda.F32), "AddRMSNorm rows"},
		{"norm type", o.AddRMSNorm(c, s, 0, 0, 0, 0, 1, 8, 1e-5, cuda.DType(99)), "output type"},
		{"silu type", o.SiLUMul(c, s, 0, 0, 0, 4, cuda.DType(99)), "output type"},
		{"gather words", o.Gather(c, s, 0, 0, 0, 2, 6), "multiple of 4"},
		{"argmax", o.ArgmaxLast(c, s, 0, 0, 0, 0, 3, 0), "ArgmaxLast rows"},
		{"scatter", o.ScatterLast(c, s, 0, 0, -1), "ScatterLast n"},
		{"not loaded", o.Resolve(c, s, 0, 0, 0, 4), "not loaded"},
	}
	for _, tc := range cases {
		require.ErrorContains(t, tc.err, tc.want, tc.name)
	}
}

// The glue kernels on a GPU against plain-Go references.
func TestGPURunnerOps(t *testing.T) {
	e := openGPU(t)
	nv, err := cuda.LoadNVRTC()
	require.NoError(t, err)
	defer nv.Close()
	cc, err := cuda.NewCubinCache(nv, "")
	require.NoError(t, err)
	mod, err := CompileCUDARunnerOps(cc, e.dev.Props().Arch())
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(5, 6))
	e.with(t, func(c cuda.Ctx, b *devBuf) {
		o, err := LoadCUDARunnerOps(c, mod)
		require.NoError(t, err)
		defer func() { require.NoError(t, o.Unload(c)) }()
		var s cuda.Stream

		// Resolve: negative tokens take the seat's last token.
		last := b.i32(t, []int32{7, 8, 9})
		tok := b.i32(t, []int32{-1, 3, -1, 5})
		seat := b.i32(t, []int32{2, 0, 0, 1})
		require.NoError(t, o.Resolve(c, s, tok, seat, last, 4))
		require.Equal(t, []int32{9, 3, 7, 5}, b.readI32(t, tok, 4))

		// AddRMSNorm in every output type, with and without the residual.
		const rows, dim = 3, 300
		x0, d := randF32(r, rows*dim, 2), randF32(r, rows*dim, 1)
		w := randF32(r, dim, 1)
		for _, dt := range []cuda.DType{cuda.F32, cuda.BF16, cuda.F16} {
			for _, withD := range []bool{false, true} {
				want := slices.Clone(x0)
				if withD {
					for i := range want {
						want[i] += d[i]
					}
				}
				wantY := make([]float32, rows*dim)
				RefRMSNorm(wantY, want, w, rows, dim, 1e-5)
				xp, wp := b.f32(t, x0), b.f32(t, w)
				var dp cuda.DevicePtr
				if withD {
					dp = b.f32(t, d)
				}
				yp := b.alloc(t, 4*rows*dim)
				require.NoError(t, o.AddRMSNorm(c, s, yp, xp, dp, wp, rows, dim, 1e-5, dt))
				requireClose(t, want, b.readF32(t, xp, rows*dim), 1e-6, "x after add")
				requireClose(t, wantY, readAs(t, b, yp, rows*dim, dt), tolOf(dt), "norm "+dt.String())
			}
		}

		// SiLUMul with the cast.
		const n = 1000
		g, u := randF32(r, n, 4), randF32(r, n, 2)
		wantS := make([]float32, n)
		RefSiLUMul(wantS, g, u)
		for _, dt := range []cuda.DType{cuda.F32, cuda.BF16, cuda.F16} {
			yp := b.alloc(t, 4*n)
			require.NoError(t, o.SiLUMul(c, s, yp, b.f32(t, g), b.f32(t, u), n, dt))
			requireClose(t, wantS, readAs(t, b, yp, n, dt), tolOf(dt), "silu "+dt.String())
		}

		// Gather rows.
		src := randF32(r, 5*8, 1)
		idx := []int32{4, 0, 4}
		out := b.alloc(t, 4*3*8)
		require.NoError(t, o.Gather(c, s, out, b.f32(t, src), b.i32(t, idx), 3, 32))
		got := b.readF32(t, out, 3*8)
		for j, i := range idx {
			require.Equal(t, src[i*8:(i+1)*8], got[j*8:(j+1)*8], "row %d", j)
		}

		// ArgmaxLast: NaN never wins, ties go low, seat -1 leaves last alone.
		nan := float32(math.NaN())
		xs := []float32{1, 3, 3, 0, nan, 2, 2, nan, nan, nan, nan, nan}
		last2 := b.i32(t, []int32{-5, -5})
		outp := b.alloc(t, 4*3)
		require.NoError(t, o.ArgmaxLast(c, s, outp, last2, b.i32(t, []int32{1, -1, 0}), b.f32(t, xs), 3, 4))
		require.Equal(t, []int32{1, 1, 0}, b.readI32(t, outp, 3))
		require.Equal(t, []int32{0, 1}, b.readI32(t, last2, 2))

		// ScatterLast.
		require.NoError(t, o.ScatterLast(c, s, last2, b.i32(t, []int32{0, 42, 1, 43}), 2))
		require.Equal(t, []int32{42, 43}, b.readI32(t, last2, 2))
	})
}

func tolOf(dt cuda.DType) float64 {
	switch dt {
	case cuda.BF16:
		return 1.0 / 128
	case cuda.F16:
		return 1.0 / 1024
	}
	return 1e-5
}

// readAs reads n elements of type dt at p as float32.
func readAs(t *testing.T, b *devBuf, p cuda.DevicePtr, n int, dt cuda.DType) []float32 {
	if dt == cuda.F32 {
		return b.readF32(t, p, n)
	}
	raw := make([]uint16, n)
	bs := make([]byte, 2*n)
	require.NoError(t, b.c.Synchronize())
	require.NoError(t, b.c.CopyDtoH(bs, p))
	out := make([]float32, n)
	for i := range raw {
		h := uint16(bs[2*i]) | uint16(bs[2*i+1])<<8
		if dt == cuda.BF16 {
			out[i] = BF16ToF32(h)
		} else {
			out[i] = F16ToF32(h)
		}
	}
	return out
}
