package gguf

import (
	"fmt"
	"math"
)

// ValueType is a metadata value type id as stored in GGUF.
type ValueType uint32

// The metadata value types of GGUF v2/v3.
const (
	ValUint8   ValueType = 0
	ValInt8    ValueType = 1
	ValUint16  ValueType = 2
	ValInt16   ValueType = 3
	ValUint32  ValueType = 4
	ValInt32   ValueType = 5
	ValFloat32 ValueType = 6
	ValBool    ValueType = 7
	ValString  ValueType = 8
	ValArray   ValueType = 9
	ValUint64  ValueType = 10
	ValInt64   ValueType = 11
	ValFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32",
	"float32", "bool", "string", "array", "uint64", "int64", "float64"}

// String returns the type's name, e.g. "uint32".
func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("valuetype(%d)", uint32(t))
}

// scalarSize is the encoded size of a fixed-size scalar, 0 for string/array/unknown.
func (t ValueType) scalarSize() int {
	switch t {
	case ValUint8, ValInt8, ValBool:
		return 1
	case ValUint16, ValInt16:
		return 2
	case ValUint32, ValInt32, ValFloat32:
		return 4
	case ValUint64, ValInt64, ValFloat64:
		return 8
	}
	return 0
}

// Value is one metadata value. V holds the Go value matching Type:
// uint8, int8, uint16, int16, uint32, int32, float32, bool, string, uint64,
// int64, float64; for ValArray, a slice of the element type ([]uint8 ...
// []string, []bool) or []Value for arrays of arrays, with Elem naming the
// element type.
type Value struct {
	Type ValueType
	Elem ValueType
	V    any
}

// KV is one metadata entry.
type KV struct {
	Key   string
	Value Value
}

// ValueOf wraps a Go value of one of the types listed on Value (slices
// become arrays). It fails for any other Go type.
func ValueOf(v any) (Value, error) {
	switch x := v.(type) {
	case uint8:
		return Value{Type: ValUint8, V: x}, nil
	case int8:
		return Value{Type: ValInt8, V: x}, nil
	case uint16:
		return Value{Type: ValUint16, V: x}, nil
	case int16:
		return Value{Type: ValInt16, V: x}, nil
	case uint32:
		return Value{Type: ValUint32, V: x}, nil
	case int32:
		return Value{Type: ValInt32, V: x}, nil
	case float32:
		return Value{Type: ValFloat32, V: x}, nil
	case bool:
		return Value{Type: ValBool, V: x}, nil
	case string:
		return Value{Type: ValString, V: x}, nil
	case uint64:
		return Value{Type: ValUint64, V: x}, nil
	case int64:
		return Value{Type: ValInt64, V: x}, nil
	case float64:
		return Value{Type: ValFloat64, V: x}, nil
	case []uint8:
		return Value{Type: ValArray, Elem: ValUint8, V: x}, nil
	case []int8:
		return Value{Type: ValArray, Elem: ValInt8, V: x}, nil
	case []uint16:
		return Value{Type: ValArray, Elem: ValUint16, V: x}, nil
	case []int16:
		return Value{Type: ValArray, Elem: ValInt16, V: x}, nil
	case []uint32:
		return Value{Type: ValArray, Elem: ValUint32, V: x}, nil
	case []int32:
		return Value{Type: ValArray, Elem: ValInt32, V: x}, nil
	case []float32:
		return Value{Type: ValArray, Elem: ValFloat32, V: x}, nil
	case []bool:
		return Value{Type: ValArray, Elem: ValBool, V: x}, nil
	case []string:
		return Value{Type: ValArray, Elem: ValString, V: x}, nil
	case []uint64:
		return Value{Type: ValArray, Elem: ValUint64, V: x}, nil
	case []int64:
		return Value{Type: ValArray, Elem: ValInt64, V: x}, nil
	case []float64:
		return Value{Type: ValArray, Elem: ValFloat64, V: x}, nil
	case []Value:
		return Value{Type: ValArray, Elem: ValArray, V: x}, nil
	}
	return Value{}, fmt.Errorf("gguf: no metadata type for Go type %T", v)
}

// TypeName describes the value's type, e.g. "uint32" or "array[string]".
func (v Value) TypeName() string {
	if v.Type == ValArray {
		return "array[" + v.Elem.String() + "]"
	}
	return v.Type.String()
}

