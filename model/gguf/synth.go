package gguf

import (
	"fmt"
	"math/rand/v2"
)

// SynthLlama returns a Writer holding a llama model of configuration c
// (Dim, Layers, Heads, KVHeads, FFN, Vocab, ContextLength, NormEps,
// RopeTheta, TiedOutput are used; HeadDim is derived) with weights drawn
// from N(0, 0.02²) by rng, stored as typ, and norm weights 1 (F32). The
// caller adds tokenizer metadata. Every size rule is checked first, with
// errors naming the value.
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
	if c.Dim%c.Heads != 0 {
		return nil, fmt.Errorf("synth: dim %d is not divisible by heads %d", c.Dim, c.Heads)
	}
	if c.Heads%c.KVHeads != 0 {
		return nil, fmt.Errorf("synth: heads %d is not divisible by kv-heads %d", c.Heads, c.KVHeads)
	}
	if hd := c.Dim / c.Heads; hd%2 != 0 {
		return nil, fmt.Errorf("synth: head dim %d (dim %d / heads %d) is odd; RoPE needs it even", hd, c.Dim, c.Heads)
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
	c.HeadDim = c.Dim / c.Heads
	w := NewWriter()
	meta := []struct {
		k string
		v any
	}{
		{"general.architecture", "llama"},
		{"general.name", "turnstile-synth"},
		{"llama.context_length", uint32(c.ContextLength)},
		{"llama.embedding_length", uint32(c.Dim)},
		{"llama.block_count", uint32(c.Layers)},
		{"llama.feed_forward_length", uint32(c.FFN)},
		{"llama.attention.head_count", uint32(c.Heads)},
		{"llama.attention.head_count_kv", uint32(c.KVHeads)},
		{"llama.rope.dimension_count", uint32(c.HeadDim)},
		{"llama.rope.freq_base", c.RopeTheta},
		{"llama.attention.layer_norm_rms_epsilon", c.NormEps},
	}
	for _, m := range meta {
		if err := w.Set(m.k, m.v); err != nil {
			return nil, err
		}
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
	}
	return w, nil
}
