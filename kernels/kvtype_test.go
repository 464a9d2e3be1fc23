package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// kvRound is the Go rounding of one float to a KV cache element of type t,
// widened back: what a 16-bit cache holds for f.
func kvRound(t DType, f float32) float32 {
	switch t {
	case F16:
		return F16ToF32(F32ToF16(f))
	case BF16:
		return BF16ToF32(F32ToBF16(f))
	}
	return f
}

// kvAs returns a copy of the F32 layer l stored as type t, every element
// rounded by the Go reference conversion (F32ToF16, F32ToBF16).
func kvAs(l *KVLayer, t DType) *KVLayer {
	c := *l
	c.Type = t
	if t == F32 {
		c.K, c.V = append([]float32(nil), l.K...), append([]float32(nil), l.V...)
		return &c
	}
	c.K, c.V = nil, nil
	c.K16, c.V16 = make([]uint16, len(l.K)), make([]uint16, len(l.V))
	for i := range l.K {
		if t == F16 {
			c.K16[i], c.V16[i] = F32ToF16(l.K[i]), F32ToF16(l.V[i])
		} else {
			c.K16[i], c.V16[i] = F32ToBF16(l.K[i]), F32ToBF16(l.V[i])
		}
	}
	return &c
}

// newKVLayer allocates a zeroed layer of type t.
func newKVLayer(t DType, blocks, kvHeads, bs, hd int) *KVLayer {
	l := &KVLayer{Type: t, NumBlocks: blocks, KVHeads: kvHeads, BlockSize: bs, HeadDim: hd}
	n := blocks * kvHeads * bs * hd
	if t == F32 {
		l.K, l.V = make([]float32, n), make([]float32, n)
	} else {
		l.K16, l.V16 = make([]uint16, n), make([]uint16, n)
	}
	return l
}

func TestParseKVType(t *testing.T) {
	for _, c := range []struct {
		in   string
		want DType
		err  string
	}{
		{"f32", F32, ""}, {"F16", F16, ""}, {" bf16 ", BF16, ""},
		{"q8_0", F32, `KV cache type "q8_0": want f32, f16 or bf16`}, {"", F32, `KV cache type ""`},
	} {
		got, err := ParseKVType(c.in)
		if c.err != "" {
			require.ErrorContains(t, err, c.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, c.want, got)
	}
	for _, c := range []struct {
		t     DType
		bytes int
	}{{F32, 4}, {F16, 2}, {BF16, 2}} {
		b, err := KVElemBytes(c.t)
		require.NoError(t, err)
		require.Equal(t, c.bytes, b)
	}
	_, err := KVElemBytes(Q8_0)
	require.ErrorContains(t, err, "Q8_0 is not a KV cache type")
}

// TestKVWrite16 checks every path rounds exactly as the Go reference does,
// specials included (ties, subnormals, overflow, infinities, NaN), at head
// sizes with and without vector tails.
func TestKVWrite16(t *testing.T) {
	specials := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 65504, 65520, 70000, -70000, 6e-8, 3e-8, 1e-5, -2.98e-8,
		1 + 1.0/2048, 1 + 3.0/2048, 1 + 1.0/256, 1 + 3.0/256, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.MaxFloat32, -math.MaxFloat32, 1e-40}
	rng := rand.New(rand.NewPCG(31, 32))
	for _, kt := range []DType{F16, BF16} {
		for _, hd := range []int{3, 8, 16, 40, 64} {
			for _, p := range SupportedPaths() {
				t.Run(fmt.Sprintf("%v/hd=%d/%v", kt, hd, p), func(t *testing.T) {
					l := newKVLayer(kt, 5, 2, 4, hd)
					table := []int32{4, 1, 3}
					pos := []int32{0, 1, 5, 11}
					row := 2 * hd
					k, v := randFloats(rng, 4*row, 3), randFloats(rng, 4*row, 1e-4)
					for i, s := range specials {
						k[(i*7)%len(k)] = s
						v[(i*5+1)%len(v)] = s
					}
					require.NoError(t, kvWrite(p, l, k, v, pos, table))
					for i, ps := range pos {
						blk, slot := int(table[ps/4]), int(ps)%4
						for h := 0; h < 2; h++ {
							off := ((blk*2+h)*4 + slot) * hd
							for d := 0; d < hd; d++ {
								src := i*row + h*hd + d
								wk, wv := F32ToF16(k[src]), F32ToF16(v[src])
								if kt == BF16 {
									wk, wv = F32ToBF16(k[src]), F32ToBF16(v[src])
								}
								require.Equal(t, wk, l.K16[off+d], "k[%d] = %g", src, k[src])
								require.Equal(t, wv, l.V16[off+d], "v[%d] = %g", src, v[src])
							}
						}
					}
				})
			}
		}
	}
	l := newKVLayer(F16, 2, 1, 4, 8)
	require.ErrorContains(t, KVWrite(l, make([]float32, 8), make([]float32, 8), []int32{8}, []int32{0, 1}), "position 8 needs block table entry 2")
	bad := &KVLayer{Type: F16, NumBlocks: 1, KVHeads: 1, BlockSize: 1, HeadDim: 1, K: []float32{0}, V: []float32{0}}
	require.ErrorContains(t, KVWrite(bad, []float32{1}, []float32{1}, []int32{0}, []int32{0}), "F16 KVLayer needs K16 and V16 of 1 values")
	bad = &KVLayer{Type: Q8_0, NumBlocks: 1, KVHeads: 1, BlockSize: 1, HeadDim: 1}
	require.ErrorContains(t, bad.Validate(), "KVLayer type Q8_0")
	require.Equal(t, int64(2*2*(2*1*4*8)), l.Bytes())
}

