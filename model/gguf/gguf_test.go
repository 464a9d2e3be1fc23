package gguf

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func openTestModel(t *testing.T) *File {
	t.Helper()
	p, err := TestModelPath()
	require.NoError(t, err, "run `make model`")
	f, err := Open(p)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, f.Close()) })
	return f
}

func TestStories260K(t *testing.T) {
	f := openTestModel(t)
	require.Equal(t, uint32(3), f.Version)
	require.Equal(t, uint64(32), f.Alignment)
	require.Len(t, f.Tensors, 48)
	require.Equal(t, uint64(292800), f.Params())

	c, err := f.LlamaConfig()
	require.NoError(t, err)
	require.Equal(t, LlamaConfig{
		Arch: "llama", Dim: 64, Layers: 5, Heads: 8, KVHeads: 4, HeadDim: 8, FFN: 172, Vocab: 512,
		ContextLength: 2048, NormEps: 1e-5, RopeTheta: 10000, RopeDim: 8,
		RopeScaling: "none", RopeScaleFactor: 1, TiedOutput: false,
	}, c)

	tok, err := f.Strings("tokenizer.ggml.tokens")
	require.NoError(t, err)
	require.Len(t, tok, 512)
	require.Equal(t, "<s>", tok[1])
	bos, err := f.Uint32("tokenizer.ggml.bos_token_id")
	require.NoError(t, err)
	require.Equal(t, uint32(1), bos)

	// The mmapped tensor bytes equal the same bytes parsed from memory.
	raw, err := os.ReadFile(mustPath(t))
	require.NoError(t, err)
	g, err := Parse(raw)
	require.NoError(t, err)
	for i := range f.Tensors {
		require.Equal(t, g.Tensors[i].Data, f.Tensors[i].Data, f.Tensors[i].Name)
	}
	emb, err := f.Tensor("token_embd.weight")
	require.NoError(t, err)
	row := make([]float32, 64)
	require.NoError(t, emb.Row(511, row))
	all, err := emb.Float32s()
	require.NoError(t, err)
	require.Equal(t, all[511*64:], row)
}

func mustPath(t *testing.T) string {
	p, err := TestModelPath()
	require.NoError(t, err, "run `make model`")
	return p
}

func TestTestModelPathEnv(t *testing.T) {
	t.Setenv("TURNSTILE_MODEL", filepath.Join(t.TempDir(), "nope.gguf"))
	_, err := TestModelPath()
	require.ErrorContains(t, err, "make model")
}

func TestCloseTwice(t *testing.T) {
	f, err := Open(mustPath(t))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, f.Close())
	require.Nil(t, f.Tensors[0].Data)
}

func encode(t *testing.T, w *Writer) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := w.WriteTo(&buf)
	require.NoError(t, err)
	require.Equal(t, int64(buf.Len()), n)
	return buf.Bytes()
}

