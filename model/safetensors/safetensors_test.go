package safetensors

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func encode(t *testing.T, ts []Tensor, meta map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, Write(&b, ts, meta))
	return b.Bytes()
}

// raw builds a file from a literal header and data section.
func raw(hdr string, body []byte) []byte {
	out := make([]byte, 8, 8+len(hdr)+len(body))
	binary.LittleEndian.PutUint64(out, uint64(len(hdr)))
	return append(append(out, hdr...), body...)
}

func TestRoundTrip(t *testing.T) {
	ts := []Tensor{
		{Name: "b", DType: "BF16", Shape: []int{2, 3}, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
		{Name: "a", DType: "F32", Shape: []int{1}, Data: []byte{0, 0, 128, 63}},
		{Name: "s", DType: "F16", Shape: []int{}, Data: []byte{0, 60}},
	}
	data := encode(t, ts, map[string]string{"format": "pt"})
	require.Zero(t, binary.LittleEndian.Uint64(data)%8, "header padded to 8")
	f, err := Parse(data)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"format": "pt"}, f.Metadata)
	require.Equal(t, ts, f.Tensors, "data order = write order")
	require.Equal(t, 6, f.Tensor("b").Elements())
	require.Nil(t, f.Tensor("none"))

	path := filepath.Join(t.TempDir(), "m.safetensors")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	g, err := Open(path)
	require.NoError(t, err)
	require.Equal(t, ts[0].Data, g.Tensor("b").Data)
	require.NoError(t, g.Close())
	require.NoError(t, g.Close())
	require.Nil(t, g.Tensors[0].Data)
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"short", []byte{1, 2}, "shorter than the 8-byte header length"},
		{"header too long", raw("{}", nil)[:9], "header length 2 exceeds"},
		{"not json", raw("{x", nil), "header JSON"},
		{"not object", raw("null", nil), "not a JSON object"},
		{"metadata type", raw(`{"__metadata__":{"a":1}}`, nil), "__metadata__ must map strings"},
		{"dtype", raw(`{"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}}`, []byte{0}), `dtype "Q4"`},
		{"offsets count", raw(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}}`, []byte{0}), "1 data_offsets"},
		{"outside", raw(`{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, []byte{0}), "outside the 1-byte data section"},
		{"size", raw(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, make([]byte, 4)), "has 4 bytes, want 8"},
		{"negative dim", raw(`{"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}`, nil), "negative or too large"},
		{"overlap", raw(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, make([]byte, 3)), `"a" and "b" overlap`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.data)
			require.ErrorIs(t, err, ErrMalformed)
			require.ErrorContains(t, err, tc.want)
		})
	}
	require.ErrorContains(t, Write(&bytes.Buffer{}, []Tensor{{Name: "w", DType: "F32", Shape: []int{2}, Data: make([]byte, 4)}}, nil), `"w" (F32 [2]) has 4 bytes, want 8`)
	require.ErrorContains(t, Write(&bytes.Buffer{}, []Tensor{{Name: "__metadata__", DType: "U8", Shape: []int{0}}}, nil), "reserved")
	_, err := Open(filepath.Join(t.TempDir(), "none.safetensors"))
	require.ErrorContains(t, err, "none.safetensors")
}

// FuzzParse: any input either parses into tensors that lie inside it with
// their shapes' sizes, or fails with ErrMalformed; never a panic.
func FuzzParse(f *testing.F) {
	var b bytes.Buffer
	_ = Write(&b, []Tensor{{Name: "w", DType: "BF16", Shape: []int{2, 2}, Data: make([]byte, 8)}, {Name: "x", DType: "F32", Shape: []int{1}, Data: make([]byte, 4)}}, map[string]string{"k": "v"})
	f.Add(b.Bytes())
	f.Add(raw(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`, make([]byte, 2)))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			return
		}
		for _, ts := range file.Tensors {
			require.Equal(t, ts.Elements()*DTypeSize(ts.DType), len(ts.Data))
		}
	})
}
