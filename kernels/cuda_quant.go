package kernels

import (
	"encoding/binary"
	"fmt"

	"github.com/turnstile-llm/turnstile/internal/quant"
)

// The Go mirror of quant.cu (and ts_q8_0_at in ops.cu): the element one
// device thread decodes, found by the same index arithmetic on the column
// alone, with the same float32 operations in the same order. Tests check it
// against internal/quant on random blocks of every type, and the CUDA
// runner's emulator dequantises and gathers through it, so the device's
// index math is verified on machines without a GPU; a GPU test then checks
// the kernels against the host.

// CUDAQuantAt returns element c of row (one row of a matrix of block type
// t, cols/elems·bytes bytes) as the device decoders compute it. It fails
// for a type that is not a block type or a c past the row's end.
func CUDAQuantAt(t DType, row []byte, c int) (float32, error) {
	e, bb, ok := quant.Type(t).Block()
	if !ok || t.BlockElems() <= 1 {
		return 0, fmt.Errorf("kernels: CUDA decoder of %v: not a block type", t)
	}
	if c < 0 || (c/e+1)*bb > len(row) {
		return 0, fmt.Errorf("kernels: %v column %d is past a row of %d bytes", t, c, len(row))
	}
	return cudaQuantAt(t, row[c/e*bb:(c/e+1)*bb], c%e), nil
}

// CUDADequantBF16 is ts_dequant_<t>_bf16 on the host: out[i] is element
// (i/cols, i%cols) of the [rows][cols] matrix in, rounded to bf16 as the
// device rounds, in the kernel's grid-stride order.
func CUDADequantBF16(out []uint16, in []byte, t DType, rows, cols int) error {
	rb, err := t.RowBytes(cols)
	if err != nil {
		return err
	}
	if t.BlockElems() <= 1 {
		return fmt.Errorf("kernels: CUDA DequantToBF16 of %v: not a block type", t)
	}
	if rows <= 0 || len(in) != rows*rb || len(out) != rows*cols {
		return fmt.Errorf("kernels: CUDA dequant of %d×%d %v: have %d bytes in, %d values out", rows, cols, t, len(in), len(out))
	}
	for i := range out {
		r := i / cols
		v, err := CUDAQuantAt(t, in[r*rb:(r+1)*rb], i%cols)
		if err != nil {
			return err
		}
		out[i] = F32ToBF16(v)
	}
	return nil
}

func cudaQF16(b []byte) float32 { return F16ToF32(binary.LittleEndian.Uint16(b)) }

// cudaQ4Nibble is ts_q4_nibble: element j < 16 is the low nibble of qs[j],
// j ≥ 16 the high nibble of qs[j-16].
func cudaQ4Nibble(qs []byte, j int) int {
	if j < 16 {
		return int(qs[j] & 0xf)
	}
	return int(qs[j-16] >> 4)
}

// cudaQuantAt decodes element j of block b of type t, mirroring
// ts_<t>_at. The explicit float32 conversions keep Go from fusing a
// multiply and an add, as the _rn intrinsics do on the device.
func cudaQuantAt(t DType, b []byte, j int) float32 {
	switch t {
	case Q4_0:
		return float32(cudaQ4Nibble(b[2:], j)-8) * cudaQF16(b)
	case Q4_1:
		return float32(float32(cudaQ4Nibble(b[4:], j))*cudaQF16(b)) + cudaQF16(b[2:])
	case Q5_0:
		h := int(binary.LittleEndian.Uint32(b[2:])>>j&1) << 4
		return float32(cudaQ4Nibble(b[6:], j)|h-16) * cudaQF16(b)
	case Q5_1:
		h := int(binary.LittleEndian.Uint32(b[4:])>>j&1) << 4
		return float32(float32(cudaQ4Nibble(b[8:], j)|h)*cudaQF16(b)) + cudaQF16(b[2:])
	case Q8_0:
		return cudaQF16(b) * float32(int8(b[2+j]))
	case Q2_K:
		n, p, r := j>>7, j>>5&3, j&31
		s := b[j>>4]
		dl := cudaQF16(b[80:]) * float32(s&0xf)
		ml := cudaQF16(b[82:]) * float32(s>>4)
		q := b[16+n*32+r] >> (2 * p) & 3
		return float32(dl*float32(q)) - ml
	case Q3_K:
		n, p, r, sub := j>>7, j>>5&3, j&31, j>>4
		sc := b[96:]
		var lo byte
		if sub < 8 {
			lo = sc[sub] & 0xf
		} else {
			lo = sc[sub-8] >> 4
		}
		hi := sc[8+sub&3] >> (2 * (sub >> 2)) & 3
		dl := cudaQF16(b[108:]) * float32(int(lo|hi<<4)-32)
		q := int(b[32+n*32+r] >> (2 * p) & 3)
		if b[r]&(1<<(n*4+p)) == 0 {
			q -= 4
		}
		return dl * float32(q)
	case Q4_K, Q5_K:
		k, h, r, sub := j>>6, j>>5&1, j&31, j>>5
		var s, mn int
		if sc := b[4:]; sub < 4 {
			s, mn = int(sc[sub]&63), int(sc[sub+4]&63)
		} else {
			s, mn = int(sc[sub+4]&0xf|sc[sub-4]>>6<<4), int(sc[sub+4]>>4|sc[sub]>>6<<4)
		}
		d1 := cudaQF16(b) * float32(s)
		m1 := cudaQF16(b[2:]) * float32(mn)
		qs := b[16:]
		if t == Q5_K {
			qs = b[48:]
		}
		q := int(qs[32*k+r] >> (4 * h) & 0xf)
		if t == Q5_K && b[16+r]>>sub&1 != 0 {
			q += 16
		}
		return float32(d1*float32(q)) - m1
	case Q6_K:
		n, k, r := j>>7, j>>5&3, j&31
		lo := b[64*n+r+32*(k&1)] >> (4 * (k >> 1)) & 0xf
		hi := b[128+32*n+r] >> (2 * k) & 3
		ds := cudaQF16(b[208:]) * float32(int8(b[192+8*n+r>>4+2*k]))
		return ds * float32(int(lo|hi<<4)-32)
	}
	return 0
}
