package grammar

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLongRuleChains: chains of thousands of rules compile in time linear
// in their length, and a grammar whose parses multiply past the limit is
// refused at match time instead of taking seconds per token.
func TestLongRuleChains(t *testing.T) {
	const n = 9000
	var nested, left strings.Builder
	nested.WriteString("root ::= r0\n")
	left.WriteString("root ::= r0\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&nested, "r%d ::= \"x\" r%d \"y\"\n", i, i+1)
		fmt.Fprintf(&left, "r%d ::= r%d \"x\" | \"y\"\n", i, i+1)
	}
	fmt.Fprintf(&nested, "r%d ::= \"z\"\n", n)
	fmt.Fprintf(&left, "r%d ::= \"z\"\n", n)
	t0 := time.Now()
	g, err := CompileGBNF(nested.String(), DefaultLimits)
	require.NoError(t, err)
	t.Logf("nested chain: %v, %d states", time.Since(t0), g.NumStates())

	t0 = time.Now()
	g, err = CompileGBNF(left.String(), DefaultLimits)
	t.Logf("left-nested chain: %v", time.Since(t0))
	if err != nil {
		require.True(t, IsTooLarge(err), "%v", err)
		return
	}
	m := NewMatcher(g, testVocab(t, "xyz"))
	mask := make([]uint64, m.v.MaskWords())
	t0 = time.Now()
	err = m.FillMask(mask)
	t.Logf("first mask: %v, %v", time.Since(t0), err)
	if err != nil {
		require.True(t, IsTooLarge(err), "%v", err)
	}
}
