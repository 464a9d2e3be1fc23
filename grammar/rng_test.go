package grammar

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRangesOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 2000; trial++ {
		var s byteSet
		for k := rng.IntN(6); k > 0; k-- {
			lo := rng.IntN(256)
			hi := min(255, lo+rng.IntN(100))
			s.addRange(byte(lo), byte(hi))
		}
		var want []byteRange
		forRanges(s, func(lo, hi byte) { want = append(want, byteRange{lo, hi}) })
		require.Equal(t, want, rangesOf(s), "%v", s)
	}
	require.Equal(t, []byteRange{{0, 255}}, rangesOf(byteSet{}.complement()))
	require.Empty(t, rangesOf(byteSet{}))
}
