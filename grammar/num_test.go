package grammar

import (
	"fmt"
	"math/big"
	"testing"

	"github.com/stretchr/testify/require"
)

func rat(s string) *big.Rat {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		panic(s)
	}
	return r
}

// TestNumberRange checks the range automata against exact arithmetic on a
// grid of texts around the bounds.
func TestNumberRange(t *testing.T) {
	if raceEnabled {
		t.Skip("single-goroutine and long under -race; the non-race pass of make test runs it")
	}
	var texts []string
	for i := -130; i <= 130; i++ {
		texts = append(texts, fmt.Sprint(i))
		for _, f := range []string{".0", ".5", ".25", ".05", ".999", ".1"} {
			if i < 0 {
				texts = append(texts, fmt.Sprintf("-%d%s", -i, f))
			} else {
				texts = append(texts, fmt.Sprintf("%d%s", i, f))
				if i == 0 {
					texts = append(texts, "-0"+f)
				}
			}
		}
	}
	texts = append(texts, "007", "1.", "-", "1e5", "-0")
	for _, m := range []string{"1", "5", "9.99", "1.2", "1.225", "5.0", "1.29999"} {
		for _, e := range []string{"e0", "e1", "E+1", "e2", "e-1", "e-2", "e-06", "e002", "e-0", "e+00"} {
			texts = append(texts, m+e, "-"+m+e)
		}
	}
	bounds := []string{"", "0", "1", "-1", "0.5", "-0.5", "10", "99", "100", "-100", "12.25", "-12.25", "0.05", "129.999"}
	for _, integer := range []bool{true, false} {
		forms := plainNumberExpr(integer)
		if !integer {
			forms = Alt(forms, Seq(Opt(Lit("-")), expForms().all))
		}
		plain, err := compileExpr(forms, testBudget())
		require.NoError(t, err)
		for _, los := range bounds {
			for _, his := range bounds {
				for _, excl := range []bool{false, true} {
					var lo, hi *numBound
					if los != "" {
						lo = &numBound{rat(los), excl}
					}
					if his != "" {
						hi = &numBound{rat(his), !excl}
					}
					d, err := numberRangeDFA(lo, hi, integer, testBudget())
					require.NoError(t, err)
					for _, s := range texts {
						want := plain.matches([]byte(s))
						if want {
							v := rat(s)
							if lo != nil && (v.Cmp(lo.v) < 0 || lo.excl && v.Cmp(lo.v) == 0) {
								want = false
							}
							if hi != nil && (v.Cmp(hi.v) > 0 || hi.excl && v.Cmp(hi.v) == 0) {
								want = false
							}
						}
						require.Equal(t, want, d.matches([]byte(s)), "%q integer=%v lo=%v hi=%v excl=%v", s, integer, los, his, excl)
					}
				}
			}
		}
	}
}

func TestMultipleOf(t *testing.T) {
	for _, tc := range []struct {
		m   string
		yes []string
		no  []string
	}{
		{"5", []string{"0", "5", "-10", "100", "5.0", "5.00"}, []string{"1", "7", "5.5", "-3"}},
		{"0.01", []string{"1", "1.5", "1.25", "-0.01", "3.10"}, []string{"1.255", "0.001"}},
		{"2.5", []string{"0", "2.5", "5", "7.50", "-12.5"}, []string{"1", "2.4", "3"}},
		{"11", []string{"0", "121", "-22"}, []string{"12", "1.1"}},
	} {
		p, d, ok := multipleParts(rat(tc.m))
		require.True(t, ok)
		a := multipleDFA(p, d)
		for _, s := range tc.yes {
			require.True(t, a.matches([]byte(s)), "%s multiple of %s", s, tc.m)
		}
		for _, s := range tc.no {
			require.False(t, a.matches([]byte(s)), "%s not a multiple of %s", s, tc.m)
		}
	}
}

func testBudget() *budget { return newBudget(DefaultLimits) }

// TestIntegerPointZero: an integer is written plainly unless
// IntegerPointZero, and then takes one ".0" only from draft 6 on.
func TestIntegerPointZero(t *testing.T) {
	v := testVocab(t, "0123456789.-")
	for _, tc := range []struct {
		schema    string
		pointZero bool
		text      string
		want      bool
	}{
		{`{"type":"integer"}`, false, "12", true},
		{`{"type":"integer"}`, false, "12.0", false},
		{`{"type":"integer"}`, true, "12.0", true},
		{`{"type":"integer"}`, true, "12.00", false},
		{`{"type":"integer","minimum":3}`, false, "12.0", false},
		{`{"type":"integer","minimum":3}`, true, "12.0", true},
		{`{"$schema":"http://json-schema.org/draft-04/schema#","type":"integer"}`, true, "12.0", false},
		{`{"type":"number","not":{"type":"integer"}}`, false, "12.0", false},
		{`{"type":"number","not":{"type":"integer"}}`, false, "12.5", true},
	} {
		g, err := CompileJSONSchema([]byte(tc.schema), JSONOptions{IntegerPointZero: tc.pointZero})
		require.NoError(t, err, tc.schema)
		m := NewMatcher(g, v)
		got := m.AcceptBytes([]byte(tc.text)) == nil && m.Complete()
		require.Equal(t, tc.want, got, "%s IntegerPointZero=%v %q", tc.schema, tc.pointZero, tc.text)
	}
}
