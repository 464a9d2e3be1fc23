package nccl

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// On a machine without NCCL (CI, developer machines) Open names every candidate
// and wraps ErrLibraryNotFound; with NCCL it loads and reports a 2.x version.
func TestOpenWithoutLibrary(t *testing.T) {
	l, err := Open()
	if err == nil {
		v, verr := l.Version()
		require.NoError(t, verr)
		require.GreaterOrEqual(t, v, 2000, "NCCL version code %d is not 2.x", v)
		t.Skipf("%s is installed here (version %d): the missing-library assertion does not apply", l.Library(), v)
	}
	require.ErrorIs(t, err, ErrLibraryNotFound)
	require.ErrorContains(t, err, "libnccl.so.2")
	require.ErrorContains(t, err, "libnccl.so]")
}

// TestOpenMissingLibrary: the binding's error wraps its own sentinel (the
// candidate list itself is internal/dl's, tested there).
func TestOpenMissingLibrary(t *testing.T) {
	const name = "libturnstile-no-such-nccl.so"
	_, err := openWith([]string{name})
	require.ErrorIs(t, err, ErrLibraryNotFound)
	require.ErrorContains(t, err, "nccl: none of ["+name+"]")
}

// A library lacking NCCL's entry points (libc stands in for a wrong or too old
// libnccl) gives an error naming the library and the first missing symbol.
func TestOpenMissingSymbol(t *testing.T) {
	_, err := openWith([]string{"libc.so.6"})
	require.ErrorIs(t, err, ErrMissingSymbol)
	require.ErrorContains(t, err, "libc.so.6 lacks symbol ncclGetVersion")
}

// InitRank checks nranks and rank before touching the (here empty) table.
func TestInitRankValidation(t *testing.T) {
	l := &Lib{}
	cases := []struct {
		name         string
		nranks, rank int
		err          string
	}{
		{"no ranks", 0, 0, "ncclCommInitRank: nranks 0, want at least 1"},
		{"negative ranks", -2, 0, "nranks -2, want at least 1"},
		{"negative rank", 2, -1, "rank -1 outside [0, 2)"},
		{"rank past nranks", 2, 2, "rank 2 outside [0, 2)"},
		{"nranks past int", 1 << 31, 0, "nranks 2147483648 exceeds NCCL's int limit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := l.InitRank(tc.nranks, tc.rank, UniqueID{})
			require.Nil(t, c)
			require.ErrorContains(t, err, tc.err)
		})
	}
}

// Every collective checks its arguments in Go before any C call, with errors
// naming the offending value. The communicator here has 3 ranks and no NCCL
// behind it: a check that let a call through reaches the destroyed guard, which
// the valid cases assert.
func TestCollectiveValidation(t *testing.T) {
	c := &Comm{nranks: 3, rank: 1}
	const a, b = uintptr(0x1000), uintptr(0x2000)
	cases := []struct {
		name string
		call func() error
		err  string // "" for arguments that pass and reach the destroyed guard
	}{
		{"all-reduce negative count", func() error { return c.AllReduceSum(a, b, -1, Float32, 0) }, "ncclAllReduce: count -1 is negative"},
		{"all-reduce unknown type", func() error { return c.AllReduceSum(a, b, 4, DataType(10), 0) }, "ncclAllReduce: unknown data type ncclDataType_t(10)"},
		{"all-reduce negative type", func() error { return c.AllReduceSum(a, b, 4, DataType(-1), 0) }, "unknown data type ncclDataType_t(-1)"},
		{"all-reduce zero send", func() error { return c.AllReduceSum(0, b, 4, Float32, 0) }, "ncclAllReduce: send buffer is 0 for count 4"},
		{"all-reduce zero recv", func() error { return c.AllReduceSum(a, 0, 4, Bfloat16, 0) }, "ncclAllReduce: recv buffer is 0 for count 4"},
		{"all-reduce in place", func() error { return c.AllReduceSum(a, a, 4, Float16, 0) }, ""},
		{"all-reduce empty null", func() error { return c.AllReduceSum(0, 0, 0, Float32, 0) }, ""},
		{"all-gather zero send", func() error { return c.AllGather(0, b, 2, Int64, 0) }, "ncclAllGather: send buffer is 0 for count 2"},
		{"all-gather overflow", func() error { return c.AllGather(a, b, 1<<62, Float32, 0) }, "ncclAllGather: sendCount 4611686018427387904 × 3 ranks × 4 bytes overflows"},
		{"all-gather valid", func() error { return c.AllGather(a, b, 2, Int64, 0) }, ""},
		{"reduce-scatter negative", func() error { return c.ReduceScatterSum(a, b, -3, Float32, 0) }, "ncclReduceScatter: count -3 is negative"},
		{"reduce-scatter overflow", func() error { return c.ReduceScatterSum(a, b, 1<<61, Float64, 0) }, "recvCount 2305843009213693952 × 3 ranks × 8 bytes overflows"},
		{"reduce-scatter valid", func() error { return c.ReduceScatterSum(a, b, 8, Bfloat16, 0) }, ""},
		{"broadcast root negative", func() error { return c.Broadcast(a, b, 1, Int8, -1, 0) }, "ncclBroadcast: root -1 outside [0, 3)"},
		{"broadcast root past ranks", func() error { return c.Broadcast(a, b, 1, Int8, 3, 0) }, "ncclBroadcast: root 3 outside [0, 3)"},
		{"broadcast root zero send", func() error { return c.Broadcast(0, b, 1, Int8, 1, 0) }, "ncclBroadcast: send buffer is 0 for count 1"},
		{"broadcast zero recv", func() error { return c.Broadcast(a, 0, 1, Uint8, 0, 0) }, "ncclBroadcast: recv buffer is 0 for count 1"},
		{"broadcast non-root without send", func() error { return c.Broadcast(0, b, 1, Int32, 0, 0) }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if tc.err == "" {
				require.ErrorIs(t, err, ErrDestroyed)
				return
			}
			require.ErrorContains(t, err, tc.err)
			require.NotErrorIs(t, err, ErrDestroyed, "validation must come before the call")
		})
	}
}

