package gguf

import (
	"fmt"
	"slices"
)

// Architectures lists the general.architecture values LlamaConfig accepts.
// Only "llama" (llama 1/2/3, Mistral-style GQA, TinyLlama, llama2.c exports)
// is read; every other value is ErrUnsupportedArch.
var Architectures = []string{"llama"}

// LlamaConfig is everything the forward pass needs, read from metadata and
// checked against the tensor shapes.
type LlamaConfig struct {
	Dim     int // embedding width (llama.embedding_length)
	Layers  int // transformer blocks (llama.block_count)
	Heads   int // query heads (llama.attention.head_count)
	KVHeads int // key/value heads (llama.attention.head_count_kv; = Heads when absent)
	HeadDim int // Dim / Heads
	FFN     int // feed-forward hidden width (llama.feed_forward_length)
	Vocab   int // rows of token_embd.weight
	// ContextLength is llama.context_length as the file states it (may be
	// larger than the trained context; see testdata/models README).
	ContextLength int
	NormEps       float32 // RMS-norm epsilon (llama.attention.layer_norm_rms_epsilon)
	RopeTheta     float32 // RoPE base (llama.rope.freq_base; 10000 when absent)
	RopeDim       int     // rotated dimensions per head (llama.rope.dimension_count; = HeadDim when absent)
	// RopeScaling is "none" or "linear" (llama.rope.scaling.type); for
	// "linear", positions are divided by RopeScaleFactor before rotation.
	RopeScaling     string
	RopeScaleFactor float32
	// TiedOutput is true when the file has no output.weight and the logits
	// use token_embd.weight.
	TiedOutput bool
}

// LlamaLayer holds one block's tensors. Matrices have Dims [in, out].
type LlamaLayer struct {
	AttnNorm, Q, K, V, O    *TensorInfo
	FFNNorm, Gate, Up, Down *TensorInfo
}

// LlamaWeights is the validated configuration with every tensor it uses.
// Output aliases TokenEmbd when Config.TiedOutput.
type LlamaWeights struct {
	Config                        LlamaConfig
	TokenEmbd, OutputNorm, Output *TensorInfo
	Layers                        []LlamaLayer
}

// LlamaConfig reads and validates the llama configuration.
func (f *File) LlamaConfig() (LlamaConfig, error) {
	w, err := f.Llama()
	if err != nil {
		return LlamaConfig{}, err
	}
	return w.Config, nil
}

