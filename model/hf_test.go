package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/model/gguf"
)

// hfTwin writes GGUF file path as a Hugging Face directory and returns it.
func hfTwin(t *testing.T, path string, scaling gguf.LlamaConfig) string {
	t.Helper()
	f, err := gguf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	dir := filepath.Join(t.TempDir(), "hf")
	require.NoError(t, WriteHFDir(dir, f, scaling))
	return dir
}

// The same synthetic model as a GGUF file and as a Hugging Face directory
// (Q/K un-permuted, NEOX rotation at load, no weight copy) gives the same
// teacher-forced logits on the CPU runner, for llama, Llama 3.1 scaling,
// qwen2 and qwen3.
func TestHFDirMatchesGGUF(t *testing.T) {
	type tc struct {
		name    string
		path    string
		scaling gguf.LlamaConfig
	}
	var cases []tc
	plain := gguf.LlamaConfig{Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFN: 96, Vocab: 300, ContextLength: 256}
	cases = append(cases, tc{"llama", writeArch(t, plain), plain})
	for _, a := range gguf.ArchFixtures() {
		data, err := gguf.ArchFixtureModel(a.Name)
		require.NoError(t, err)
		p := filepath.Join(t.TempDir(), a.Name+".gguf")
		require.NoError(t, os.WriteFile(p, data, 0o644))
		cases = append(cases, tc{a.Name, p, a.Config})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := LoadLlama(c.path, LlamaOptions{})
			require.NoError(t, err)
			defer g.Close()
			dir := hfTwin(t, c.path, c.scaling)
			h, err := LoadLlama(dir, LlamaOptions{})
			require.NoError(t, err)
			defer func() { require.NoError(t, h.Close()) }()
			require.True(t, h.cfg.RopeNeox)
			require.Equal(t, g.cfg.RopeNeox, g.cfg.Arch != "llama")
			require.InDeltaSlice(t, g.ropeFreqs, h.ropeFreqs, 1e-6*g.ropeFreqs[0])
			toks := make([]int32, 40)
			for i := range toks {
				toks[i] = int32((i*37 + 11) % g.cfg.Vocab)
			}
			gl, hl := teacherForced(t, g, toks[:32], 8), teacherForced(t, h, toks[:32], 8)
			var worst float64
			for i := range gl {
				worst = max(worst, relErr(hl[i], gl[i]))
			}
			t.Logf("%s: HF directory vs GGUF, worst logit difference of the row's largest: %.3g", c.name, worst)
			require.Less(t, worst, 1e-5)
			require.Equal(t, []int32{257, 258}, h.StopIDs())
			require.Contains(t, h.ChatTemplate(), "<|eot|>")
			require.Equal(t, []int32{256, 72, 105}, h.Tokenizer().Encode("Hi", true))
		})
	}
}

// Errors name the offending file, field or value and what is supported,
// and the directory once.
func TestHFDirErrors(t *testing.T) {
	plain := gguf.LlamaConfig{Dim: 64, Layers: 1, Heads: 4, KVHeads: 2, FFN: 96, Vocab: 300, ContextLength: 256}
	base := hfTwin(t, writeArch(t, plain), plain)
	edit := func(t *testing.T, f func(dir string)) string {
		dir := filepath.Join(t.TempDir(), "m")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		ents, err := os.ReadDir(base)
		require.NoError(t, err)
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(base, e.Name()))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644))
		}
		f(dir)
		return dir
	}
	setConfig := func(key string, v any) func(string) {
		return func(dir string) {
			p := filepath.Join(dir, "config.json")
			b, _ := os.ReadFile(p)
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			m[key] = v
			b, _ = json.Marshal(m)
			_ = os.WriteFile(p, b, 0o644)
		}
	}
	rm := func(name string) func(string) { return func(dir string) { _ = os.Remove(filepath.Join(dir, name)) } }
	for _, c := range []struct {
		name string
		edit func(string)
		want string
	}{
		{"gemma", setConfig("architectures", []string{"Gemma2ForCausalLM"}), `architectures = ["Gemma2ForCausalLM"] (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)`},
		{"dtype", setConfig("torch_dtype", "float8"), `torch_dtype = "float8" (supported: bfloat16, float16, float32)`},
		{"rope", setConfig("rope_scaling", map[string]any{"rope_type": "yarn", "factor": 4}), `rope_scaling.rope_type = "yarn" (supported: default, linear, llama3)`},
		{"act", setConfig("hidden_act", "gelu"), `hidden_act = "gelu" (supported: silu)`},
		{"layers", setConfig("num_hidden_layers", 0), "num_hidden_layers = 0, want > 0"},
		{"shape", setConfig("intermediate_size", 128), `"model.layers.0.mlp.gate_proj.weight" is [96 64], want [128 64]`},
		{"no config", rm("config.json"), "config.json is missing"},
		{"no weights", rm("model.safetensors"), "no model.safetensors or model.safetensors.index.json"},
		{"no tokenizer", rm("tokenizer.json"), "tokenizer.json is missing"},
		{"sliding window", setConfig("sliding_window", -3), "sliding_window = -3, want > 0 or null"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := edit(t, c.edit)
			_, err := LoadLlama(dir, LlamaOptions{})
			require.ErrorContains(t, err, c.want)
			require.Equal(t, 1, strings.Count(err.Error(), dir), "%v", err)
		})
	}
}

