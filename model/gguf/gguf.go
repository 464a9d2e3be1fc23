// Package gguf reads and writes GGUF model files (versions 2 and 3): header,
// typed metadata, tensor descriptors and the tensor data over one read-only
// memory map, plus the accepted architectures' configuration, shape checks
// and synthetic models (SynthLlama), and the conversions of every tensor
// type it accepts.
//
// Accepted: GGUF v2 and v3, little-endian; tensor types F32, F16, BF16, the
// legacy block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the K-quants Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K (any other type id is an error naming the tensor,
// the type and the supported list); architectures llama (Llama 1 to 3 and
// Mistral: GQA or not, separate or tied output matrix, RoPE scaling none,
// linear or llama3), qwen2 and qwen3 (Archs; each an ArchSpec). Everything
// else, other architectures included, is rejected with an error that names
// it.
//
// Fixtures from llama.cpp check the conversions and the forward pass: the
// repository's testdata/quant holds llama.cpp-quantised tensors and what ggml decodes
// from them (scripts/make-quant-fixtures.sh), testdata/arch llama.cpp's
// logits and greedy tokens per architecture (scripts/make-arch-fixtures.sh),
// and testdata/matrix the same for every weight type × architecture and two
// llama.cpp mixes (scripts/make-matrix-fixtures.sh, checked by
// model.TestMatrixMatchesLlamaCpp).
//
// Parsing never trusts a length or count from the file: each is bounded by
// the bytes that remain before anything is allocated, so a malformed file
// yields an error naming the offending key or tensor, never a panic.
package gguf

import (
	"errors"
	"fmt"
	"strings"

	"github.com/turnstile-llm/turnstile/internal/quant"
)

// Errors that callers (and tests) can match with errors.Is; the returned
// error wraps one of them with the key, tensor or value at fault.
var (
	ErrTruncated       = errors.New("gguf: truncated file")
	ErrBadMagic        = errors.New("gguf: bad magic")
	ErrBadVersion      = errors.New("gguf: unsupported version")
	ErrMalformed       = errors.New("gguf: malformed file")
	ErrUnknownType     = errors.New("gguf: unsupported tensor type")
	ErrMissingKey      = errors.New("gguf: missing metadata key")
	ErrWrongType       = errors.New("gguf: metadata value has the wrong type")
	ErrMissingTensor   = errors.New("gguf: missing tensor")
	ErrShapeMismatch   = errors.New("gguf: tensor shape mismatch")
	ErrUnsupportedArch = errors.New("gguf: unsupported architecture")
)

// Magic is the 4-byte file signature "GGUF".
const Magic = "GGUF"

// DefaultAlignment is the tensor data alignment when general.alignment is absent.
const DefaultAlignment = 32

// MaxDims is the most dimensions a tensor may have (GGML_MAX_DIMS).
const MaxDims = 4

// GGMLType is a tensor element type id as stored in GGUF.
type GGMLType uint32

// The tensor types turnstile accepts. Any other id is ErrUnknownType.
const (
	TypeF32  GGMLType = 0
	TypeF16  GGMLType = 1
	TypeQ4_0 GGMLType = GGMLType(quant.Q4_0)
	TypeQ4_1 GGMLType = GGMLType(quant.Q4_1)
	TypeQ5_0 GGMLType = GGMLType(quant.Q5_0)
	TypeQ5_1 GGMLType = GGMLType(quant.Q5_1)
	TypeQ8_0 GGMLType = GGMLType(quant.Q8_0)
	TypeQ2_K GGMLType = GGMLType(quant.Q2_K)
	TypeQ3_K GGMLType = GGMLType(quant.Q3_K)
	TypeQ4_K GGMLType = GGMLType(quant.Q4_K)
	TypeQ5_K GGMLType = GGMLType(quant.Q5_K)
	TypeQ6_K GGMLType = GGMLType(quant.Q6_K)
	TypeBF16 GGMLType = 30
)

// SupportedTypes lists every type Supported accepts, in id order.
var SupportedTypes = [...]GGMLType{TypeF32, TypeF16, TypeQ4_0, TypeQ4_1, TypeQ5_0, TypeQ5_1,
	TypeQ8_0, TypeQ2_K, TypeQ3_K, TypeQ4_K, TypeQ5_K, TypeQ6_K, TypeBF16}

// SupportedList is SupportedTypes as "F32, F16, ..., BF16" for error messages.
func SupportedList() string {
	names := make([]string, len(SupportedTypes))
	for i, t := range SupportedTypes {
		names[i] = t.String()
	}
	return strings.Join(names, ", ")
}

// Q8_0 block layout: QK8_0 weights share one F16 scale.
const (
	QK8_0         = quant.QK
	BlockBytesQ80 = quant.BytesQ8_0
)

// QK_K is the K-quants' super-block size in elements.
const QK_K = quant.QKK

// ggmlNames names well-known type ids so that errors about unsupported
// types say what the file holds.
var ggmlNames = map[GGMLType]string{
	0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
	10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K",
	16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S",
	22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64",
	29: "IQ1_M", 30: "BF16",
}

// String returns the GGML name of the type, e.g. "Q8_0", or "type(N)".
func (t GGMLType) String() string {
	if n, ok := ggmlNames[t]; ok {
		return n
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// Supported reports whether turnstile can load tensors of this type.
func (t GGMLType) Supported() bool { return t.BlockSize() != 0 }

// BlockSize is the number of elements per storage block (1 for F32, F16 and
// BF16, 32 for the legacy block types, 256 for the K-quants); a tensor's
// first dimension must be a multiple of it. 0 for unsupported types.
func (t GGMLType) BlockSize() int {
	switch t {
	case TypeF32, TypeF16, TypeBF16:
		return 1
	}
	e, _, _ := quant.Type(t).Block()
	return e
}

// BlockBytes is the size in bytes of one block. 0 for unsupported types.
func (t GGMLType) BlockBytes() int {
	switch t {
	case TypeF32:
		return 4
	case TypeF16, TypeBF16:
		return 2
	}
	_, b, _ := quant.Type(t).Block()
	return b
}

// RowBytes returns the bytes used by n consecutive elements (n a multiple of
// BlockSize), or an error naming n and the type.
func (t GGMLType) RowBytes(n uint64) (uint64, error) {
	bs := uint64(t.BlockSize())
	if bs == 0 {
		return 0, fmt.Errorf("%w: %v (supported: %s)", ErrUnknownType, t, SupportedList())
	}
	if n%bs != 0 {
		return 0, fmt.Errorf("%w: %d elements is not a multiple of the %v block size %d", ErrShapeMismatch, n, t, bs)
	}
	blocks := n / bs
	bb := uint64(t.BlockBytes())
	if blocks > (1<<63)/bb {
		return 0, fmt.Errorf("%w: %d elements of %v overflow", ErrMalformed, n, t)
	}
	return blocks * bb, nil
}

// TensorInfo describes one tensor and holds its bytes.
type TensorInfo struct {
	Name string
	Type GGMLType
	// Dims are the GGML dimensions, ne0 first (ne0 varies fastest; a weight
	// matrix used as y = W·x has Dims = [in, out]).
	Dims []uint64
	// Offset is the byte offset of the data from the start of the data section.
	Offset uint64
	// Data is the tensor's bytes inside the file image (memory-mapped when
	// the File came from Open): read-only, valid until File.Close.
	Data []byte
}

// Elements returns the number of elements (product of Dims).
func (t *TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Shape returns Dims formatted as "[a b c]".
func (t *TensorInfo) Shape() string { return fmt.Sprint(t.Dims) }
