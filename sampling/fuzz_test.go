package sampling

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzSample feeds arbitrary logits (every float32 bit pattern: NaN, ±Inf,
// subnormals) and arbitrary parameters folded into their valid ranges, and
// requires a token in [0, vocab), a non-NaN logprob <= 0 and consistent
// bookkeeping.
func FuzzSample(f *testing.F) {
	f32 := func(vs ...float32) []byte {
		b := make([]byte, 4*len(vs))
		for i, v := range vs {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		return b
	}
	f.Add(f32(1, 2, 3), float32(1), uint8(0), float32(1), float32(0), float32(1), float32(0), float32(0), uint64(1), uint8(5))
	f.Add(f32(negInf, nan32, posInf, posInf), float32(0.7), uint8(2), float32(0.9), float32(0.1), float32(1.2), float32(0.5), float32(-0.5), uint64(2), uint8(20))
	f.Add(f32(negInf, negInf), float32(2), uint8(1), float32(0.5), float32(1), float32(0.5), float32(2), float32(2), uint64(3), uint8(0))
	f.Add(f32(3e38, -3e38, 1e-45, 0), float32(1e-4), uint8(3), float32(0.01), float32(0.99), float32(100), float32(-2), float32(-2), uint64(4), uint8(1))
	f.Add(f32(nan32), float32(0), uint8(0), float32(1), float32(0), float32(1), float32(0), float32(0), uint64(5), uint8(1))
	f.Fuzz(func(t *testing.T, raw []byte, temp float32, topK uint8, topP, minP, rep, pres, freq float32, seed uint64, topLP uint8) {
		vocab := len(raw) / 4
		if vocab == 0 || vocab > 4096 {
			return
		}
		logits := make([]float32, vocab)
		for i := range logits {
			logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		p := Params{
			Temperature:       fold(temp, 0, 4),
			TopK:              int(topK) % (vocab + 2),
			TopP:              max(fold(topP, 0, 1), 1e-6),
			MinP:              fold(minP, 0, 1),
			RepetitionPenalty: max(fold(rep, 0, 4), 1e-3),
			PresencePenalty:   fold(pres, -2, 2),
			FrequencyPenalty:  fold(freq, -2, 2),
			Seed:              seed,
			HasSeed:           seed%2 == 0,
			Logprobs:          seed%3 == 0,
			TopLogprobs:       int(topLP) % (MaxTopLogprobs + 1),
		}
		require.NoError(t, p.Validate(vocab))
		s, err := New(2, vocab)
		require.NoError(t, err)
		hist := make([]int32, 0, vocab)
		for i := range vocab {
			if raw[4*i]&1 == 1 {
				hist = append(hist, int32(i))
			}
		}
		require.NoError(t, s.Start(1, &p, hist))
		c := newChoice()
		row := make([]float32, vocab)
		for range 3 {
			copy(row, logits)
			require.NoError(t, s.Sample(1, row, c))
			require.GreaterOrEqual(t, c.Token, int32(0))
			require.Less(t, int(c.Token), vocab)
			require.False(t, math.IsNaN(float64(c.Logprob)))
			require.LessOrEqual(t, c.Logprob, float32(1e-5))
			for i := range p.TopLogprobs {
				require.False(t, math.IsNaN(float64(c.TopLogprobs[i])))
				if i > 0 {
					require.GreaterOrEqual(t, c.TopLogprobs[i-1], c.TopLogprobs[i])
				}
			}
			require.NoError(t, s.Check())
		}
		require.NoError(t, s.End(1))
		require.NoError(t, s.Check())
	})
}

// fold maps any float32 (NaN and Inf included) into [lo, hi].
func fold(v, lo, hi float32) float32 {
	if v != v || math.IsInf(float64(v), 0) {
		return lo
	}
	v = float32(math.Mod(math.Abs(float64(v)), float64(hi-lo)+1e-6))
	return min(lo+v, hi)
}