func TestMetadataRoundTrip(t *testing.T) {
	vals := map[string]any{
		"u8": uint8(200), "i8": int8(-5), "u16": uint16(60000), "i16": int16(-300),
		"u32": uint32(4e9), "i32": int32(-7), "f32": float32(1.5), "b": true, "s": "héllo",
		"u64": uint64(1 << 60), "i64": int64(-1 << 60), "f64": 2.25,
		"au8": []uint8{1, 2}, "ai8": []int8{-1}, "au16": []uint16{7}, "ai16": []int16{-7},
		"au32": []uint32{1, 2, 3}, "ai32": []int32{-1, 5}, "af32": []float32{0.5},
		"ab": []bool{true, false}, "as": []string{"a", "", "ccc"}, "au64": []uint64{9},
		"ai64": []int64{-9}, "af64": []float64{1e300},
		"nested": []Value{{Type: ValArray, Elem: ValString, V: []string{"x"}}, {Type: ValArray, Elem: ValInt32, V: []int32{4}}},
	}
	w := NewWriter()
	for k, v := range vals {
		require.NoError(t, w.Set(k, v))
	}
	for _, version := range []uint32{2, 3} {
		b := encode(t, w)
		binary.LittleEndian.PutUint32(b[4:], version)
		f, err := Parse(b)
		require.NoError(t, err)
		require.Equal(t, version, f.Version)
		require.Len(t, f.Metadata, len(vals))
		for k, v := range vals {
			got, ok := f.Value(k)
			require.True(t, ok, k)
			require.Equal(t, v, got.V, k)
		}
	}
	f, err := Parse(encode(t, w))
	require.NoError(t, err)
	// Typed getters accept any integer width and name key and type on error.
	n, err := f.Int("i16")
	require.NoError(t, err)
	require.Equal(t, -300, n)
	_, err = f.Uint32("i8")
	require.ErrorIs(t, err, ErrWrongType)
	require.ErrorContains(t, err, `"i8"`)
	_, err = f.String("u32")
	require.ErrorIs(t, err, ErrWrongType)
	require.ErrorContains(t, err, "uint32")
	_, err = f.Strings("missing.key")
	require.ErrorIs(t, err, ErrMissingKey)
	require.ErrorContains(t, err, "missing.key")
	i32, err := f.Int32s("au32")
	require.NoError(t, err)
	require.Equal(t, []int32{1, 2, 3}, i32)
	f64, err := f.Float32("f64")
	require.NoError(t, err)
	require.Equal(t, float32(2.25), f64)
	_, err = f.Float32s("as")
	require.ErrorContains(t, err, "array[string]")
}

func tinyConfig() LlamaConfig {
	return LlamaConfig{Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, FFN: 64, Vocab: 16, ContextLength: 128}
}

func tinyFile(t *testing.T, c LlamaConfig, typ GGMLType) []byte {
	t.Helper()
	w, err := SynthLlama(c, typ, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	return encode(t, w)
}

func TestSynthTypes(t *testing.T) {
	for _, typ := range []GGMLType{TypeF32, TypeF16, TypeBF16, TypeQ8_0} {
		for _, tied := range []bool{false, true} {
			c := tinyConfig()
			c.TiedOutput = tied
			f, err := Parse(tinyFile(t, c, typ))
			require.NoError(t, err, typ)
			w, err := f.Llama()
			require.NoError(t, err, typ)
			require.Equal(t, tied, w.Config.TiedOutput)
			require.Equal(t, 8, w.Config.HeadDim)
			require.Equal(t, typ, w.Layers[1].Down.Type)
			require.Equal(t, TypeF32, w.Layers[1].FFNNorm.Type)
			if tied {
				require.Same(t, w.TokenEmbd, w.Output)
			}
			norm, err := w.OutputNorm.Float32s()
			require.NoError(t, err)
			require.Equal(t, float32(1), norm[31])
			q, err := w.Layers[0].Q.Float32s()
			require.NoError(t, err)
			var sum float64
			for _, x := range q {
				sum += float64(x * x)
			}
			std := sum / float64(len(q))
			require.InDelta(t, 0.02*0.02, std, 0.0001, "weights ~N(0, 0.02)")
			for i := range f.Tensors {
				require.Zero(t, (f.DataOffset+f.Tensors[i].Offset)%32, f.Tensors[i].Name)
			}
		}
	}
}

func TestSynthRejects(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*LlamaConfig)
		typ  GGMLType
		want string
	}{
		{func(c *LlamaConfig) { c.Heads = 5 }, TypeF32, "dim 32 is not divisible by heads 5"},
		{func(c *LlamaConfig) { c.KVHeads = 3 }, TypeF32, "heads 4 is not divisible by kv-heads 3"},
		{func(c *LlamaConfig) { c.Heads = 32; c.KVHeads = 1 }, TypeF32, "head dim 1"},
		{func(c *LlamaConfig) { c.FFN = 48 }, TypeQ8_0, "ffn (48)"},
		{func(c *LlamaConfig) { c.Layers = 0 }, TypeF32, "layers = 0"},
		{func(c *LlamaConfig) {}, GGMLType(16), "IQ2_XXS"},
		{func(c *LlamaConfig) {}, TypeQ4_K, "Q4_K needs dim (32) and ffn (64) to be multiples of 256"},
	} {
		c := tinyConfig()
		tc.mod(&c)
		_, err := SynthLlama(c, tc.typ, rand.New(rand.NewPCG(1, 2)))
		require.ErrorContains(t, err, tc.want)
	}
}

