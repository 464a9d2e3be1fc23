package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/turnstile-llm/turnstile/internal/mmapfile"
)

// File is a parsed GGUF file. Metadata and Tensors keep file order. It is
// read-only after Open/Parse and safe for concurrent readers; Close must not
// run while anyone still reads tensor data. Metadata values are copies on
// the Go heap and stay valid after Close.
type File struct {
	Version   uint32
	Metadata  []KV
	Tensors   []TensorInfo
	Alignment uint64
	// DataOffset is the file offset of the tensor data section.
	DataOffset uint64
	// Size is the file size in bytes.
	Size uint64

	index   map[string]int // metadata key → position in Metadata
	tensors map[string]int // tensor name → position in Tensors
	mapped  []byte         // the mmap, nil for Parse or after Close
}

// Open memory-maps the file read-only and parses it. Tensor data is not
// copied: TensorInfo.Data points into the mapping, which Close releases.
func Open(path string) (*File, error) {
	data, err := mmapfile.Map(path, 4)
	var small *mmapfile.TooSmallError
	if errors.As(err, &small) {
		return nil, fmt.Errorf("%w: %s is %d bytes", ErrTruncated, path, small.Size)
	}
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		_ = mmapfile.Unmap(data)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.mapped = data
	return f, nil
}

// Close unmaps the file (after which every TensorInfo.Data is invalid).
// It is a no-op for a File from Parse and on a second call.
func (f *File) Close() error {
	if f.mapped == nil {
		return nil
	}
	m := f.mapped
	f.mapped = nil
	for i := range f.Tensors {
		f.Tensors[i].Data = nil
	}
	if err := mmapfile.Unmap(m); err != nil {
		return fmt.Errorf("gguf: munmap: %w", err)
	}
	return nil
}

// ReleasePages drops the process's resident pages of b, tensor bytes of
// this file (see mmapfile.Release): TensorInfo.Data stays valid and reads fault
// the pages back in. Bytes of b outside the mapping are left alone, so it
// is a no-op for a File from Parse, after Close, or for b of another file.
func (f *File) ReleasePages(b []byte) error {
	if err := mmapfile.Release(f.mapped, b); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	return nil
}

// Tensor returns the named tensor's descriptor.
func (f *File) Tensor(name string) (*TensorInfo, error) {
	i, ok := f.tensors[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrMissingTensor, name)
	}
	return &f.Tensors[i], nil
}

// decoder reads little-endian values from b, failing with ErrTruncated
// (naming what it was reading) instead of running past the end.
type decoder struct {
	b   []byte
	off uint64
}

func (d *decoder) remaining() uint64 { return uint64(len(d.b)) - d.off }

func (d *decoder) take(n uint64, what string) ([]byte, error) {
	if n > d.remaining() {
		return nil, fmt.Errorf("%w: %s needs %d bytes at offset %d, %d left", ErrTruncated, what, n, d.off, d.remaining())
	}
	s := d.b[d.off : d.off+n : d.off+n]
	d.off += n
	return s, nil
}

func (d *decoder) u8(what string) (uint8, error) {
	s, err := d.take(1, what)
	if err != nil {
		return 0, err
	}
	return s[0], nil
}

