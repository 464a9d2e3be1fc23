package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// quantBounds are the block types beside F32/F16/BF16 with the error bounds
// of TestQuantRoundTrip (N(0, 1) data with outliers): rel bounds
// RMS(error)/RMS(x) over the tensor, worst bounds max|error|/max|x| over
// any one block. The worst bounds follow from the formats: a legacy
// symmetric type maps the largest-magnitude value to its most negative code
// (-8, -16), so a value of the other sign at that magnitude is off by one
// step (1/8, 1/16); an affine type is off by at most half a step of a range
// ≤ 2·max|x| (2/15/2, 2/31/2), plus F16 rounding of the scales. Measured on
// this data (rel, worst): Q4_0 0.095 0.124, Q4_1 0.085 0.066, Q5_0 0.056
// 0.058, Q5_1 0.041 0.032, Q8_0 0.0063 0.0043, Q2_K 0.306 0.223, Q3_K 0.163
// 0.184, Q4_K 0.085 0.064, Q5_K 0.042 0.034, Q6_K 0.021 0.026.
var quantBounds = []struct {
	t          GGMLType
	rel, worst float64
}{
	{TypeQ4_0, 0.11, 0.13},
	{TypeQ4_1, 0.10, 0.07},
	{TypeQ5_0, 0.065, 0.065},
	{TypeQ5_1, 0.05, 0.035},
	{TypeQ8_0, 0.007, 0.005},
	{TypeQ2_K, 0.35, 0.30},
	{TypeQ3_K, 0.19, 0.21},
	{TypeQ4_K, 0.10, 0.075},
	{TypeQ5_K, 0.05, 0.04},
	{TypeQ6_K, 0.025, 0.03},
}

func TestQuantRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range quantBounds {
		t.Run(tc.t.String(), func(t *testing.T) {
			bs := tc.t.BlockSize()
			x := make([]float32, 16*256)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
				if i%97 == 0 {
					x[i] *= 4 // an outlier now and then
				}
			}
			data, err := Quantize(tc.t, x)
			require.NoError(t, err)
			n, err := tc.t.RowBytes(uint64(len(x)))
			require.NoError(t, err)
			require.Len(t, data, int(n))
			y := make([]float32, len(x))
			require.NoError(t, Dequantize(tc.t, data, y))
			var se, sx, worst float64
			for b := 0; b < len(x)/bs; b++ {
				var amax, emax float64
				for i := b * bs; i < (b+1)*bs; i++ {
					e := float64(y[i] - x[i])
					se += e * e
					sx += float64(x[i]) * float64(x[i])
					amax = math.Max(amax, math.Abs(float64(x[i])))
					emax = math.Max(emax, math.Abs(e))
				}
				worst = math.Max(worst, emax/amax)
			}
			rel := math.Sqrt(se / sx)
			t.Logf("%v: rel RMS error %.4f, worst block max error / max|x| %.4f", tc.t, rel, worst)
			require.Less(t, rel, tc.rel)
			require.Less(t, worst, tc.worst)
		})
	}
}

func TestQuantShapeErrors(t *testing.T) {
	for _, tc := range []struct {
		t    GGMLType
		n    int
		want string
	}{
		{TypeQ4_0, 33, "multiple of the Q4_0 block size 32"},
		{TypeQ4_K, 288, "multiple of the Q4_K block size 256"},
		{TypeQ6_K, 32, "multiple of the Q6_K block size 256"},
	} {
		_, err := Quantize(tc.t, make([]float32, tc.n))
		require.ErrorContains(t, err, tc.want)
		require.ErrorContains(t, Dequantize(tc.t, nil, make([]float32, tc.n)), tc.want)
	}
	bb := TypeQ5_K.BlockBytes()
	err := Dequantize(TypeQ5_K, make([]byte, bb-1), make([]float32, 256))
	require.ErrorContains(t, err, fmt.Sprintf("have %d bytes, want %d", bb-1, bb))
}

func TestTypeGeometry(t *testing.T) {
	for _, tc := range []struct {
		t            GGMLType
		elems, bytes int
	}{
		{TypeQ4_0, 32, 18}, {TypeQ4_1, 32, 20}, {TypeQ5_0, 32, 22}, {TypeQ5_1, 32, 24},
		{TypeQ8_0, 32, 34}, {TypeQ2_K, 256, 84}, {TypeQ3_K, 256, 110}, {TypeQ4_K, 256, 144},
		{TypeQ5_K, 256, 176}, {TypeQ6_K, 256, 210}, {TypeF32, 1, 4}, {TypeBF16, 1, 2},
	} {
		require.True(t, tc.t.Supported(), tc.t)
		require.Equal(t, tc.elems, tc.t.BlockSize(), tc.t)
		require.Equal(t, tc.bytes, tc.t.BlockBytes(), tc.t)
	}
	require.False(t, GGMLType(15).Supported()) // Q8_K: a dot-product type, never stored
	require.Equal(t, "F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, BF16", SupportedList())
}

// ggmlRef is one line of testdata/quant/ggml-ref.txt (format in
// scripts/quant-ref.c): what ggml's dequantiser made of a tensor or of the
// pseudo-random blocks of a type.
type ggmlRef struct {
	kind, label, tensor, typ string
	n                        int // elements (file) or blocks (random)
	hash                     uint64
	head                     []uint32
}

