// Package safetensors reads and writes the safetensors format of Hugging
// Face checkpoints: an 8-byte little-endian header length N, N bytes of
// JSON mapping each tensor name to {dtype, shape, data_offsets} (and an
// optional "__metadata__" of strings), then the raw little-endian tensor
// bytes, offsets relative to the end of the header. Open memory-maps the
// file read-only; tensor data is never copied. The header's offsets, sizes
// and overlaps are checked before any tensor is handed out (the parser is
// fuzzed); a writer makes the format too. It depends on nothing outside
// the standard library but internal/mmapfile.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/turnstile-llm/turnstile/internal/mmapfile"
)

// MaxHeader is the largest JSON header accepted, in bytes (the format's
// own limit, 100 MB).
const MaxHeader = 100 << 20

// ErrMalformed is wrapped by every error about the file's structure.
var ErrMalformed = errors.New("safetensors: malformed file")

// DTypeSize returns the bytes per element of a safetensors dtype name, 0
// for a name the format does not define.
func DTypeSize(dtype string) int {
	switch dtype {
	case "F64", "I64", "U64":
		return 8
	case "F32", "I32", "U32":
		return 4
	case "F16", "BF16", "I16", "U16":
		return 2
	case "I8", "U8", "BOOL", "F8_E4M3", "F8_E5M2":
		return 1
	}
	return 0
}

// Tensor is one tensor: its name, dtype name ("BF16", "F32", ...), shape
// (row-major, outermost first) and bytes. Data aliases the file's mapping
// (or Parse's input) and is valid until Close.
type Tensor struct {
	Name  string
	DType string
	Shape []int
	Data  []byte
}

// Elements is the product of the shape (1 for a scalar).
func (t *Tensor) Elements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File is a parsed safetensors file. Tensors are in data order.
type File struct {
	Tensors  []Tensor
	Metadata map[string]string
	byName   map[string]int
	mapped   []byte
}

// Tensor returns the named tensor, or nil.
func (f *File) Tensor(name string) *Tensor {
	if i, ok := f.byName[name]; ok {
		return &f.Tensors[i]
	}
	return nil
}

