package server

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBound: a bound admits exactly its maximum in flight, counted per
// place, and a place freed (once, however often it is freed) is taken again.
func TestBound(t *testing.T) {
	for _, tc := range []struct {
		name  string
		max   int
		holds []int  // places asked for, in order, none freed
		ok    []bool // whether each was granted
	}{
		{"exactly the maximum at once", 3, []int{3, 1}, []bool{true, false}},
		{"up to the maximum one by one", 2, []int{1, 1, 1}, []bool{true, true, false}},
		{"more than the maximum at once", 2, []int{3, 2}, []bool{false, true}},
		{"a refusal takes nothing", 3, []int{2, 2, 1}, []bool{true, false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &bound{max: tc.max}
			held := 0
			for i, n := range tc.holds {
				_, ok := b.hold(n)
				require.Equal(t, tc.ok[i], ok, "hold %d of %d places with %d of %d in flight", i, n, held, tc.max)
				if ok {
					held += n
				}
				require.Equal(t, held, b.inFlight())
			}
		})
	}
	b := &bound{max: 2}
	h, ok := b.hold(2)
	require.True(t, ok)
	h.free(0)
	h.free(0)
	require.Equal(t, 1, b.inFlight(), "a place is freed once")
	_, ok = b.hold(2)
	require.False(t, ok)
	h2, ok := b.hold(1)
	require.True(t, ok, "the freed place is taken again")
	h.freeAll()
	h2.freeAll()
	require.Zero(t, b.inFlight())
}
