package model

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/step"
)

// kvGreedyPrompts are the prompts of the auto KV type decision: the story
// prompts and more openings of the kind stories260K was trained on.
var kvGreedyPrompts = append(append([]string{}, storyPrompts...),
	"One day, a girl named Mia found a shiny stone",
	"Max was a brave little bear who",
	"It was raining outside, so the children",
	"The old man had a small boat. Every morning he",
	"Anna wanted a cookie, but her mom said",
	"In the forest there lived a happy rabbit",
	"Tim and his sister went to the beach. They built",
	"The bird could not fly because",
)

// kvGreedyTokens is how many tokens each prompt generates in the decision.
const kvGreedyTokens = 200

// greedyWithKV prefills every prompt together on a runner whose KV cache
// is kt, then decodes kvGreedyTokens greedy tokens for all of them in one
// batch per step, and returns each prompt's generated tokens.
func greedyWithKV(t *testing.T, m *Llama, kt kernels.DType, prompts [][]int32) [][]int32 {
	const bs, perSeq = 16, 16 // 256 positions per sequence
	cfg := CPURunnerConfig{Seats: len(prompts), KVBlocks: len(prompts) * perSeq, BlockSize: bs, MaxBatchTokens: 1024, KVType: kt}
	r := newTestRunner(t, m, cfg)
	h := newHarness(t, r)
	parts := make([]part, len(prompts))
	for i, p := range prompts {
		require.LessOrEqual(t, len(p)+kvGreedyTokens, bs*perSeq)
		parts[i] = part{newSeq(int32(i), iota32(i*perSeq, perSeq)...), p, true}
	}
	gen := make([][]int32, len(prompts))
	toks, _ := h.step(parts...)
	for n := 0; ; n++ {
		for i := range gen {
			gen[i] = append(gen[i], toks[i])
		}
		if n+1 == kvGreedyTokens {
			return gen
		}
		for i := range parts {
			parts[i].toks = []int32{step.FutureToken}
		}
		toks, _ = h.step(parts...)
	}
}

// TestKVTypeGreedyStories is the evidence for --kv-cache-dtype auto: greedy
// generation on stories260K for kvGreedyPrompts with an f32, an f16 and a
// bf16 cache, and the rule applied to it. f16 and bf16 cost the same two
// bytes, so the rule is: f16 if it generates exactly what f32 does (it
// keeps 3 more mantissa bits), else bf16 if that does, else f16 (llama.cpp's
// default). The agreement of each type is reported (first divergent token
// per prompt).
func TestKVTypeGreedyStories(t *testing.T) {
	m := loadStories(t)
	prompts := encodeAll(m, kvGreedyPrompts)
	want := greedyWithKV(t, m, kernels.F32, prompts)
	identical := map[kernels.DType]bool{}
	for _, kt := range []kernels.DType{kernels.F16, kernels.BF16} {
		got := greedyWithKV(t, m, kt, prompts)
		same, first := 0, ""
		for i := range want {
			d := 0
			for d < len(want[i]) && want[i][d] == got[i][d] {
				d++
			}
			if d == len(want[i]) {
				same++
			} else {
				first += fmt.Sprintf(" prompt %d diverges at token %d;", i, d)
			}
		}
		identical[kt] = same == len(want)
		t.Logf("%v cache: %d of %d prompts generate the f32 cache's %d greedy tokens exactly;%s", kt, same, len(want), kvGreedyTokens, first)
	}
	rule := kernels.F16
	if !identical[kernels.F16] && identical[kernels.BF16] {
		rule = kernels.BF16
	}
	require.Equal(t, rule, DefaultCPUKVType, "the auto rule on this evidence picks %v", rule)
}

// TestCPURunnerKVType checks each cache type's size and that a 16-bit
// cache follows the f32 one closely (logits of a prefill and decodes).
func TestCPURunnerKVType(t *testing.T) {
	m := loadStories(t)
	c := m.cfg
	prompt := encodeAll(m, storyPrompts[5:6])[0]
	cfg := CPURunnerConfig{Seats: 2, KVBlocks: 16, BlockSize: 16, MaxBatchTokens: 64, KeepLogits: true}
	logits := func(kt kernels.DType) [][]float32 {
		cfg := cfg
		cfg.KVType = kt
		r := newTestRunner(t, m, cfg)
		elem, err := kernels.KVElemBytes(kt)
		require.NoError(t, err)
		require.Equal(t, kt, r.KVType())
		require.Equal(t, int64(2*c.Layers*cfg.KVBlocks*cfg.BlockSize*c.KVHeads*c.HeadDim*elem), r.KVBytes())
		h := newHarness(t, r)
		s := newSeq(0, iota32(0, 16)...)
		_, l := h.step(part{s, prompt, true})
		out := [][]float32{l[0]}
		for d := 0; d < 4; d++ {
			_, l = h.step(part{s, []int32{step.FutureToken}, true})
			out = append(out, l[0])
		}
		return out
	}
	want := logits(kernels.F32)
	for _, tc := range []struct {
		kt  kernels.DType
		tol float64 // relative logits error: the rounding of K/V (2^-11, 2^-8)
	}{{kernels.F16, 0.01}, {kernels.BF16, 0.05}} {
		got := logits(tc.kt)
		for i := range want {
			e := relErr(got[i], want[i])
			t.Logf("%v cache, step %d: relative logits error %.2g", tc.kt, i, e)
			require.Less(t, e, tc.tol, "%v step %d", tc.kt, i)
		}
	}
}