// kvTol16 bounds |kernel − reference| on a 16-bit cache: both read the
// same rounded K/V, so the difference is float32 arithmetic only.
const kvTol16 = 1e-5

// TestPagedAttentionKVTypes checks attention on 16-bit caches: on every
// path it equals RefPagedAttention on the rounded K/V, and its error
// against the float32 cache (the cost of the rounding) is reported.
func TestPagedAttentionKVTypes(t *testing.T) {
	mixed := []attnSeqShape{{1, 1}, {1, 37}, {20, 20}, {5, 70}, {1, 130}, {11, 50}}
	rng := rand.New(rand.NewPCG(33, 34))
	var cases []attnCase
	for _, bs := range []int{1, 16} {
		for _, group := range []int{1, 4} {
			for _, hd := range []int{8, 20, 64} {
				cases = append(cases, newAttnCase(t, rng, bs, 2, group, hd, mixed))
			}
		}
	}
	for _, kt := range []DType{F16, BF16} {
		ls, wants := make([]*KVLayer, len(cases)), make([][]float32, len(cases))
		for i, c := range cases {
			ls[i] = kvAs(c.l, kt)
			wants[i] = make([]float32, len(c.q))
			require.NoError(t, RefPagedAttention(wants[i], c.q, ls[i], c.seqs, c.heads, 0.3))
		}
		t.Run(kt.String(), func(t *testing.T) {
			forEachPath(t, func(t *testing.T, w *Workers) {
				var worst, vsF32 float64
				for i, c := range cases {
					out := make([]float32, len(c.q))
					require.NoError(t, w.PagedAttention(out, c.q, ls[i], c.seqs, c.heads, 0.3))
					for j := range out {
						e := math.Abs(float64(out[j] - wants[i][j]))
						if !(e <= kvTol16) {
							require.InDelta(t, wants[i][j], out[j], kvTol16, "%s: out[%d]", c.name, j)
						}
						worst = max(worst, e)
						vsF32 = max(vsF32, math.Abs(float64(out[j]-c.want[j])))
					}
				}
				t.Logf("%v cache on %v: max |out − ref on rounded K/V| = %.2g; max |out − f32 cache result| = %.2g (|V| ≤ 1)",
					kt, w.Path(), worst, vsF32)
			})
		})
	}
}
