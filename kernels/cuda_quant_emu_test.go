package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/internal/quant"
)

// cudaQuantScaleOffsets are the byte offsets of each block type's f16
// scales (d, and m or dmin where the type has one).
var cudaQuantScaleOffsets = map[DType][]int{
	Q4_0: {0}, Q4_1: {0, 2}, Q5_0: {0}, Q5_1: {0, 2}, Q8_0: {0},
	Q2_K: {80, 82}, Q3_K: {108}, Q4_K: {0, 2}, Q5_K: {0, 2}, Q6_K: {208},
}

// randQuantRows fills rows of random blocks of t: every bit of the codes,
// masks and packed scales random, the f16 scales random finite values (a
// NaN scale has no bit-exact answer: the device canonicalises payloads).
func randQuantRows(r *rand.Rand, t DType, rows, cols int) []byte {
	_, bb, _ := quant.Type(t).Block()
	rb, _ := t.RowBytes(cols)
	data := make([]byte, rows*rb)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	for b := 0; b < len(data)/bb; b++ {
		for _, off := range cudaQuantScaleOffsets[t] {
			h := uint16(r.Uint32())
			if h&0x7c00 == 0x7c00 {
				h &^= 0x4000 // an Inf or NaN exponent made finite
			}
			binary.LittleEndian.PutUint16(data[b*bb+off:], h)
		}
	}
	return data
}

// The per-thread index math of quant.cu (mirrored by CUDAQuantAt) decodes
// every element of random blocks of every block type to internal/quant's
// float32 bit for bit, and the dequantiser's grid-stride order gives each
// element its bf16 rounding.
func TestCUDAQuantAtMatchesQuant(t *testing.T) {
	for _, dt := range Types {
		if dt.BlockElems() <= 1 {
			continue
		}
		t.Run(dt.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(dt), 7))
			const rows = 3
			cols := 4 * dt.BlockElems()
			data := randQuantRows(r, dt, rows, cols)
			rb, err := dt.RowBytes(cols)
			require.NoError(t, err)
			want := make([]float32, rows*cols)
			require.NoError(t, quant.Dequantize(quant.Type(dt), data, want))
			for i, w := range want {
				row := data[i/cols*rb : (i/cols+1)*rb]
				got, err := CUDAQuantAt(dt, row, i%cols)
				require.NoError(t, err)
				require.Equal(t, math.Float32bits(w), math.Float32bits(got), "element %d: want %g, got %g", i, w, got)
			}
			bf := make([]uint16, rows*cols)
			require.NoError(t, CUDADequantBF16(bf, data, dt, rows, cols))
			for i, w := range want {
				require.Equal(t, F32ToBF16(w), bf[i], "bf16 element %d", i)
			}
		})
	}
}

func TestCUDAQuantAtErrors(t *testing.T) {
	_, err := CUDAQuantAt(F16, make([]byte, 64), 0)
	require.ErrorContains(t, err, "decoder of F16: not a block type")
	_, err = CUDAQuantAt(Q4_K, make([]byte, quant.BytesQ4_K), 256)
	require.ErrorContains(t, err, "Q4_K column 256 is past a row of 144 bytes")
	require.ErrorContains(t, CUDADequantBF16(make([]uint16, 32), make([]byte, 64), BF16, 1, 32), "BF16: not a block type")
	require.ErrorContains(t, CUDADequantBF16(make([]uint16, 32), make([]byte, 17), Q4_0, 1, 32), "have 17 bytes in")
	require.ErrorContains(t, CUDADequantBF16(make([]uint16, 48), make([]byte, 36), Q4_0, 1, 48), "48 columns is not a multiple of 32")
}
