package kernels

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/turnstile-llm/turnstile/internal/half"
)

// DType is the element type of a weight matrix. Values equal the GGML type
// ids so a GGUF tensor type converts directly.
type DType uint8

// The supported weight types.
const (
	F32  DType = 0
	F16  DType = 1
	Q8_0 DType = 8 // blocks of 32 along Cols: fp16 scale d, then 32 int8 q; value d·q
	BF16 DType = 30
)

// Q8_0 block geometry.
const (
	Q8BlockElems = 32
	Q8BlockBytes = 34
)

// String returns the GGML name of the type.
func (t DType) String() string {
	switch t {
	case F32:
		return "F32"
	case F16:
		return "F16"
	case Q8_0:
		return "Q8_0"
	case BF16:
		return "BF16"
	}
	return fmt.Sprintf("DType(%d)", uint8(t))
}

// RowBytes returns the bytes of one row of cols elements of type t.
func (t DType) RowBytes(cols int) (int, error) {
	switch t {
	case F32:
		return 4 * cols, nil
	case F16, BF16:
		return 2 * cols, nil
	case Q8_0:
		if cols%Q8BlockElems != 0 {
			return 0, fmt.Errorf("kernels: Q8_0 row of %d columns is not a multiple of %d", cols, Q8BlockElems)
		}
		return cols / Q8BlockElems * Q8BlockBytes, nil
	}
	return 0, fmt.Errorf("kernels: unsupported weight type %v", t)
}

// Matrix is a weight matrix W, row-major [Rows][Cols]: Rows output features,
// Cols input features. Data may be mmapped or Go memory; kernels only read it
// during a call and never retain it.
type Matrix struct {
	Type       DType
	Rows, Cols int
	Data       []byte
}

// Validate checks the shape against the data length.
func (w Matrix) Validate() error {
	if w.Rows <= 0 || w.Cols <= 0 {
		return fmt.Errorf("kernels: matrix shape %dx%d must be positive", w.Rows, w.Cols)
	}
	rb, err := w.Type.RowBytes(w.Cols)
	if err != nil {
		return err
	}
	if len(w.Data) != w.Rows*rb {
		return fmt.Errorf("kernels: %v matrix %dx%d needs %d bytes, Data has %d", w.Type, w.Rows, w.Cols, w.Rows*rb, len(w.Data))
	}
	return nil
}

// rowBytes is RowBytes for a validated matrix.
func (w Matrix) rowBytes() int {
	rb, _ := w.Type.RowBytes(w.Cols)
	return rb
}

// At returns element (r, c) of W as float32 (the exact dequantized value).
func (w Matrix) At(r, c int) float32 {
	rb := w.rowBytes()
	row := w.Data[r*rb : (r+1)*rb]
	switch w.Type {
	case F32:
		return math.Float32frombits(binary.LittleEndian.Uint32(row[4*c:]))
	case F16:
		return F16ToF32(binary.LittleEndian.Uint16(row[2*c:]))
	case BF16:
		return BF16ToF32(binary.LittleEndian.Uint16(row[2*c:]))
	default:
		b := row[c/Q8BlockElems*Q8BlockBytes:]
		d := F16ToF32(binary.LittleEndian.Uint16(b))
		return d * float32(int8(b[2+c%Q8BlockElems]))
	}
}

// F16ToF32 converts an IEEE half (bits) to float32 exactly (see internal/half).
func F16ToF32(h uint16) float32 { return half.F16ToF32(h) }

// F32ToF16 rounds float32 to the nearest IEEE half, ties to even (see internal/half).
func F32ToF16(f float32) uint16 { return half.F32ToF16(f) }

// BF16ToF32 converts a bfloat16 (bits) to float32 exactly.
func BF16ToF32(h uint16) float32 { return half.BF16ToF32(h) }

// F32ToBF16 rounds float32 to the nearest bfloat16, ties to even (see internal/half).
func F32ToBF16(f float32) uint16 { return half.F32ToBF16(f) }

// Quantize encodes a float32 matrix [rows][cols] as type t (round to
// nearest; Q8_0 uses d = max|v|/127 per block, like GGML). It is used to
// build test and benchmark weights.
func Quantize(t DType, rows, cols int, v []float32) (Matrix, error) {
	if len(v) != rows*cols {
		return Matrix{}, fmt.Errorf("kernels: Quantize %dx%d needs %d values, got %d", rows, cols, rows*cols, len(v))
	}
	rb, err := t.RowBytes(cols)
	if err != nil {
		return Matrix{}, err
	}
	data := make([]byte, rows*rb)
	for r := 0; r < rows; r++ {
		row := data[r*rb : (r+1)*rb]
		src := v[r*cols : (r+1)*cols]
		switch t {
		case F32:
			for c, x := range src {
				binary.LittleEndian.PutUint32(row[4*c:], math.Float32bits(x))
			}
		case F16:
			for c, x := range src {
				binary.LittleEndian.PutUint16(row[2*c:], F32ToF16(x))
			}
		case BF16:
			for c, x := range src {
				binary.LittleEndian.PutUint16(row[2*c:], F32ToBF16(x))
			}
		case Q8_0:
			for blk := 0; blk < cols/Q8BlockElems; blk++ {
				vals := src[blk*Q8BlockElems : (blk+1)*Q8BlockElems]
				var amax float32
				for _, x := range vals {
					amax = max(amax, float32(math.Abs(float64(x))))
				}
				dh := F32ToF16(amax / 127)
				d := F16ToF32(dh)
				out := row[blk*Q8BlockBytes:]
				binary.LittleEndian.PutUint16(out, dh)
				for i, x := range vals {
					var q float64
					if d != 0 {
						q = math.Round(float64(x / d))
					}
					out[2+i] = byte(int8(max(-127, min(127, q))))
				}
			}
		}
	}
	return Matrix{Type: t, Rows: rows, Cols: cols, Data: data}, nil
}
