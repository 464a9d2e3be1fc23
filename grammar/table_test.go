package grammar

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// randomVocab is n random tokens over alphabet, of 1 to maxLen bytes
// (longer than shortBytes for some), with the one-byte tokens of the
// alphabet so every string can be written, a control token and a stop
// token (the last two ids).
func randomVocab(t testing.TB, rng *rand.Rand, alphabet string, n, maxLen int) *Vocab {
	seen := map[string]bool{}
	var pieces [][]byte
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			pieces = append(pieces, []byte(s))
		}
	}
	for _, c := range []byte(alphabet) {
		add(string(c))
	}
	for len(pieces) < n {
		l := 1 + rng.IntN(maxLen)
		if rng.IntN(4) > 0 {
			l = 1 + rng.IntN(6) // most tokens are short
		}
		var b strings.Builder
		for range l {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		add(b.String())
	}
	pieces = append(pieces, []byte("<ctl>"), nil)
	special := make([]bool, len(pieces))
	special[len(pieces)-2] = true
	special[len(pieces)-1] = true
	v, err := NewVocab(pieces, special, []int32{int32(len(pieces) - 1)})
	require.NoError(t, err)
	return v
}

// TestSharedTablesMatchBruteForce checks masks against brute force where
// tables are shared: between the positions of counted strings that read
// alike for shortBytes bytes, between grammars over one vocabulary
// (each schema compiled twice, and strings in many contexts), through the
// subtrees of the trie's root, and for long tokens (walked per position).
func TestSharedTablesMatchBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	v := randomVocab(t, rng, `ab"\:,{}[] 0`, 1500, 40)
	require.NotEmpty(t, v.long.nodes, "the vocabulary has long tokens")
	schemas := []string{
		`{"type":"string"}`,
		`{"type":"string","minLength":2,"maxLength":60}`,
		`{"type":"string","maxLength":30}`,
		`{"type":"array","items":{"type":"string","maxLength":50}}`,
		`{"type":"object","properties":{"ab":{"type":"string"},"a\"b":{"type":"integer"}},"additionalProperties":{"type":"string","minLength":27}}`,
		`{"type":"object","additionalProperties":{"type":"array","items":{"type":"string"}}}`,
		`{"enum":["ab","abab","a\"a",0]}`,
	}
	mask := make([]uint64, v.MaskWords())
	for round := range 2 {
		for _, schema := range schemas {
			g, err := CompileJSONSchema([]byte(schema), JSONOptions{Whitespace: WhitespaceCompact})
			require.NoError(t, err, schema)
			for trial := range 8 {
				m := NewMatcher(g, v)
				for step := range 80 {
					require.NoError(t, m.FillMask(mask))
					require.Equal(t, maskIDs(bruteMask(m), v), maskIDs(mask, v), "%s round %d trial %d step %d", schema, round, trial, step)
					var ids []int32
					forBits(mask, func(id int32) { ids = append(ids, id) })
					if len(ids) == 0 || m.Done() {
						break
					}
					id := ids[rng.IntN(len(ids))]
					if v.IsStop(id) {
						break
					}
					require.NoError(t, m.Accept(id))
				}
			}
		}
	}
}