// Len is the element count of an array value, 0 for scalars.
func (v Value) Len() int {
	switch x := v.V.(type) {
	case []uint8:
		return len(x)
	case []int8:
		return len(x)
	case []uint16:
		return len(x)
	case []int16:
		return len(x)
	case []uint32:
		return len(x)
	case []int32:
		return len(x)
	case []float32:
		return len(x)
	case []bool:
		return len(x)
	case []string:
		return len(x)
	case []uint64:
		return len(x)
	case []int64:
		return len(x)
	case []float64:
		return len(x)
	case []Value:
		return len(x)
	}
	return 0
}

// asInt64 converts any integer scalar to int64; ok is false for other
// types and for uint64 values above MaxInt64.
func (v Value) asInt64() (int64, bool) {
	switch x := v.V.(type) {
	case uint8:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

// Value returns the metadata value for key.
func (f *File) Value(key string) (Value, bool) {
	i, ok := f.index[key]
	if !ok {
		return Value{}, false
	}
	return f.Metadata[i].Value, true
}

func (f *File) get(key string) (Value, error) {
	v, ok := f.Value(key)
	if !ok {
		return Value{}, fmt.Errorf("%w: %q", ErrMissingKey, key)
	}
	return v, nil
}

func wrongType(key string, v Value, want string) error {
	return fmt.Errorf("%w: %q is %s, want %s", ErrWrongType, key, v.TypeName(), want)
}

// Has reports whether key is present.
func (f *File) Has(key string) bool { _, ok := f.index[key]; return ok }

// String returns a string value.
func (f *File) String(key string) (string, error) {
	v, err := f.get(key)
	if err != nil {
		return "", err
	}
	s, ok := v.V.(string)
	if !ok {
		return "", wrongType(key, v, "string")
	}
	return s, nil
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, error) {
	v, err := f.get(key)
	if err != nil {
		return false, err
	}
	b, ok := v.V.(bool)
	if !ok {
		return false, wrongType(key, v, "bool")
	}
	return b, nil
}

// Int returns any integer-typed value as int (writers disagree on widths,
// e.g. uint32 vs int32 vs uint64 for counts); it fails when the value is not
// an integer or does not fit.
func (f *File) Int(key string) (int, error) {
	v, err := f.get(key)
	if err != nil {
		return 0, err
	}
	n, ok := v.asInt64()
	if !ok || n != int64(int(n)) {
		return 0, wrongType(key, v, "integer")
	}
	return int(n), nil
}

// Uint32 returns an integer-typed value that fits in uint32.
func (f *File) Uint32(key string) (uint32, error) {
	v, err := f.get(key)
	if err != nil {
		return 0, err
	}
	n, ok := v.asInt64()
	if !ok {
		return 0, wrongType(key, v, "integer")
	}
	if n < 0 || n > math.MaxUint32 {
		return 0, fmt.Errorf("%w: %q = %d does not fit in uint32", ErrWrongType, key, n)
	}
	return uint32(n), nil
}

// Float32 returns a float32 or float64 value as float32.
func (f *File) Float32(key string) (float32, error) {
	v, err := f.get(key)
	if err != nil {
		return 0, err
	}
	switch x := v.V.(type) {
	case float32:
		return x, nil
	case float64:
		return float32(x), nil
	}
	return 0, wrongType(key, v, "float32")
}

// Strings returns an array of strings. The slice is shared with the File.
func (f *File) Strings(key string) ([]string, error) {
	v, err := f.get(key)
	if err != nil {
		return nil, err
	}
	s, ok := v.V.([]string)
	if !ok {
		return nil, wrongType(key, v, "array[string]")
	}
	return s, nil
}

// Float32s returns an array of float32. The slice is shared with the File.
func (f *File) Float32s(key string) ([]float32, error) {
	v, err := f.get(key)
	if err != nil {
		return nil, err
	}
	s, ok := v.V.([]float32)
	if !ok {
		return nil, wrongType(key, v, "array[float32]")
	}
	return s, nil
}

// Int32s returns an array of int32 (uint32 arrays are converted when every
// element fits). The slice may be shared with the File.
func (f *File) Int32s(key string) ([]int32, error) {
	v, err := f.get(key)
	if err != nil {
		return nil, err
	}
	switch s := v.V.(type) {
	case []int32:
		return s, nil
	case []uint32:
		out := make([]int32, len(s))
		for i, x := range s {
			if x > math.MaxInt32 {
				return nil, fmt.Errorf("%w: %q[%d] = %d does not fit in int32", ErrWrongType, key, i, x)
			}
			out[i] = int32(x)
		}
		return out, nil
	}
	return nil, wrongType(key, v, "array[int32]")
}
