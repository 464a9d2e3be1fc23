package gguf

import (
	"fmt"
	"math"
	"strings"
)

// ArchSpec is what one accepted general.architecture changes in the shared
// llama-shaped forward pass: data and small hooks, not another forward pass.
// Its metadata keys are "<Name>.…" (llama.block_count, qwen3.block_count).
type ArchSpec struct {
	Name string
	// RopeNeox: llama.cpp rotates this architecture's Q/K in the NEOX
	// (rotate-half) layout; llama GGUFs are permuted for adjacent pairs.
	RopeNeox bool
	// QKNorm: every block has attn_q_norm and attn_k_norm weights
	// ([head_dim], an RMSNorm of each head of Q and K before RoPE).
	QKNorm bool
}

// Archs returns the accepted architectures. Q/K/V biases
// (blk.N.attn_{q,k,v}.bias) are read wherever all three are present
// (qwen2 has them).
func Archs() []ArchSpec {
	return []ArchSpec{
		{Name: "llama"},                 // llama 1/2/3, Mistral, TinyLlama, llama2.c exports
		{Name: "qwen2", RopeNeox: true}, // Qwen2, Qwen2.5
		{Name: "qwen3", RopeNeox: true, QKNorm: true},
	}
}

// ArchNames lists the accepted general.architecture values, comma-separated.
func ArchNames() string {
	var names []string
	for _, a := range Archs() {
		names = append(names, a.Name)
	}
	return strings.Join(names, ", ")
}

// LookupArch returns the spec of general.architecture value name.
func LookupArch(name string) (ArchSpec, error) {
	for _, a := range Archs() {
		if a.Name == name {
			return a, nil
		}
	}
	return ArchSpec{}, fmt.Errorf("%w: general.architecture = %q (supported: %s)", ErrUnsupportedArch, name, ArchNames())
}

// LlamaConfig is everything the forward pass needs, read from metadata and
// checked against the tensor shapes. Keys are named for arch "llama"; other
// architectures use their own prefix (qwen3.block_count).
type LlamaConfig struct {
	// Arch is the architecture (general.architecture) and ArchSpec its
	// differences from llama.
	Arch     string
	RopeNeox bool // Q/K pairs are (i, i+HeadDim/2), not (2i, 2i+1)
	QKNorm   bool // per-head RMSNorm of Q and K before RoPE
	QKVBias  bool // Q, K and V projections add a bias
	Dim      int  // embedding width (llama.embedding_length)
	Layers   int  // transformer blocks (llama.block_count)
	Heads    int  // query heads (llama.attention.head_count)
	KVHeads  int  // key/value heads (llama.attention.head_count_kv; = Heads when absent)
	// HeadDim is llama.attention.key_length (= value_length) when present,
	// else Dim / Heads; qwen3 has Heads·HeadDim ≠ Dim.
	HeadDim int
	FFN     int // feed-forward hidden width (llama.feed_forward_length)
	Vocab   int // rows of token_embd.weight
	// ContextLength is llama.context_length as the file states it (may be
	// larger than the trained context; see testdata/models README).
	ContextLength int
	NormEps       float32 // RMS-norm epsilon (llama.attention.layer_norm_rms_epsilon)
	RopeTheta     float32 // RoPE base (llama.rope.freq_base; 10000 when absent)
	RopeDim       int     // rotated dimensions per head (llama.rope.dimension_count; = HeadDim when absent)
	// RopeScaling is "none", "linear" or "llama3" (llama.rope.scaling.type).
	// For "linear", positions are divided by RopeScaleFactor before
	// rotation. For "llama3" the per-dimension factors follow from
	// RopeScaleFactor, RopeLowFreqFactor, RopeHighFreqFactor and
	// RopeOrigContext (llama.rope.scaling.factor, .low_freq_factor,
	// .high_freq_factor, .original_context_length) unless the file has
	// rope_freqs.weight, which then wins (llama.cpp reads only the tensor).
	RopeScaling        string
	RopeScaleFactor    float32
	RopeLowFreqFactor  float32
	RopeHighFreqFactor float32
	RopeOrigContext    int
	// RopeFreqFactors is true when the file has rope_freqs.weight
	// ([RopeDim/2] F32): pair i's frequency is divided by factor i.
	RopeFreqFactors bool
	// SlidingWindow is llama.attention.sliding_window in tokens (0: none):
	// each token attends only to the last SlidingWindow positions.
	SlidingWindow int
	// TiedOutput is true when the file has no output.weight and the logits
	// use token_embd.weight.
	TiedOutput bool
}

