package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/model/safetensors"
	"github.com/turnstile-llm/turnstile/model/tokenizer"
)

// hfArchs maps the config.json architectures this loader reads to the
// gguf architecture whose forward pass they share.
var hfArchs = map[string]string{
	"LlamaForCausalLM":   "llama",
	"MistralForCausalLM": "llama",
	"Qwen2ForCausalLM":   "qwen2",
	"Qwen3ForCausalLM":   "qwen3",
}

// hfArchList names the accepted architectures, sorted.
func hfArchList() string {
	var names []string
	for k := range hfArchs {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// hfConfig is the part of a Hugging Face config.json the loader reads.
// Pointers distinguish absent (or null) from zero.
type hfConfig struct {
	Architectures         []string       `json:"architectures"`
	HiddenSize            int            `json:"hidden_size"`
	NumHiddenLayers       int            `json:"num_hidden_layers"`
	NumAttentionHeads     int            `json:"num_attention_heads"`
	NumKeyValueHeads      *int           `json:"num_key_value_heads"`
	HeadDim               *int           `json:"head_dim"`
	IntermediateSize      int            `json:"intermediate_size"`
	RMSNormEps            float64        `json:"rms_norm_eps"`
	RopeTheta             *float64       `json:"rope_theta"`
	RopeScaling           *hfRopeScaling `json:"rope_scaling"`
	TieWordEmbeddings     bool           `json:"tie_word_embeddings"`
	MaxPositionEmbeddings int            `json:"max_position_embeddings"`
	VocabSize             int            `json:"vocab_size"`
	TorchDType            string         `json:"torch_dtype"`
	SlidingWindow         *int           `json:"sliding_window"`
	UseSlidingWindow      *bool          `json:"use_sliding_window"`
	MaxWindowLayers       *int           `json:"max_window_layers"`
	LayerTypes            []string       `json:"layer_types"`
	HiddenAct             string         `json:"hidden_act"`
	MLPBias               bool           `json:"mlp_bias"`
}

type hfRopeScaling struct {
	RopeType       string  `json:"rope_type"`
	Type           string  `json:"type"` // the older spelling of rope_type
	Factor         float64 `json:"factor"`
	LowFreqFactor  float64 `json:"low_freq_factor"`
	HighFreqFactor float64 `json:"high_freq_factor"`
	OrigContext    int     `json:"original_max_position_embeddings"`
}

// hfLlamaConfig turns config.json into the forward pass's configuration.
// Hugging Face checkpoints keep Q and K in the rotate-half layout (llama
// GGUFs permute them for adjacent pairs), so every architecture rotates
// NEOX here; that is the HF rotation exactly and needs no weight copy.
func hfLlamaConfig(h *hfConfig) (gguf.LlamaConfig, error) {
	var c gguf.LlamaConfig
	if len(h.Architectures) != 1 {
		return c, fmt.Errorf("config.json: architectures = %v, want one of %s", h.Architectures, hfArchList())
	}
	arch, ok := hfArchs[h.Architectures[0]]
	if !ok {
		return c, fmt.Errorf("%w: config.json: architectures = [%q] (supported: %s)", gguf.ErrUnsupportedArch, h.Architectures[0], hfArchList())
	}
	spec, err := gguf.LookupArch(arch)
	if err != nil {
		return c, err
	}
	c.Arch, c.RopeNeox, c.QKNorm = arch, true, spec.QKNorm
	for _, p := range []struct {
		key string
		v   int
		dst *int
	}{
		{"hidden_size", h.HiddenSize, &c.Dim}, {"num_hidden_layers", h.NumHiddenLayers, &c.Layers},
		{"num_attention_heads", h.NumAttentionHeads, &c.Heads}, {"intermediate_size", h.IntermediateSize, &c.FFN},
		{"max_position_embeddings", h.MaxPositionEmbeddings, &c.ContextLength}, {"vocab_size", h.VocabSize, &c.Vocab},
	} {
		if p.v <= 0 {
			return c, fmt.Errorf("config.json: %s = %d, want > 0", p.key, p.v)
		}
		*p.dst = p.v
	}
	c.KVHeads = c.Heads
	if h.NumKeyValueHeads != nil {
		c.KVHeads = *h.NumKeyValueHeads
	}
	if c.KVHeads <= 0 || c.Heads%c.KVHeads != 0 {
		return c, fmt.Errorf("config.json: num_key_value_heads = %d, want > 0 and dividing num_attention_heads %d", c.KVHeads, c.Heads)
	}
	switch {
	case h.HeadDim != nil:
		c.HeadDim = *h.HeadDim
	case c.Dim%c.Heads == 0:
		c.HeadDim = c.Dim / c.Heads
	default:
		return c, fmt.Errorf("config.json: hidden_size %d is not divisible by num_attention_heads %d and head_dim is absent", c.Dim, c.Heads)
	}
	if c.HeadDim <= 0 || c.HeadDim%2 != 0 {
		return c, fmt.Errorf("config.json: head_dim = %d, want even and > 0 (RoPE rotates pairs)", c.HeadDim)
	}
	c.RopeDim = c.HeadDim
	if !(h.RMSNormEps > 0 && h.RMSNormEps < 1) {
		return c, fmt.Errorf("config.json: rms_norm_eps = %g, want in (0, 1)", h.RMSNormEps)
	}
	c.NormEps = float32(h.RMSNormEps)
	c.RopeTheta = 10000
	if h.RopeTheta != nil {
		if !(*h.RopeTheta > 1) {
			return c, fmt.Errorf("config.json: rope_theta = %g, want > 1", *h.RopeTheta)
		}
		c.RopeTheta = float32(*h.RopeTheta)
	}
	if err := hfRope(&c, h.RopeScaling); err != nil {
		return c, err
	}
	if h.HiddenAct != "" && h.HiddenAct != "silu" {
		return c, fmt.Errorf("config.json: hidden_act = %q (supported: silu)", h.HiddenAct)
	}
	if h.MLPBias {
		return c, errors.New("config.json: mlp_bias = true is not supported (no MLP biases)")
	}
	switch h.TorchDType {
	case "", "bfloat16", "float16", "float32":
	default:
		return c, fmt.Errorf("config.json: torch_dtype = %q (supported: bfloat16, float16, float32)", h.TorchDType)
	}
	if c.SlidingWindow, err = hfSlidingWindow(h, arch); err != nil {
		return c, err
	}
	c.TiedOutput = h.TieWordEmbeddings
	return c, nil
}

// hfSlidingWindow is the window every layer attends within (0: none).
// Mistral's sliding_window applies to every layer when set. Qwen2/3
// configs carry one that use_sliding_window (absent: false, as in
// transformers' Qwen2Config) turns on, and then only for the layers
// i ≥ max_window_layers (Qwen2Config builds layer_types so:
// "sliding_attention" if sliding_window is set and i >= max_window_layers:
// the first max_window_layers layers are full; an older docstring said the
// opposite, the code decides). An explicit
// layer_types list decides per layer. The kernels take one window for the
// whole model, so a config that mixes windowed and full layers is refused.
func hfSlidingWindow(h *hfConfig, arch string) (int, error) {
	if h.SlidingWindow == nil {
		return 0, nil
	}
	qwen := arch == "qwen2" || arch == "qwen3"
	if use := h.UseSlidingWindow; (use != nil && !*use) || (use == nil && qwen) {
		return 0, nil
	}
	if *h.SlidingWindow <= 0 {
		return 0, fmt.Errorf("config.json: sliding_window = %d, want > 0 or null", *h.SlidingWindow)
	}
	n := h.NumHiddenLayers
	sliding := n // layers with the window
	switch {
	case h.LayerTypes != nil:
		if len(h.LayerTypes) != n {
			return 0, fmt.Errorf("config.json: layer_types has %d entries, num_hidden_layers = %d", len(h.LayerTypes), n)
		}
		sliding = 0
		for i, t := range h.LayerTypes {
			switch t {
			case "sliding_attention":
				sliding++
			case "full_attention":
			default:
				return 0, fmt.Errorf("config.json: layer_types[%d] = %q (supported: sliding_attention, full_attention)", i, t)
			}
		}
	case qwen && h.MaxWindowLayers != nil:
		sliding = min(n, max(0, n-*h.MaxWindowLayers))
	}
	switch sliding {
	case 0:
		return 0, nil
	case n:
		return *h.SlidingWindow, nil
	}
	return 0, fmt.Errorf("%w: config.json: sliding_window = %d applies to %d of the %d layers (max_window_layers or layer_types); "+
		"a window on some layers only is not supported", gguf.ErrUnsupportedArch, *h.SlidingWindow, sliding, n)
}

// hfRope reads rope_scaling (null, linear or llama3).
func hfRope(c *gguf.LlamaConfig, s *hfRopeScaling) error {
	c.RopeScaling, c.RopeScaleFactor = "none", 1
	if s == nil {
		return nil
	}
	typ := s.RopeType
	if typ == "" {
		typ = s.Type
	}
	switch typ {
	case "default":
		return nil
	case "linear", "llama3":
	default:
		return fmt.Errorf("%w: config.json: rope_scaling.rope_type = %q (supported: default, linear, llama3)", gguf.ErrUnsupportedArch, typ)
	}
	if !(s.Factor >= 1) {
		return fmt.Errorf("config.json: rope_scaling.factor = %g, want ≥ 1", s.Factor)
	}
	c.RopeScaling, c.RopeScaleFactor = typ, float32(s.Factor)
	if typ == "llama3" {
		if !(s.LowFreqFactor > 0 && s.HighFreqFactor > s.LowFreqFactor) || s.OrigContext <= 0 {
			return fmt.Errorf("config.json: rope_scaling low_freq_factor = %g, high_freq_factor = %g, original_max_position_embeddings = %d: want 0 < low < high and a context > 0",
				s.LowFreqFactor, s.HighFreqFactor, s.OrigContext)
		}
		c.RopeLowFreqFactor, c.RopeHighFreqFactor, c.RopeOrigContext = float32(s.LowFreqFactor), float32(s.HighFreqFactor), s.OrigContext
	}
	return nil
}

// hfShards opens the checkpoint's safetensors files: the shards of
// model.safetensors.index.json, else model.safetensors. It returns the open
// files and each tensor's file.
func hfShards(dir string) ([]*safetensors.File, map[string]*safetensors.File, error) {
	byName := map[string]*safetensors.File{}
	var files []*safetensors.File
	closeAll := func() {
		for _, f := range files {
			_ = f.Close()
		}
	}
	var shards []string
	idx, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	switch {
	case err == nil:
		var ix struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(idx, &ix); err != nil {
			return nil, nil, fmt.Errorf("model.safetensors.index.json: %w", err)
		}
		for _, s := range ix.WeightMap {
			if s != filepath.Base(s) {
				return nil, nil, fmt.Errorf("model.safetensors.index.json: shard %q is not a file name in the directory", s)
			}
			if !slices.Contains(shards, s) {
				shards = append(shards, s)
			}
		}
		sort.Strings(shards)
		if len(shards) == 0 {
			return nil, nil, errors.New("model.safetensors.index.json: weight_map is empty")
		}
	case errors.Is(err, fs.ErrNotExist):
		shards = []string{"model.safetensors"}
		if _, err := os.Stat(filepath.Join(dir, shards[0])); err != nil {
			return nil, nil, errors.New("no model.safetensors or model.safetensors.index.json (weights must be safetensors: BF16, F16 or F32)")
		}
	default:
		return nil, nil, err
	}
	for _, s := range shards {
		f, err := safetensors.Open(filepath.Join(dir, s))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		files = append(files, f)
		for i := range f.Tensors {
			byName[f.Tensors[i].Name] = f
		}
	}
	return files, byName, nil
}

// hfMatrix views a 2-D BF16/F16/F32 tensor [out][in] as a kernels.Matrix.
func hfMatrix(t *safetensors.Tensor, rows, cols int) (kernels.Matrix, error) {
	if len(t.Shape) != 2 || t.Shape[0] != rows || t.Shape[1] != cols {
		return kernels.Matrix{}, fmt.Errorf("%w: tensor %q is %v, want [%d %d]", gguf.ErrShapeMismatch, t.Name, t.Shape, rows, cols)
	}
	var dt kernels.DType
	switch t.DType {
	case "F32":
		dt = kernels.F32
	case "F16":
		dt = kernels.F16
	case "BF16":
		dt = kernels.BF16
	default:
		return kernels.Matrix{}, fmt.Errorf("tensor %q has dtype %s (supported: BF16, F16, F32)", t.Name, t.DType)
	}
	m := kernels.Matrix{Type: dt, Rows: rows, Cols: cols, Data: t.Data}
	if err := m.Validate(); err != nil {
		return kernels.Matrix{}, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	return m, nil
}

// hfVector copies a 1-D BF16/F16/F32 tensor of n elements to float32.
func hfVector(t *safetensors.Tensor, n int) ([]float32, error) {
	if len(t.Shape) != 1 || t.Shape[0] != n {
		return nil, fmt.Errorf("%w: tensor %q is %v, want [%d]", gguf.ErrShapeMismatch, t.Name, t.Shape, n)
	}
	out := make([]float32, n)
	d := t.Data
	for i := range out {
		switch t.DType {
		case "F32":
			out[i] = math.Float32frombits(uint32(d[4*i]) | uint32(d[4*i+1])<<8 | uint32(d[4*i+2])<<16 | uint32(d[4*i+3])<<24)
		case "F16":
			out[i] = kernels.F16ToF32(uint16(d[2*i]) | uint16(d[2*i+1])<<8)
		case "BF16":
			out[i] = kernels.BF16ToF32(uint16(d[2*i]) | uint16(d[2*i+1])<<8)
		default:
			return nil, fmt.Errorf("tensor %q has dtype %s (supported: BF16, F16, F32)", t.Name, t.DType)
		}
	}
	return out, nil
}

// readHFJSON reads dir/name into v; a missing optional file leaves v and
// reports false.
func readHFJSON(dir, name string, v any, optional bool) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		if optional && errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("%s is missing", name)
		}
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("%s: %w", name, err)
	}
	return true, nil
}

