package model

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/step"
)

// TestCascadeMatchesPlain: on stories260K, sequences that share a prompt
// prefix (the same leading blocks) decode with their step's groups exactly
// as without them: the same greedy tokens every step, logits within float
// tolerance; a group of one sampled member in the last layer and a prefill
// chunk member are covered.
func TestCascadeMatchesPlain(t *testing.T) {
	m := loadStories(t)
	const bs, seqs, steps = 8, 6, 24
	base := encodeAll(m, storyPrompts[5:6])[0]
	shared := len(base) / bs // full blocks of the shared prefix
	require.GreaterOrEqual(t, shared, 2)
	suffixes := encodeAll(m, storyPrompts[:seqs])
	run := func(group bool) ([][]int32, [][][]float32) {
		cfg := CPURunnerConfig{Seats: seqs + 1, KVBlocks: 256, BlockSize: bs, MaxBatchTokens: 256, KeepLogits: true}
		r := newTestRunner(t, m, cfg)
		h := newHarness(t, r)
		// The owner prefills the prefix into blocks 0..shared-1.
		owner := newSeq(seqs, iota32(0, shared+1)...)
		h.step(part{owner, base[:shared*bs], false})
		ss := make([]*tseq, seqs)
		parts := make([]part, seqs)
		for i := range ss {
			table := append(iota32(0, shared), iota32(100+i*20, 20)...)
			ss[i] = newSeq(int32(i), table...)
			ss[i].ctx = int32(shared * bs)
			ss[i].history = append(append([]int32(nil), base[:shared*bs]...), suffixes[i][1:]...)
			parts[i] = part{ss[i], suffixes[i][1:], true}
		}
		g := step.Grouper{}
		if group {
			g.MinBlocks = 2
		}
		var toks [][]int32
		var logits [][][]float32
		for n := 0; n < steps; n++ {
			h.build(parts...)
			if n == 3 {
				// One member takes a non-sampling prefill chunk of two
				// tokens instead of its decode: it shares the run too, but
				// has no row in the last layer.
				h.build(append(parts[:2:2], append([]part{{ss[2], []int32{5, 6}, false}}, parts[3:]...)...)...)
			}
			g.Group(&h.b, bs)
			if group {
				require.Len(t, h.b.Groups, 1, "step %d", n)
				require.EqualValues(t, shared, h.b.Groups[0].SharedBlocks)
			}
			require.NoError(t, r.Execute(&h.b, &h.out))
			require.NoError(t, r.Check())
			var ts []int32
			var ls [][]float32
			for i := range h.b.Seqs {
				ts = append(ts, h.out.Tokens[i])
				if l := r.Logits(i); l != nil {
					ls = append(ls, append([]float32(nil), l...))
				}
			}
			toks, logits = append(toks, ts), append(logits, ls)
			for i := range parts {
				p := &parts[i]
				tok := h.out.Tokens[i]
				if n == 3 && i == 2 {
					p.s.ctx += 2
					p.s.started = true
					continue
				}
				p.s.ctx += int32(len(p.toks))
				p.s.started = true
				p.toks = []int32{tok}
			}
		}
		return toks, logits
	}
	plainToks, plainLogits := run(false)
	casToks, casLogits := run(true)
	require.Equal(t, plainToks, casToks)
	for n := range plainLogits {
		require.Len(t, casLogits[n], len(plainLogits[n]))
		for i := range plainLogits[n] {
			require.Less(t, relErr(casLogits[n][i], plainLogits[n][i]), invarianceTol, "step %d row %d", n, i)
		}
	}
}
