package grammar

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRepeatUnit checks the directly built repetition of one scalar value
// against the compiled one: the same language on random byte strings
// (valid UTF-8, surrogates, overlong and stray bytes), and already
// minimal.
func TestRepeatUnit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	unit, err := compileExpr(anyRune, newBudget(DefaultLimits))
	require.NoError(t, err)
	alpha := []byte("a\xc3\xa9\xe0\xa0\x80\xed\x9f\xbf\xed\xa0\x80\xf0\x90\x80\x80\xf4\x8f\xbf\xbf\xff\x80\xc0")
	for _, mm := range [][2]int{{0, 0}, {0, 1}, {1, 1}, {0, -1}, {1, -1}, {3, -1}, {2, 5}, {0, 7}, {5, 5}} {
		got, ok, err := repeatUnit(unit, mm[0], mm[1], newBudget(DefaultLimits))
		require.True(t, ok)
		require.NoError(t, err)
		want, err := compileExpr(Repeat(anyRune, mm[0], mm[1]), newBudget(DefaultLimits))
		require.NoError(t, err)
		require.Len(t, got.states, len(want.states), "%v: minimal", mm)
		for range 20000 {
			s := make([]byte, rng.IntN(14))
			for i := range s {
				s[i] = alpha[rng.IntN(len(alpha))]
			}
			require.Equal(t, want.matches(s), got.matches(s), "%v %q", mm, s)
		}
	}
	_, ok, _ := repeatUnit(regexDFA(t, `a*`), 1, 2, newBudget(DefaultLimits))
	require.False(t, ok, "a unit whose end reads on is refused")
	_, _, err = repeatUnit(unit, 0, DefaultLimits.States, newBudget(DefaultLimits))
	require.ErrorIs(t, err, errTooLarge)
}

func regexDFA(t *testing.T, re string) *dfa {
	e, err := regexExpr(re)
	require.NoError(t, err)
	d, err := compileExpr(e, newBudget(DefaultLimits))
	require.NoError(t, err)
	return d
}
