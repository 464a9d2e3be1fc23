package mpi

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOpenMissingLibrary: the binding's error wraps its own sentinel (the
// candidate list itself is internal/dl's, tested there).
func TestOpenMissingLibrary(t *testing.T) {
	const name = "libturnstile-no-such-mpi.so"
	_, err := openWith([]string{name})
	require.ErrorIs(t, err, ErrLibraryNotFound)
	require.ErrorContains(t, err, "mpi: none of ["+name+"]")
}

// A library lacking MPI's entry points (libc stands in for a wrong libmpi) must
// give an error naming the library and the first missing symbol, not a crash.
func TestOpenMissingSymbol(t *testing.T) {
	_, err := openWith([]string{"libc.so.6"})
	require.ErrorIs(t, err, ErrMissingSymbol)
	require.ErrorContains(t, err, "libc.so.6 lacks symbol MPI_Init_thread")
}

// A World after Close, or one never opened, refuses every collective with
// ErrClosed instead of calling into MPI; Close stays idempotent.
func TestClosedWorld(t *testing.T) {
	w := &World{rank: 0, size: 1, closed: true}
	calls := map[string]func() error{
		"MPI_Allgather":            func() error { return w.AllgatherInt64([]int64{1}, []int64{0}) },
		"MPI_Allgatherv":           func() error { return w.AllgathervFloat32([]float32{1}, []int{1}, []float32{0}) },
		"MPI_Gatherv":              func() error { return w.GathervBytes([]byte{1}, []int{1}, []byte{0}, 0) },
		"MPI_Bcast":                func() error { return w.BcastBytes([]byte{1}, 0) },
		"MPI_Allreduce":            func() error { return w.AllreduceSumFloat32([]float32{1}) },
		"MPI_Reduce_scatter_block": func() error { return w.ReduceScatterSumFloat32([]float32{1}, []float32{0}) },
		"MPI_Reduce_scatter":       func() error { return w.ReduceScatterSumFloat32V([]float32{1}, []int{1}, []float32{0}) },
		"MPI_Comm_dup":             func() error { _, err := w.Dup(); return err },
		"MPI_Barrier":              w.Barrier,
	}
	for op, call := range calls {
		err := call()
		require.ErrorIs(t, err, ErrClosed, op)
		require.ErrorContains(t, err, op)
	}
	require.NoError(t, w.Close())
}

