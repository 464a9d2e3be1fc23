// Package quant holds the reference codecs of GGML's block-quantised weight
// types: the legacy types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (blocks of 32) and
// the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (super-blocks of 256).
//
// Dequantisation is bit-exact with ggml's dequantize_row_* (ggml-quants.c,
// built without FMA contraction): every product and sum below is rounded to
// float32 in the order ggml does it, and explicit float32 conversions keep
// the Go compiler from fusing a multiply and an add (the spec allows fusion
// otherwise). Quantisation is a simple round-to-nearest with one scale
// search per (sub-)block: good enough to make test data, not a replacement
// for llama.cpp's importance-weighted quantiser. The blocks it writes are
// ordinary GGML blocks, so ggml decodes them exactly as Dequantize does.
//
// model/gguf (file formats) and kernels (the CPU kernels' Go reference) both
// need these, so they live here once, like internal/half.
package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/turnstile-llm/turnstile/internal/half"
)

// Type is a GGML tensor type id (the values GGUF stores).
type Type uint32

// The block-quantised types this package codes.
const (
	Q4_0 Type = 2
	Q4_1 Type = 3
	Q5_0 Type = 6
	Q5_1 Type = 7
	Q8_0 Type = 8
	Q2_K Type = 10
	Q3_K Type = 11
	Q4_K Type = 12
	Q5_K Type = 13
	Q6_K Type = 14
)

// Types lists every type of this package, legacy types first.
var Types = [...]Type{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K}

// QK is the legacy block size and QKK the K-quant super-block size, in
// elements.
const (
	QK  = 32
	QKK = 256
)

// Block byte sizes (ggml-common.h's block_* structs).
const (
	BytesQ4_0 = 2 + QK/2             // d, 16 nibble pairs
	BytesQ4_1 = 2 + 2 + QK/2         // d, m, nibbles
	BytesQ5_0 = 2 + 4 + QK/2         // d, qh (5th bits), nibbles
	BytesQ5_1 = 2 + 2 + 4 + QK/2     // d, m, qh, nibbles
	BytesQ8_0 = 2 + QK               // d, int8 q
	BytesQ2_K = QKK/16 + QKK/4 + 2*2 // scales (4-bit scale|4-bit min), 2-bit q, d, dmin
	BytesQ3_K = QKK/8 + QKK/4 + 12 + 2
	BytesQ4_K = 2*2 + 12 + QKK/2
	BytesQ5_K = 2*2 + 12 + QKK/8 + QKK/2
	BytesQ6_K = QKK/2 + QKK/4 + QKK/16 + 2
)

var names = map[Type]string{
	Q4_0: "Q4_0", Q4_1: "Q4_1", Q5_0: "Q5_0", Q5_1: "Q5_1", Q8_0: "Q8_0",
	Q2_K: "Q2_K", Q3_K: "Q3_K", Q4_K: "Q4_K", Q5_K: "Q5_K", Q6_K: "Q6_K",
}

