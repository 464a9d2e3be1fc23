package hugemem

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAlloc(t *testing.T) {
	for _, n := range []int{1, 4095, PageSize, PageSize + 1, 3*PageSize - 7} {
		r, err := Alloc(n)
		require.NoError(t, err, "n=%d", n)
		b := r.Bytes()
		require.Len(t, b, n)
		require.Equal(t, n, cap(b), "n=%d: the caller sees exactly n bytes", n)
		nonzero := 0
		for i := range b {
			if b[i] != 0 {
				nonzero++
			}
			b[i] = byte(i)
		}
		require.Zero(t, nonzero, "n=%d: bytes of a new region that are not 0", n)
		if runtime.GOOS == "linux" {
			require.Zero(t, addr(b)%PageSize, "n=%d: region not 2 MiB aligned", n)
		}
		require.NoError(t, r.Free())
		require.Nil(t, r.Bytes())
		require.NoError(t, r.Free(), "a second Free does nothing")
	}
	var nilRegion *Region
	require.NoError(t, nilRegion.Free())
}

func TestAllocErrors(t *testing.T) {
	for _, n := range []int{0, -1, maxBytes + 1} {
		_, err := Alloc(n)
		require.ErrorContains(t, err, "Alloc(", "n=%d", n)
	}
	_, err := Alloc(-5)
	require.ErrorContains(t, err, "Alloc(-5): want a positive size")
}

func TestViews(t *testing.T) {
	r, err := Alloc(64)
	require.NoError(t, err)
	f, err := Float32s(r, 16)
	require.NoError(t, err)
	require.Len(t, f, 16)
	f[15] = 1.5
	u, err := Uint16s(r, 32)
	require.NoError(t, err)
	require.Len(t, u, 32)
	require.Equal(t, uint16(0x3fc0), u[31], "the views alias one region (1.5 = 0x3fc00000)")
	empty, err := Uint16s(r, 0)
	require.NoError(t, err)
	require.Empty(t, empty)

	_, err = Float32s(r, 17)
	require.ErrorContains(t, err, "view of 17 elements of 4 bytes in a region of 64 bytes")
	_, err = Uint16s(r, -1)
	require.ErrorContains(t, err, "view of -1 elements")

	require.NoError(t, r.Free())
	_, err = Float32s(r, 1)
	require.ErrorIs(t, err, ErrFreed)
}

// TestAlignOffset: the offset of the first huge-page boundary at or past an
// address. A fresh mapping on this kernel may already be 2 MiB aligned, so
// the arithmetic is checked on addresses, not on Alloc.
func TestAlignOffset(t *testing.T) {
	const base = 1 << 40 // on a boundary
	for _, tc := range []struct {
		a    uintptr
		want int
	}{
		{base, 0},
		{base + 1, PageSize - 1},
		{base + 4096, PageSize - 4096},
		{base + PageSize/2, PageSize / 2},
		{base + PageSize - 4096, 4096},
		{base + PageSize - 1, 1},
		{base + 3*PageSize, 0},
		{0, 0},
	} {
		got := alignOffset(tc.a)
		require.Equal(t, tc.want, got, "address %#x", tc.a)
		require.Zero(t, (tc.a+uintptr(got))%PageSize, "address %#x + %d is not on a boundary", tc.a, got)
	}
}
