package kernels

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/turnstile-llm/turnstile/internal/half"
	"github.com/turnstile-llm/turnstile/internal/quant"
)

// DType is the element type of a weight matrix. Values equal the GGML type
// ids so a GGUF tensor type converts directly.
type DType uint8

// The supported weight types. The block types store blocks along Cols
// (layouts in internal/quant and ggml-common.h): legacy blocks of 32
// (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and K-quant super-blocks of 256 (Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K), so Cols must be a multiple of the block size.
const (
	F32  DType = 0
	F16  DType = 1
	Q4_0 DType = DType(quant.Q4_0)
	Q4_1 DType = DType(quant.Q4_1)
	Q5_0 DType = DType(quant.Q5_0)
	Q5_1 DType = DType(quant.Q5_1)
	Q8_0 DType = 8 // blocks of 32 along Cols: fp16 scale d, then 32 int8 q; value d·q
	Q2_K DType = DType(quant.Q2_K)
	Q3_K DType = DType(quant.Q3_K)
	Q4_K DType = DType(quant.Q4_K)
	Q5_K DType = DType(quant.Q5_K)
	Q6_K DType = DType(quant.Q6_K)
	BF16 DType = 30
)

// Types lists every supported weight type, in id order.
var Types = [...]DType{F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, BF16}

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
	case BF16:
		return "BF16"
	}
	if _, _, ok := quant.Type(t).Block(); ok {
		return quant.Type(t).String()
	}
	return fmt.Sprintf("DType(%d)", uint8(t))
}

// BlockElems is the number of elements per storage block along Cols: 1 for
// F32, F16 and BF16, 32 or 256 for the block types, 0 if unsupported.
func (t DType) BlockElems() int {
	switch t {
	case F32, F16, BF16:
		return 1
	}
	e, _, _ := quant.Type(t).Block()
	return e
}

// RowBytes returns the bytes of one row of cols elements of type t.
func (t DType) RowBytes(cols int) (int, error) {
	switch t {
	case F32:
		return 4 * cols, nil
	case F16, BF16:
		return 2 * cols, nil
	}
	e, b, ok := quant.Type(t).Block()
	if !ok {
		return 0, fmt.Errorf("kernels: unsupported weight type %v", t)
	}
	if cols%e != 0 {
		return 0, fmt.Errorf("kernels: %v row of %d columns is not a multiple of %d", t, cols, e)
	}
	return cols / e * b, nil
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
	case Q8_0:
		b := row[c/Q8BlockElems*Q8BlockBytes:]
		d := F16ToF32(binary.LittleEndian.Uint16(b))
		return d * float32(int8(b[2+c%Q8BlockElems]))
	default:
		// One block decoded for one element: a reference, not a kernel.
		e, bb, _ := quant.Type(w.Type).Block()
		var buf [quant.QKK]float32
		quant.DequantizeBlock(quant.Type(w.Type), row[c/e*bb:(c/e+1)*bb], buf[:e])
		return buf[c%e]
	}
}

// Row writes row r of W, dequantised exactly (as At), to dst (Cols floats).
func (w Matrix) Row(r int, dst []float32) {
	rb := w.rowBytes()
	row := w.Data[r*rb : (r+1)*rb]
	if _, _, ok := quant.Type(w.Type).Block(); ok && w.Type != Q8_0 {
		_ = quant.Dequantize(quant.Type(w.Type), row, dst[:w.Cols]) // lengths validated
		return
	}
	for c := range dst[:w.Cols] {
		dst[c] = w.At(r, c)
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
// nearest; Q8_0 uses d = max|v|/127 per block, like GGML; the other block
// types use internal/quant's quantisers). It is used to build test and
// benchmark weights.
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
		default:
			if err := quant.Quantize(quant.Type(t), src, row); err != nil {
				return Matrix{}, fmt.Errorf("kernels: Quantize row %d: %w", r, err)
			}
		}
	}
	return Matrix{Type: t, Rows: rows, Cols: cols, Data: data}, nil
}
