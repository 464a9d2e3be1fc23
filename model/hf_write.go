package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/model/safetensors"
)

// WriteHFDir writes the model of GGUF file f as a Hugging Face checkpoint
// directory dir (created if needed): config.json, model.safetensors (F32;
// F16 and BF16 tensors kept as stored), and a synthetic byte-level BPE
// tokenizer of the same vocabulary size (tokenizer.json: the 256 byte
// tokens, then <|begin_of_text|>, <|end_of_text|>, <|eot|> and
// <|extra_N|> specials; tokenizer_config.json; generation_config.json with
// eos_token_id [end_of_text, eot]) — so the vocabulary must hold at least
// 259 tokens. It is the test twin of a GGUF: llama Q and K rows are
// un-permuted back to the rotate-half layout Hugging Face keeps (GGUF
// converters permute them for adjacent-pair RoPE); qwen2/qwen3 are not
// permuted. scaling supplies the llama3 rope_scaling parameters when f has
// rope_freqs.weight (GGUF keeps only the factors); its factors must match
// the tensor's.
func WriteHFDir(dir string, f *gguf.File, scaling gguf.LlamaConfig) error {
	w, err := f.Llama()
	if err != nil {
		return err
	}
	c := w.Config
	if c.Vocab < 259 {
		return fmt.Errorf("model: WriteHFDir needs a vocabulary of ≥ 259 tokens for its byte-level tokenizer, the model has %d", c.Vocab)
	}
	arch := map[string]string{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[c.Arch]
	if c.Arch == "llama" && c.SlidingWindow > 0 {
		arch = "MistralForCausalLM"
	}
	cfg := map[string]any{
		"architectures": []string{arch}, "hidden_size": c.Dim, "num_hidden_layers": c.Layers,
		"num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads, "head_dim": c.HeadDim,
		"intermediate_size": c.FFN, "rms_norm_eps": c.NormEps, "rope_theta": c.RopeTheta,
		"tie_word_embeddings": c.TiedOutput, "max_position_embeddings": c.ContextLength,
		"vocab_size": c.Vocab, "torch_dtype": "float32", "hidden_act": "silu",
		"bos_token_id": 256, "eos_token_id": []int{257, 258},
	}
	if c.SlidingWindow > 0 {
		cfg["sliding_window"] = c.SlidingWindow
		if c.Arch != "llama" { // Qwen's window is off unless turned on, for layers ≥ max_window_layers
			cfg["use_sliding_window"], cfg["max_window_layers"] = true, 0
		}
	}
	switch {
	case w.RopeFreqs != nil:
		got, err := w.RopeFreqs.Float32s()
		if err != nil {
			return err
		}
		s := scaling
		s.RopeDim, s.RopeTheta = c.RopeDim, c.RopeTheta
		for i, v := range s.Llama3Factors() {
			if math.Abs(float64(v-got[i])) > 1e-6*float64(v) {
				return fmt.Errorf("model: WriteHFDir: rope_freqs.weight[%d] = %g, but the llama3 scaling given makes %g", i, got[i], v)
			}
		}
		cfg["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": s.RopeScaleFactor,
			"low_freq_factor": s.RopeLowFreqFactor, "high_freq_factor": s.RopeHighFreqFactor,
			"original_max_position_embeddings": s.RopeOrigContext}
	case c.RopeScaling == "linear":
		cfg["rope_scaling"] = map[string]any{"rope_type": "linear", "factor": c.RopeScaleFactor}
	case c.RopeScaling == "llama3":
		cfg["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": c.RopeScaleFactor,
			"low_freq_factor": c.RopeLowFreqFactor, "high_freq_factor": c.RopeHighFreqFactor,
			"original_max_position_embeddings": c.RopeOrigContext}
	}
	var ts []safetensors.Tensor
	add := func(name string, t *gguf.TensorInfo, permuteHeads int) error {
		if t == nil {
			return nil
		}
		shape := make([]int, len(t.Dims))
		for i, d := range t.Dims { // GGUF dims are innermost first
			shape[len(t.Dims)-1-i] = int(d)
		}
		vals, err := t.Float32s()
		if err != nil {
			return err
		}
		if permuteHeads > 0 {
			vals = unpermuteRows(vals, shape[0], t.Elements()/uint64(shape[0]), permuteHeads)
		}
		data := make([]byte, 4*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		}
		ts = append(ts, safetensors.Tensor{Name: name, DType: "F32", Shape: shape, Data: data})
		return nil
	}
	qh, kh := 0, 0
	if c.Arch == "llama" {
		qh, kh = c.Heads, c.KVHeads
	}
	if err := add("model.embed_tokens.weight", w.TokenEmbd, 0); err != nil {
		return err
	}
	if err := add("model.norm.weight", w.OutputNorm, 0); err != nil {
		return err
	}
	if !c.TiedOutput {
		if err := add("lm_head.weight", w.Output, 0); err != nil {
			return err
		}
	}
	for i, l := range w.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		for _, s := range []struct {
			name  string
			t     *gguf.TensorInfo
			heads int
		}{
			{"input_layernorm.weight", l.AttnNorm, 0}, {"post_attention_layernorm.weight", l.FFNNorm, 0},
			{"self_attn.q_proj.weight", l.Q, qh}, {"self_attn.k_proj.weight", l.K, kh},
			{"self_attn.v_proj.weight", l.V, 0}, {"self_attn.o_proj.weight", l.O, 0},
			{"self_attn.q_proj.bias", l.QBias, qh}, {"self_attn.k_proj.bias", l.KBias, kh}, {"self_attn.v_proj.bias", l.VBias, 0},
			{"self_attn.q_norm.weight", l.QNorm, 0}, {"self_attn.k_norm.weight", l.KNorm, 0},
			{"mlp.gate_proj.weight", l.Gate, 0}, {"mlp.up_proj.weight", l.Up, 0}, {"mlp.down_proj.weight", l.Down, 0},
		} {
			if err := add(p+s.name, s.t, s.heads); err != nil {
				return err
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var st bytes.Buffer
	if err := safetensors.Write(&st, ts, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	files := map[string][]byte{"model.safetensors": st.Bytes()}
	for name, v := range map[string]any{
		"config.json":            cfg,
		"tokenizer.json":         synthHFTokenizer(c.Vocab),
		"tokenizer_config.json":  map[string]any{"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "add_bos_token": true, "chat_template": "{% for m in messages %}{{ m['content'] }}<|eot|>{% endfor %}"},
		"generation_config.json": map[string]any{"bos_token_id": 256, "eos_token_id": []int{257, 258}},
	} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		files[name] = b
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// unpermuteRows undoes the GGUF converter's Q/K permutation of a [rows][cols]
// matrix (or a bias, cols 1) of heads heads: GGUF row h·hd + 2j + t holds
// Hugging Face row h·hd + t·hd/2 + j.
func unpermuteRows(v []float32, rows int, cols uint64, heads int) []float32 {
	out := make([]float32, len(v))
	hd := rows / heads
	n := int(cols)
	for h := 0; h < heads; h++ {
		for j := 0; j < hd/2; j++ {
			for t := 0; t < 2; t++ {
				src, dst := h*hd+2*j+t, h*hd+t*hd/2+j
				copy(out[dst*n:(dst+1)*n], v[src*n:(src+1)*n])
			}
		}
	}
	return out
}

// synthHFTokenizer is a byte-level BPE tokenizer.json of vocab tokens: the
// 256 GPT-2 byte symbols (no merges), then special tokens.
func synthHFTokenizer(vocab int) map[string]any {
	v := map[string]int{}
	id := 0
	for b := 0; b < 256; b++ {
		v[string(gpt2ByteRune(byte(b)))] = id
		id++
	}
	var added []map[string]any
	for id < vocab {
		name := fmt.Sprintf("<|extra_%d|>", id-259)
		switch id {
		case 256:
			name = "<|begin_of_text|>"
		case 257:
			name = "<|end_of_text|>"
		case 258:
			name = "<|eot|>"
		}
		v[name] = id
		added = append(added, map[string]any{"id": id, "content": name, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true})
		id++
	}
	return map[string]any{
		"version": "1.0", "added_tokens": added, "normalizer": nil,
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
		"decoder":       map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model":         map[string]any{"type": "BPE", "vocab": v, "merges": []string{}, "ignore_merges": false},
	}
}

// gpt2ByteRune is GPT-2's printable stand-in for byte b.
func gpt2ByteRune(b byte) rune {
	switch {
	case b >= '!' && b <= '~', b >= 0xA1 && b <= 0xAC, b >= 0xAE:
		return rune(b)
	}
	n := 0
	for x := 0; x < int(b); x++ {
		if !(x >= '!' && x <= '~' || x >= 0xA1 && x <= 0xAC || x >= 0xAE) {
			n++
		}
	}
	return rune(256 + n)
}