// RopeFrequencies is the rotation table of c for kernels.RoPEFreqs:
// radians per position of each of the RopeDim/2 pairs, folding in the base,
// linear scaling and the llama3 per-dimension factors. factors is
// rope_freqs.weight ([RopeDim/2]) when the file has it, else nil.
func (c LlamaConfig) RopeFrequencies(factors []float32) ([]float64, error) {
	n := c.RopeDim / 2
	if factors != nil && len(factors) != n {
		return nil, fmt.Errorf("%w: rope_freqs.weight has %d factors, want rope dim/2 = %d", ErrShapeMismatch, len(factors), n)
	}
	f := make([]float64, n)
	for i := range f {
		f[i] = math.Pow(float64(c.RopeTheta), -2*float64(i)/float64(c.RopeDim))
		switch {
		case factors != nil:
			if !(factors[i] > 0) {
				return nil, fmt.Errorf("%w: rope_freqs.weight[%d] = %g, want > 0", ErrMalformed, i, factors[i])
			}
			f[i] /= float64(factors[i])
		case c.RopeScaling == "linear":
			f[i] /= float64(c.RopeScaleFactor)
		case c.RopeScaling == "llama3":
			f[i] /= llama3Factor(f[i], c)
		}
	}
	return f, nil
}

// Llama3Factors are the per-dimension divisors of Llama 3.1 RoPE scaling
// (rope_freqs.weight as llama.cpp's converter writes it) for c's
// RopeScaleFactor, RopeLowFreqFactor, RopeHighFreqFactor and
// RopeOrigContext: 1 for short wavelengths, the factor for long ones, a
// smooth blend between.
func (c LlamaConfig) Llama3Factors() []float32 {
	out := make([]float32, c.RopeDim/2)
	for i := range out {
		out[i] = float32(llama3Factor(math.Pow(float64(c.RopeTheta), -2*float64(i)/float64(c.RopeDim)), c))
	}
	return out
}

func llama3Factor(freq float64, c LlamaConfig) float64 {
	factor, lo, hi, orig := float64(c.RopeScaleFactor), float64(c.RopeLowFreqFactor), float64(c.RopeHighFreqFactor), float64(c.RopeOrigContext)
	wavelen := 2 * math.Pi / freq
	switch {
	case wavelen < orig/hi:
		return 1
	case wavelen > orig/lo:
		return factor
	}
	smooth := (orig/wavelen - lo) / (hi - lo)
	return 1 / ((1-smooth)/factor + smooth)
}

// LlamaLayer holds one block's tensors. Matrices have Dims [in, out].
// QBias, KBias and VBias ([out], F32) are set when Config.QKVBias; QNorm and
// KNorm ([HeadDim], F32) when Config.QKNorm.
type LlamaLayer struct {
	AttnNorm, Q, K, V, O    *TensorInfo
	QBias, KBias, VBias     *TensorInfo
	QNorm, KNorm            *TensorInfo
	FFNNorm, Gate, Up, Down *TensorInfo
}

