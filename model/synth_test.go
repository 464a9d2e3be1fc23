package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/model/gguf"
)

// synthSpec describes a synthetic llama model written with the gguf writer.
type synthSpec struct {
	Dim, Layers, Heads, KVHeads, FFN, Vocab, Context int
	Theta                                            float32 // 0: 10000
	LinearScale                                      float32 // 0: no scaling
	Tied                                             bool
	RopeDim                                          int // 0: not written (= head dim)
	Window                                           int // llama.attention.sliding_window; 0: not written
	// Types are the matrix types, cycled over the matrices in file order so
	// every type appears in every role once there are enough layers.
	Types []gguf.GGMLType
	// Gaussian draws weights from a normal distribution (else uniform,
	// which is faster to generate for large benchmark models).
	Gaussian bool
	Seed     uint64
}

// smallSpec is the model of the correctness tests: GQA ratio 2, head dim
// 16, two layers, every weight type.
func smallSpec(types ...gguf.GGMLType) synthSpec {
	return synthSpec{Dim: 64, Layers: 3, Heads: 4, KVHeads: 2, FFN: 96, Vocab: 96, Context: 256,
		Types: types, Gaussian: true, Seed: 7}
}

// kquantSpec is smallSpec widened for the K-quants, whose rows are whole
// super-blocks of 256: dim and ffn 256, head dim 64, two layers.
func kquantSpec(types ...gguf.GGMLType) synthSpec {
	return synthSpec{Dim: 256, Layers: 2, Heads: 4, KVHeads: 2, FFN: 256, Vocab: 96, Context: 256,
		Types: types, Gaussian: true, Seed: 7}
}

// writeSynth writes the model to dir and returns its path.
func writeSynth(tb testing.TB, dir string, s synthSpec) string {
	tb.Helper()
	rng := rand.New(rand.NewPCG(s.Seed, 99))
	w := gguf.NewWriter()
	theta := s.Theta
	if theta == 0 {
		theta = 10000
	}
	tokens := make([]string, s.Vocab)
	for i := range tokens {
		tokens[i] = fmt.Sprintf("t%d", i)
	}
	tokens[0], tokens[1], tokens[2] = "<unk>", "<s>", "</s>"
	meta := []struct {
		k string
		v any
	}{
		{"general.architecture", "llama"},
		{"llama.context_length", uint32(s.Context)},
		{"llama.embedding_length", uint32(s.Dim)},
		{"llama.block_count", uint32(s.Layers)},
		{"llama.feed_forward_length", uint32(s.FFN)},
		{"llama.attention.head_count", uint32(s.Heads)},
		{"llama.attention.head_count_kv", uint32(s.KVHeads)},
		{"llama.rope.freq_base", theta},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.bos_token_id", uint32(1)},
		{"tokenizer.ggml.eos_token_id", uint32(2)},
	}
	if s.LinearScale != 0 {
		meta = append(meta, struct {
			k string
			v any
		}{"llama.rope.scaling.type", "linear"}, struct {
			k string
			v any
		}{"llama.rope.scaling.factor", s.LinearScale})
	}
	if s.RopeDim != 0 {
		meta = append(meta, struct {
			k string
			v any
		}{"llama.rope.dimension_count", uint32(s.RopeDim)})
	}
	if s.Window != 0 {
		meta = append(meta, struct {
			k string
			v any
		}{"llama.attention.sliding_window", uint32(s.Window)})
	}
	for _, kv := range meta {
		require.NoError(tb, w.Set(kv.k, kv.v))
	}
	nmat := 0
	add := func(name string, in, out int) {
		n := in * out
		vals := make([]float32, n)
		if out == 1 { // norm weight: around 1 so a wrong norm shows
			for i := range vals {
				vals[i] = 1 + 0.2*float32(rng.NormFloat64())
			}
			data, err := gguf.Quantize(gguf.TypeF32, vals)
			require.NoError(tb, err)
			require.NoError(tb, w.AddTensor(name, gguf.TypeF32, []uint64{uint64(in)}, data))
			return
		}
		// Scale 1/sqrt(in) keeps activations O(1) through the layers, so
		// attention and the MLP matter in the logits.
		sd := 1 / math.Sqrt(float64(in))
		for i := range vals {
			if s.Gaussian {
				vals[i] = float32(rng.NormFloat64() * sd)
			} else {
				vals[i] = float32((rng.Float64()*2 - 1) * sd * math.Sqrt(3))
			}
		}
		if name == "token_embd.weight" {
			for i := range vals {
				vals[i] *= float32(math.Sqrt(float64(in)))
			}
		}
		typ := s.Types[nmat%len(s.Types)]
		nmat++
		data, err := gguf.Quantize(typ, vals)
		require.NoError(tb, err)
		require.NoError(tb, w.AddTensor(name, typ, []uint64{uint64(in), uint64(out)}, data))
	}
	qd, kvd := s.Dim, s.Dim/s.Heads*s.KVHeads
	add("token_embd.weight", s.Dim, s.Vocab)
	add("output_norm.weight", s.Dim, 1)
	if !s.Tied {
		add("output.weight", s.Dim, s.Vocab)
	}
	for i := 0; i < s.Layers; i++ {
		add(gguf.LayerTensor(i, "attn_norm"), s.Dim, 1)
		add(gguf.LayerTensor(i, "attn_q"), s.Dim, qd)
		add(gguf.LayerTensor(i, "attn_k"), s.Dim, kvd)
		add(gguf.LayerTensor(i, "attn_v"), s.Dim, kvd)
		add(gguf.LayerTensor(i, "attn_output"), qd, s.Dim)
		add(gguf.LayerTensor(i, "ffn_norm"), s.Dim, 1)
		add(gguf.LayerTensor(i, "ffn_gate"), s.Dim, s.FFN)
		add(gguf.LayerTensor(i, "ffn_up"), s.Dim, s.FFN)
		add(gguf.LayerTensor(i, "ffn_down"), s.FFN, s.Dim)
	}
	path := filepath.Join(dir, "synth.gguf")
	f, err := os.Create(path)
	require.NoError(tb, err)
	_, err = w.WriteTo(f)
	require.NoError(tb, err)
	require.NoError(tb, f.Close())
	return path
}

