package sim

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTokenizer(t *testing.T) {
	tok, err := NewTokenizer(512, 1, 2)
	require.NoError(t, err)
	require.Equal(t, []int32{1}, tok.Encode("ignored", true))
	require.Empty(t, tok.Encode("ignored", false))
	require.Empty(t, tok.Piece(77))
	require.Equal(t, int32(1), tok.BOS())
	require.Equal(t, int32(2), tok.EOS())
	require.Equal(t, 512, tok.VocabSize())
	for _, bad := range [][3]int{{0, 0, 0}, {10, 10, 2}, {10, 1, -1}} {
		_, err := NewTokenizer(bad[0], int32(bad[1]), int32(bad[2]))
		require.ErrorContains(t, err, "ids must lie in [0, vocab)")
	}
}
