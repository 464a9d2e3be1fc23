package model

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/model/gguf"
)

// archFixture is llama.cpp's output for one architecture fixture
// (scripts/llama-logits.cpp -g): teacher-forced logits of toks and the
// greedy continuation after them.
type archFixture struct {
	toks, greedy []int32
	logits       [][]float32
}

func readArchFixture(t *testing.T, name string) archFixture {
	t.Helper()
	path, err := gguf.ArchFixturePath(name + ".bin")
	require.NoError(t, err)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	le := binary.LittleEndian
	require.GreaterOrEqual(t, len(data), 8)
	n, vocab := int(le.Uint32(data)), int(le.Uint32(data[4:]))
	off := 8
	var f archFixture
	read := func() int32 { v := int32(le.Uint32(data[off:])); off += 4; return v }
	require.GreaterOrEqual(t, len(data), 8+4*n+4*n*vocab+4, "%s: %d tokens × %d logits", name, n, vocab)
	for i := 0; i < n; i++ {
		f.toks = append(f.toks, read())
	}
	for i := 0; i < n; i++ {
		row := make([]float32, vocab)
		for j := range row {
			row[j] = math.Float32frombits(uint32(read()))
		}
		f.logits = append(f.logits, row)
	}
	ng := int(read())
	require.Equal(t, off+4*ng, len(data), "%s: %d greedy tokens", name, ng)
	for i := 0; i < ng; i++ {
		f.greedy = append(f.greedy, read())
	}
	return f
}

// loadArchFixture rebuilds the F32 model of fixture name and loads it.
func loadArchFixture(t *testing.T, name string) *Llama {
	t.Helper()
	data, err := gguf.ArchFixtureModel(name)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), name+".gguf")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	m, err := LoadLlama(path, LlamaOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return m
}

// spreadErr is the largest and mean |a−b| over a row, each divided by the
// spread max(b)−min(b) of the reference row.
func spreadErr(a, b []float32) (worst, mean float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	var sum float64
	for i := range b {
		lo, hi = math.Min(lo, float64(b[i])), math.Max(hi, float64(b[i]))
		d := math.Abs(float64(a[i]) - float64(b[i]))
		worst = math.Max(worst, d)
		sum += d
	}
	s := hi - lo
	return worst / s, sum / float64(len(b)) / s
}

// TestArchitecturesMatchLlamaCpp runs each architecture fixture (Llama 3.1
// RoPE scaling, qwen2 biases and NEOX rotation, qwen3 per-head Q/K norms
// with a decoupled head dim) on the CPU runner: the teacher-forced logits
// (one prefill token, then one token per step) match llama.cpp's within
// 1e-5 of each row's logit spread, and the greedy continuation after the
// sequence (prefilled at once) is llama.cpp's token for token.
func TestArchitecturesMatchLlamaCpp(t *testing.T) {
	for _, a := range gguf.ArchFixtures() {
		t.Run(a.Name, func(t *testing.T) {
			want := readArchFixture(t, a.Name)
			m := loadArchFixture(t, a.Name)
			require.Equal(t, m.cfg.Vocab, len(want.logits[0]))
			r := newTestRunner(t, m, CPURunnerConfig{Seats: 2, KVBlocks: 16, BlockSize: 16, MaxBatchTokens: 64, KeepLogits: true})
			h := newHarness(t, r)
			s := newSeq(0, iota32(0, 8)...)
			var worst, mean float64
			agree := 0
			for i, tok := range want.toks {
				_, got := h.step(part{s, []int32{tok}, true})
				w, mn := spreadErr(got[0], want.logits[i])
				worst, mean = max(worst, w), mean+mn/float64(len(want.toks))
				if kernels.RefArgmax(got[0]) == kernels.RefArgmax(want.logits[i]) {
					agree++
				}
			}
			ref := refForward(t, m, want.toks)
			var worstRef float64
			for i := range ref {
				w, _ := spreadErr(ref[i], want.logits[i])
				worstRef = max(worstRef, w)
			}
			t.Logf("%s: logits vs llama.cpp over %d positions, of the row's spread: max %.3g, mean %.3g (Go reference: max %.3g); argmax equal %d/%d",
				a.Name, len(want.toks), worst, mean, worstRef, agree, len(want.toks))
			require.Less(t, worst, 1e-5)
			require.Equal(t, len(want.toks), agree)

			g := newSeq(1, iota32(8, 8)...)
			tok, _ := h.step(part{g, want.toks, true})
			greedy := []int32{tok[0]}
			for len(greedy) < len(want.greedy) {
				tok, _ = h.step(part{g, tok[:1], true})
				greedy = append(greedy, tok[0])
			}
			require.Equal(t, want.greedy, greedy)
		})
	}
}

