package grammar

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// testVocab is every string of length 1..3 over alphabet, plus extra
// tokens, a control token and a stop token (the last two ids).
func testVocab(t testing.TB, alphabet string, extra ...string) *Vocab {
	var pieces [][]byte
	var add func(prefix string, n int)
	add = func(prefix string, n int) {
		if n == 0 {
			return
		}
		for _, c := range []byte(alphabet) {
			s := prefix + string(c)
			pieces = append(pieces, []byte(s))
			add(s, n-1)
		}
	}
	add("", 3)
	for _, e := range extra {
		pieces = append(pieces, []byte(e))
	}
	pieces = append(pieces, []byte("<ctl>"), nil)
	special := make([]bool, len(pieces))
	special[len(pieces)-2] = true
	special[len(pieces)-1] = true
	v, err := NewVocab(pieces, special, []int32{int32(len(pieces) - 1)})
	require.NoError(t, err)
	return v
}

// jsonish is a small recursive grammar: lists of lists and atoms.
func jsonish(t testing.TB) *Grammar {
	var b Builder
	val := b.Declare("value")
	list := b.Declare("list")
	atom := b.Rule("atom", Alt(Plus(ByteRange('0', '9')), Lit("ab")))
	ws := Opt(Lit(" "))
	b.Define(list, Seq(Lit("["), ws, Opt(Seq(Ref(val), Star(Seq(Lit(","), ws, Ref(val))))), Lit("]")))
	b.Define(val, Alt(Ref(atom), Ref(list)))
	g, err := b.Build(val, DefaultLimits)
	require.NoError(t, err)
	return g
}

// bruteMask computes the mask by trying every token from every parse.
func bruteMask(m *Matcher) []uint64 {
	mask := make([]uint64, m.v.MaskWords())
	if m.done {
		return mask
	}
	for id := range m.v.Size() {
		if m.v.special[id] {
			continue
		}
		for _, f := range m.cur {
			if m.accepts(f, m.v.pieces[id]) {
				mask[id>>6] |= 1 << (id & 63)
				break
			}
		}
	}
	if m.Complete() {
		for _, s := range m.v.stops {
			mask[s>>6] |= 1 << (s & 63)
		}
	}
	return mask
}

func maskIDs(m []uint64, v *Vocab) []string {
	var out []string
	forBits(m, func(id int32) { out = append(out, fmt.Sprintf("%d:%q", id, v.pieces[id])) })
	return out
}

// TestMaskMatchesBruteForce walks random accepted tokens through the
// grammar and checks, at every step, that the table-built mask equals the
// brute-force one and that Accept agrees with the mask for every token.
func TestMaskMatchesBruteForce(t *testing.T) {
	v := testVocab(t, "[], 0ab", "[[", "]]", "],[", "[0,", "0]", "ab]", "[ab", " [", "12", "],")
	g := jsonish(t)
	rng := rand.New(rand.NewPCG(1, 2))
	mask := make([]uint64, v.MaskWords())
	for trial := 0; trial < 50; trial++ {
		m := NewMatcher(g, v)
		for step := 0; step < 30; step++ {
			require.NoError(t, m.FillMask(mask))
			want := bruteMask(m)
			require.Equal(t, maskIDs(want, v), maskIDs(mask, v), "trial %d step %d", trial, step)
			for id := range v.Size() {
				allowed := mask[id>>6]&(1<<(id&63)) != 0
				err := m.Accept(int32(id))
				require.Equal(t, allowed, err == nil, "token %q: mask %v, Accept %v", v.pieces[id], allowed, err)
				if err == nil {
					require.NoError(t, m.Rollback(1))
				}
			}
			var ids []int32
			forBits(mask, func(id int32) { ids = append(ids, id) })
			if len(ids) == 0 || m.Done() {
				break
			}
			require.NoError(t, m.Accept(ids[rng.IntN(len(ids))]))
		}
	}
}