type entry struct {
	DType       string  `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// Parse reads a safetensors file held in data. Tensor data aliases data.
// Every offset, size and shape is checked: tensors lie inside the data
// section, do not overlap, and have exactly shape × dtype size bytes.
func Parse(data []byte) (*File, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the 8-byte header length", ErrMalformed, len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > MaxHeader || n > uint64(len(data)-8) {
		return nil, fmt.Errorf("%w: header length %d exceeds the file (%d bytes) or the %d-byte limit", ErrMalformed, n, len(data), MaxHeader)
	}
	hdr, body := data[8:8+n], data[8+n:]
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(hdr))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: header JSON: %v", ErrMalformed, err)
	}
	if raw == nil {
		return nil, fmt.Errorf("%w: header is not a JSON object", ErrMalformed)
	}
	f := &File{byName: map[string]int{}}
	var begins []int64 // data offset of each f.Tensors entry
	if m, ok := raw["__metadata__"]; ok {
		if err := json.Unmarshal(m, &f.Metadata); err != nil {
			return nil, fmt.Errorf("%w: __metadata__ must map strings to strings: %v", ErrMalformed, err)
		}
		delete(raw, "__metadata__")
	}
	for name, msg := range raw {
		var e entry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, fmt.Errorf("%w: tensor %q: %v", ErrMalformed, name, err)
		}
		size := DTypeSize(e.DType)
		if size == 0 {
			return nil, fmt.Errorf("%w: tensor %q has dtype %q (known: F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL F8_E4M3 F8_E5M2)", ErrMalformed, name, e.DType)
		}
		if len(e.DataOffsets) != 2 {
			return nil, fmt.Errorf("%w: tensor %q has %d data_offsets, want 2", ErrMalformed, name, len(e.DataOffsets))
		}
		begin, end := e.DataOffsets[0], e.DataOffsets[1]
		if begin < 0 || end < begin || end > int64(len(body)) {
			return nil, fmt.Errorf("%w: tensor %q data_offsets [%d, %d] outside the %d-byte data section", ErrMalformed, name, begin, end, len(body))
		}
		elems := int64(1)
		shape := make([]int, len(e.Shape))
		for i, d := range e.Shape {
			if d < 0 || (d > 0 && elems > math.MaxInt32*int64(1<<16)/d) {
				return nil, fmt.Errorf("%w: tensor %q shape %v is negative or too large", ErrMalformed, name, e.Shape)
			}
			elems *= d
			shape[i] = int(d)
		}
		if elems*int64(size) != end-begin {
			return nil, fmt.Errorf("%w: tensor %q (%s %v) has %d bytes, want %d", ErrMalformed, name, e.DType, e.Shape, end-begin, elems*int64(size))
		}
		f.Tensors = append(f.Tensors, Tensor{Name: name, DType: e.DType, Shape: shape, Data: body[begin:end:end]})
		begins = append(begins, begin)
	}
	// Data order; then no two tensors may share bytes.
	idx := make([]int, len(f.Tensors))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(i, j int) bool {
		a, b := idx[i], idx[j]
		if begins[a] != begins[b] {
			return begins[a] < begins[b]
		}
		return f.Tensors[a].Name < f.Tensors[b].Name
	})
	sorted := make([]Tensor, len(idx))
	for i, k := range idx {
		sorted[i] = f.Tensors[k]
		if i > 0 {
			p := idx[i-1]
			if begins[p]+int64(len(f.Tensors[p].Data)) > begins[k] {
				return nil, fmt.Errorf("%w: tensors %q and %q overlap", ErrMalformed, f.Tensors[p].Name, f.Tensors[k].Name)
			}
		}
		f.byName[sorted[i].Name] = i
	}
	f.Tensors = sorted
	return f, nil
}

// Open memory-maps the file at path read-only and parses it. Close
// releases the mapping.
func Open(path string) (*File, error) {
	data, err := mmapfile.Map(path, 8)
	var small *mmapfile.TooSmallError
	if errors.As(err, &small) {
		return nil, fmt.Errorf("%w: %s is %d bytes", ErrMalformed, path, small.Size)
	}
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		_ = mmapfile.Unmap(data)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.mapped = data
	return f, nil
}

// Close unmaps a file from Open (every Tensor.Data is invalid after it);
// a no-op for a File from Parse and on a second call.
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
		return fmt.Errorf("safetensors: munmap: %w", err)
	}
	return nil
}

// ReleasePages drops the process's resident pages of b, tensor bytes of
// this file (see mmapfile.Release): Tensor.Data stays valid and reads fault
// the pages back in. Bytes of b outside the mapping are left alone, so it
// is a no-op for a File from Parse, after Close, or for b of another file.
func (f *File) ReleasePages(b []byte) error {
	if err := mmapfile.Release(f.mapped, b); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// Write writes tensors (in the given order, each Data of exactly its
// shape's size) and metadata as one safetensors file. The header is padded
// with spaces to a multiple of 8 bytes, as the reference writer does.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	hdr := map[string]any{}
	if len(metadata) > 0 {
		hdr["__metadata__"] = metadata
	}
	var off int64
	names := map[string]bool{}
	for _, t := range tensors {
		if names[t.Name] || t.Name == "__metadata__" || strings.TrimSpace(t.Name) == "" {
			return fmt.Errorf("safetensors: tensor name %q is empty, reserved or repeated", t.Name)
		}
		names[t.Name] = true
		size := DTypeSize(t.DType)
		if size == 0 || t.Elements()*size != len(t.Data) {
			return fmt.Errorf("safetensors: tensor %q (%s %v) has %d bytes, want %d", t.Name, t.DType, t.Shape, len(t.Data), t.Elements()*size)
		}
		hdr[t.Name] = entry{DType: t.DType, Shape: toInt64(t.Shape), DataOffsets: []int64{off, off + int64(len(t.Data))}}
		off += int64(len(t.Data))
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		return fmt.Errorf("safetensors: header: %w", err)
	}
	for len(js)%8 != 0 {
		js = append(js, ' ')
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(js)))
	if _, err := w.Write(slices.Concat(n[:], js)); err != nil {
		return err
	}
	for _, t := range tensors {
		if _, err := w.Write(t.Data); err != nil {
			return err
		}
	}
	return nil
}

func toInt64(s []int) []int64 {
	out := make([]int64, len(s))
	for i, v := range s {
		out[i] = int64(v)
	}
	return out
}
