package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzMatMul checks MatMul against the float64 reference for arbitrary
// small shapes, weight types, worker counts and every supported path, with
// float32 activations (SetExact) and with the default low-precision ones
// (within lowpCase's bound).
func FuzzMatMul(f *testing.F) {
	f.Add(uint64(1), uint8(1), uint8(7), uint8(5), uint8(0), uint8(1))
	f.Add(uint64(2), uint8(6), uint8(40), uint8(33), uint8(1), uint8(2))
	f.Add(uint64(3), uint8(13), uint8(255), uint8(17), uint8(2), uint8(3))
	f.Add(uint64(4), uint8(4), uint8(64), uint8(1), uint8(3), uint8(2))
	f.Fuzz(func(t *testing.T, seed uint64, m, k, n, typ, workers uint8) {
		if m == 0 || k == 0 || n == 0 {
			return
		}
		dt := allTypes[int(typ)%len(allTypes)]
		kk := roundUp(int(k), dt.BlockElems())
		rng := rand.New(rand.NewPCG(seed, 7))
		c := newMMCase(t, rng, dt, int(m)%40+1, kk, int(n))
		lc := lowpCase(t, rng, c.W, c.m)
		w := NewWorkers(int(workers)%4 + 1)
		defer w.Close()
		for _, p := range SupportedPaths() {
			require.NoError(t, w.SetPath(p))
			w.SetExact(true)
			c.check(t, w)
			w.SetExact(false)
			lc.check(t, w)
		}
	})
}

// FuzzPagedAttention checks paged attention against dense attention for
// arbitrary block sizes, GQA groups, head sizes and sequence shapes.
func FuzzPagedAttention(f *testing.F) {
	f.Add(uint64(1), uint8(1), uint8(1), uint8(1), uint8(2), uint8(1), uint8(1))
	f.Add(uint64(2), uint8(16), uint8(2), uint8(4), uint8(64), uint8(20), uint8(20))
	f.Add(uint64(3), uint8(64), uint8(1), uint8(8), uint8(20), uint8(3), uint8(130))
	f.Fuzz(func(t *testing.T, seed uint64, bs, kvHeads, group, hd, numQ, ctx uint8) {
		b := int(bs)%64 + 1
		kvh := int(kvHeads)%3 + 1
		g := int(group)%8 + 1
		d := int(hd)%64 + 1
		c := int(ctx)%150 + 1
		q := int(numQ)%c + 1
		rng := rand.New(rand.NewPCG(seed, 9))
		ac := newAttnCase(t, rng, b, kvh, g, d, []attnSeqShape{{q, c}, {1, c}})
		w := NewWorkers(2)
		defer w.Close()
		for _, p := range SupportedPaths() {
			require.NoError(t, w.SetPath(p))
			ac.check(t, w)
		}
	})
}

// FuzzF32ToF16 checks that the half conversion rounds to nearest: no other
// half is closer to the input than the one returned.
func FuzzF32ToF16(f *testing.F) {
	for _, v := range []float32{0, 1, -2.5, 65504, 65520, 6e-8, 3e-8, 1e-4, float32(math.Inf(1))} {
		f.Add(math.Float32bits(v))
	}
	f.Fuzz(func(t *testing.T, bits uint32) {
		v := math.Float32frombits(bits)
		h := F32ToF16(v)
		got := F16ToF32(h)
		if math.IsNaN(float64(v)) {
			require.True(t, math.IsNaN(float64(got)))
			return
		}
		if math.Abs(float64(v)) >= 65520 { // rounds past the largest half
			require.True(t, math.IsInf(float64(got), int(math.Copysign(1, float64(v)))))
			return
		}
		err := math.Abs(float64(got) - float64(v))
		for _, nb := range []uint16{h + 1, h - 1} {
			alt := F16ToF32(nb)
			if math.IsNaN(float64(alt)) || math.IsInf(float64(alt), 0) || math.Signbit(float64(alt)) != math.Signbit(float64(got)) {
				continue
			}
			require.LessOrEqual(t, err, math.Abs(float64(alt)-float64(v)), "%v → %#04x, neighbour %#04x is closer", v, h, nb)
		}
	})
}