// patch rewrites the first occurrence of old in b (which must exist).
func patch(t *testing.T, b []byte, old, new []byte) []byte {
	t.Helper()
	i := bytes.Index(b, old)
	require.GreaterOrEqual(t, i, 0, "pattern %q", old)
	out := append([]byte(nil), b...)
	copy(out[i:], new)
	return out
}

// tensorTypeOffset finds the type field of the named tensor's info.
func tensorTypeOffset(t *testing.T, b []byte, name string) int {
	t.Helper()
	i := bytes.Index(b, []byte(name))
	require.GreaterOrEqual(t, i, 0)
	nd := int(binary.LittleEndian.Uint32(b[i+len(name):]))
	return i + len(name) + 4 + 8*nd
}

func TestParseErrors(t *testing.T) {
	good := tinyFile(t, tinyConfig(), TypeF32)
	setU32 := func(off int, v uint32) []byte {
		out := append([]byte(nil), good...)
		binary.LittleEndian.PutUint32(out[off:], v)
		return out
	}
	for _, tc := range []struct {
		name string
		data []byte
		is   error
		want string
	}{
		{"empty", nil, ErrTruncated, "magic"},
		{"bad magic", patch(t, good, []byte("GGUF"), []byte("GGML")), ErrBadMagic, "GGML"},
		{"version 1", setU32(4, 1), ErrBadVersion, "1"},
		{"big endian", setU32(4, 3<<24), ErrBadVersion, ""},
		{"header only", good[:20], ErrTruncated, "tensor count"},
		{"cut in metadata", good[:100], ErrTruncated, ""},
		{"cut in data", good[:len(good)-10], ErrTruncated, "blk.1.ffn_down.weight"},
		{"huge tensor count", func() []byte {
			b := append([]byte(nil), good...)
			binary.LittleEndian.PutUint64(b[8:], 1<<62)
			return b
		}(), ErrTruncated, "tensor count"},
		{"unknown tensor type", setU32(tensorTypeOffset(t, good, "blk.0.attn_k.weight"), 16), ErrUnknownType,
			`"blk.0.attn_k.weight" has type IQ2_XXS (id 16); supported: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, BF16`},
		{"Q8_0 row not multiple of 32", func() []byte {
			w := NewWriter()
			require.NoError(t, w.AddTensor("odd", TypeF32, []uint64{4, 16}, make([]byte, 256)))
			b := encode(t, w)
			binary.LittleEndian.PutUint32(b[tensorTypeOffset(t, b, "odd"):], uint32(TypeQ8_0))
			return b
		}(), ErrShapeMismatch, `"odd" first dimension 4`},
		{"duplicate key", patch(t, good, []byte("llama.context_length"), []byte("general.architecture")), ErrMalformed, `duplicate metadata key "general.architecture"`},
		{"bad value type", patch(t, good, []byte("general.name\x08"), []byte("general.name\x63")), ErrMalformed, "general.name"},
		{"bad alignment", func() []byte {
			w, err := SynthLlama(tinyConfig(), TypeF32, rand.New(rand.NewPCG(1, 2)))
			require.NoError(t, err)
			require.NoError(t, w.Set("general.alignment", uint32(64)))
			b := encode(t, w)
			return patch(t, b, []byte("general.alignment\x04\x00\x00\x00\x40"), []byte("general.alignment\x04\x00\x00\x00\x30"))
		}(), ErrMalformed, "general.alignment = 48"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.data)
			require.ErrorIs(t, err, tc.is)
			require.ErrorContains(t, err, tc.want)
		})
	}
	// Every prefix of a valid file fails cleanly: each cut inside the
	// header and tensor infos, and a few inside the data.
	f, err := Parse(good)
	require.NoError(t, err)
	last := f.Tensors[len(f.Tensors)-1]
	end := int(f.DataOffset + last.Offset + uint64(len(last.Data))) // then only padding
	for n := 0; n < end; n++ {
		if n > int(f.DataOffset) {
			n = min(n+len(good)/16, end-1)
		}
		_, err := Parse(good[:n])
		require.ErrorIs(t, err, ErrTruncated, "prefix %d", n)
	}
}