// loadHF loads a Hugging Face checkpoint directory: config.json,
// model.safetensors (or its index and shards, memory-mapped), tokenizer.json
// with tokenizer_config.json, and generation_config.json when present.
// Errors do not name dir; LoadLlama adds it once.
func loadHF(dir string, opts LlamaOptions) (*Llama, error) {
	var h hfConfig
	if _, err := readHFJSON(dir, "config.json", &h, false); err != nil {
		return nil, err
	}
	c, err := hfLlamaConfig(&h)
	if err != nil {
		return nil, err
	}
	files, byName, err := hfShards(dir)
	if err != nil {
		return nil, err
	}
	m := &Llama{cfg: c, maxContext: c.ContextLength, shards: files}
	ok := false
	defer func() {
		if !ok {
			_ = m.Close()
		}
	}()
	if err := m.setContext(opts); err != nil {
		return nil, err
	}
	get := func(name string) (*safetensors.Tensor, error) {
		if f := byName[name]; f != nil {
			return f.Tensor(name), nil
		}
		return nil, fmt.Errorf("%w: tensor %q is in no safetensors file", gguf.ErrMissingTensor, name)
	}
	mat := func(name string, rows, cols int) (kernels.Matrix, error) {
		t, err := get(name)
		if err != nil {
			return kernels.Matrix{}, err
		}
		return hfMatrix(t, rows, cols)
	}
	vec := func(name string, n int) ([]float32, error) {
		t, err := get(name)
		if err != nil {
			return nil, err
		}
		return hfVector(t, n)
	}
	if m.embd, err = mat("model.embed_tokens.weight", c.Vocab, c.Dim); err != nil {
		return nil, err
	}
	if m.outNorm, err = vec("model.norm.weight", c.Dim); err != nil {
		return nil, err
	}
	if c.TiedOutput {
		m.output = m.embd
	} else if m.output, err = mat("lm_head.weight", c.Vocab, c.Dim); err != nil {
		return nil, err
	}
	// Biases come as a set (qwen2 has them; llama's attention_bias too).
	_, hasBias := byName["model.layers.0.self_attn.q_proj.bias"]
	m.cfg.QKVBias = hasBias
	if _, ok := byName["model.layers.0.self_attn.o_proj.bias"]; ok {
		return nil, fmt.Errorf("%w: tensor %q: an attention output bias is not supported", gguf.ErrUnsupportedArch, "model.layers.0.self_attn.o_proj.bias")
	}
	qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	m.layers = make([]llamaLayer, c.Layers)
	for i := range m.layers {
		l := &m.layers[i]
		p := fmt.Sprintf("model.layers.%d.", i)
		for _, v := range []struct {
			dst  *[]float32
			name string
			n    int
			when bool
		}{
			{&l.attnNorm, "input_layernorm.weight", c.Dim, true},
			{&l.ffnNorm, "post_attention_layernorm.weight", c.Dim, true},
			{&l.qBias, "self_attn.q_proj.bias", qd, hasBias},
			{&l.kBias, "self_attn.k_proj.bias", kvd, hasBias},
			{&l.vBias, "self_attn.v_proj.bias", kvd, hasBias},
			{&l.qNorm, "self_attn.q_norm.weight", c.HeadDim, c.QKNorm},
			{&l.kNorm, "self_attn.k_norm.weight", c.HeadDim, c.QKNorm},
		} {
			if !v.when {
				continue
			}
			if *v.dst, err = vec(p+v.name, v.n); err != nil {
				return nil, err
			}
		}
		for _, w := range []struct {
			dst        *kernels.Matrix
			name       string
			rows, cols int
		}{
			{&l.q, "self_attn.q_proj.weight", qd, c.Dim}, {&l.k, "self_attn.k_proj.weight", kvd, c.Dim},
			{&l.v, "self_attn.v_proj.weight", kvd, c.Dim}, {&l.o, "self_attn.o_proj.weight", c.Dim, qd},
			{&l.gate, "mlp.gate_proj.weight", c.FFN, c.Dim}, {&l.up, "mlp.up_proj.weight", c.FFN, c.Dim},
			{&l.down, "mlp.down_proj.weight", c.Dim, c.FFN},
		} {
			if *w.dst, err = mat(p+w.name, w.rows, w.cols); err != nil {
				return nil, err
			}
		}
	}
	if m.ropeFreqs, err = c.RopeFrequencies(nil); err != nil {
		return nil, err
	}
	if err := m.hfTokenizer(dir); err != nil {
		return nil, err
	}
	ok = true
	return m, nil
}

