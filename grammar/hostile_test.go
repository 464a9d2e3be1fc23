package grammar

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHostileSchemas: schemas built to cost time or memory are refused or
// compiled within the stated bounds (DefaultLimits: 200,000 states, 5 s).
// Each case states what must happen; none may hang or panic.
func TestHostileSchemas(t *testing.T) {
	if raceEnabled {
		t.Skip("single-goroutine and long under -race; the non-race pass of make test runs it")
	}
	deep := strings.Repeat(`{"type":"object","properties":{"a":`, 300) + `{"type":"string"}` + strings.Repeat(`}}`, 300)
	var enum strings.Builder
	enum.WriteString(`{"enum":[`)
	for i := 0; i < 20000; i++ {
		if i > 0 {
			enum.WriteByte(',')
		}
		fmt.Fprintf(&enum, `"value-%d"`, i)
	}
	enum.WriteString(`]}`)
	var big strings.Builder
	big.WriteString(`{"type":"object","properties":{`)
	for i := 0; big.Len() < MaxSchemaBytes+10; i++ {
		if i > 0 {
			big.WriteByte(',')
		}
		fmt.Fprintf(&big, `"p%d":{"type":"string","description":"%s"}`, i, strings.Repeat("x", 200))
	}
	big.WriteString(`}}`)
	for _, tc := range []struct {
		name   string
		schema string
		err    string // "" when it must compile
	}{
		{"nested 300 deep", deep, ""},
		{"enum of 20,000 strings", enum.String(), ""},
		{"$ref to itself", `{"$ref":"#"}`, "cycle"},
		{"required recursion without a base case", `{"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]}`, "cannot match any string"},
		{"minItems one million", `{"type":"array","minItems":1000000}`, "minItems 1000000"},
		{"maxLength one million", `{"type":"string","maxLength":1000000}`, "maxLength 1000000"},
		{"exploding pattern", `{"type":"string","pattern":"^(a|b)*a(a|b){24}$"}`, "too large"},
		{"schema over 4 MiB", big.String(), "more than the limit of"},
		{"unknown keyword type", `{"type":"objekt"}`, "invalid schema"},
		{"remote reference", `{"$ref":"http://example.com/s.json"}`, "another document"},
		{"uniqueItems", `{"type":"array","uniqueItems":true}`, `"uniqueItems"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Now()
			// The time bound is tested on its own below; here a generous
			// one keeps a loaded machine from failing what compiles.
			lim := DefaultLimits
			lim.Time = time.Minute
			g, err := CompileJSONSchema([]byte(tc.schema), JSONOptions{Limits: lim})
			t.Logf("%v", time.Since(t0))
			if tc.err == "" {
				require.NoError(t, err)
				require.LessOrEqual(t, g.NumStates(), DefaultLimits.States)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
}

// TestCompileTimeBound: a compilation past Limits.Time stops with an
// error naming the bound.
func TestCompileTimeBound(t *testing.T) {
	lim := DefaultLimits
	lim.Time = time.Millisecond
	_, err := CompileJSONSchema([]byte(`{"type":"string","pattern":"^(a|b)*a(a|b){16}$"}`), JSONOptions{Limits: lim})
	require.ErrorContains(t, err, "compiling took more than 1ms")
	require.True(t, IsTooLarge(err))
}