// Every argument is checked in Go before any C call, with errors naming the
// offending value. The world here has 3 ranks and no MPI behind it: a check
// that let a call through would reach the closed guard instead.
func TestArgumentValidation(t *testing.T) {
	w := &World{rank: 1, size: 3, closed: true}
	cases := []struct {
		name string
		call func() error
		err  string
	}{
		{"allgather all too short", func() error { return w.AllgatherInt64(make([]int64, 2), make([]int64, 5)) },
			"MPI_Allgather: len(all) = 5, want size 3 × len(local) 2 = 6"},
		{"allgather all too long", func() error { return w.AllgatherInt64(make([]int64, 1), make([]int64, 4)) },
			"len(all) = 4, want size 3 × len(local) 1 = 3"},
		{"allgatherv counts length", func() error { return w.AllgathervFloat32(nil, []int{0, 0}, nil) },
			"MPI_Allgatherv: len(counts) = 2, want the world size 3"},
		{"allgatherv negative count", func() error { return w.AllgathervFloat32(nil, []int{1, 0, -1}, nil) },
			"counts[2] = -1 is negative"},
		{"allgatherv local mismatch", func() error { return w.AllgathervFloat32(make([]float32, 2), []int{1, 3, 0}, make([]float32, 4)) },
			"len(local) = 2, want counts[1] = 3"},
		{"allgatherv all mismatch", func() error { return w.AllgathervFloat32(make([]float32, 3), []int{1, 3, 0}, make([]float32, 5)) },
			"len(all) = 5, want sum(counts) = 4"},
		{"allgatherv displacement overflow", func() error {
			return w.AllgathervFloat32(nil, []int{math.MaxInt32, 0, 1}, nil)
		}, "sum(counts[:3]) = 2147483648 exceeds MPI's int displacement limit"},
		{"gatherv root negative", func() error { return w.GathervBytes(nil, []int{0, 0, 0}, nil, -1) },
			"MPI_Gatherv: root -1 outside [0, 3)"},
		{"gatherv root past size", func() error { return w.GathervBytes(nil, []int{0, 0, 0}, nil, 3) },
			"MPI_Gatherv: root 3 outside [0, 3)"},
		{"gatherv counts length", func() error { return w.GathervBytes(nil, []int{0, 0}, nil, 0) },
			"MPI_Gatherv: len(counts) = 2, want the world size 3"},
		{"gatherv negative count", func() error { return w.GathervBytes(nil, []int{-2, 0, 0}, nil, 0) },
			"MPI_Gatherv: counts[0] = -2 is negative"},
		{"gatherv local mismatch", func() error { return w.GathervBytes(make([]byte, 1), []int{1, 2, 0}, nil, 0) },
			"MPI_Gatherv: len(local) = 1, want counts[1] = 2"},
		{"gatherv all mismatch on root", func() error { return w.GathervBytes(make([]byte, 2), []int{1, 2, 0}, make([]byte, 4), 1) },
			"MPI_Gatherv: len(all) = 4 on root 1, want sum(counts) = 3"},
		{"bcast root negative", func() error { return w.BcastBytes([]byte{1}, -1) }, "MPI_Bcast: root -1 outside [0, 3)"},
		{"bcast root past size", func() error { return w.BcastBytes([]byte{1}, 3) }, "MPI_Bcast: root 3 outside [0, 3)"},
		{"reduce-scatter-v counts length", func() error { return w.ReduceScatterSumFloat32V(nil, []int{0}, nil) },
			"MPI_Reduce_scatter: len(counts) = 1, want the world size 3"},
		{"reduce-scatter-v negative count", func() error { return w.ReduceScatterSumFloat32V(nil, []int{0, 0, -4}, nil) },
			"MPI_Reduce_scatter: counts[2] = -4 is negative"},
		{"reduce-scatter-v recv mismatch", func() error {
			return w.ReduceScatterSumFloat32V(make([]float32, 6), []int{1, 2, 3}, make([]float32, 3))
		}, "MPI_Reduce_scatter: len(recv) = 3, want counts[1] = 2"},
		{"reduce-scatter-v send mismatch", func() error {
			return w.ReduceScatterSumFloat32V(make([]float32, 5), []int{1, 2, 3}, make([]float32, 2))
		}, "MPI_Reduce_scatter: len(send) = 5, want sum(counts) = 6"},
		{"reduce-scatter send mismatch", func() error { return w.ReduceScatterSumFloat32(make([]float32, 7), make([]float32, 2)) },
			"MPI_Reduce_scatter_block: len(send) = 7, want size 3 × len(recv) 2 = 6"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.ErrorContains(t, err, tc.err)
			require.NotErrorIs(t, err, ErrClosed, "validation must come before the call")
		})
	}
}

// Lengths past MPI's int count are refused (checked on the helpers: such
// slices are too big to allocate in a test).
func TestCountLimit(t *testing.T) {
	require.NoError(t, checkCount("MPI_Bcast", "buf", math.MaxInt32))
	require.ErrorContains(t, checkCount("MPI_Bcast", "buf", math.MaxInt32+1),
		"MPI_Bcast: len(buf) = 2147483648 exceeds MPI's int count limit 2147483647")
	require.ErrorContains(t, checkAllgather(1, math.MaxInt32+1, math.MaxInt32+1), "len(local) = 2147483648")
	require.ErrorContains(t, checkReduceScatter(1, math.MaxInt32+1, math.MaxInt32+1), "len(send) = 2147483648")
}

func TestErrorText(t *testing.T) {
	require.Equal(t, "mpi: MPI_Allgather: MPI_ERR_TRUNCATE: message truncated (error code 15)",
		(&Error{Op: "MPI_Allgather", Code: 15, Message: "MPI_ERR_TRUNCATE: message truncated"}).Error())
	require.Equal(t, "mpi: MPI_Barrier: error code 5", (&Error{Op: "MPI_Barrier", Code: 5}).Error())
	require.Equal(t, "MPI_THREAD_MULTIPLE", ThreadMultiple.String())
	require.Equal(t, "MPI thread level 9", ThreadLevel(9).String())
}