// hfTokenizer reads tokenizer.json, tokenizer_config.json (BOS/EOS and
// chat_template) and generation_config.json (eos_token_id, one or a list:
// every one stops generation). Embedding and output rows past the
// tokenizer's last token (a padded vocab_size) are dropped.
func (m *Llama) hfTokenizer(dir string) error {
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return errors.New("tokenizer.json is missing (a Hugging Face byte-level BPE tokenizer is required)")
		}
		return err
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if m.tok, err = tokenizer.FromHFJSON(tj, cfg); err != nil {
		return err
	}
	if n := m.tok.VocabSize(); n > m.cfg.Vocab {
		return fmt.Errorf("tokenizer.json has %d tokens, more than vocab_size %d", n, m.cfg.Vocab)
	} else if n < m.cfg.Vocab {
		// Padded embedding rows (Qwen2.5: vocab_size 151936 for 151665
		// tokens, rounded up for the GPU): no token has them, so they are
		// dropped and the logits have one entry per token; a padded id
		// can then be neither sampled nor fed (it is outside the vocabulary).
		m.embd, m.output = firstRows(m.embd, n), firstRows(m.output, n)
		m.cfg.Vocab = n
	}
	if cfg != nil {
		var tc struct {
			ChatTemplate json.RawMessage `json:"chat_template"`
		}
		if err := json.Unmarshal(cfg, &tc); err != nil {
			return fmt.Errorf("tokenizer_config.json: %w", err)
		}
		if m.chatTemplate, err = hfChatTemplate(tc.ChatTemplate); err != nil {
			return fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	var gc struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	found, err := readHFJSON(dir, "generation_config.json", &gc, true)
	if err != nil {
		return err
	}
	var ids []int32
	if found && len(gc.EOS) > 0 && string(gc.EOS) != "null" {
		var one int32
		if json.Unmarshal(gc.EOS, &one) == nil {
			ids = []int32{one}
		} else if err := json.Unmarshal(gc.EOS, &ids); err != nil {
			return fmt.Errorf("generation_config.json: eos_token_id = %s, want an id or a list of ids", gc.EOS)
		}
	}
	return m.setStopIDs(ids)
}

// firstRows is w's first n rows (n ≤ w.Rows), sharing its data.
func firstRows(w kernels.Matrix, n int) kernels.Matrix {
	w.Data = w.Data[:len(w.Data)/w.Rows*n]
	w.Rows = n
	return w
}

// hfChatTemplate reads tokenizer_config.json's chat_template: absent or
// null (""), a string, or a list of {"name", "template"} of which, as
// transformers does without a template name, the one named "default" is
// taken.
func hfChatTemplate(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return one, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", fmt.Errorf("chat_template is %s, want a string or a list of {\"name\", \"template\"}", clip(raw))
	}
	var names []string
	for i, e := range list {
		var t struct {
			Name     *string `json:"name"`
			Template *string `json:"template"`
		}
		if json.Unmarshal(e, &t) != nil || t.Name == nil || t.Template == nil {
			return "", fmt.Errorf("chat_template[%d] is %s, want {\"name\": string, \"template\": string}", i, clip(e))
		}
		if *t.Name == "default" {
			return *t.Template, nil
		}
		names = append(names, strconv.Quote(*t.Name))
	}
	return "", fmt.Errorf("chat_template lists %d templates (%s) but none named \"default\", the one used without a template name",
		len(list), strings.Join(names, ", "))
}

// clip shortens JSON for an error message.
func clip(b []byte) string {
	if len(b) > 80 {
		return string(b[:77]) + "..."
	}
	return string(b)
}
