package guided

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/grammar"
)

// byteVocab has one token per byte and a stop token (256).
func byteVocab(t testing.TB) *grammar.Vocab {
	pieces := make([][]byte, 257)
	for i := range 256 {
		pieces[i] = []byte{byte(i)}
	}
	special := make([]bool, 257)
	special[256] = true
	v, err := grammar.NewVocab(pieces, special, []int32{256})
	require.NoError(t, err)
	return v
}

func allowed(mask []uint64, id int32) bool { return mask[id>>6]&(1<<(id&63)) != 0 }

func TestDecoderLifecycle(t *testing.T) {
	v := byteVocab(t)
	g, err := grammar.CompileChoices([]string{"yes", "no"}, grammar.DefaultLimits)
	require.NoError(t, err)
	d, err := New(4, v)
	require.NoError(t, err)
	require.Equal(t, 4, d.Seats())
	require.NoError(t, d.Start(2, g))
	require.NoError(t, d.Check())
	require.ErrorContains(t, d.Start(2, g), "still holds a matcher")
	require.True(t, d.Active(2))
	require.False(t, d.Active(1))

	m, err := d.Fill(2)
	require.NoError(t, err)
	require.True(t, allowed(m, 'y'))
	require.True(t, allowed(m, 'n'))
	require.False(t, allowed(m, 'x'))
	require.False(t, allowed(m, 256), "the stop token waits for a complete answer")
	for _, c := range "no" {
		require.NoError(t, d.Accept(2, int32(c)))
	}
	m, err = d.Fill(2)
	require.NoError(t, err)
	require.Equal(t, 1, grammar.CountMask(m))
	require.True(t, allowed(m, 256))
	require.ErrorIs(t, d.Accept(2, 'x'), grammar.ErrRejected)

	require.ErrorContains(t, d.Accept(1, 'y'), "holds no matcher")
	_, err = d.Fill(1)
	require.ErrorContains(t, err, "holds no matcher")
	require.ErrorContains(t, d.Start(4, g), "seat 4 outside [0, 4)")
	require.NoError(t, d.End(2))
	require.NoError(t, d.End(2), "ending a free seat is a no-op")
	require.Equal(t, 0, d.Live())
	require.NoError(t, d.Check())

	_, err = New(0, v)
	require.ErrorContains(t, err, "0 seats")
	_, err = New(2, nil)
	require.ErrorContains(t, err, "no vocabulary")
}

func TestCache(t *testing.T) {
	c, err := NewCache(CacheConfig{Entries: 2, Bytes: 1 << 30, Compilers: 1, Limits: grammar.DefaultLimits})
	require.NoError(t, err)
	ctx := context.Background()
	schema := Spec{Kind: JSONSchema, Source: `{"type":"integer"}`}
	g1, err := c.Get(ctx, schema)
	require.NoError(t, err)
	g2, err := c.Get(ctx, schema)
	require.NoError(t, err)
	require.Same(t, g1, g2, "the same spec shares one grammar")
	st := c.Stats()
	require.Equal(t, int64(1), st.Misses)
	require.Equal(t, int64(1), st.Hits)

	// A bad spec fails, and its failure is cached.
	bad := Spec{Kind: JSONSchema, Source: `{"type":"objekt"}`}
	_, err = c.Get(ctx, bad)
	require.ErrorContains(t, err, "invalid schema")
	_, err = c.Get(ctx, bad)
	require.ErrorContains(t, err, "invalid schema")
	require.Equal(t, int64(1), c.Stats().Failures)

	// A third distinct spec evicts the least recently used one.
	_, err = c.Get(ctx, Spec{Kind: Regex, Source: `[0-9]+`})
	require.NoError(t, err)
	require.Equal(t, 2, c.Stats().Entries)
	require.Equal(t, int64(1), c.Stats().Evictions)

	// Whitespace policy is part of the key.
	g3, err := c.Get(ctx, Spec{Kind: JSONSchema, Source: `{"type":"integer"}`, Whitespace: grammar.WhitespaceCompact})
	require.NoError(t, err)
	require.NotSame(t, g1, g3)

	_, err = NewCache(CacheConfig{})
	require.ErrorContains(t, err, "must be positive")
}

// TestCacheConcurrent: many requests for one spec compile it once.
func TestCacheConcurrent(t *testing.T) {
	c, err := NewCache(DefaultCacheConfig)
	require.NoError(t, err)
	s := Spec{Kind: JSONSchema, Source: `{"type":"object","properties":{"a":{"type":"string"}}}`}
	var wg sync.WaitGroup
	gs := make([]*grammar.Grammar, 16)
	for i := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := c.Get(context.Background(), s)
			require.NoError(t, err)
			gs[i] = g
		}()
	}
	wg.Wait()
	for _, g := range gs {
		require.Same(t, gs[0], g)
	}
	require.Equal(t, int64(1), c.Stats().Misses)
}