func (d *decoder) u16(what string) (uint16, error) {
	s, err := d.take(2, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(s), nil
}

func (d *decoder) u32(what string) (uint32, error) {
	s, err := d.take(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(s), nil
}

func (d *decoder) u64(what string) (uint64, error) {
	s, err := d.take(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(s), nil
}

func (d *decoder) str(what string) (string, error) {
	n, err := d.u64(what + " length")
	if err != nil {
		return "", err
	}
	s, err := d.take(n, what)
	if err != nil {
		return "", err
	}
	return string(s), nil
}

// count reads a uint64 count of items each at least minSize bytes and
// rejects counts the remaining bytes cannot hold, so that no allocation is
// sized by an unchecked number.
func (d *decoder) count(minSize uint64, what string) (int, error) {
	n, err := d.u64(what)
	if err != nil {
		return 0, err
	}
	if minSize > 0 && n > d.remaining()/minSize {
		return 0, fmt.Errorf("%w: %s = %d cannot fit in the %d bytes left", ErrTruncated, what, n, d.remaining())
	}
	return int(n), nil
}

// maxNesting bounds arrays of arrays so that a crafted file cannot recurse deeply.
const maxNesting = 8

// Parse parses a GGUF image held in memory. Tensor data slices alias data.
func Parse(data []byte) (*File, error) {
	d := &decoder{b: data}
	magic, err := d.take(4, "magic")
	if err != nil {
		return nil, err
	}
	if string(magic) != Magic {
		return nil, fmt.Errorf("%w: %q, want %q", ErrBadMagic, magic, Magic)
	}
	f := &File{Size: uint64(len(data)), index: map[string]int{}, tensors: map[string]int{}}
	if f.Version, err = d.u32("version"); err != nil {
		return nil, err
	}
	if f.Version != 2 && f.Version != 3 {
		return nil, fmt.Errorf("%w: %d (want 2 or 3; version 1 and big-endian files are not read)", ErrBadVersion, f.Version)
	}
	// Minimum encoded sizes: a tensor info is name length + n_dims + type +
	// offset; a key/value is key length + value type + 1 value byte.
	nTensors, err := d.count(8+4+4+8, "tensor count")
	if err != nil {
		return nil, err
	}
	nKV, err := d.count(8+4+1, "metadata count")
	if err != nil {
		return nil, err
	}
	f.Metadata = make([]KV, 0, nKV)
	for i := 0; i < nKV; i++ {
		key, err := d.str(fmt.Sprintf("metadata key #%d", i))
		if err != nil {
			return nil, err
		}
		if _, dup := f.index[key]; dup {
			return nil, fmt.Errorf("%w: duplicate metadata key %q", ErrMalformed, key)
		}
		vt, err := d.u32(fmt.Sprintf("type of %q", key))
		if err != nil {
			return nil, err
		}
		v, err := d.value(ValueType(vt), key, 0)
		if err != nil {
			return nil, err
		}
		f.index[key] = len(f.Metadata)
		f.Metadata = append(f.Metadata, KV{Key: key, Value: v})
	}
	f.Alignment = DefaultAlignment
	if f.Has("general.alignment") {
		a, err := f.Uint32("general.alignment")
		if err != nil {
			return nil, err
		}
		if a == 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("%w: general.alignment = %d is not a power of two", ErrMalformed, a)
		}
		f.Alignment = uint64(a)
	}
	f.Tensors = make([]TensorInfo, 0, nTensors)
	for i := 0; i < nTensors; i++ {
		t, err := d.tensorInfo(i)
		if err != nil {
			return nil, err
		}
		if _, dup := f.tensors[t.Name]; dup {
			return nil, fmt.Errorf("%w: duplicate tensor %q", ErrMalformed, t.Name)
		}
		f.tensors[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	// The data section starts at the next multiple of the alignment; a file
	// with no tensors may end before it.
	f.DataOffset = (d.off + f.Alignment - 1) / f.Alignment * f.Alignment
	if nTensors > 0 && f.DataOffset > f.Size {
		return nil, fmt.Errorf("%w: data section starts at %d, file is %d bytes", ErrTruncated, f.DataOffset, f.Size)
	}
	for i := range f.Tensors {
		t := &f.Tensors[i]
		size, err := t.Type.RowBytes(t.Elements())
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		if t.Offset%f.Alignment != 0 {
			return nil, fmt.Errorf("%w: tensor %q offset %d is not a multiple of the alignment %d", ErrMalformed, t.Name, t.Offset, f.Alignment)
		}
		avail := f.Size - f.DataOffset
		if t.Offset > avail || size > avail-t.Offset {
			return nil, fmt.Errorf("%w: tensor %q needs bytes [%d, %d) of the data section, which has %d", ErrTruncated, t.Name, t.Offset, t.Offset+size, avail)
		}
		start := f.DataOffset + t.Offset
		t.Data = data[start : start+size : start+size]
	}
	return f, nil
}

func (d *decoder) tensorInfo(i int) (TensorInfo, error) {
	var t TensorInfo
	var err error
	if t.Name, err = d.str(fmt.Sprintf("tensor #%d name", i)); err != nil {
		return t, err
	}
	nd, err := d.u32(fmt.Sprintf("tensor %q dimension count", t.Name))
	if err != nil {
		return t, err
	}
	if nd == 0 || nd > MaxDims {
		return t, fmt.Errorf("%w: tensor %q has %d dimensions (1..%d allowed)", ErrMalformed, t.Name, nd, MaxDims)
	}
	t.Dims = make([]uint64, nd)
	elems := uint64(1)
	for j := range t.Dims {
		if t.Dims[j], err = d.u64(fmt.Sprintf("tensor %q dimension %d", t.Name, j)); err != nil {
			return t, err
		}
		if t.Dims[j] == 0 {
			return t, fmt.Errorf("%w: tensor %q dimension %d is 0", ErrMalformed, t.Name, j)
		}
		if elems > math.MaxInt64/t.Dims[j] {
			return t, fmt.Errorf("%w: tensor %q shape %v overflows", ErrMalformed, t.Name, t.Dims[:j+1])
		}
		elems *= t.Dims[j]
	}
	typ, err := d.u32(fmt.Sprintf("tensor %q type", t.Name))
	if err != nil {
		return t, err
	}
	t.Type = GGMLType(typ)
	if !t.Type.Supported() {
		return t, fmt.Errorf("%w: tensor %q has type %v (id %d); supported: %s", ErrUnknownType, t.Name, t.Type, typ, SupportedList())
	}
	if t.Dims[0]%uint64(t.Type.BlockSize()) != 0 {
		return t, fmt.Errorf("%w: tensor %q first dimension %d is not a multiple of the %v block size %d", ErrShapeMismatch, t.Name, t.Dims[0], t.Type, t.Type.BlockSize())
	}
	if t.Offset, err = d.u64(fmt.Sprintf("tensor %q offset", t.Name)); err != nil {
		return t, err
	}
	return t, nil
}

// value decodes one metadata value of type vt for key.
func (d *decoder) value(vt ValueType, key string, depth int) (Value, error) {
	what := fmt.Sprintf("value of %q", key)
	var v Value
	v.Type = vt
	var err error
	switch vt {
	case ValUint8:
		var x uint8
		x, err = d.u8(what)
		v.V = x
	case ValInt8:
		var x uint8
		x, err = d.u8(what)
		v.V = int8(x)
	case ValUint16:
		var x uint16
		x, err = d.u16(what)
		v.V = x
	case ValInt16:
		var x uint16
		x, err = d.u16(what)
		v.V = int16(x)
	case ValUint32:
		var x uint32
		x, err = d.u32(what)
		v.V = x
	case ValInt32:
		var x uint32
		x, err = d.u32(what)
		v.V = int32(x)
	case ValFloat32:
		var x uint32
		x, err = d.u32(what)
		v.V = math.Float32frombits(x)
	case ValBool:
		var x uint8
		x, err = d.u8(what)
		if err == nil && x > 1 {
			return v, fmt.Errorf("%w: %q bool byte is %d", ErrMalformed, key, x)
		}
		v.V = x == 1
	case ValString:
		var s string
		s, err = d.str(what)
		v.V = s
	case ValUint64:
		var x uint64
		x, err = d.u64(what)
		v.V = x
	case ValInt64:
		var x uint64
		x, err = d.u64(what)
		v.V = int64(x)
	case ValFloat64:
		var x uint64
		x, err = d.u64(what)
		v.V = math.Float64frombits(x)
	case ValArray:
		return d.array(key, depth)
	default:
		return v, fmt.Errorf("%w: %q has unknown value type %d", ErrMalformed, key, uint32(vt))
	}
	return v, err
}

func (d *decoder) array(key string, depth int) (Value, error) {
	if depth >= maxNesting {
		return Value{}, fmt.Errorf("%w: %q nests arrays deeper than %d", ErrMalformed, key, maxNesting)
	}
	et, err := d.u32(fmt.Sprintf("element type of %q", key))
	if err != nil {
		return Value{}, err
	}
	elem := ValueType(et)
	minSize := uint64(elem.scalarSize())
	switch elem {
	case ValString:
		minSize = 8
	case ValArray:
		minSize = 12
	}
	if minSize == 0 {
		return Value{}, fmt.Errorf("%w: %q has unknown array element type %d", ErrMalformed, key, et)
	}
	n, err := d.count(minSize, fmt.Sprintf("length of %q", key))
	if err != nil {
		return Value{}, err
	}
	v := Value{Type: ValArray, Elem: elem}
	what := fmt.Sprintf("elements of %q", key)
	if elem != ValString && elem != ValArray && elem != ValBool {
		raw, err := d.take(uint64(n)*minSize, what)
		if err != nil {
			return v, err
		}
		v.V = decodeScalars(elem, raw, n)
		return v, nil
	}
	switch elem {
	case ValBool:
		out := make([]bool, n)
		for i := range out {
			x, err := d.u8(what)
			if err != nil {
				return v, err
			}
			if x > 1 {
				return v, fmt.Errorf("%w: %q[%d] bool byte is %d", ErrMalformed, key, i, x)
			}
			out[i] = x == 1
		}
		v.V = out
	case ValString:
		out := make([]string, n)
		for i := range out {
			if out[i], err = d.str(what); err != nil {
				return v, err
			}
		}
		v.V = out
	case ValArray:
		out := make([]Value, n)
		for i := range out {
			if out[i], err = d.array(fmt.Sprintf("%s[%d]", key, i), depth+1); err != nil {
				return v, err
			}
		}
		v.V = out
	}
	return v, nil
}

// decodeScalars decodes n little-endian fixed-size elements of type t from raw.
func decodeScalars(t ValueType, raw []byte, n int) any {
	le := binary.LittleEndian
	switch t {
	case ValUint8:
		return append([]uint8(nil), raw...)
	case ValInt8:
		out := make([]int8, n)
		for i := range out {
			out[i] = int8(raw[i])
		}
		return out
	case ValUint16:
		out := make([]uint16, n)
		for i := range out {
			out[i] = le.Uint16(raw[2*i:])
		}
		return out
	case ValInt16:
		out := make([]int16, n)
		for i := range out {
			out[i] = int16(le.Uint16(raw[2*i:]))
		}
		return out
	case ValUint32:
		out := make([]uint32, n)
		for i := range out {
			out[i] = le.Uint32(raw[4*i:])
		}
		return out
	case ValInt32:
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(le.Uint32(raw[4*i:]))
		}
		return out
	case ValFloat32:
		out := make([]float32, n)
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
		return out
	case ValUint64:
		out := make([]uint64, n)
		for i := range out {
			out[i] = le.Uint64(raw[8*i:])
		}
		return out
	case ValInt64:
		out := make([]int64, n)
		for i := range out {
			out[i] = int64(le.Uint64(raw[8*i:]))
		}
		return out
	case ValFloat64:
		out := make([]float64, n)
		for i := range out {
			out[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		}
		return out
	}
	return nil
}