func TestOpenErrorsNamePath(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "bad.gguf")
	require.NoError(t, os.WriteFile(p, []byte("GGUF\x03\x00\x00\x00"), 0o644))
	_, err := Open(p)
	require.ErrorIs(t, err, ErrTruncated)
	require.ErrorContains(t, err, p)
	_, err = Open(filepath.Join(dir, "none.gguf"))
	require.ErrorContains(t, err, "none.gguf")
}

func TestLlamaErrors(t *testing.T) {
	base := func() *Writer {
		w, err := SynthLlama(tinyConfig(), TypeF32, rand.New(rand.NewPCG(1, 2)))
		require.NoError(t, err)
		return w
	}
	drop := func(w *Writer, name string) *Writer {
		out := NewWriter()
		for _, kv := range w.kvs {
			out.SetValue(kv.Key, kv.Value)
		}
		for _, ti := range w.tensors {
			if ti.Name != name {
				require.NoError(t, out.AddTensor(ti.Name, ti.Type, ti.Dims, ti.Data))
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		w    func() *Writer
		is   error
		want string
	}{
		{"unsupported arch", func() *Writer { w := base(); require.NoError(t, w.Set("general.architecture", "gpt2")); return w }, ErrUnsupportedArch, `"gpt2"`},
		{"missing key", func() *Writer {
			w := base()
			out := NewWriter()
			for _, kv := range w.kvs {
				if kv.Key != "llama.feed_forward_length" {
					out.SetValue(kv.Key, kv.Value)
				}
			}
			out.tensors = w.tensors
			return out
		}, ErrMissingKey, "llama.feed_forward_length"},
		{"wrong key type", func() *Writer { w := base(); require.NoError(t, w.Set("llama.block_count", "two")); return w }, ErrWrongType, "llama.block_count"},
		{"missing tensor", func() *Writer { return drop(base(), "blk.1.attn_v.weight") }, ErrMissingTensor, "blk.1.attn_v.weight"},
		{"shape mismatch", func() *Writer {
			w := base()
			require.NoError(t, w.Set("llama.feed_forward_length", uint32(96)))
			return w
		}, ErrShapeMismatch, `"blk.0.ffn_gate.weight" is [32 64], want [32 96]`},
		{"kv heads mismatch", func() *Writer {
			w := base()
			require.NoError(t, w.Set("llama.attention.head_count_kv", uint32(4)))
			return w
		}, ErrShapeMismatch, "blk.0.attn_k.weight"},
		{"vocab mismatch", func() *Writer {
			w := base()
			require.NoError(t, w.Set("tokenizer.ggml.tokens", []string{"a"}))
			return w
		}, ErrShapeMismatch, "tokenizer.ggml.tokens"},
		{"rope scaling", func() *Writer { w := base(); require.NoError(t, w.Set("llama.rope.scaling.type", "yarn")); return w }, ErrUnsupportedArch, "yarn"},
		{"gemma", func() *Writer { w := base(); require.NoError(t, w.Set("general.architecture", "gemma2")); return w }, ErrUnsupportedArch, `"gemma2" (supported: llama, qwen2, qwen3)`},
		{"llama3 without low factor", func() *Writer {
			w := base()
			require.NoError(t, w.Set("llama.rope.scaling.type", "llama3"))
			require.NoError(t, w.Set("llama.rope.scaling.factor", float32(8)))
			return w
		}, ErrMissingKey, "llama.rope.scaling.low_freq_factor"},
		{"partial biases", func() *Writer {
			w := base()
			require.NoError(t, w.AddTensor("blk.0.attn_q.bias", TypeF32, []uint64{32}, make([]byte, 128)))
			return w
		}, ErrMissingTensor, "1 of the 3 attention biases"},
		{"qwen3 without q norm", func() *Writer {
			c := tinyConfig()
			c.Arch = "qwen3"
			w, err := SynthLlama(c, TypeF32, rand.New(rand.NewPCG(1, 2)))
			require.NoError(t, err)
			return drop(w, "blk.1.attn_q_norm.weight")
		}, ErrMissingTensor, "blk.1.attn_q_norm.weight"},
		{"sliding window", func() *Writer {
			w := base()
			require.NoError(t, w.Set("llama.attention.sliding_window", int32(-4)))
			return w
		}, ErrMalformed, "llama.attention.sliding_window = -4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse(encode(t, tc.w()))
			require.NoError(t, err)
			_, err = f.LlamaConfig()
			require.ErrorIs(t, err, tc.is)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestWriterRejects(t *testing.T) {
	w := NewWriter()
	require.ErrorContains(t, w.AddTensor("a", TypeF32, []uint64{4}, make([]byte, 15)), "has 15 bytes, want 16")
	require.ErrorContains(t, w.AddTensor("q", TypeQ8_0, []uint64{16}, make([]byte, 17)), "block size 32")
	require.ErrorContains(t, w.AddTensor("x", GGMLType(16), []uint64{256}, nil), "IQ2_XXS")
	require.ErrorContains(t, w.AddTensor("k", TypeQ4_K, []uint64{128}, make([]byte, 72)), "block size 256")
	require.NoError(t, w.AddTensor("a", TypeF32, []uint64{4}, make([]byte, 16)))
	require.ErrorContains(t, w.AddTensor("a", TypeF32, []uint64{4}, make([]byte, 16)), `duplicate tensor "a"`)
	require.ErrorContains(t, w.Set("k", struct{}{}), `"k"`)
	w.SetValue("bad", Value{Type: ValUint32, V: "str"})
	_, err := w.WriteTo(&bytes.Buffer{})
	require.ErrorContains(t, err, `"bad"`)
}

func TestLlamaOptionalKeys(t *testing.T) {
	c := tinyConfig()
	c.KVHeads = c.Heads
	w, err := SynthLlama(c, TypeF16, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	out := NewWriter()
	for _, kv := range w.kvs {
		if kv.Key != "llama.attention.head_count_kv" && kv.Key != "llama.rope.dimension_count" {
			out.SetValue(kv.Key, kv.Value)
		}
	}
	out.tensors = w.tensors
	require.NoError(t, out.Set("llama.rope.freq_base", float32(500000)))
	require.NoError(t, out.Set("llama.rope.scaling.type", "linear"))
	require.NoError(t, out.Set("llama.rope.scaling.factor", float32(4)))
	require.NoError(t, out.Set("llama.attention.key_length", uint32(8)))
	f, err := Parse(encode(t, out))
	require.NoError(t, err)
	got, err := f.LlamaConfig()
	require.NoError(t, err)
	require.Equal(t, 4, got.KVHeads)
	require.Equal(t, 8, got.RopeDim)
	require.Equal(t, float32(500000), got.RopeTheta)
	require.Equal(t, "linear", got.RopeScaling)
	require.Equal(t, float32(4), got.RopeScaleFactor)

	require.NoError(t, out.Set("llama.attention.key_length", uint32(16)))
	f, err = Parse(encode(t, out))
	require.NoError(t, err)
	_, err = f.LlamaConfig()
	// key_length sets the head dim (qwen3 decouples it from dim/heads), so
	// the Q tensor no longer fits.
	require.ErrorContains(t, err, `"blk.0.attn_q.weight" is [32 32], want [32 64]`)
}

// Every architecture's synthetic file reads back with its own keys and
// tensors: the spec's flags, head dim decoupled from dim/heads, biases,
// per-head norms, llama3 factors and the sliding window.
func TestLlamaArchitectures(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*LlamaConfig)
		want func(*testing.T, *LlamaWeights)
	}{
		{"llama3", func(c *LlamaConfig) {
			c.RopeScaling, c.RopeScaleFactor, c.RopeLowFreqFactor, c.RopeHighFreqFactor, c.RopeOrigContext = "llama3", 8, 1, 4, 64
		}, func(t *testing.T, w *LlamaWeights) {
			require.True(t, w.Config.RopeFreqFactors)
			require.NotNil(t, w.RopeFreqs)
			require.False(t, w.Config.RopeNeox)
		}},
		{"qwen2", func(c *LlamaConfig) { c.Arch, c.QKVBias = "qwen2", true }, func(t *testing.T, w *LlamaWeights) {
			require.True(t, w.Config.QKVBias && w.Config.RopeNeox)
			require.Equal(t, []uint64{32}, w.Layers[1].QBias.Dims)
			require.Equal(t, []uint64{16}, w.Layers[1].VBias.Dims)
		}},
		{"qwen3", func(c *LlamaConfig) { c.Arch, c.HeadDim, c.TiedOutput = "qwen3", 16, true }, func(t *testing.T, w *LlamaWeights) {
			require.True(t, w.Config.QKNorm && w.Config.RopeNeox && w.Config.TiedOutput)
			require.Equal(t, 16, w.Config.HeadDim)
			require.Equal(t, []uint64{32, 64}, w.Layers[0].Q.Dims)
			require.Equal(t, []uint64{16}, w.Layers[0].KNorm.Dims)
		}},
		{"mistral", func(c *LlamaConfig) { c.SlidingWindow = 16 }, func(t *testing.T, w *LlamaWeights) {
			require.Equal(t, 16, w.Config.SlidingWindow)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tinyConfig()
			tc.edit(&c)
			w, err := SynthLlama(c, TypeF32, rand.New(rand.NewPCG(1, 2)))
			require.NoError(t, err)
			f, err := Parse(encode(t, w))
			require.NoError(t, err)
			got, err := f.Llama()
			require.NoError(t, err)
			want := c.Arch
			if want == "" {
				want = "llama"
			}
			require.Equal(t, want, got.Config.Arch)
			tc.want(t, got)
		})
	}
}

// The llama3 factors follow Meta's rule (1 for short wavelengths, the
// factor for long ones, a blend between) and the metadata and tensor forms
// of the same scaling give the same frequencies.
func TestRopeFrequenciesLlama3(t *testing.T) {
	c := LlamaConfig{RopeDim: 128, RopeTheta: 500000, RopeScaling: "llama3", RopeScaleFactor: 8,
		RopeLowFreqFactor: 1, RopeHighFreqFactor: 4, RopeOrigContext: 8192}
	f := c.Llama3Factors()
	require.Len(t, f, 64)
	require.Equal(t, float32(1), f[0])
	require.Equal(t, float32(8), f[63])
	blended := 0
	for i := 1; i < len(f); i++ {
		require.GreaterOrEqual(t, f[i], f[i-1], "factors grow with the wavelength")
		if f[i] > 1 && f[i] < 8 {
			blended++
		}
	}
	require.Positive(t, blended)
	meta, err := c.RopeFrequencies(nil)
	require.NoError(t, err)
	tensor, err := c.RopeFrequencies(f)
	require.NoError(t, err)
	require.InDeltaSlice(t, meta, tensor, 1e-7*meta[0])
	_, err = c.RopeFrequencies(f[:3])
	require.ErrorContains(t, err, "3 factors, want rope dim/2 = 64")
	lin := LlamaConfig{RopeDim: 4, RopeTheta: 10000, RopeScaling: "linear", RopeScaleFactor: 4}
	fl, err := lin.RopeFrequencies(nil)
	require.NoError(t, err)
	require.InDeltaSlice(t, []float64{0.25, 0.0025}, fl, 1e-12)
}