func TestCacheCanceled(t *testing.T) {
	c, err := NewCache(DefaultCacheConfig)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Take every compiler slot so the request must wait, then see it go.
	for range cap(c.sem) {
		c.sem <- struct{}{}
	}
	_, err = c.Get(ctx, Spec{Kind: Regex, Source: "a"})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 0, c.Stats().Entries, "a canceled compilation leaves nothing behind")
}

func TestCompileKinds(t *testing.T) {
	for _, tc := range []struct {
		spec Spec
		ok   string
		bad  string
	}{
		{Spec{Kind: JSONSchema, Source: `{"type":"boolean"}`}, "true", "1"},
		{Spec{Kind: JSONObject}, `{"a":[1,{}]}`, `[1]`},
		{Spec{Kind: Regex, Source: `[a-c]{2}`}, "ab", "ad"},
		{Spec{Kind: Choice, Choices: []string{"red", "green"}}, "green", "blue"},
		{Spec{Kind: GBNF, Source: `root ::= "x" [0-9]+`}, "x12", "y"},
		{Spec{Kind: StructuralTag, Source: `{"type":"structural_tag","structures":[{"begin":"<f>","schema":{"type":"integer"},"end":"</f>"}],"triggers":["<f"]}`}, "a <f>12</f> b", "<f>x</f>"},
	} {
		t.Run(tc.spec.Kind.String(), func(t *testing.T) {
			g, err := Compile(tc.spec, grammar.DefaultLimits)
			require.NoError(t, err)
			m := grammar.NewMatcher(g, byteVocab(t))
			require.NoError(t, m.AcceptBytes([]byte(tc.ok)))
			require.True(t, m.Complete())
			m.Reset()
			err = m.AcceptBytes([]byte(tc.bad))
			require.True(t, err != nil || !m.Complete(), "%q must not be a whole answer", tc.bad)
		})
	}
	_, err := Compile(Spec{Kind: 99}, grammar.DefaultLimits)
	require.ErrorContains(t, err, "unknown constraint kind 99")
}

// TestStructuralTagSpec: a tool-call tag compiles from its JSON, the
// whitespace policy reaches the JSON inside the calls, and a bad tag's
// error names the field.
func TestStructuralTagSpec(t *testing.T) {
	tag := grammar.StructuralTag{
		Structures: []grammar.TagStructure{{
			Begin:  "<tool_call>\n{\"name\": \"add\", \"arguments\": ",
			Schema: []byte(`{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`),
			End:    "}\n</tool_call>",
		}},
		Triggers: []string{"<tool_call>"},
		Text:     grammar.TagTextBefore,
		Max:      1,
	}
	require.Equal(t, "structural_tag", StructuralTag.String())
	call := func(args string) string {
		return "I'll add.\n<tool_call>\n{\"name\": \"add\", \"arguments\": " + args + "}\n</tool_call>"
	}
	for _, tc := range []struct {
		ws   grammar.Whitespace
		text string
		ok   bool
	}{
		{grammar.WhitespaceBounded, call(`{"a": 1}`), true},
		{grammar.WhitespaceCompact, call(`{"a":1}`), true},
		{grammar.WhitespaceCompact, call(`{"a": 1}`), false},
		{grammar.WhitespaceBounded, call(`{"a":"1"}`), false},
		{grammar.WhitespaceBounded, call(`{"a":1}`) + "\nmore text", false},
	} {
		g, err := Compile(Spec{Kind: StructuralTag, Source: string(tag.JSON()), Whitespace: tc.ws}, grammar.DefaultLimits)
		require.NoError(t, err)
		m := grammar.NewMatcher(g, byteVocab(t))
		err = m.AcceptBytes([]byte(tc.text))
		require.Equal(t, tc.ok, err == nil && m.Complete(), "%q: %v", tc.text, err)
	}

	c, err := NewCache(DefaultCacheConfig)
	require.NoError(t, err)
	_, err = c.Get(context.Background(), Spec{Kind: StructuralTag, Source: `{"structures":[{"begin":"<f>","end":"</f>"}],"triggers":["<g"]}`})
	require.ErrorContains(t, err, "structures[0].begin")
	_, err = c.Get(context.Background(), Spec{Kind: StructuralTag, Source: `{"structures":[],"tools":[]}`})
	require.ErrorContains(t, err, `unknown member "tools"`)
}
