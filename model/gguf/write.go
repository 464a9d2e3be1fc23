package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// Writer builds a GGUF v3 file in memory order: metadata in the order set,
// tensors in the order added. The tensor bytes are referenced, not copied,
// until WriteTo.
type Writer struct {
	kvs     []KV
	index   map[string]int
	tensors []TensorInfo
	names   map[string]bool
}

// NewWriter returns an empty writer.
func NewWriter() *Writer {
	return &Writer{index: map[string]int{}, names: map[string]bool{}}
}

// SetValue sets key to v, replacing an earlier value in place. The
// alignment of the data section follows general.alignment (default 32).
func (w *Writer) SetValue(key string, v Value) {
	if i, ok := w.index[key]; ok {
		w.kvs[i].Value = v
		return
	}
	w.index[key] = len(w.kvs)
	w.kvs = append(w.kvs, KV{Key: key, Value: v})
}

// Set sets key to a Go value (see ValueOf).
func (w *Writer) Set(key string, v any) error {
	val, err := ValueOf(v)
	if err != nil {
		return fmt.Errorf("metadata %q: %w", key, err)
	}
	w.SetValue(key, val)
	return nil
}

// AddTensor appends a tensor; data must be exactly the encoded size of dims
// in type t. The slice is kept (not copied) until WriteTo.
func (w *Writer) AddTensor(name string, t GGMLType, dims []uint64, data []byte) error {
	if w.names[name] {
		return fmt.Errorf("gguf writer: duplicate tensor %q", name)
	}
	if len(dims) == 0 || len(dims) > MaxDims {
		return fmt.Errorf("gguf writer: tensor %q has %d dimensions (1..%d allowed)", name, len(dims), MaxDims)
	}
	ti := TensorInfo{Name: name, Type: t, Dims: append([]uint64(nil), dims...), Data: data}
	if !t.Supported() {
		return fmt.Errorf("gguf writer: tensor %q: %w: %v (supported: %s)", name, ErrUnknownType, t, SupportedList())
	}
	if dims[0]%uint64(t.BlockSize()) != 0 {
		return fmt.Errorf("gguf writer: tensor %q: first dimension %d is not a multiple of the %v block size %d", name, dims[0], t, t.BlockSize())
	}
	n, err := t.RowBytes(ti.Elements())
	if err != nil {
		return fmt.Errorf("gguf writer: tensor %q: %w", name, err)
	}
	if uint64(len(data)) != n {
		return fmt.Errorf("gguf writer: tensor %q %v %v has %d bytes, want %d", name, t, dims, len(data), n)
	}
	w.names[name] = true
	w.tensors = append(w.tensors, ti)
	return nil
}

// WriteTo writes the file.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	align := uint64(DefaultAlignment)
	if i, ok := w.index["general.alignment"]; ok {
		a, ok := w.kvs[i].Value.V.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 {
			return 0, fmt.Errorf("gguf writer: general.alignment must be a uint32 power of two, got %v", w.kvs[i].Value.V)
		}
		align = uint64(a)
	}
	e := &encoder{w: bufio.NewWriter(out)}
	e.bytes([]byte(Magic))
	e.u32(3)
	e.u64(uint64(len(w.tensors)))
	e.u64(uint64(len(w.kvs)))
	for _, kv := range w.kvs {
		e.str(kv.Key)
		e.u32(uint32(kv.Value.Type))
		if err := e.value(kv.Value, kv.Key); err != nil {
			return e.n, err
		}
	}
	offsets := make([]uint64, len(w.tensors))
	var off uint64
	for i, t := range w.tensors {
		offsets[i] = off
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(off)
		off += (uint64(len(t.Data)) + align - 1) / align * align
	}
	pad := func() { e.bytes(make([]byte, (align-uint64(e.n)%align)%align)) }
	if len(w.tensors) > 0 {
		pad()
	}
	for _, t := range w.tensors {
		e.bytes(t.Data)
		pad()
	}
	if e.err == nil {
		e.err = e.w.Flush()
	}
	if e.err != nil {
		return e.n, fmt.Errorf("gguf writer: %w", e.err)
	}
	return e.n, nil
}

type encoder struct {
	w   *bufio.Writer
	n   int64
	err error
	buf [8]byte
}

func (e *encoder) bytes(b []byte) {
	if e.err != nil {
		return
	}
	n, err := e.w.Write(b)
	e.n += int64(n)
	e.err = err
}

func (e *encoder) u8(x uint8) { e.bytes([]byte{x}) }
func (e *encoder) u16(x uint16) {
	binary.LittleEndian.PutUint16(e.buf[:], x)
	e.bytes(e.buf[:2])
}
func (e *encoder) u32(x uint32) {
	binary.LittleEndian.PutUint32(e.buf[:], x)
	e.bytes(e.buf[:4])
}
func (e *encoder) u64(x uint64) {
	binary.LittleEndian.PutUint64(e.buf[:], x)
	e.bytes(e.buf[:8])
}
func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	e.bytes([]byte(s))
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// value writes v's payload (the type id is written by the caller).
func (e *encoder) value(v Value, key string) error {
	bad := func() error {
		return fmt.Errorf("gguf writer: %q: type %s does not match Go value %T", key, v.TypeName(), v.V)
	}
	if v.Type == ValArray {
		e.u32(uint32(v.Elem))
		e.u64(uint64(v.Len()))
		switch x := v.V.(type) {
		case []uint8:
			e.bytes(x)
		case []int8:
			for _, y := range x {
				e.u8(uint8(y))
			}
		case []uint16:
			for _, y := range x {
				e.u16(y)
			}
		case []int16:
			for _, y := range x {
				e.u16(uint16(y))
			}
		case []uint32:
			for _, y := range x {
				e.u32(y)
			}
		case []int32:
			for _, y := range x {
				e.u32(uint32(y))
			}
		case []float32:
			for _, y := range x {
				e.u32(math.Float32bits(y))
			}
		case []bool:
			for _, y := range x {
				e.u8(b2u(y))
			}
		case []string:
			for _, y := range x {
				e.str(y)
			}
		case []uint64:
			for _, y := range x {
				e.u64(y)
			}
		case []int64:
			for _, y := range x {
				e.u64(uint64(y))
			}
		case []float64:
			for _, y := range x {
				e.u64(math.Float64bits(y))
			}
		case []Value:
			for i, y := range x {
				if y.Type != ValArray {
					return fmt.Errorf("gguf writer: %q[%d]: nested element is %s, want array", key, i, y.TypeName())
				}
				if err := e.value(y, fmt.Sprintf("%s[%d]", key, i)); err != nil {
					return err
				}
			}
		default:
			return bad()
		}
		if want, _ := ValueOf(v.V); want.Elem != v.Elem {
			return bad()
		}
		return nil
	}
	if want, err := ValueOf(v.V); err != nil || want.Type != v.Type {
		return bad()
	}
	switch x := v.V.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case bool:
		e.u8(b2u(x))
	case string:
		e.str(x)
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	}
	return nil
}
