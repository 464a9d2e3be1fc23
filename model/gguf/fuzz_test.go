package gguf

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParse: the parser never panics and never returns tensor data outside
// the input; whatever parses also survives LlamaConfig.
func FuzzParse(f *testing.F) {
	w, err := SynthLlama(LlamaConfig{Dim: 32, Layers: 1, Heads: 4, KVHeads: 2, FFN: 32, Vocab: 4, ContextLength: 8},
		TypeQ8_0, rand.New(rand.NewPCG(1, 1)))
	require.NoError(f, err)
	require.NoError(f, w.Set("tokenizer.ggml.tokens", []string{"a", "b", "c", "d"}))
	require.NoError(f, w.Set("nested", []Value{{Type: ValArray, Elem: ValBool, V: []bool{true}}}))
	var buf bytes.Buffer
	_, err = w.WriteTo(&buf)
	require.NoError(f, err)
	f.Add(buf.Bytes())
	f.Add([]byte("GGUF\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("GGUF\x02\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Parse(data)
		if err != nil {
			return
		}
		for i := range g.Tensors {
			ti := &g.Tensors[i]
			n, err := ti.Type.RowBytes(ti.Elements())
			require.NoError(t, err)
			require.Equal(t, n, uint64(len(ti.Data)))
		}
		_, _ = g.LlamaConfig()
	})
}