// A communicator that is destroyed (or was never initialised) refuses every call
// with ErrDestroyed naming the call; Destroy and Abort stay idempotent.
func TestDestroyedComm(t *testing.T) {
	c := &Comm{nranks: 1}
	c.done.Store(true)
	calls := map[string]func() error{
		"ncclAllReduce":         func() error { return c.AllReduceSum(1, 1, 1, Float32, 0) },
		"ncclAllGather":         func() error { return c.AllGather(1, 1, 1, Float32, 0) },
		"ncclReduceScatter":     func() error { return c.ReduceScatterSum(1, 1, 1, Float32, 0) },
		"ncclBroadcast":         func() error { return c.Broadcast(1, 1, 1, Float32, 0, 0) },
		"ncclCommGetAsyncError": c.AsyncError,
	}
	for op, call := range calls {
		err := call()
		require.ErrorIs(t, err, ErrDestroyed, op)
		require.ErrorContains(t, err, op)
	}
	require.NoError(t, c.Destroy())
	require.NoError(t, c.Destroy())
	require.NoError(t, c.Abort())
}

func TestTypesAndErrorText(t *testing.T) {
	cases := []struct {
		dt   DataType
		code int
		name string
		size int
	}{
		{Int8, 0, "ncclInt8", 1}, {Uint8, 1, "ncclUint8", 1},
		{Int32, 2, "ncclInt32", 4}, {Uint32, 3, "ncclUint32", 4},
		{Int64, 4, "ncclInt64", 8}, {Uint64, 5, "ncclUint64", 8},
		{Float16, 6, "ncclFloat16", 2}, {Float32, 7, "ncclFloat32", 4},
		{Float64, 8, "ncclFloat64", 8}, {Bfloat16, 9, "ncclBfloat16", 2},
		{DataType(11), 11, "ncclDataType_t(11)", 0},
	}
	for _, tc := range cases {
		require.Equal(t, tc.code, int(tc.dt), tc.name)
		require.Equal(t, tc.name, tc.dt.String())
		require.Equal(t, tc.size, tc.dt.Size(), tc.name)
	}
	require.Equal(t, 128, len(UniqueID{}))
	require.Equal(t, "nccl: ncclAllReduce: invalid argument (run with NCCL_DEBUG=WARN for details) (ncclResult_t 4)",
		(&Error{Op: "ncclAllReduce", Code: 4, Message: "invalid argument (run with NCCL_DEBUG=WARN for details)"}).Error())
	require.Equal(t, "nccl: ncclGroupEnd: ncclResult_t 3", (&Error{Op: "ncclGroupEnd", Code: 3}).Error())
}
