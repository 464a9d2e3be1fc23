package gguf

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestF16Known(t *testing.T) {
	for _, tc := range []struct {
		h uint16
		f float32
	}{
		{0x0000, 0}, {0x3c00, 1}, {0xc000, -2}, {0x3555, 0.333251953125},
		{0x7bff, 65504}, {0x0001, 5.960464477539063e-08}, {0x0400, 6.103515625e-05},
		{0x03ff, 6.097555160522461e-05}, {0x7c00, float32(math.Inf(1))}, {0xfc00, float32(math.Inf(-1))},
	} {
		require.Equal(t, tc.f, F16ToF32(tc.h), "%#04x", tc.h)
		require.Equal(t, tc.h, F32ToF16(tc.f), "%g", tc.f)
	}
	require.True(t, math.IsNaN(float64(F16ToF32(0x7e00))))
	require.True(t, math.IsNaN(float64(F16ToF32(F32ToF16(float32(math.NaN()))))))
	// Rounding: halfway cases go to even, overflow to Inf, tiny to zero.
	require.Equal(t, uint16(0x3c00), F32ToF16(1+1.0/2048))          // tie, stays even
	require.Equal(t, uint16(0x3c02), F32ToF16(1+3.0/2048))          // tie, rounds up to even
	require.Equal(t, uint16(0x3c01), F32ToF16(1+1.0/2048+1.0/8192)) // above the tie
	require.Equal(t, uint16(0x7c00), F32ToF16(65520))
	require.Equal(t, uint16(0x7bff), F32ToF16(65519))
	require.Equal(t, uint16(0x8000), F32ToF16(-1e-10))
	require.Equal(t, uint16(0x0001), F32ToF16(4e-8)) // rounds up to the smallest subnormal
}

func TestF16AllValuesRoundTrip(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		require.Equal(t, uint16(h), F32ToF16(f), "%#04x", h)
	}
}

func TestBF16(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := BF16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			require.True(t, math.IsNaN(float64(BF16ToF32(F32ToBF16(f)))))
			continue
		}
		require.Equal(t, uint16(h), F32ToBF16(f), "%#04x", h)
	}
	require.Equal(t, uint16(0x3f80), F32ToBF16(math.Float32frombits(0x3f808000))) // tie to even
	require.Equal(t, uint16(0x3f82), F32ToBF16(math.Float32frombits(0x3f818000))) // tie to even (up)
	require.Equal(t, uint16(0x3f81), F32ToBF16(math.Float32frombits(0x3f808001)))
}

func TestQuantizeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	src := make([]float32, 4*QK8_0)
	for i := range src {
		src[i] = float32(rng.NormFloat64())
	}
	src[5] = 0
	copy(src[QK8_0:2*QK8_0], make([]float32, QK8_0)) // an all-zero block
	for _, tc := range []struct {
		typ   GGMLType
		bytes int
		tol   func(x float32, amax float32) float64
	}{
		{TypeF32, 4 * len(src), func(float32, float32) float64 { return 0 }},
		{TypeF16, 2 * len(src), func(x, _ float32) float64 { return math.Abs(float64(x)) / 2048 }},
		{TypeBF16, 2 * len(src), func(x, _ float32) float64 { return math.Abs(float64(x)) / 256 }},
		// Q8_0: half a quantization step plus the F16 rounding of the scale.
		{TypeQ8_0, 4 * BlockBytesQ80, func(_, amax float32) float64 { return float64(amax)/127/2 + float64(amax)/1024 }},
	} {
		b, err := Quantize(tc.typ, src)
		require.NoError(t, err)
		require.Len(t, b, tc.bytes, tc.typ)
		out := make([]float32, len(src))
		require.NoError(t, Dequantize(tc.typ, b, out))
		for blk := 0; blk < len(src)/QK8_0; blk++ {
			var amax float32
			for _, x := range src[blk*QK8_0 : (blk+1)*QK8_0] {
				amax = max(amax, float32(math.Abs(float64(x))))
			}
			for i := blk * QK8_0; i < (blk+1)*QK8_0; i++ {
				require.InDelta(t, src[i], out[i], tc.tol(src[i], amax)+1e-12, "%v [%d]", tc.typ, i)
			}
		}
		require.Equal(t, float32(0), out[5], tc.typ)
	}
	// Q8_0 keeps the block's largest magnitude at ±127 steps.
	b, err := Quantize(TypeQ8_0, src[:QK8_0])
	require.NoError(t, err)
	var m int8
	for _, q := range b[2:] {
		m = max(m, int8(q), -int8(q))
	}
	require.Equal(t, int8(127), m)
}

func TestQuantizeErrors(t *testing.T) {
	_, err := Quantize(TypeQ8_0, make([]float32, 33))
	require.ErrorContains(t, err, "33")
	require.ErrorContains(t, Dequantize(TypeF16, make([]byte, 3), make([]float32, 2)), "have 3 bytes, want 4")
	require.ErrorIs(t, Dequantize(GGMLType(99), nil, nil), ErrUnknownType)
}
