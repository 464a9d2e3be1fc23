package half

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRoundTripAll: every 16-bit pattern widens exactly and narrows back to
// itself (NaNs to a NaN), for both formats.
func TestRoundTripAll(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := F16ToF32(h)
		if math.IsNaN(float64(f)) {
			require.True(t, math.IsNaN(float64(F16ToF32(F32ToF16(f)))), "f16 %#04x", h)
		} else {
			require.Equal(t, h, F32ToF16(f), "f16 %#04x -> %g", h, f)
		}
		b := BF16ToF32(h)
		if math.IsNaN(float64(b)) {
			require.True(t, math.IsNaN(float64(BF16ToF32(F32ToBF16(b)))), "bf16 %#04x", h)
		} else {
			require.Equal(t, h, F32ToBF16(b), "bf16 %#04x -> %g", h, b)
		}
	}
}

func TestRounding(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   float32
		f16  uint16
		bf16 uint16
	}{
		{"one", 1, 0x3c00, 0x3f80},
		{"f16 tie to even down", 1 + 1.0/2048, 0x3c00, 0x3f80},
		{"f16 tie to even up", 1 + 3.0/2048, 0x3c02, 0x3f80},
		{"f16 overflow", 70000, 0x7c00, 0x4789},
		{"f16 smallest subnormal", float32(math.Ldexp(1, -24)), 0x0001, 0x3380},
		{"f16 underflow to zero", float32(math.Ldexp(1, -26)), 0x0000, 0x3280},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000, 0x8000},
		{"-inf", float32(math.Inf(-1)), 0xfc00, 0xff80},
		{"bf16 tie to even", math.Float32frombits(0x3f808000), 0x3c04, 0x3f80},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.f16, F32ToF16(tc.in), "f16")
			require.Equal(t, tc.bf16, F32ToBF16(tc.in), "bf16")
		})
	}
	require.True(t, math.IsNaN(float64(F16ToF32(F32ToF16(float32(math.NaN()))))))
	require.True(t, math.IsNaN(float64(BF16ToF32(F32ToBF16(float32(math.NaN()))))))
}
