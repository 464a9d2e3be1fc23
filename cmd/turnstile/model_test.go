package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/model/tokenizer"
)

func TestModelInspectStories(t *testing.T) {
	p, err := gguf.TestModelPath()
	require.NoError(t, err, "run `make model`")
	out, err := runCLI(t, "model", "inspect", p)
	require.NoError(t, err)
	for _, want := range []string{
		"GGUF v3", "48 tensors",
		`tokenizer.ggml.tokens                    array[string]  ["<unk>" "<s>" "</s>" "<0x00>" ... (512 total)]`,
		`general.architecture                     string         "llama"`,
		"blk.4.ffn_down.weight        F32   [172 64]            44032",
		"parameters: 292800", "tensor bytes: 1171200",
		"llama: dim 64, layers 5, heads 8, kv heads 4, head dim 8, ffn 172, vocab 512",
	} {
		require.Contains(t, out, want)
	}
}

func TestModelSynth(t *testing.T) {
	vocab, err := gguf.TestModelPath()
	require.NoError(t, err, "run `make model`")
	dir := t.TempDir()
	for _, typ := range []string{"f32", "f16", "bf16", "q8_0"} {
		out := filepath.Join(dir, typ+".gguf")
		_, err := runCLI(t, "model", "synth", "--dim", "32", "--layers", "2", "--heads", "4", "--kv-heads", "2",
			"--ffn", "64", "--type", typ, "--vocab-from", vocab, "--seed", "7", "-o", out)
		require.NoError(t, err, typ)

		text, err := runCLI(t, "model", "inspect", out)
		require.NoError(t, err)
		// 2·(32·512) embeddings and output + 32 norm + 2 layers × (2·32 norms + 32·32·2 q,o + 32·16·2 k,v + 3·32·64 ffn)
		require.Contains(t, text, "parameters: 51360")
		require.Contains(t, text, "llama: dim 32, layers 2, heads 4, kv heads 2, head dim 8, ffn 64, vocab 512")

		f, err := gguf.Open(out)
		require.NoError(t, err)
		c, err := f.LlamaConfig()
		require.NoError(t, err)
		require.Equal(t, 32, c.Dim)
		require.Equal(t, 512, c.Vocab)
		require.False(t, c.TiedOutput)
		q, err := f.Tensor("blk.1.attn_q.weight")
		require.NoError(t, err)
		require.Equal(t, typ, map[gguf.GGMLType]string{gguf.TypeF32: "f32", gguf.TypeF16: "f16", gguf.TypeBF16: "bf16", gguf.TypeQ8_0: "q8_0"}[q.Type])
		tk, err := tokenizer.FromGGUF(f)
		require.NoError(t, err)
		require.Equal(t, []int32{1, 403, 407, 261, 378}, tk.Encode("Once upon a time", true))
		require.NoError(t, f.Close())
	}
	// Same seed, same bytes; another seed, other weights.
	a := filepath.Join(dir, "a.gguf")
	b := filepath.Join(dir, "b.gguf")
	for i, p := range []string{a, b} {
		_, err := runCLI(t, "model", "synth", "--dim", "32", "--heads", "4", "--ffn", "32", "--vocab-from", vocab,
			"--seed", []string{"1", "2"}[i], "-o", p, "--tied")
		require.NoError(t, err)
	}
	fa, err := gguf.Open(a)
	require.NoError(t, err)
	defer fa.Close()
	fb, err := gguf.Open(b)
	require.NoError(t, err)
	defer fb.Close()
	c, err := fa.LlamaConfig()
	require.NoError(t, err)
	require.True(t, c.TiedOutput)
	require.NotEqual(t, fa.Tensors[0].Data, fb.Tensors[0].Data)
	require.Equal(t, fa.Tensors[1].Data, fb.Tensors[1].Data) // the norm: all ones
}

func TestModelSynthRejects(t *testing.T) {
	vocab, err := gguf.TestModelPath()
	require.NoError(t, err, "run `make model`")
	out := filepath.Join(t.TempDir(), "x.gguf")
	base := []string{"model", "synth", "--vocab-from", vocab, "-o", out}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dim", "30", "--heads", "4"}, "dim 30 is not divisible by heads 4"},
		{[]string{"--heads", "4", "--kv-heads", "3"}, "heads 4 is not divisible by kv-heads 3"},
		{[]string{"--dim", "12", "--heads", "4", "--kv-heads", "1"}, "head dim 3"},
		{[]string{"--type", "q8_0", "--dim", "48", "--heads", "4"}, "dim (48)"},
		{[]string{"--type", "iq2_xxs"}, `--type "iq2_xxs": want one of F32, F16, Q4_0`},
		{[]string{"--type", "q4_k"}, "Q4_K needs dim (64) and ffn (128) to be multiples of 256"},
		{[]string{"--layers", "0"}, "layers = 0"},
		{[]string{"--ffn", "-1"}, "ffn = -1"},
		{[]string{"--vocab-from", filepath.Join(t.TempDir(), "none.gguf")}, "none.gguf"},
		{[]string{"-o", ""}, "-o"},
	} {
		_, err := runCLI(t, append(append([]string{}, base...), tc.args...)...)
		require.ErrorContains(t, err, tc.want, tc.args)
	}
	_, err = runCLI(t, "model", "inspect", filepath.Join(t.TempDir(), "missing.gguf"))
	require.ErrorContains(t, err, "missing.gguf")
}

// --format safetensors writes the same synthetic weights as a Hugging Face
// directory that --model accepts; the GGUF twin loads with the same shape.
func TestModelSynthSafetensors(t *testing.T) {
	vocab, err := gguf.TestModelPath()
	require.NoError(t, err, "run `make model`")
	dir := t.TempDir()
	args := []string{"model", "synth", "--arch", "qwen3", "--dim", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2",
		"--head-dim", "32", "--ffn", "96", "--vocab-from", vocab, "--seed", "3", "--tied"}
	hf, gg := filepath.Join(dir, "hf"), filepath.Join(dir, "m.gguf")
	_, err = runCLI(t, append(args, "--format", "safetensors", "-o", hf)...)
	require.NoError(t, err)
	_, err = runCLI(t, append(args, "-o", gg)...)
	require.NoError(t, err)
	for _, name := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"} {
		require.FileExists(t, filepath.Join(hf, name))
	}
	a, err := model.LoadLlama(hf, model.LlamaOptions{})
	require.NoError(t, err)
	defer a.Close()
	b, err := model.LoadLlama(gg, model.LlamaOptions{})
	require.NoError(t, err)
	defer b.Close()
	ca, cb := a.Config(), b.Config()
	require.Equal(t, "qwen3", ca.Arch)
	require.Equal(t, cb.HeadDim, ca.HeadDim)
	require.True(t, ca.QKNorm && ca.TiedOutput)
	out, err := runCLI(t, "generate", "--device", "cpu", "--model", hf, "--prompt", "Hi", "-n", "4")
	require.NoError(t, err)
	require.Contains(t, out, "decode:")
	_, err = runCLI(t, append(args, "--format", "onnx", "-o", hf)...)
	require.ErrorContains(t, err, `--format "onnx": want gguf or safetensors`)
}
