package gguf

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/turnstile-llm/turnstile/internal/half"
	"github.com/turnstile-llm/turnstile/internal/quant"
)

// F16ToF32 converts an IEEE half (bits) to float32 exactly (see internal/half).
func F16ToF32(h uint16) float32 { return half.F16ToF32(h) }

// F32ToF16 rounds float32 to the nearest IEEE half, ties to even (see internal/half).
func F32ToF16(f float32) uint16 { return half.F32ToF16(f) }

// BF16ToF32 converts a bfloat16 (bits) to float32 exactly.
func BF16ToF32(h uint16) float32 { return half.BF16ToF32(h) }

// F32ToBF16 rounds float32 to the nearest bfloat16, ties to even (see internal/half).
func F32ToBF16(f float32) uint16 { return half.F32ToBF16(f) }

// Quantize encodes src in type t (any supported type) and returns the
// bytes. A block type needs len(src) to be a multiple of its block size.
// Q8_0 stores d = max|x|/127 as F16 and q = round(x/d) as int8 per block of
// 32; the other block types use internal/quant's round-to-nearest with a
// small scale search (test data quality, not llama.cpp's quantiser).
func Quantize(t GGMLType, src []float32) ([]byte, error) {
	n, err := t.RowBytes(uint64(len(src)))
	if err != nil {
		return nil, fmt.Errorf("quantize %d values to %v: %w", len(src), t, err)
	}
	out := make([]byte, n)
	le := binary.LittleEndian
	switch t {
	case TypeF32:
		for i, x := range src {
			le.PutUint32(out[4*i:], math.Float32bits(x))
		}
	case TypeF16:
		for i, x := range src {
			le.PutUint16(out[2*i:], F32ToF16(x))
		}
	case TypeBF16:
		for i, x := range src {
			le.PutUint16(out[2*i:], F32ToBF16(x))
		}
	case TypeQ8_0:
		// Kept as it was (d from max|x| without the F16 round trip) so that
		// existing Q8_0 test files keep their bytes.
		for b := 0; b < len(src)/QK8_0; b++ {
			blk := src[b*QK8_0 : (b+1)*QK8_0]
			dst := out[b*BlockBytesQ80 : (b+1)*BlockBytesQ80]
			var amax float32
			for _, x := range blk {
				amax = max(amax, float32(math.Abs(float64(x))))
			}
			d := amax / 127
			var id float32
			if d != 0 {
				id = 1 / d
			}
			le.PutUint16(dst, F32ToF16(d))
			for i, x := range blk {
				dst[2+i] = byte(int8(math.Round(float64(x * id))))
			}
		}
	default:
		if err := quant.Quantize(quant.Type(t), src, out); err != nil {
			return nil, fmt.Errorf("quantize %d values to %v: %w", len(src), t, err)
		}
	}
	return out, nil
}

// Dequantize decodes len(dst) values of type t from src into dst. src must
// hold exactly those values (len(dst) a multiple of t's block size).
func Dequantize(t GGMLType, src []byte, dst []float32) error {
	n, err := t.RowBytes(uint64(len(dst)))
	if err != nil {
		return fmt.Errorf("dequantize %d values of %v: %w", len(dst), t, err)
	}
	if uint64(len(src)) != n {
		return fmt.Errorf("dequantize %d values of %v: have %d bytes, want %d", len(dst), t, len(src), n)
	}
	le := binary.LittleEndian
	switch t {
	case TypeF32:
		for i := range dst {
			dst[i] = math.Float32frombits(le.Uint32(src[4*i:]))
		}
	case TypeF16:
		for i := range dst {
			dst[i] = F16ToF32(le.Uint16(src[2*i:]))
		}
	case TypeBF16:
		for i := range dst {
			dst[i] = BF16ToF32(le.Uint16(src[2*i:]))
		}
	default:
		if err := quant.Dequantize(quant.Type(t), src, dst); err != nil {
			return fmt.Errorf("dequantize %d values of %v: %w", len(dst), t, err)
		}
	}
	return nil
}

// Float32s decodes the whole tensor into a new slice (a copy; for tests,
// tools and small tensors — the forward pass reads Data directly).
func (t *TensorInfo) Float32s() ([]float32, error) {
	out := make([]float32, t.Elements())
	if err := Dequantize(t.Type, t.Data, out); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	return out, nil
}

// Row decodes row i (Dims[0] elements, e.g. one token's embedding) into
// dst, which must have length Dims[0].
func (t *TensorInfo) Row(i int, dst []float32) error {
	rows := t.Elements() / t.Dims[0]
	if i < 0 || uint64(i) >= rows {
		return fmt.Errorf("tensor %q: row %d out of range [0, %d)", t.Name, i, rows)
	}
	if uint64(len(dst)) != t.Dims[0] {
		return fmt.Errorf("tensor %q: row buffer has %d elements, want %d", t.Name, len(dst), t.Dims[0])
	}
	rb, err := t.Type.RowBytes(t.Dims[0])
	if err != nil {
		return fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	off := uint64(i) * rb
	if off+rb > uint64(len(t.Data)) {
		return fmt.Errorf("tensor %q: row %d past the %d data bytes", t.Name, i, len(t.Data))
	}
	return Dequantize(t.Type, t.Data[off:off+rb], dst)
}
