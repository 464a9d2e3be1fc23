package testwait

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWaitsReturn(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	require.Equal(t, 7, Recv(t, ch, "the value"))
	require.Equal(t, "done", Within(t, "f", func() string { return "done" }))
	n := 0
	For(t, "three polls", func() bool { n++; return n == 3 })
	require.Equal(t, 3, n)
	dl, ok := Ctx(t).Deadline()
	require.True(t, ok)
	require.LessOrEqual(t, time.Until(dl), Bound)
}