// Llama reads the configuration and resolves every tensor, checking each
// shape. Norm weights must be F32; matrices may be F32, F16, BF16 or Q8_0.
func (f *File) Llama() (*LlamaWeights, error) {
	arch, err := f.String("general.architecture")
	if err != nil {
		return nil, err
	}
	if !slices.Contains(Architectures, arch) {
		return nil, fmt.Errorf("%w: general.architecture = %q (accepted: %v)", ErrUnsupportedArch, arch, Architectures)
	}
	var c LlamaConfig
	positive := func(key string, dst *int) error {
		n, err := f.Int(key)
		if err != nil {
			return err
		}
		if n <= 0 {
			return fmt.Errorf("%w: %s = %d, want > 0", ErrMalformed, key, n)
		}
		*dst = n
		return nil
	}
	for _, p := range []struct {
		key string
		dst *int
	}{
		{"llama.embedding_length", &c.Dim},
		{"llama.block_count", &c.Layers},
		{"llama.attention.head_count", &c.Heads},
		{"llama.feed_forward_length", &c.FFN},
		{"llama.context_length", &c.ContextLength},
	} {
		if err := positive(p.key, p.dst); err != nil {
			return nil, err
		}
	}
	c.KVHeads = c.Heads
	if f.Has("llama.attention.head_count_kv") {
		if err := positive("llama.attention.head_count_kv", &c.KVHeads); err != nil {
			return nil, err
		}
	}
	if c.Dim%c.Heads != 0 {
		return nil, fmt.Errorf("%w: llama.embedding_length %d is not divisible by llama.attention.head_count %d", ErrShapeMismatch, c.Dim, c.Heads)
	}
	if c.Heads%c.KVHeads != 0 {
		return nil, fmt.Errorf("%w: llama.attention.head_count %d is not divisible by llama.attention.head_count_kv %d", ErrShapeMismatch, c.Heads, c.KVHeads)
	}
	c.HeadDim = c.Dim / c.Heads
	// Each block has 9 tensors; checking this before allocating the layer
	// table keeps a crafted block_count from allocating without bound.
	if c.Layers > len(f.Tensors)/9 {
		return nil, fmt.Errorf("%w: llama.block_count = %d, but the file has only %d tensors", ErrMissingTensor, c.Layers, len(f.Tensors))
	}
	for _, key := range []string{"llama.attention.key_length", "llama.attention.value_length"} {
		if f.Has(key) {
			n, err := f.Int(key)
			if err != nil {
				return nil, err
			}
			if n != c.HeadDim {
				return nil, fmt.Errorf("%w: %s = %d, but embedding_length/head_count = %d", ErrShapeMismatch, key, n, c.HeadDim)
			}
		}
	}
	if c.NormEps, err = f.Float32("llama.attention.layer_norm_rms_epsilon"); err != nil {
		return nil, err
	}
	if !(c.NormEps > 0 && c.NormEps < 1) {
		return nil, fmt.Errorf("%w: llama.attention.layer_norm_rms_epsilon = %g, want in (0, 1)", ErrMalformed, c.NormEps)
	}
	c.RopeTheta = 10000
	if f.Has("llama.rope.freq_base") {
		if c.RopeTheta, err = f.Float32("llama.rope.freq_base"); err != nil {
			return nil, err
		}
		if !(c.RopeTheta > 1) {
			return nil, fmt.Errorf("%w: llama.rope.freq_base = %g, want > 1", ErrMalformed, c.RopeTheta)
		}
	}
	c.RopeDim = c.HeadDim
	if f.Has("llama.rope.dimension_count") {
		if err := positive("llama.rope.dimension_count", &c.RopeDim); err != nil {
			return nil, err
		}
		if c.RopeDim > c.HeadDim || c.RopeDim%2 != 0 {
			return nil, fmt.Errorf("%w: llama.rope.dimension_count = %d, want even and ≤ head dim %d", ErrShapeMismatch, c.RopeDim, c.HeadDim)
		}
	}
	if c.HeadDim%2 != 0 {
		return nil, fmt.Errorf("%w: head dim %d is odd; RoPE rotates pairs", ErrShapeMismatch, c.HeadDim)
	}
	c.RopeScaling, c.RopeScaleFactor = "none", 1
	if f.Has("llama.rope.scaling.type") {
		if c.RopeScaling, err = f.String("llama.rope.scaling.type"); err != nil {
			return nil, err
		}
	}
	switch c.RopeScaling {
	case "none":
	case "linear":
		if c.RopeScaleFactor, err = f.Float32("llama.rope.scaling.factor"); err != nil {
			return nil, err
		}
		if !(c.RopeScaleFactor >= 1) {
			return nil, fmt.Errorf("%w: llama.rope.scaling.factor = %g, want ≥ 1", ErrMalformed, c.RopeScaleFactor)
		}
	default:
		return nil, fmt.Errorf("%w: llama.rope.scaling.type = %q (accepted: none, linear)", ErrUnsupportedArch, c.RopeScaling)
	}

	w := &LlamaWeights{}
	if w.TokenEmbd, err = f.Tensor("token_embd.weight"); err != nil {
		return nil, err
	}
	if len(w.TokenEmbd.Dims) != 2 || w.TokenEmbd.Dims[0] != uint64(c.Dim) {
		return nil, fmt.Errorf("%w: tensor %q is %v, want [%d vocab]", ErrShapeMismatch, w.TokenEmbd.Name, w.TokenEmbd.Dims, c.Dim)
	}
	c.Vocab = int(w.TokenEmbd.Dims[1])
	if toks, err := f.Strings("tokenizer.ggml.tokens"); err == nil && len(toks) != c.Vocab {
		return nil, fmt.Errorf("%w: tokenizer.ggml.tokens has %d entries, tensor %q has %d rows", ErrShapeMismatch, len(toks), w.TokenEmbd.Name, c.Vocab)
	}
	check := func(name string, norm bool, dims ...int) (*TensorInfo, error) {
		t, err := f.Tensor(name)
		if err != nil {
			return nil, err
		}
		ok := len(t.Dims) == len(dims)
		for i := 0; ok && i < len(dims); i++ {
			ok = t.Dims[i] == uint64(dims[i])
		}
		if !ok {
			return nil, fmt.Errorf("%w: tensor %q is %v, want %v", ErrShapeMismatch, name, t.Dims, dims)
		}
		if norm && t.Type != TypeF32 {
			return nil, fmt.Errorf("%w: norm tensor %q is %v, want F32", ErrUnknownType, name, t.Type)
		}
		return t, nil
	}
	if w.OutputNorm, err = check("output_norm.weight", true, c.Dim); err != nil {
		return nil, err
	}
	if _, err := f.Tensor("output.weight"); err != nil {
		c.TiedOutput = true
		w.Output = w.TokenEmbd
	} else if w.Output, err = check("output.weight", false, c.Dim, c.Vocab); err != nil {
		return nil, err
	}
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	w.Layers = make([]LlamaLayer, c.Layers)
	for i := range w.Layers {
		l := &w.Layers[i]
		for _, s := range []struct {
			dst  **TensorInfo
			name string
			norm bool
			dims []int
		}{
			{&l.AttnNorm, "attn_norm", true, []int{c.Dim}},
			{&l.Q, "attn_q", false, []int{c.Dim, q}},
			{&l.K, "attn_k", false, []int{c.Dim, kv}},
			{&l.V, "attn_v", false, []int{c.Dim, kv}},
			{&l.O, "attn_output", false, []int{q, c.Dim}},
			{&l.FFNNorm, "ffn_norm", true, []int{c.Dim}},
			{&l.Gate, "ffn_gate", false, []int{c.Dim, c.FFN}},
			{&l.Up, "ffn_up", false, []int{c.Dim, c.FFN}},
			{&l.Down, "ffn_down", false, []int{c.FFN, c.Dim}},
		} {
			if *s.dst, err = check(LayerTensor(i, s.name), s.norm, s.dims...); err != nil {
				return nil, err
			}
		}
	}
	w.Config = c
	return w, nil
}

// LayerTensor names a block tensor, e.g. LayerTensor(3, "attn_q") = "blk.3.attn_q.weight".
func LayerTensor(layer int, name string) string {
	return fmt.Sprintf("blk.%d.%s.weight", layer, name)
}

// Params is the number of parameters (elements) over all tensors.
func (f *File) Params() uint64 {
	var n uint64
	for i := range f.Tensors {
		n += f.Tensors[i].Elements()
	}
	return n
}
