package model

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/step"
)

// within reports whether b lies inside mem.
func within(b, mem []byte) bool {
	if len(b) == 0 || len(mem) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&mem[0]))
	return p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(mem))
}

// TestResidentWeights: by default LoadLlama moves every streamed matrix
// into the model's huge-page region (the embedding stays in the file);
// with Mmap they stay in the file mapping. Both give bit-identical logits,
// and Close releases the region.
func TestResidentWeights(t *testing.T) {
	path, err := gguf.TestModelPath()
	require.NoError(t, err)
	var logits [2][][]float32
	for i, mmap := range []bool{false, true} {
		m, err := LoadLlama(path, LlamaOptions{Mmap: mmap})
		require.NoError(t, err)
		if mmap {
			require.Nil(t, m.weights)
		} else {
			require.NotNil(t, m.weights)
			mem := m.weights.Bytes()
			mats := []*[]byte{&m.output.Data}
			for li := range m.layers {
				l := &m.layers[li]
				mats = append(mats, &l.q.Data, &l.k.Data, &l.v.Data, &l.o.Data, &l.gate.Data, &l.up.Data, &l.down.Data)
			}
			for j, d := range mats {
				require.True(t, within(*d, mem), "matrix %d is not in the weights region", j)
				require.Zero(t, uintptr(unsafe.Pointer(&(*d)[0]))%64, "matrix %d is not 64-byte aligned", j)
			}
			require.False(t, within(m.embd.Data, mem), "an untied embedding is read a row per token and stays in the file")
		}
		r := newTestRunner(t, m, CPURunnerConfig{Seats: 1, KVBlocks: 8, BlockSize: 16, MaxBatchTokens: 64, KeepLogits: true})
		h := newHarness(t, r)
		s := newSeq(0, iota32(0, 8)...)
		_, l := h.step(part{s, m.Tokenizer().Encode("Once upon a time", true), true})
		logits[i] = append(logits[i], l[0])
		for range 4 {
			_, l = h.step(part{s, []int32{step.FutureToken}, true})
			logits[i] = append(logits[i], l[0])
		}
		require.NoError(t, r.Close())
		require.NoError(t, m.Close())
		require.Nil(t, m.weights)
		require.NoError(t, m.Close(), "a second Close does nothing")
	}
	require.Equal(t, logits[1], logits[0], "logits from the region and from the file mapping")

	// A tied output keeps sharing the embedding's bytes after the move.
	s := smallSpec(gguf.TypeF16)
	s.Tied = true
	m := loadSynth(t, s)
	require.NotNil(t, m.weights)
	require.True(t, within(m.output.Data, m.weights.Bytes()))
	require.Equal(t, &m.output.Data[0], &m.embd.Data[0], "tied output and embedding")
}