// loadSynth writes and loads a synthetic model, closed when the test ends.
func loadSynth(tb testing.TB, s synthSpec) *Llama {
	tb.Helper()
	m, err := LoadLlama(writeSynth(tb, tb.TempDir(), s), LlamaOptions{})
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, m.Close()) })
	return m
}

// refForward is the plain-Go reference forward pass: dense causal attention
// over the whole sequence (masked to the model's sliding window, if any) and the kernels' float64 Ref* functions for
// everything else. It returns the logits of every position, [n][vocab].
func refForward(tb testing.TB, m *Llama, tokens []int32) [][]float32 {
	tb.Helper()
	c := m.cfg
	n := len(tokens)
	qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	x := make([]float32, n*c.Dim)
	xn := make([]float32, n*c.Dim)
	tmp := make([]float32, n*c.Dim)
	q, att := make([]float32, n*qd), make([]float32, n*qd)
	k, v := make([]float32, n*kvd), make([]float32, n*kvd)
	gate, up := make([]float32, n*c.FFN), make([]float32, n*c.FFN)
	pos := make([]int32, n)
	for i := range pos {
		pos[i] = int32(i)
	}
	mm := func(y, in []float32, w kernels.Matrix) { require.NoError(tb, kernels.RefMatMul(y, in, n, w)) }
	kernels.RefEmbedding(x, m.embd, tokens)
	scale := float32(1 / math.Sqrt(float64(c.HeadDim)))
	for _, l := range m.layers {
		kernels.RefRMSNorm(xn, x, l.attnNorm, n, c.Dim, c.NormEps)
		mm(q, xn, l.q)
		mm(k, xn, l.k)
		mm(v, xn, l.v)
		if l.qBias != nil {
			addRows(q, l.qBias)
			addRows(k, l.kBias)
			addRows(v, l.vBias)
		}
		if l.qNorm != nil {
			kernels.RefRMSNorm(q, q, l.qNorm, n*c.Heads, c.HeadDim, c.NormEps)
			kernels.RefRMSNorm(k, k, l.kNorm, n*c.KVHeads, c.HeadDim, c.NormEps)
		}
		kernels.RefRoPEFreqs(q, pos, c.Heads, c.HeadDim, m.ropeFreqs, c.RopeNeox)
		kernels.RefRoPEFreqs(k, pos, c.KVHeads, c.HeadDim, m.ropeFreqs, c.RopeNeox)
		kernels.RefAttentionWindow(att, q, k, v, n, n, c.Heads, c.KVHeads, c.HeadDim, c.SlidingWindow, scale)
		mm(tmp, att, l.o)
		for i := range x {
			x[i] += tmp[i]
		}
		kernels.RefRMSNorm(xn, x, l.ffnNorm, n, c.Dim, c.NormEps)
		mm(gate, xn, l.gate)
		mm(up, xn, l.up)
		kernels.RefSiLUMul(gate, gate, up)
		mm(tmp, gate, l.down)
		for i := range x {
			x[i] += tmp[i]
		}
	}
	kernels.RefRMSNorm(xn, x, m.outNorm, n, c.Dim, c.NormEps)
	logits := make([]float32, n*c.Vocab)
	mm(logits, xn, m.output)
	rows := make([][]float32, n)
	for i := range rows {
		rows[i] = logits[i*c.Vocab : (i+1)*c.Vocab]
	}
	return rows
}

// relErr is max|a-b| / max|b|: the error relative to the row's scale.
func relErr(a, b []float32) float64 {
	var d, s float64
	for i := range b {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
		s = math.Max(s, math.Abs(float64(b[i])))
	}
	if s == 0 {
		return d
	}
	return d / s
}