// LlamaWeights is the validated configuration with every tensor it uses.
// Output aliases TokenEmbd when Config.TiedOutput; RopeFreqs is
// rope_freqs.weight when Config.RopeFreqFactors, else nil.
type LlamaWeights struct {
	Config                        LlamaConfig
	TokenEmbd, OutputNorm, Output *TensorInfo
	RopeFreqs                     *TensorInfo
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

// Llama reads the configuration of any accepted architecture (Archs) and
// resolves every tensor, checking each shape. Norm and bias weights must be
// F32; matrices may be any supported type.
func (f *File) Llama() (*LlamaWeights, error) {
	archName, err := f.String("general.architecture")
	if err != nil {
		return nil, err
	}
	spec, err := LookupArch(archName)
	if err != nil {
		return nil, err
	}
	key := func(k string) string { return spec.Name + "." + k }
	c := LlamaConfig{Arch: spec.Name, RopeNeox: spec.RopeNeox, QKNorm: spec.QKNorm}
	positive := func(k string, dst *int) error {
		n, err := f.Int(k)
		if err != nil {
			return err
		}
		if n <= 0 {
			return fmt.Errorf("%w: %s = %d, want > 0", ErrMalformed, k, n)
		}
		*dst = n
		return nil
	}
	for _, p := range []struct {
		key string
		dst *int
	}{
		{key("embedding_length"), &c.Dim},
		{key("block_count"), &c.Layers},
		{key("attention.head_count"), &c.Heads},
		{key("feed_forward_length"), &c.FFN},
		{key("context_length"), &c.ContextLength},
	} {
		if err := positive(p.key, p.dst); err != nil {
			return nil, err
		}
	}
	c.KVHeads = c.Heads
	if f.Has(key("attention.head_count_kv")) {
		if err := positive(key("attention.head_count_kv"), &c.KVHeads); err != nil {
			return nil, err
		}
	}
	if c.Heads%c.KVHeads != 0 {
		return nil, fmt.Errorf("%w: %s %d is not divisible by %s %d", ErrShapeMismatch, key("attention.head_count"), c.Heads, key("attention.head_count_kv"), c.KVHeads)
	}
	// Each block has at least 9 tensors; checking this before allocating
	// the layer table keeps a crafted block_count from allocating without
	// bound.
	if c.Layers > len(f.Tensors)/9 {
		return nil, fmt.Errorf("%w: %s = %d, but the file has only %d tensors", ErrMissingTensor, key("block_count"), c.Layers, len(f.Tensors))
	}
	if f.Has(key("attention.key_length")) {
		if err := positive(key("attention.key_length"), &c.HeadDim); err != nil {
			return nil, err
		}
	} else {
		if c.Dim%c.Heads != 0 {
			return nil, fmt.Errorf("%w: %s %d is not divisible by %s %d", ErrShapeMismatch, key("embedding_length"), c.Dim, key("attention.head_count"), c.Heads)
		}
		c.HeadDim = c.Dim / c.Heads
	}
	if f.Has(key("attention.value_length")) {
		n, err := f.Int(key("attention.value_length"))
		if err != nil {
			return nil, err
		}
		if n != c.HeadDim {
			return nil, fmt.Errorf("%w: %s = %d, but the key head dim is %d (only equal key and value heads are supported)", ErrShapeMismatch, key("attention.value_length"), n, c.HeadDim)
		}
	}
	if c.NormEps, err = f.Float32(key("attention.layer_norm_rms_epsilon")); err != nil {
		return nil, err
	}
	if !(c.NormEps > 0 && c.NormEps < 1) {
		return nil, fmt.Errorf("%w: %s = %g, want in (0, 1)", ErrMalformed, key("attention.layer_norm_rms_epsilon"), c.NormEps)
	}
	c.RopeTheta = 10000
	if f.Has(key("rope.freq_base")) {
		if c.RopeTheta, err = f.Float32(key("rope.freq_base")); err != nil {
			return nil, err
		}
		if !(c.RopeTheta > 1) {
			return nil, fmt.Errorf("%w: %s = %g, want > 1", ErrMalformed, key("rope.freq_base"), c.RopeTheta)
		}
	}
	if c.HeadDim%2 != 0 {
		return nil, fmt.Errorf("%w: head dim %d is odd; RoPE rotates pairs", ErrShapeMismatch, c.HeadDim)
	}
	c.RopeDim = c.HeadDim
	if f.Has(key("rope.dimension_count")) {
		if err := positive(key("rope.dimension_count"), &c.RopeDim); err != nil {
			return nil, err
		}
		if c.RopeDim > c.HeadDim || c.RopeDim%2 != 0 {
			return nil, fmt.Errorf("%w: %s = %d, want even and ≤ head dim %d", ErrShapeMismatch, key("rope.dimension_count"), c.RopeDim, c.HeadDim)
		}
	}
	if err := f.ropeScaling(&c, key); err != nil {
		return nil, err
	}
	if f.Has(key("attention.sliding_window")) {
		if err := positive(key("attention.sliding_window"), &c.SlidingWindow); err != nil {
			return nil, err
		}
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
	check := func(name string, f32 bool, dims ...int) (*TensorInfo, error) {
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
		if f32 && t.Type != TypeF32 {
			return nil, fmt.Errorf("%w: norm or bias tensor %q is %v, want F32", ErrUnknownType, name, t.Type)
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
	if _, err := f.Tensor("rope_freqs.weight"); err == nil {
		if w.RopeFreqs, err = check("rope_freqs.weight", true, c.RopeDim/2); err != nil {
			return nil, err
		}
		c.RopeFreqFactors = true
	}
	// Biases come as a set: a file with some of them is malformed rather
	// than silently half-read.
	nbias := 0
	for _, b := range []string{"attn_q", "attn_k", "attn_v"} {
		if _, err := f.Tensor(LayerBias(0, b)); err == nil {
			nbias++
		}
	}
	switch nbias {
	case 0:
	case 3:
		c.QKVBias = true
	default:
		return nil, fmt.Errorf("%w: block 0 has %d of the 3 attention biases (attn_q, attn_k, attn_v .bias)", ErrMissingTensor, nbias)
	}
	if _, err := f.Tensor(LayerBias(0, "attn_output")); err == nil {
		return nil, fmt.Errorf("%w: tensor %q: an attention output bias is not supported", ErrUnsupportedArch, LayerBias(0, "attn_output"))
	}
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	w.Layers = make([]LlamaLayer, c.Layers)
	for i := range w.Layers {
		l := &w.Layers[i]
		type ts struct {
			dst  **TensorInfo
			name string
			f32  bool
			dims []int
		}
		list := []ts{
			{&l.AttnNorm, LayerTensor(i, "attn_norm"), true, []int{c.Dim}},
			{&l.Q, LayerTensor(i, "attn_q"), false, []int{c.Dim, q}},
			{&l.K, LayerTensor(i, "attn_k"), false, []int{c.Dim, kv}},
			{&l.V, LayerTensor(i, "attn_v"), false, []int{c.Dim, kv}},
			{&l.O, LayerTensor(i, "attn_output"), false, []int{q, c.Dim}},
			{&l.FFNNorm, LayerTensor(i, "ffn_norm"), true, []int{c.Dim}},
			{&l.Gate, LayerTensor(i, "ffn_gate"), false, []int{c.Dim, c.FFN}},
			{&l.Up, LayerTensor(i, "ffn_up"), false, []int{c.Dim, c.FFN}},
			{&l.Down, LayerTensor(i, "ffn_down"), false, []int{c.FFN, c.Dim}},
		}
		if c.QKVBias {
			list = append(list,
				ts{&l.QBias, LayerBias(i, "attn_q"), true, []int{q}},
				ts{&l.KBias, LayerBias(i, "attn_k"), true, []int{kv}},
				ts{&l.VBias, LayerBias(i, "attn_v"), true, []int{kv}})
		}
		if c.QKNorm {
			list = append(list,
				ts{&l.QNorm, LayerTensor(i, "attn_q_norm"), true, []int{c.HeadDim}},
				ts{&l.KNorm, LayerTensor(i, "attn_k_norm"), true, []int{c.HeadDim}})
		}
		for _, s := range list {
			if *s.dst, err = check(s.name, s.f32, s.dims...); err != nil {
				return nil, err
			}
		}
	}
	w.Config = c
	return w, nil
}

// ropeScaling reads <arch>.rope.scaling.* into c.
func (f *File) ropeScaling(c *LlamaConfig, key func(string) string) error {
	var err error
	c.RopeScaling, c.RopeScaleFactor = "none", 1
	if f.Has(key("rope.scaling.type")) {
		if c.RopeScaling, err = f.String(key("rope.scaling.type")); err != nil {
			return err
		}
	}
	factor := func() error {
		if c.RopeScaleFactor, err = f.Float32(key("rope.scaling.factor")); err != nil {
			return err
		}
		if !(c.RopeScaleFactor >= 1) {
			return fmt.Errorf("%w: %s = %g, want ≥ 1", ErrMalformed, key("rope.scaling.factor"), c.RopeScaleFactor)
		}
		return nil
	}
	switch c.RopeScaling {
	case "none":
	case "linear":
		return factor()
	case "llama3":
		if err := factor(); err != nil {
			return err
		}
		if c.RopeLowFreqFactor, err = f.Float32(key("rope.scaling.low_freq_factor")); err != nil {
			return err
		}
		if c.RopeHighFreqFactor, err = f.Float32(key("rope.scaling.high_freq_factor")); err != nil {
			return err
		}
		if !(c.RopeLowFreqFactor > 0 && c.RopeHighFreqFactor > c.RopeLowFreqFactor) {
			return fmt.Errorf("%w: %s = %g, %s = %g, want 0 < low < high", ErrMalformed,
				key("rope.scaling.low_freq_factor"), c.RopeLowFreqFactor, key("rope.scaling.high_freq_factor"), c.RopeHighFreqFactor)
		}
		n, err := f.Int(key("rope.scaling.original_context_length"))
		if err != nil {
			return err
		}
		if n <= 0 {
			return fmt.Errorf("%w: %s = %d, want > 0", ErrMalformed, key("rope.scaling.original_context_length"), n)
		}
		c.RopeOrigContext = n
	default:
		return fmt.Errorf("%w: %s = %q (supported: none, linear, llama3)", ErrUnsupportedArch, key("rope.scaling.type"), c.RopeScaling)
	}
	return nil
}

// LayerBias names a block bias, e.g. LayerBias(3, "attn_q") = "blk.3.attn_q.bias".
func LayerBias(layer int, name string) string {
	return fmt.Sprintf("blk.%d.%s.bias", layer, name)
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