// A sharded checkpoint (model.safetensors.index.json) loads as the single
// file does.
func TestHFDirSharded(t *testing.T) {
	plain := gguf.LlamaConfig{Dim: 64, Layers: 1, Heads: 4, KVHeads: 2, FFN: 96, Vocab: 300, ContextLength: 256}
	dir := hfTwin(t, writeArch(t, plain), plain)
	whole, err := LoadLlama(dir, LlamaOptions{})
	require.NoError(t, err)
	defer whole.Close()
	// Move the file under a shard name and index every tensor to it.
	require.NoError(t, os.Rename(filepath.Join(dir, "model.safetensors"), filepath.Join(dir, "model-00001-of-00001.safetensors")))
	wm := map[string]string{}
	for _, n := range []string{"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"} {
		wm[n] = "model-00001-of-00001.safetensors"
	}
	b, err := json.Marshal(map[string]any{"weight_map": wm})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), b, 0o644))
	sh, err := LoadLlama(dir, LlamaOptions{})
	require.NoError(t, err)
	defer sh.Close()
	toks := []int32{1, 5, 9, 200}
	require.Equal(t, teacherForced(t, whole, toks, 4), teacherForced(t, sh, toks, 4))
}

// TestHFSlidingWindow reads the window per architecture: Mistral's applies
// to every layer; Qwen's only with use_sliding_window, to the layers
// i ≥ max_window_layers (or as layer_types says), and a window on some
// layers only is refused, naming the counts.
func TestHFSlidingWindow(t *testing.T) {
	i := func(v int) *int { return &v }
	b := func(v bool) *bool { return &v }
	full, swa := "full_attention", "sliding_attention"
	for _, c := range []struct {
		name string
		h    hfConfig
		arch string
		want int
		err  string
	}{
		{"none", hfConfig{NumHiddenLayers: 4}, "llama", 0, ""},
		{"mistral", hfConfig{NumHiddenLayers: 4, SlidingWindow: i(4096)}, "llama", 4096, ""},
		{"mistral off", hfConfig{NumHiddenLayers: 4, SlidingWindow: i(4096), UseSlidingWindow: b(false)}, "llama", 0, ""},
		{"bad", hfConfig{NumHiddenLayers: 4, SlidingWindow: i(0)}, "llama", 0, "sliding_window = 0, want > 0 or null"},
		{"qwen default off", hfConfig{NumHiddenLayers: 4, SlidingWindow: i(32768), MaxWindowLayers: i(0)}, "qwen2", 0, ""},
		{"qwen off", hfConfig{NumHiddenLayers: 4, SlidingWindow: i(32768), UseSlidingWindow: b(false), MaxWindowLayers: i(0)}, "qwen2", 0, ""},
		{"qwen all", hfConfig{NumHiddenLayers: 4, SlidingWindow: i(64), UseSlidingWindow: b(true), MaxWindowLayers: i(0)}, "qwen2", 64, ""},
		{"qwen none", hfConfig{NumHiddenLayers: 4, SlidingWindow: i(64), UseSlidingWindow: b(true), MaxWindowLayers: i(4)}, "qwen3", 0, ""},
		{"qwen no max", hfConfig{NumHiddenLayers: 4, SlidingWindow: i(64), UseSlidingWindow: b(true)}, "qwen2", 64, ""},
		{"qwen mixed", hfConfig{NumHiddenLayers: 4, SlidingWindow: i(64), UseSlidingWindow: b(true), MaxWindowLayers: i(1)}, "qwen2", 0,
			"sliding_window = 64 applies to 3 of the 4 layers"},
		{"types all", hfConfig{NumHiddenLayers: 2, SlidingWindow: i(64), LayerTypes: []string{swa, swa}}, "llama", 64, ""},
		{"types full", hfConfig{NumHiddenLayers: 2, SlidingWindow: i(64), UseSlidingWindow: b(true), LayerTypes: []string{full, full}}, "qwen2", 0, ""},
		{"types mixed", hfConfig{NumHiddenLayers: 2, SlidingWindow: i(64), LayerTypes: []string{full, swa}}, "llama", 0, "applies to 1 of the 2 layers"},
		{"types bad", hfConfig{NumHiddenLayers: 2, SlidingWindow: i(64), LayerTypes: []string{full, "chunked"}}, "llama", 0, `layer_types[1] = "chunked"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := hfSlidingWindow(&c.h, c.arch)
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}
