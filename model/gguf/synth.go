package gguf

import (
	"fmt"
	"math/rand/v2"
)

// SynthLlama returns a Writer holding a model of configuration c with
// weights drawn from N(0, 0.02²) by rng, stored as typ, and attention/FFN/
// output norm weights 1 (F32). Used: Arch ("" is llama; its ArchSpec adds
// per-head Q/K norm weights, drawn from 1 + N(0, 0.1²)), Dim, Layers, Heads,
// KVHeads, HeadDim (0: Dim/Heads; otherwise written as key_length and
// value_length), FFN, Vocab, ContextLength, NormEps, RopeTheta, QKVBias
// (biases from N(0, 0.1²)), RopeScaling "llama3" (written as llama.cpp's
// converter does: rope_freqs.weight from Llama3Factors, no scaling keys),
// SlidingWindow and TiedOutput. The caller adds tokenizer metadata. Every
// size rule is checked first, with errors naming the value.
func SynthLlama(c LlamaConfig, typ GGMLType, rng *rand.Rand) (*Writer, error) {
	for _, p := range []struct {
		name string
		v    int
	}{{"dim", c.Dim}, {"layers", c.Layers}, {"heads", c.Heads}, {"kv-heads", c.KVHeads},
		{"ffn", c.FFN}, {"vocab", c.Vocab}, {"context length", c.ContextLength}} {
		if p.v <= 0 {
			return nil, fmt.Errorf("synth: %s = %d, want > 0", p.name, p.v)
		}
	}
	if c.Arch == "" {
		c.Arch = "llama"
	}
	spec, err := LookupArch(c.Arch)
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	explicitHD := c.HeadDim != 0
	if !explicitHD && c.Dim%c.Heads != 0 {
		return nil, fmt.Errorf("synth: dim %d is not divisible by heads %d", c.Dim, c.Heads)
	}
	if c.Heads%c.KVHeads != 0 {
		return nil, fmt.Errorf("synth: heads %d is not divisible by kv-heads %d", c.Heads, c.KVHeads)
	}
	if !explicitHD {
		c.HeadDim = c.Dim / c.Heads
	}
	if c.HeadDim <= 0 || c.HeadDim%2 != 0 {
		return nil, fmt.Errorf("synth: head dim %d (dim %d, heads %d) must be even and > 0; RoPE rotates pairs", c.HeadDim, c.Dim, c.Heads)
	}
	switch c.RopeScaling {
	case "", "none":
	case "llama3":
		if !(c.RopeScaleFactor >= 1 && c.RopeLowFreqFactor > 0 && c.RopeHighFreqFactor > c.RopeLowFreqFactor && c.RopeOrigContext > 0) {
			return nil, fmt.Errorf("synth: llama3 rope scaling needs factor ≥ 1, 0 < low < high freq factor and an original context, got %g, %g, %g, %d",
				c.RopeScaleFactor, c.RopeLowFreqFactor, c.RopeHighFreqFactor, c.RopeOrigContext)
		}
	default:
		return nil, fmt.Errorf("synth: rope scaling %q (supported: none, llama3)", c.RopeScaling)
	}
	if c.SlidingWindow < 0 {
		return nil, fmt.Errorf("synth: sliding window = %d, want ≥ 0", c.SlidingWindow)
	}
	if !typ.Supported() {
		return nil, fmt.Errorf("synth: %w: %v", ErrUnknownType, typ)
	}
	if bs := typ.BlockSize(); c.Dim%bs != 0 || c.FFN%bs != 0 {
		return nil, fmt.Errorf("synth: %v needs dim (%d) and ffn (%d) to be multiples of %d", typ, c.Dim, c.FFN, bs)
	}
	if c.NormEps == 0 {
		c.NormEps = 1e-5
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	c.RopeDim = c.HeadDim
	w := NewWriter()
	a := c.Arch + "."
	type pair struct {
		k string
		v any
	}
	meta := []pair{
		{"general.architecture", c.Arch},
		{"general.name", "turnstile-synth"},
		{a + "context_length", uint32(c.ContextLength)},
		{a + "embedding_length", uint32(c.Dim)},
		{a + "block_count", uint32(c.Layers)},
		{a + "feed_forward_length", uint32(c.FFN)},
		{a + "attention.head_count", uint32(c.Heads)},
		{a + "attention.head_count_kv", uint32(c.KVHeads)},
		{a + "rope.dimension_count", uint32(c.HeadDim)},
		{a + "rope.freq_base", c.RopeTheta},
		{a + "attention.layer_norm_rms_epsilon", c.NormEps},
	}
	if explicitHD {
		meta = append(meta, pair{a + "attention.key_length", uint32(c.HeadDim)}, pair{a + "attention.value_length", uint32(c.HeadDim)})
	}
	if c.SlidingWindow > 0 {
		meta = append(meta, pair{a + "attention.sliding_window", uint32(c.SlidingWindow)})
	}
	for _, m := range meta {
		if err := w.Set(m.k, m.v); err != nil {
			return nil, err
		}
	}
	// addVals stores vals as tensor name of type t.
	addVals := func(name string, t GGMLType, vals []float32, dims ...int) error {
		ud := make([]uint64, len(dims))
		for i, d := range dims {
			ud[i] = uint64(d)
		}
		data, err := Quantize(t, vals)
		if err != nil {
			return fmt.Errorf("synth: tensor %q: %w", name, err)
		}
		return w.AddTensor(name, t, ud, data)
	}
	// around draws n values from center + N(0, sd²).
	around := func(n int, center, sd float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(center + rng.NormFloat64()*sd)
		}
		return v
	}
	add := func(name string, t GGMLType, dims ...int) error {
		n := 1
		ud := make([]uint64, len(dims))
		for i, d := range dims {
			n *= d
			ud[i] = uint64(d)
		}
		vals := make([]float32, n)
		for i := range vals {
			if t == TypeF32 && len(dims) == 1 {
				vals[i] = 1 // norm weight
			} else {
				vals[i] = float32(rng.NormFloat64() * 0.02)
			}
		}
		data, err := Quantize(t, vals)
		if err != nil {
			return fmt.Errorf("synth: tensor %q: %w", name, err)
		}
		return w.AddTensor(name, t, ud, data)
	}
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	if err := add("token_embd.weight", typ, c.Dim, c.Vocab); err != nil {
		return nil, err
	}
	if err := add("output_norm.weight", TypeF32, c.Dim); err != nil {
		return nil, err
	}
	if !c.TiedOutput {
		if err := add("output.weight", typ, c.Dim, c.Vocab); err != nil {
			return nil, err
		}
	}
	if c.RopeScaling == "llama3" {
		if err := addVals("rope_freqs.weight", TypeF32, c.Llama3Factors(), c.HeadDim/2); err != nil {
			return nil, err
		}
	}
	for i := 0; i < c.Layers; i++ {
		for _, s := range []struct {
			name string
			t    GGMLType
			dims []int
		}{
			{"attn_norm", TypeF32, []int{c.Dim}},
			{"attn_q", typ, []int{c.Dim, q}},
			{"attn_k", typ, []int{c.Dim, kv}},
			{"attn_v", typ, []int{c.Dim, kv}},
			{"attn_output", typ, []int{q, c.Dim}},
			{"ffn_norm", TypeF32, []int{c.Dim}},
			{"ffn_gate", typ, []int{c.Dim, c.FFN}},
			{"ffn_up", typ, []int{c.Dim, c.FFN}},
			{"ffn_down", typ, []int{c.FFN, c.Dim}},
		} {
			if err := add(LayerTensor(i, s.name), s.t, s.dims...); err != nil {
				return nil, err
			}
		}
		if c.QKVBias {
			for _, b := range []struct {
				name string
				n    int
			}{{"attn_q", q}, {"attn_k", kv}, {"attn_v", kv}} {
				if err := addVals(LayerBias(i, b.name), TypeF32, around(b.n, 0, 0.1), b.n); err != nil {
					return nil, err
				}
			}
		}
		if spec.QKNorm {
			for _, n := range []string{"attn_q_norm", "attn_k_norm"} {
				if err := addVals(LayerTensor(i, n), TypeF32, around(c.HeadDim, 1, 0.1), c.HeadDim); err != nil {
					return nil, err
				}
			}
		}
	}
	return w, nil
}