func TestAcceptText(t *testing.T) {
	v := testVocab(t, "[], 0ab")
	g := jsonish(t)
	for _, tc := range []struct {
		text     string
		ok, done bool
	}{
		{"[0,[ab, 12],[]]", true, true},
		{"ab", true, true},
		{"[", true, false},
		{"[,", false, false},
		{"]", false, false},
		{"[ [0]]", true, true},
		{"[0]]", false, false},
	} {
		t.Run(tc.text, func(t *testing.T) {
			m := NewMatcher(g, v)
			var err error
			for i := 0; i < len(tc.text) && err == nil; i++ {
				err = m.AcceptBytes([]byte{tc.text[i]})
			}
			require.Equal(t, tc.ok, err == nil, "%v", err)
			if tc.ok {
				require.Equal(t, tc.done, m.Complete())
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *Builder) RuleID
		want  string
	}{
		{"no base case", func(b *Builder) RuleID {
			a := b.Declare("a")
			b.Define(a, Seq(Lit("x"), Ref(a)))
			return a
		}, `rule "a" cannot match any string`},
		{"left recursion", func(b *Builder) RuleID {
			a := b.Declare("a")
			b.Define(a, Alt(Seq(Ref(a), Lit("x")), Lit("y")))
			return a
		}, `left recursion: "a" -> "a"`},
		{"left recursion through empty", func(b *Builder) RuleID {
			a := b.Declare("a")
			e := b.Rule("e", Opt(Lit("z")))
			b.Define(a, Alt(Seq(Ref(e), Ref(a), Lit("x")), Lit("y")))
			return a
		}, `left recursion`},
		{"undefined", func(b *Builder) RuleID {
			a := b.Declare("a")
			u := b.Declare("u")
			b.Define(a, Ref(u))
			return a
		}, `rule "u" is used but never defined`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b Builder
			root := tc.build(&b)
			_, err := b.Build(root, DefaultLimits)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestEmptyAndNullable(t *testing.T) {
	v := testVocab(t, "ab")
	var b Builder
	a := b.Declare("a")
	// a ::= "a" a | ε  — right recursion through an empty alternative.
	b.Define(a, Opt(Seq(Lit("a"), Ref(a))))
	g, err := b.Build(a, DefaultLimits)
	require.NoError(t, err)
	m := NewMatcher(g, v)
	require.True(t, m.Complete())
	require.NoError(t, m.AcceptBytes([]byte("aaa")))
	require.True(t, m.Complete())
	require.Error(t, m.AcceptBytes([]byte("b")))
	mask := make([]uint64, v.MaskWords())
	require.NoError(t, m.FillMask(mask))
	require.Equal(t, maskIDs(bruteMask(m), v), maskIDs(mask, v))
}

func TestForced(t *testing.T) {
	v := testVocab(t, "ab")
	g, err := CompileJSONSchema([]byte(`{"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"}},"required":["name","n"],"additionalProperties":false}`), JSONOptions{Whitespace: WhitespaceCompact})
	require.NoError(t, err)
	m := NewMatcher(g, v)
	require.Equal(t, `{"name":"`, string(m.Forced(64)))
	require.NoError(t, m.AcceptBytes([]byte(`{"name":"x"`)))
	require.Equal(t, `,"n":`, string(m.Forced(64)))
	require.Equal(t, `,"n`, string(m.Forced(3)), "bounded by max")
	require.NoError(t, m.AcceptBytes([]byte(`,"n":5}`)))
	require.Empty(t, m.Forced(64), "complete: nothing is forced")
}

// TestConcurrentMasks: matchers of one grammar on several goroutines
// share its tables and the vocabulary's (the race detector watches).
func TestConcurrentMasks(t *testing.T) {
	v := testVocab(t, `{}":ab0,`)
	g, err := CompileJSONSchema([]byte(`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}}}`), JSONOptions{Whitespace: WhitespaceCompact})
	require.NoError(t, err)
	want := []string{}
	{
		m := NewMatcher(g, v)
		mask := make([]uint64, v.MaskWords())
		for _, b := range []string{`{`, `"a":`, `"ab"`} {
			require.NoError(t, m.FillMask(mask))
			want = append(want, fmt.Sprint(maskIDs(mask, v)))
			require.NoError(t, m.AcceptBytes([]byte(b)))
		}
	}
	done := make(chan error, 8)
	for range 8 {
		go func() {
			m := NewMatcher(g, v)
			mask := make([]uint64, v.MaskWords())
			for i, b := range []string{`{`, `"a":`, `"ab"`} {
				if err := m.FillMask(mask); err != nil {
					done <- err
					return
				}
				if got := fmt.Sprint(maskIDs(mask, v)); got != want[i] {
					done <- fmt.Errorf("step %d: mask %s, want %s", i, got, want[i])
					return
				}
				if err := m.AcceptBytes([]byte(b)); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 8 {
		require.NoError(t, <-done)
	}
}