func readGGMLRef(t *testing.T) []ggmlRef {
	p, err := QuantFixturePath("ggml-ref.txt")
	require.NoError(t, err)
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	var refs []ggmlRef
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		fs := strings.Fields(line)
		var r ggmlRef
		switch fs[0] {
		case "file":
			require.Len(t, fs, 7, line)
			r = ggmlRef{kind: fs[0], label: fs[1], tensor: fs[2], typ: fs[3]}
			fs = fs[4:]
		case "random":
			require.Len(t, fs, 5, line)
			r = ggmlRef{kind: fs[0], typ: fs[1]}
			fs = fs[2:]
		default:
			t.Fatalf("ggml-ref.txt: bad line %q", line)
		}
		r.n, err = strconv.Atoi(fs[0])
		require.NoError(t, err, line)
		r.hash, err = strconv.ParseUint(fs[1], 16, 64)
		require.NoError(t, err, line)
		for _, h := range strings.Split(fs[2], ",") {
			v, err := strconv.ParseUint(h, 16, 32)
			require.NoError(t, err, line)
			r.head = append(r.head, uint32(v))
		}
		refs = append(refs, r)
	}
	require.NoError(t, sc.Err())
	return refs
}

func typeByName(t *testing.T, name string) GGMLType {
	for _, ty := range SupportedTypes {
		if strings.EqualFold(ty.String(), name) {
			return ty
		}
	}
	t.Fatalf("ggml-ref.txt: unknown type %q", name)
	return 0
}

// requireSameAsGGML compares our dequantisation with ggml's, bit for bit.
func requireSameAsGGML(t *testing.T, r ggmlRef, vals []float32) {
	t.Helper()
	for i, want := range r.head {
		require.Equal(t, want, math.Float32bits(vals[i]), "%s %s %s: value %d: ggml %g, ours %g",
			r.label, r.tensor, r.typ, i, math.Float32frombits(want), vals[i])
	}
	h := fnv.New64a()
	var b [4]byte
	for _, v := range vals {
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
		h.Write(b[:])
	}
	require.Equal(t, r.hash, h.Sum64(), "%s %s %s: the %d dequantised values differ from ggml's", r.label, r.tensor, r.typ, len(vals))
}

// randomBlocks makes quant-ref's pseudo-random blocks of type ty: xorshift64*
// bytes (the top byte of each output, seed 0x5eed + type id) with the top
// exponent bit of each F16 field cleared.
func randomBlocks(ty GGMLType, nb int) []byte {
	bs := ty.BlockBytes()
	buf := make([]byte, nb*bs)
	s := uint64(0x5eed) + uint64(ty)
	for i := range buf {
		s ^= s >> 12
		s ^= s << 25
		s ^= s >> 27
		buf[i] = byte((s * 0x2545f4914f6cdd1d) >> 56)
	}
	fields := map[GGMLType][]int{TypeQ4_1: {0, 2}, TypeQ5_1: {0, 2}, TypeQ4_K: {0, 2}, TypeQ5_K: {0, 2},
		TypeQ2_K: {80, 82}, TypeQ3_K: {108}, TypeQ6_K: {208}}[ty]
	if fields == nil {
		fields = []int{0}
	}
	for b := 0; b < nb; b++ {
		for _, off := range fields {
			buf[b*bs+off+1] &= 0xbf
		}
	}
	return buf
}

// TestDequantizeMatchesGGML checks every dequantiser against ggml's own
// (testdata/quant/ggml-ref.txt): on files llama.cpp's llama-quantize wrote
// (every type, including its fallbacks for rows that are not a multiple of
// 256), on pseudo-random blocks (every bit pattern of scales and quants),
// and on the blocks our quantisers write (so ggml reads them as we do).
func TestDequantizeMatchesGGML(t *testing.T) {
	refs := readGGMLRef(t)
	seen := map[string]map[GGMLType]bool{"file": {}, "random": {}, "ours": {}}
	files := map[string]*File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	ours := map[GGMLType]*File{}
	for _, r := range refs {
		ty := typeByName(t, r.typ)
		switch {
		case r.kind == "random":
			seen["random"][ty] = true
			vals := make([]float32, r.n*ty.BlockSize())
			require.NoError(t, Dequantize(ty, randomBlocks(ty, r.n), vals))
			requireSameAsGGML(t, r, vals)
			continue
		case strings.HasPrefix(r.label, "ours-"):
			ot := typeByName(t, strings.TrimPrefix(r.label, "ours-"))
			if ours[ot] == nil {
				data, err := QuantFixtureModel(ot, 256)
				require.NoError(t, err)
				ours[ot], err = Parse(data)
				require.NoError(t, err)
			}
			seen["ours"][ty] = true
			tt, err := ours[ot].Tensor(r.tensor)
			require.NoError(t, err)
			require.Equal(t, ty, tt.Type, r.tensor)
			vals, err := tt.Float32s()
			require.NoError(t, err)
			requireSameAsGGML(t, r, vals)
			continue
		}
		f := files[r.label]
		if f == nil {
			p, err := QuantFixturePath(r.label + ".gguf")
			require.NoError(t, err)
			f, err = Open(p)
			require.NoError(t, err)
			files[r.label] = f
		}
		seen["file"][ty] = true
		tt, err := f.Tensor(r.tensor)
		require.NoError(t, err)
		require.Equal(t, ty, tt.Type, "%s %s", r.label, r.tensor)
		require.Equal(t, uint64(r.n), tt.Elements())
		vals, err := tt.Float32s()
		require.NoError(t, err)
		requireSameAsGGML(t, r, vals)
	}
	for kind, types := range seen {
		for _, tc := range quantBounds {
			require.True(t, types[tc.t], "ggml-ref.txt has no %s line of type %v", kind, tc.t)
		}
	}
}