// String returns the GGML name, e.g. "Q4_K", or "type(N)".
func (t Type) String() string {
	if n, ok := names[t]; ok {
		return n
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// Block returns the elements and bytes of one block of t; ok is false for a
// type this package does not code.
func (t Type) Block() (elems, bytes int, ok bool) {
	switch t {
	case Q4_0:
		return QK, BytesQ4_0, true
	case Q4_1:
		return QK, BytesQ4_1, true
	case Q5_0:
		return QK, BytesQ5_0, true
	case Q5_1:
		return QK, BytesQ5_1, true
	case Q8_0:
		return QK, BytesQ8_0, true
	case Q2_K:
		return QKK, BytesQ2_K, true
	case Q3_K:
		return QKK, BytesQ3_K, true
	case Q4_K:
		return QKK, BytesQ4_K, true
	case Q5_K:
		return QKK, BytesQ5_K, true
	case Q6_K:
		return QKK, BytesQ6_K, true
	}
	return 0, 0, false
}

// check validates the lengths of a whole-block src/dst pair.
func check(t Type, nbytes, nvals int) (blocks int, err error) {
	e, b, ok := t.Block()
	if !ok {
		return 0, fmt.Errorf("quant: %v is not a block-quantised type", t)
	}
	if nvals%e != 0 {
		return 0, fmt.Errorf("quant: %d %v values is not a multiple of the block size %d", nvals, t, e)
	}
	if nbytes != nvals/e*b {
		return 0, fmt.Errorf("quant: %d %v values need %d bytes, have %d", nvals, t, nvals/e*b, nbytes)
	}
	return nvals / e, nil
}

func f16(b []byte) float32 { return half.F16ToF32(binary.LittleEndian.Uint16(b)) }

// Dequantize decodes len(dst) values of type t from src (exactly the bytes
// of len(dst)/elems blocks) into dst, bit-exactly as ggml does.
func Dequantize(t Type, src []byte, dst []float32) error {
	nb, err := check(t, len(src), len(dst))
	if err != nil {
		return err
	}
	e, b, _ := t.Block()
	for i := 0; i < nb; i++ {
		DequantizeBlock(t, src[i*b:(i+1)*b], dst[i*e:(i+1)*e])
	}
	return nil
}

// DequantizeBlock decodes one block: blk holds its bytes, y receives its
// elements (32 or 256). The lengths must be right (Dequantize checks them).
func DequantizeBlock(t Type, blk []byte, y []float32) {
	switch t {
	case Q4_0:
		d := f16(blk)
		qs := blk[2:]
		for j := 0; j < QK/2; j++ {
			y[j] = float32(int(qs[j]&0xf)-8) * d
			y[j+QK/2] = float32(int(qs[j]>>4)-8) * d
		}
	case Q4_1:
		d, m := f16(blk), f16(blk[2:])
		qs := blk[4:]
		for j := 0; j < QK/2; j++ {
			y[j] = float32(float32(qs[j]&0xf)*d) + m
			y[j+QK/2] = float32(float32(qs[j]>>4)*d) + m
		}
	case Q5_0:
		d := f16(blk)
		qh := binary.LittleEndian.Uint32(blk[2:])
		qs := blk[6:]
		for j := 0; j < QK/2; j++ {
			h0 := int(qh>>j&1) << 4
			h1 := int(qh>>(j+16)&1) << 4
			y[j] = float32(int(qs[j]&0xf)|h0-16) * d
			y[j+QK/2] = float32(int(qs[j]>>4)|h1-16) * d
		}
	case Q5_1:
		d, m := f16(blk), f16(blk[2:])
		qh := binary.LittleEndian.Uint32(blk[4:])
		qs := blk[8:]
		for j := 0; j < QK/2; j++ {
			h0 := int(qh>>j&1) << 4
			h1 := int(qh>>(j+16)&1) << 4
			y[j] = float32(float32(int(qs[j]&0xf)|h0)*d) + m
			y[j+QK/2] = float32(float32(int(qs[j]>>4)|h1)*d) + m
		}
	case Q8_0:
		d := f16(blk)
		for j := 0; j < QK; j++ {
			y[j] = float32(int8(blk[2+j])) * d
		}
	case Q2_K:
		sc, qs := blk[:16], blk[16:80]
		d, dmin := f16(blk[80:]), f16(blk[82:])
		// Two halves of 128; in each, four 2-bit planes (shift 2j) of 32
		// bytes, each plane two sub-blocks of 16 with their own scale byte.
		for n := 0; n < 2; n++ {
			for j := 0; j < 4; j++ {
				for h := 0; h < 2; h++ {
					s := sc[n*8+j*2+h]
					dl := d * float32(s&0xf)
					ml := dmin * float32(s>>4)
					q := qs[n*32+h*16:]
					out := y[n*128+j*32+h*16:]
					for l := 0; l < 16; l++ {
						out[l] = float32(dl*float32(q[l]>>(2*j)&3)) - ml
					}
				}
			}
		}
	case Q3_K:
		hm, qs, sc := blk[:32], blk[32:96], blk[96:108]
		d := f16(blk[108:])
		for n := 0; n < 2; n++ {
			for j := 0; j < 4; j++ {
				bit := byte(1) << (n*4 + j)
				for h := 0; h < 2; h++ {
					dl := d * float32(Q3KScale(sc, n*8+j*2+h)-32)
					q := qs[n*32+h*16:]
					m := hm[h*16:]
					out := y[n*128+j*32+h*16:]
					for l := 0; l < 16; l++ {
						v := int(q[l] >> (2 * j) & 3)
						if m[l]&bit == 0 {
							v -= 4
						}
						out[l] = dl * float32(v)
					}
				}
			}
		}
	case Q4_K, Q5_K:
		d, dmin := f16(blk), f16(blk[2:])
		sc := blk[4:16]
		var qh, qs []byte
		if t == Q5_K {
			qh, qs = blk[16:48], blk[48:176]
		} else {
			qs = blk[16:144]
		}
		// Four chunks of 64: low nibbles of 32 bytes, then their high
		// nibbles, each with its own 6-bit scale and min.
		for j := 0; j < 4; j++ {
			for h := 0; h < 2; h++ {
				s, mn := ScaleMinK4(sc, 2*j+h)
				d1 := d * float32(s)
				m1 := dmin * float32(mn)
				q := qs[32*j:]
				out := y[64*j+32*h:]
				for l := 0; l < 32; l++ {
					v := int(q[l] >> (4 * h) & 0xf)
					if qh != nil && qh[l]>>(2*j+h)&1 != 0 {
						v += 16
					}
					out[l] = float32(d1*float32(v)) - m1
				}
			}
		}
	case Q6_K:
		ql, qh, sc := blk[:128], blk[128:192], blk[192:208]
		d := f16(blk[208:])
		for n := 0; n < 2; n++ {
			l4, h4, s8 := ql[n*64:], qh[n*32:], sc[n*8:]
			out := y[n*128:]
			for l := 0; l < 32; l++ {
				is := l / 16
				q1 := int(l4[l]&0xf|(h4[l]>>0&3)<<4) - 32
				q2 := int(l4[l+32]&0xf|(h4[l]>>2&3)<<4) - 32
				q3 := int(l4[l]>>4|(h4[l]>>4&3)<<4) - 32
				q4 := int(l4[l+32]>>4|(h4[l]>>6&3)<<4) - 32
				out[l] = float32(d*float32(int8(s8[is]))) * float32(q1)
				out[l+32] = float32(d*float32(int8(s8[is+2]))) * float32(q2)
				out[l+64] = float32(d*float32(int8(s8[is+4]))) * float32(q3)
				out[l+96] = float32(d*float32(int8(s8[is+6]))) * float32(q4)
			}
		}
	}
}

// ScaleMinK4 returns the 6-bit scale and min of sub-block j (0..7) from the
// 12 packed scale bytes of a Q4_K or Q5_K block (ggml's get_scale_min_k4):
// sub-blocks 0..3 keep theirs in the low 6 bits of bytes j and j+4; 4..7
// split theirs between a nibble of byte j+4 and the top 2 bits of bytes
// j-4 (scale) and j (min).
func ScaleMinK4(q []byte, j int) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | q[j-4]>>6<<4, q[j+4]>>4 | q[j]>>6<<4
}

// Q3KScale returns the 6-bit scale code (0..63; the scale is code-32) of
// sub-block j (0..15) from the 12 packed scale bytes of a Q3_K block: its low
// nibble is byte j's (j < 8) or byte j-8's high nibble, its top two bits sit
// in byte 8+j%4 at bit 2·(j/4).
func Q3KScale(sc []byte, j int) int {
	var lo byte
	if j < 8 {
		lo = sc[j] & 0xf
	} else {
		lo = sc[j-8] >> 4
	}
	hi := sc[8+j%4] >> (2 * (j / 4)) & 3
	return int(lo | hi<<4)
}

// Quantize encodes src (a multiple of t's block size) as t into dst (exactly
// the blocks' bytes).
func Quantize(t Type, src []float32, dst []byte) error {
	nb, err := check(t, len(dst), len(src))
	if err != nil {
		return err
	}
	e, b, _ := t.Block()
	for i := 0; i < nb; i++ {
		quantizeBlock(t, src[i*e:(i+1)*e], dst[i*b:(i+1)*b])
	}
	return nil
}

// putF16 stores x as F16 and returns the value a decoder will read back, so
// the codes are chosen against the scale actually stored.
func putF16(dst []byte, x float32) float32 {
	h := half.F32ToF16(x)
	binary.LittleEndian.PutUint16(dst, h)
	return half.F16ToF32(h)
}

// signedMax returns the element of largest magnitude, with its sign.
func signedMax(x []float32) float32 {
	var m float32
	for _, v := range x {
		if abs(v) > abs(m) {
			m = v
		}
	}
	return m
}

func minMax(x []float32) (lo, hi float32) {
	lo, hi = x[0], x[0]
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

func abs(x float32) float32 { return float32(math.Abs(float64(x))) }

// code rounds x/d to the nearest integer in [lo, hi] (0 when d is 0).
func code(x, d float32, lo, hi int) int {
	if d == 0 {
		return max(lo, min(hi, 0))
	}
	return max(lo, min(hi, int(math.Round(float64(x/d)))))
}

func quantizeBlock(t Type, x []float32, blk []byte) {
	clear(blk)
	switch t {
	case Q4_0, Q5_0:
		// Symmetric: the largest-magnitude value maps to the most negative
		// code (-8 or -16), as ggml does, so the positive side keeps one
		// more step of range.
		bias := 8
		if t == Q5_0 {
			bias = 16
		}
		d := putF16(blk, signedMax(x)/float32(-bias))
		var qh uint32
		qs := blk[2:]
		if t == Q5_0 {
			qs = blk[6:]
		}
		for j := 0; j < QK/2; j++ {
			u0 := code(x[j], d, -bias, bias-1) + bias
			u1 := code(x[j+QK/2], d, -bias, bias-1) + bias
			qs[j] = byte(u0&0xf | (u1&0xf)<<4)
			qh |= uint32(u0>>4&1)<<j | uint32(u1>>4&1)<<(j+16)
		}
		if t == Q5_0 {
			binary.LittleEndian.PutUint32(blk[2:], qh)
		}
	case Q4_1, Q5_1:
		levels := 15
		if t == Q5_1 {
			levels = 31
		}
		lo, hi := minMax(x)
		d := putF16(blk, (hi-lo)/float32(levels))
		m := putF16(blk[2:], lo)
		var qh uint32
		qs := blk[4:]
		if t == Q5_1 {
			qs = blk[8:]
		}
		for j := 0; j < QK/2; j++ {
			u0 := code(x[j]-m, d, 0, levels)
			u1 := code(x[j+QK/2]-m, d, 0, levels)
			qs[j] = byte(u0&0xf | (u1&0xf)<<4)
			qh |= uint32(u0>>4&1)<<j | uint32(u1>>4&1)<<(j+16)
		}
		if t == Q5_1 {
			binary.LittleEndian.PutUint32(blk[4:], qh)
		}
	case Q8_0:
		d := putF16(blk, abs(signedMax(x))/127)
		for j, v := range x {
			blk[2+j] = byte(int8(code(v, d, -127, 127)))
		}
	case Q2_K:
		quantizeQ2K(x, blk)
	case Q3_K:
		quantizeQ3K(x, blk)
	case Q4_K, Q5_K:
		quantizeQ45K(t, x, blk)
	case Q6_K:
		quantizeQ6K(x, blk)
	}
}

// affine fits x ≈ s·q − m with q in [0, levels] and m ≥ 0 (the K-quants'
// sub-block form): it tries a few shrunken ranges around [min(0, lo), hi]
// and keeps the (scale, min) of least squared error.
func affine(x []float32, levels int) (s, m float32) {
	lo, hi := minMax(x)
	lo = min(lo, 0)
	best := float32(math.Inf(1))
	for step := 0; step <= 8; step++ {
		f := 1 - float32(step)*0.025
		cs, cm := (hi-lo)*f/float32(levels), -lo*f
		var e float32
		for _, v := range x {
			r := v - (cs*float32(code(v+cm, cs, 0, levels)) - cm)
			e += r * r
		}
		if e < best {
			best, s, m = e, cs, cm
		}
	}
	return s, m
}

// symmetric fits x ≈ s·q with q in [-n, n-1]: a few scales around
// max|x|/n, the least squared error kept.
func symmetric(x []float32, n int) float32 {
	mx := signedMax(x)
	best, s := float32(math.Inf(1)), float32(0)
	for step := 0; step <= 8; step++ {
		cs := mx / float32(-n) * (1 - float32(step)*0.03)
		var e float32
		for _, v := range x {
			r := v - cs*float32(code(v, cs, -n, n-1))
			e += r * r
		}
		if e < best {
			best, s = e, cs
		}
	}
	return s
}

func maxOf(v []float32) float32 {
	var m float32
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func quantizeQ2K(x []float32, blk []byte) {
	var ss, ms [16]float32
	for i := range ss {
		ss[i], ms[i] = affine(x[16*i:16*i+16], 3)
	}
	d := putF16(blk[80:], maxOf(ss[:])/15)
	dmin := putF16(blk[82:], maxOf(ms[:])/15)
	for i := 0; i < 16; i++ {
		sc, mc := code(ss[i], d, 0, 15), code(ms[i], dmin, 0, 15)
		blk[i] = byte(sc | mc<<4)
		dl, ml := d*float32(sc), dmin*float32(mc)
		n, j, h := i/8, i%8/2, i%2
		for l := 0; l < 16; l++ {
			q := code(x[16*i+l]+ml, dl, 0, 3)
			blk[16+n*32+h*16+l] |= byte(q << (2 * j))
		}
	}
}

func quantizeQ3K(x []float32, blk []byte) {
	var ss [16]float32
	var amax float32
	for i := range ss {
		ss[i] = symmetric(x[16*i:16*i+16], 4)
		amax = max(amax, abs(ss[i]))
	}
	d := putF16(blk[108:], amax/31)
	sc := blk[96:108]
	for i := 0; i < 16; i++ {
		c := code(ss[i], d, -32, 31)
		u := byte(c + 32)
		if i < 8 {
			sc[i] |= u & 0xf
		} else {
			sc[i-8] |= (u & 0xf) << 4
		}
		sc[8+i%4] |= (u >> 4) << (2 * (i / 4))
		dl := d * float32(c)
		n, j, h := i/8, i%8/2, i%2
		for l := 0; l < 16; l++ {
			u := code(x[16*i+l], dl, -4, 3) + 4
			blk[32+n*32+h*16+l] |= byte(u&3) << (2 * j)
			if u >= 4 {
				blk[h*16+l] |= 1 << (n*4 + j)
			}
		}
	}
}

func quantizeQ45K(t Type, x []float32, blk []byte) {
	levels := 15
	if t == Q5_K {
		levels = 31
	}
	var ss, ms [8]float32
	for i := range ss {
		ss[i], ms[i] = affine(x[32*i:32*i+32], levels)
	}
	d := putF16(blk, maxOf(ss[:])/63)
	dmin := putF16(blk[2:], maxOf(ms[:])/63)
	sc := blk[4:16]
	for i := 0; i < 8; i++ {
		s, m := code(ss[i], d, 0, 63), code(ms[i], dmin, 0, 63)
		if i < 4 {
			sc[i] |= byte(s)
			sc[i+4] |= byte(m)
		} else {
			sc[i+4] = byte(s&0xf | (m&0xf)<<4)
			sc[i-4] |= byte(s>>4) << 6
			sc[i] |= byte(m>>4) << 6
		}
		d1, m1 := d*float32(s), dmin*float32(m)
		j, h := i/2, i%2
		for l := 0; l < 32; l++ {
			q := code(x[32*i+l]+m1, d1, 0, levels)
			if t == Q5_K {
				blk[48+32*j+l] |= byte(q&0xf) << (4 * h)
				if q >= 16 {
					blk[16+l] |= 1 << i
				}
			} else {
				blk[16+32*j+l] |= byte(q) << (4 * h)
			}
		}
	}
}

func quantizeQ6K(x []float32, blk []byte) {
	var ss [16]float32
	var amax float32
	for i := range ss {
		ss[i] = symmetric(x[16*i:16*i+16], 32)
		amax = max(amax, abs(ss[i]))
	}
	d := putF16(blk[208:], amax/127)
	for i := 0; i < 16; i++ {
		c := code(ss[i], d, -128, 127)
		blk[192+i] = byte(int8(c))
		dl := d * float32(c)
		// Element e = 128n + 32k + l (k the quarter, l < 32) sits in
		// ql[64n + l + 32(k&1)] (nibble k>>1) and qh[32n + l] (bits 2k).
		for li := 0; li < 16; li++ {
			e := 16*i + li
			n, k, l := e/128, e%128/32, e%32
			u := code(x[e], dl, -32, 31) + 32
			blk[64*n+l+32*(k&1)] |= byte(u&0xf) << (4 * (k >> 1))
			blk[128+32*n+l] |= byte(u>>4) << (2 * k)
		}
	}
}
