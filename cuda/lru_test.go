package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLRU: the plan cache keeps at most max entries, drops the least
// recently used (a get counts as a use), hands every dropped value to drop
// exactly once, and clear drops the rest.
func TestLRU(t *testing.T) {
	var dropped []int
	l := newLRU(3, func(k int, v string) {
		require.Equal(t, "v", v[:1])
		dropped = append(dropped, k)
	})
	for _, k := range []int{1, 2, 3} {
		l.put(k, "v")
	}
	_, ok := l.get(1) // 2 is now the least recent
	require.True(t, ok)
	l.put(4, "v")
	require.Equal(t, []int{2}, dropped)
	_, ok = l.get(2)
	require.False(t, ok)
	l.put(5, "v") // 3 next
	require.Equal(t, []int{2, 3}, dropped)
	require.Equal(t, 3, l.len())
	for _, k := range []int{1, 4, 5} {
		_, ok := l.get(k)
		require.True(t, ok, "key %d", k)
	}
	l.clear()
	require.ElementsMatch(t, []int{2, 3, 1, 4, 5}, dropped)
	require.Zero(t, l.len())
}

// TestCublasStatusString: statuses are named; "no algorithm" never shows as
// a bare number.
func TestCublasStatusString(t *testing.T) {
	for _, tc := range []struct {
		r    int
		want string
	}{
		{15, "CUBLAS_STATUS_NOT_SUPPORTED (cublasStatus 15)"},
		{7, "CUBLAS_STATUS_INVALID_VALUE (cublasStatus 7)"},
		{14, "CUBLAS_STATUS_INTERNAL_ERROR (cublasStatus 14)"},
		{99, "cublasStatus 99"},
	} {
		require.Equal(t, tc.want, cublasStatusString(tc.r))
	}
}