// writeArch writes SynthLlama of c (F32, a numbered vocabulary) and returns
// its path.
func writeArch(t *testing.T, c gguf.LlamaConfig) string {
	t.Helper()
	w, err := gguf.SynthLlama(c, gguf.TypeF32, rand.New(rand.NewPCG(3, 4)))
	require.NoError(t, err)
	toks := make([]string, c.Vocab)
	for i := range toks {
		toks[i] = fmt.Sprintf("t%d", i)
	}
	toks[0], toks[1], toks[2] = "<unk>", "<s>", "</s>"
	require.NoError(t, w.Set("tokenizer.ggml.model", "llama"))
	require.NoError(t, w.Set("tokenizer.ggml.tokens", toks))
	require.NoError(t, w.Set("tokenizer.ggml.scores", make([]float32, c.Vocab)))
	types := make([]int32, c.Vocab)
	for i := range types {
		types[i] = 1
	}
	require.NoError(t, w.Set("tokenizer.ggml.token_type", types))
	require.NoError(t, w.Set("tokenizer.ggml.bos_token_id", uint32(1)))
	require.NoError(t, w.Set("tokenizer.ggml.eos_token_id", uint32(2)))
	path := filepath.Join(t.TempDir(), "m.gguf")
	var buf bytes.Buffer
	_, err = w.WriteTo(&buf)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	return path
}

// A sliding window loads at the file's whole context, and both runners
// take it (their kernels mask it: TestSlidingWindowMatchesReference,
// TestCUDAEmuSlidingWindowMatchesCPU); the CUDA runner then fails for want
// of a GPU, or not at all, never over the window. A window the context
// cannot outgrow masks nothing. An unsupported architecture names itself,
// the supported list and the path once.
func TestLoadArchitectureRefusals(t *testing.T) {
	c := gguf.LlamaConfig{Dim: 32, Layers: 1, Heads: 4, KVHeads: 2, FFN: 64, Vocab: 16, ContextLength: 128, SlidingWindow: 64}
	path := writeArch(t, c)
	cuda := CUDARunnerConfig{Seats: 2, BlockSize: 16, MaxBatchTokens: 16, KVType: DefaultCUDAKVType}
	for _, tc := range []struct{ maxContext, wantCtx, wantWindow int }{{0, 128, 64}, {64, 64, 0}} {
		m, err := LoadLlama(path, LlamaOptions{MaxContext: tc.maxContext})
		require.NoError(t, err)
		require.Equal(t, tc.wantCtx, m.MaxContext())
		require.Equal(t, int32(tc.wantWindow), m.attnWindow())
		if r, err := NewCUDARunner(m, cuda); err == nil {
			require.NoError(t, r.Close())
		} else {
			require.NotContains(t, err.Error(), "sliding_window")
		}
		require.NoError(t, m.Close())
	}

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	bad := filepath.Join(t.TempDir(), "gemma.gguf")
	require.NoError(t, os.WriteFile(bad, bytes.Replace(data, []byte("\x05\x00\x00\x00\x00\x00\x00\x00llama"), []byte("\x05\x00\x00\x00\x00\x00\x00\x00gemma"), 1), 0o644))
	_, err = LoadLlama(bad, LlamaOptions{})
	require.ErrorIs(t, err, gguf.ErrUnsupportedArch)
	require.ErrorContains(t, err, `general.architecture = "gemma" (supported: llama, qwen2, qwen3)`)
	require.Equal(t, 1, strings.Count(err.Error(), bad))
}

// StopIDs is EOS, then GGUF tokenizer.ggml.eot_token_id (Llama 3 chat ends
// turns with <|eot_id|>); an id outside the vocabulary is refused.
func TestStopIDsGGUF(t *testing.T) {
	c := gguf.LlamaConfig{Dim: 32, Layers: 1, Heads: 4, KVHeads: 2, FFN: 64, Vocab: 16, ContextLength: 128}
	m, err := LoadLlama(writeArch(t, c), LlamaOptions{})
	require.NoError(t, err)
	require.Equal(t, []int32{2}, m.StopIDs())
	require.NoError(t, m.Close())
	for _, tc := range []struct {
		eot  uint32
		want []int32
		err  string
	}{{7, []int32{2, 7}, ""}, {2, []int32{2}, ""}, {99, nil, "stop token 99 outside the vocabulary [0, 16)"}} {
		path := writeArch(t, c)
		f, err := gguf.Open(path)
		require.NoError(t, err)
		w := gguf.NewWriter()
		for _, kv := range f.Metadata {
			w.SetValue(kv.Key, kv.Value)
		}
		require.NoError(t, w.Set("tokenizer.ggml.eot_token_id", tc.eot))
		for _, ti := range f.Tensors {
			require.NoError(t, w.AddTensor(ti.Name, ti.Type, ti.Dims, ti.Data))
		}
		var buf bytes.Buffer
		_, err = w.WriteTo(&buf)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
		m, err := LoadLlama(path, LlamaOptions{})
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, m.StopIDs())
		require.NoError(t, m.Close())
	}
}
