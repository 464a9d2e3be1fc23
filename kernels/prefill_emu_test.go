package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// A lane-level Go emulation of ts_paged_prefill_tc_* (attention.cu), for
// checking the kernel's index math where no GPU is at hand. It transliterates
// the CUDA code: one block at a time, its 4 warps × 32 lanes each holding the
// registers the kernel holds (Q and P A fragments, S and O accumulators,
// running max and sum), the shared-memory tiles as a []uint16 with the
// kernel's strides, the staging loop over thread ids, the tile loop, the
// masks, the quad shuffles and the writes, with bf16 rounding exactly where
// the kernel rounds. The device helpers are mirrored once each (emuPackBF16x2,
// emuStageIndex, emuLoad4). The mma is emulated as the hardware defines it:
// emuMMA gathers the 16×16 A, 16×8 B and 16×8 C matrices from the 32 lanes'
// fragments through the PTX ISA fragment layout of m16n8k16 (ptxA, ptxB,
// ptxC, written from the ISA tables, not from the kernel), multiplies, and
// scatters D back, so a fragment formula in the kernel that disagrees with
// the ISA layout gives wrong numbers here. Nothing is shared with the CPU
// reference (RefPagedAttention) the results are compared against.

// ---- the hardware ----

// ptxA is the (row, col) of half e (0 low, 1 high) of A register r of lane l
// for mma.m16n8k16 with 16-bit A: rows groupID and groupID+8, columns
// 2·threadID_in_group (+1) and +8.
func ptxA(l, r, e int) (row, col int) {
	return l/4 + 8*(r%2), 2*(l%4) + e + 8*(r/2)
}

// ptxB is the (k, n) of half e of B register r of lane l: k rows
// 2·threadID_in_group (+1), +8 for b1; column groupID.
func ptxB(l, r, e int) (k, n int) {
	return 2*(l%4) + e + 8*r, l / 4
}

// ptxC is the (row, col) of C/D register r of lane l: rows groupID (c0, c1)
// and groupID+8 (c2, c3), columns 2·threadID_in_group + (r&1).
func ptxC(l, r int) (row, col int) {
	return l/4 + 8*(r/2), 2*(l%4) + r%2
}

func emuBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// emuMMA is mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 over a
// warp: c[l] are lane l's 4 accumulators, a[l] its 4 A registers, b0[l] and
// b1[l] its B registers. Products of bf16 are exact in float64; each output
// is C plus the 16-term dot product, rounded once to float32 (the hardware's
// internal order may differ in the last bits).
func emuMMA(c *[32][4]float32, a *[32][4]uint32, b0, b1 *[32]uint32) {
	var A [16][16]float64
	var B [16][8]float64
	var C [16][8]float64
	for l := 0; l < 32; l++ {
		for r := 0; r < 4; r++ {
			for e := 0; e < 2; e++ {
				row, col := ptxA(l, r, e)
				A[row][col] = float64(emuBF16(uint16(a[l][r] >> (16 * e))))
			}
		}
		for r, b := range []uint32{b0[l], b1[l]} {
			for e := 0; e < 2; e++ {
				k, n := ptxB(l, r, e)
				B[k][n] = float64(emuBF16(uint16(b >> (16 * e))))
			}
		}
		for r := 0; r < 4; r++ {
			row, col := ptxC(l, r)
			C[row][col] = float64(c[l][r])
		}
	}
	for l := 0; l < 32; l++ {
		for r := 0; r < 4; r++ {
			row, col := ptxC(l, r)
			d := C[row][col]
			for k := 0; k < 16; k++ {
				d += A[row][k] * B[k][col]
			}
			c[l][r] = float32(d)
		}
	}
}

// emuShflXor is __shfl_xor_sync(0xffffffff, v, m) over a warp.
func emuShflXor(v [32]float32, m int) [32]float32 {
	var o [32]float32
	for l := range o {
		o[l] = v[l^m]
	}
	return o
}

func emuExp2(x float32) float32 { return float32(math.Exp2(float64(x))) }

// ---- the device helpers ----

// emuF32ToBF16 is ts_f32_to_bf16.
func emuF32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16 | 0x40)
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// emuPackBF16x2 is ts_pack_bf16x2.
func emuPackBF16x2(lo, hi float32) uint32 {
	return uint32(emuF32ToBF16(lo)) | uint32(emuF32ToBF16(hi))<<16
}

// emuStageIndex is ts_pft_stage_index.
func emuStageIndex(c, hd int) (kr, d int) {
	chunks := hd / 4
	kr = c&7 + 8*(c/(8*chunks))
	d = ((c >> 3) % chunks) * 4
	return kr, d
}

// emuCache is a KV cache as the kernel's T sees it: float (the _f32 entry)
// or bf16 bits (_bf16).
type emuCache struct {
	f32  []float32
	bf16 []uint16
}

// emuLoad4 is ts_load4_bf16x2 at element offset off.
func (c emuCache) emuLoad4(off int) (x, y uint32) {
	if c.bf16 != nil {
		return uint32(c.bf16[off]) | uint32(c.bf16[off+1])<<16, uint32(c.bf16[off+2]) | uint32(c.bf16[off+3])<<16
	}
	v := c.f32[off : off+4]
	return emuPackBF16x2(v[0], v[1]), emuPackBF16x2(v[2], v[3])
}

func u32At(m []uint16, i int) uint32 { return uint32(m[i]) | uint32(m[i+1])<<16 } // *(const unsigned *)(m + i)

// ---- the kernel ----

type emuPrefillArgs struct {
	out, q                []float32
	Kc, Vc                emuCache
	qStart, numQ, ctxLens []int32
	tables                []int32
	maxBlocks             int
	heads, kvh, bs, hd    int
	scale                 float32
	window                int // sliding window (0: none)
}

// emuPrefillTC runs the grid (gridX, heads, seqs) of ts_paged_prefill_tc_*.
func emuPrefillTC(a *emuPrefillArgs, gridX int) {
	for s := range a.numQ {
		for h := 0; h < a.heads; h++ {
			for bx := 0; bx < gridX; bx++ {
				emuPrefillTCBlock(a, bx, h, s)
			}
		}
	}
}

// emuWarp is the registers of one warp's 32 lanes.
type emuWarp struct {
	qa             [cudaPrefillTCMaxHD / 16][32][4]uint32
	o              [cudaPrefillTCMaxHD / 8][32][4]float32
	m0, m1, l0, l1 [32]float32
}

func emuPrefillTCBlock(a *emuPrefillArgs, bx, h, s int) {
	const warps, rowsPerBlock, keys, pad = cudaPrefillTCWarps, cudaPrefillTCRows, cudaPrefillTCKeys, cudaPrefillTCPad
	inf := float32(math.Inf(1))
	hd := a.hd
	nq := int(a.numQ[s])
	i0 := bx * rowsPerBlock
	if i0 >= nq {
		return
	}
	ks := hd + pad
	vs := keys + pad
	smem := make([]uint16, prefillTCSmem(hd)/2)
	Ks := smem[:keys*ks]
	Vt := smem[keys*ks:]
	pos0 := int(a.ctxLens[s]) - nq
	last := pos0 + min(i0+rowsPerBlock, nq) - 1
	kvi := h / (a.heads / a.kvh)
	table := a.tables[s*a.maxBlocks:]
	nkd, ndt := hd/16, hd/8
	qrow := a.heads * hd

	var W [warps]emuWarp
	var live [warps]bool
	var wlast, wwin [warps]int
	var r0, r1, lim0, lim1, win0, win1 [warps][32]int
	qs := a.scale * float32(1.4426950408889634)
	for warp := 0; warp < warps; warp++ {
		wr := i0 + warp*16
		live[warp] = wr < nq
		wlast[warp] = pos0 + min(wr+16, nq) - 1
		wwin[warp] = -1
		if a.window > 0 {
			wwin[warp] = pos0 + wr - a.window
		}
		w := &W[warp]
		for lane := 0; lane < 32; lane++ {
			g, tig := lane>>2, lane&3
			r0[warp][lane] = wr + g
			r1[warp][lane] = r0[warp][lane] + 8
			lim0[warp][lane] = min(pos0+r0[warp][lane], last)
			lim1[warp][lane] = min(pos0+r1[warp][lane], last)
			win0[warp][lane], win1[warp][lane] = -1, -1
			if a.window > 0 {
				win0[warp][lane], win1[warp][lane] = pos0+r0[warp][lane]-a.window, pos0+r1[warp][lane]-a.window
			}
			q0 := (int(a.qStart[s])+r0[warp][lane])*qrow + h*hd
			q1 := q0 + 8*qrow
			for kd := 0; kd < nkd; kd++ {
				d := kd*16 + 2*tig
				var x00, x01, x10, x11 [2]float32
				if r0[warp][lane] < nq {
					x00 = [2]float32{a.q[q0+d], a.q[q0+d+1]}
					x01 = [2]float32{a.q[q0+d+8], a.q[q0+d+9]}
				}
				if r1[warp][lane] < nq {
					x10 = [2]float32{a.q[q1+d], a.q[q1+d+1]}
					x11 = [2]float32{a.q[q1+d+8], a.q[q1+d+9]}
				}
				w.qa[kd][lane][0] = emuPackBF16x2(x00[0]*qs, x00[1]*qs)
				w.qa[kd][lane][1] = emuPackBF16x2(x10[0]*qs, x10[1]*qs)
				w.qa[kd][lane][2] = emuPackBF16x2(x01[0]*qs, x01[1]*qs)
				w.qa[kd][lane][3] = emuPackBF16x2(x11[0]*qs, x11[1]*qs)
			}
			w.m0[lane], w.m1[lane] = -inf, -inf
		}
	}

	tbeg := 0
	if a.window > 0 {
		tbeg = max(pos0+i0-a.window+1, 0)
	}
	for t0 := tbeg; t0 <= last; t0 += keys {
		// __syncthreads(); staging by every thread of the block.
		for tid := 0; tid < 32*warps; tid++ {
			for c := tid; c < keys*hd/4; c += 32 * warps {
				kr, d := emuStageIndex(c, hd)
				t := t0 + kr
				var kx, ky, vx, vy uint32
				if t <= last {
					off := ((int(table[t/a.bs])*a.kvh+kvi)*a.bs+t%a.bs)*hd + d
					kx, ky = a.Kc.emuLoad4(off)
					vx, vy = a.Vc.emuLoad4(off)
				}
				p := kr*ks + d
				Ks[p], Ks[p+1], Ks[p+2], Ks[p+3] = uint16(kx), uint16(kx>>16), uint16(ky), uint16(ky>>16)
				Vt[(d+0)*vs+kr] = uint16(vx & 0xffff)
				Vt[(d+1)*vs+kr] = uint16(vx >> 16)
				Vt[(d+2)*vs+kr] = uint16(vy & 0xffff)
				Vt[(d+3)*vs+kr] = uint16(vy >> 16)
			}
		}
		// __syncthreads(); each warp's math.
		for warp := 0; warp < warps; warp++ {
			if !live[warp] || t0 > wlast[warp] || t0+keys-1 <= wwin[warp] {
				continue
			}
			w := &W[warp]
			var sc [keys / 8][32][4]float32
			for kd := 0; kd < nkd; kd++ {
				for nt := 0; nt < keys/8; nt++ {
					var b0, b1 [32]uint32
					for lane := 0; lane < 32; lane++ {
						g, tig := lane>>2, lane&3
						kp := (nt*8+g)*ks + kd*16 + 2*tig
						b0[lane], b1[lane] = u32At(Ks, kp), u32At(Ks, kp+8)
					}
					emuMMA(&sc[nt], &w.qa[kd], &b0, &b1)
				}
			}
			var mx0, mx1 [32]float32
			for lane := 0; lane < 32; lane++ {
				tig := lane & 3
				mx0[lane], mx1[lane] = -inf, -inf
				for nt := 0; nt < keys/8; nt++ {
					for j := 0; j < 2; j++ {
						kpos := t0 + nt*8 + 2*tig + j
						if kpos > lim0[warp][lane] || kpos <= win0[warp][lane] {
							sc[nt][lane][j] = -inf
						}
						if kpos > lim1[warp][lane] || kpos <= win1[warp][lane] {
							sc[nt][lane][2+j] = -inf
						}
						mx0[lane] = max32(mx0[lane], sc[nt][lane][j])
						mx1[lane] = max32(mx1[lane], sc[nt][lane][2+j])
					}
				}
			}
			mx0 = emuMax(mx0, emuShflXor(mx0, 1))
			mx0 = emuMax(mx0, emuShflXor(mx0, 2))
			mx1 = emuMax(mx1, emuShflXor(mx1, 1))
			mx1 = emuMax(mx1, emuShflXor(mx1, 2))
			var pa [keys / 16][32][4]uint32
			for lane := 0; lane < 32; lane++ {
				mn0, mn1 := max32(w.m0[lane], mx0[lane]), max32(w.m1[lane], mx1[lane])
				b0, b1 := mn0, mn1
				if mn0 == -inf {
					b0 = 0
				}
				if mn1 == -inf {
					b1 = 0
				}
				a0, a1 := emuExp2(w.m0[lane]-b0), emuExp2(w.m1[lane]-b1)
				w.m0[lane], w.m1[lane] = mn0, mn1
				w.l0[lane] *= a0
				w.l1[lane] *= a1
				for dt := 0; dt < cudaPrefillTCMaxHD/8; dt++ {
					w.o[dt][lane][0] *= a0
					w.o[dt][lane][1] *= a0
					w.o[dt][lane][2] *= a1
					w.o[dt][lane][3] *= a1
				}
				for nt := 0; nt < keys/8; nt++ {
					p0, p1 := emuExp2(sc[nt][lane][0]-b0), emuExp2(sc[nt][lane][1]-b0)
					p2, p3 := emuExp2(sc[nt][lane][2]-b1), emuExp2(sc[nt][lane][3]-b1)
					w.l0[lane] += p0 + p1
					w.l1[lane] += p2 + p3
					pa[nt/2][lane][(nt&1)*2+0] = emuPackBF16x2(p0, p1)
					pa[nt/2][lane][(nt&1)*2+1] = emuPackBF16x2(p2, p3)
				}
			}
			for kk := 0; kk < keys/16; kk++ {
				for dt := 0; dt < ndt; dt++ {
					var b0, b1 [32]uint32
					for lane := 0; lane < 32; lane++ {
						g, tig := lane>>2, lane&3
						vp := (dt*8+g)*vs + kk*16 + 2*tig
						b0[lane], b1[lane] = u32At(Vt, vp), u32At(Vt, vp+8)
					}
					emuMMA(&w.o[dt], &pa[kk], &b0, &b1)
				}
			}
		}
	}

	for warp := 0; warp < warps; warp++ {
		w := &W[warp]
		w.l0 = emuAdd(w.l0, emuShflXor(w.l0, 1))
		w.l0 = emuAdd(w.l0, emuShflXor(w.l0, 2))
		w.l1 = emuAdd(w.l1, emuShflXor(w.l1, 1))
		w.l1 = emuAdd(w.l1, emuShflXor(w.l1, 2))
		for lane := 0; lane < 32; lane++ {
			tig := lane & 3
			var inv0, inv1 float32
			if w.l0[lane] > 0 {
				inv0 = 1 / w.l0[lane]
			}
			if w.l1[lane] > 0 {
				inv1 = 1 / w.l1[lane]
			}
			o0 := (int(a.qStart[s])+r0[warp][lane])*qrow + h*hd + 2*tig
			o1 := o0 + 8*qrow
			for dt := 0; dt < ndt; dt++ {
				if r0[warp][lane] < nq {
					a.out[o0+dt*8], a.out[o0+dt*8+1] = w.o[dt][lane][0]*inv0, w.o[dt][lane][1]*inv0
				}
				if r1[warp][lane] < nq {
					a.out[o1+dt*8], a.out[o1+dt*8+1] = w.o[dt][lane][2]*inv1, w.o[dt][lane][3]*inv1
				}
			}
		}
	}
}

// emuPrefillWarp runs the grid (gridX, heads, seqs) of ts_paged_prefill_*
// (the warp kernel): warp w of block bx is query bx·TS_PREFILL_WARPS + w.
func emuPrefillWarp(a *emuPrefillArgs, gridX int) {
	for s := range a.numQ {
		for h := 0; h < a.heads; h++ {
			for bx := 0; bx < gridX; bx++ {
				for warp := 0; warp < cudaPrefillWarps; warp++ {
					emuPrefillWarpQuery(a, bx*cudaPrefillWarps+warp, h, s)
				}
			}
		}
	}
}

// emuPrefillWarpQuery is one warp of prefill_attn, lanes as arrays.
func emuPrefillWarpQuery(a *emuPrefillArgs, i, h, s int) {
	const nj = cudaMaxHeadDim / 32
	inf := float32(math.Inf(1))
	hd, bs := a.hd, a.bs
	nq := int(a.numQ[s])
	if i >= nq {
		return
	}
	row := int(a.qStart[s]) + i
	pos := int(a.ctxLens[s]) - nq + i
	kvi := h / (a.heads / a.kvh)
	table := a.tables[s*a.maxBlocks:]
	var qr, acc [32][nj]float32
	for lane := 0; lane < 32; lane++ {
		for j := 0; j < nj; j++ {
			if d := lane + 32*j; d < hd {
				qr[lane][j] = a.q[row*a.heads*hd+h*hd+d] * a.scale
			}
		}
	}
	var m, l [32]float32
	for lane := range m {
		m[lane] = -inf
	}
	t0 := 0
	if a.window > 0 {
		t0 = max(pos-a.window+1, 0)
	}
	for ; t0 <= pos; t0 += 32 {
		n := min(32, pos+1-t0)
		var my [32]float32
		for lane := range my {
			my[lane] = -inf
		}
		for jj := 0; jj < n; jj++ {
			t := t0 + jj
			kr := ((int(table[t/bs])*a.kvh+kvi)*bs + t%bs) * hd
			var part [32]float32
			for lane := 0; lane < 32; lane++ {
				for j := 0; j < nj; j++ {
					if d := lane + 32*j; d < hd {
						part[lane] += qr[lane][j] * a.Kc.at(kr+d)
					}
				}
			}
			my[jj] = emuWarpSum(part)[jj]
		}
		mx := my
		for o := 16; o > 0; o >>= 1 {
			mx = emuMax(mx, emuShflXor(mx, o))
		}
		var p, al [32]float32
		for lane := 0; lane < 32; lane++ {
			mn := max32(m[lane], mx[lane])
			if m[lane] != -inf {
				al[lane] = emuExp(m[lane] - mn)
			}
			if my[lane] != -inf {
				p[lane] = emuExp(my[lane] - mn)
			}
			m[lane] = mn // the kernel sets m after the V loop, which does not read it
		}
		ps := emuWarpSum(p)
		for lane := 0; lane < 32; lane++ {
			l[lane] = l[lane]*al[lane] + ps[lane]
			for j := 0; j < nj; j++ {
				acc[lane][j] *= al[lane]
			}
		}
		for jj := 0; jj < n; jj++ {
			t := t0 + jj
			vr := ((int(table[t/bs])*a.kvh+kvi)*bs + t%bs) * hd
			for lane := 0; lane < 32; lane++ {
				pj := p[jj]
				for j := 0; j < nj; j++ {
					if d := lane + 32*j; d < hd {
						acc[lane][j] += pj * a.Vc.at(vr+d)
					}
				}
			}
		}
	}
	o := row*a.heads*hd + h*hd
	for lane := 0; lane < 32; lane++ {
		for j := 0; j < nj; j++ {
			if d := lane + 32*j; d < hd {
				a.out[o+d] = 0
				if l[lane] > 0 {
					a.out[o+d] = acc[lane][j] / l[lane]
				}
			}
		}
	}
}

// max32 is fmaxf for the non-NaN values the kernel meets.
func max32(x, y float32) float32 {
	if x > y {
		return x
	}
	return y
}

func emuMax(x, y [32]float32) [32]float32 {
	for l := range x {
		x[l] = max32(x[l], y[l])
	}
	return x
}

func emuAdd(x, y [32]float32) [32]float32 {
	for l := range x {
		x[l] += y[l]
	}
	return x
}

// ---- the tests ----

// The hardware model itself: the fragment layouts of ptxA/ptxB/ptxC cover
// every element of A, B and C exactly once, and emuMMA multiplies.
func TestEmuMMALayout(t *testing.T) {
	var seenA [16][16]int
	var seenB [16][8]int
	var seenC [16][8]int
	for l := 0; l < 32; l++ {
		for r := 0; r < 4; r++ {
			for e := 0; e < 2; e++ {
				row, col := ptxA(l, r, e)
				seenA[row][col]++
			}
			row, col := ptxC(l, r)
			seenC[row][col]++
		}
		for r := 0; r < 2; r++ {
			for e := 0; e < 2; e++ {
				k, n := ptxB(l, r, e)
				seenB[k][n]++
			}
		}
	}
	for i := range 16 {
		for j := range 16 {
			require.Equal(t, 1, seenA[i][j], "A[%d][%d]", i, j)
		}
		for j := range 8 {
			require.Equal(t, 1, seenB[i][j], "B[%d][%d]", i, j)
			require.Equal(t, 1, seenC[i][j], "C[%d][%d]", i, j)
		}
	}
	// A = I (rows 0..15), B[k][n] = k + 16n: D = B's rows, plus C = 1.
	var a [32][4]uint32
	var b0, b1 [32]uint32
	var c [32][4]float32
	for l := 0; l < 32; l++ {
		for r := 0; r < 4; r++ {
			var h [2]float32
			for e := 0; e < 2; e++ {
				if row, col := ptxA(l, r, e); row == col {
					h[e] = 1
				}
			}
			a[l][r] = emuPackBF16x2(h[0], h[1])
			c[l][r] = 1
		}
		bv := func(r int) uint32 {
			k0, n0 := ptxB(l, r, 0)
			k1, n1 := ptxB(l, r, 1)
			return emuPackBF16x2(float32(k0+16*n0), float32(k1+16*n1))
		}
		b0[l], b1[l] = bv(0), bv(1)
	}
	emuMMA(&c, &a, &b0, &b1)
	for l := 0; l < 32; l++ {
		for r := 0; r < 4; r++ {
			row, col := ptxC(l, r)
			require.Equal(t, float32(row+16*col+1), c[l][r], "lane %d reg %d", l, r)
		}
	}
}

// Every staging item lands on a distinct (key, 4-dim chunk) of the tile.
func TestEmuStageIndexCovers(t *testing.T) {
	for hd := 16; hd <= cudaPrefillTCMaxHD; hd += 16 {
		seen := map[[2]int]bool{}
		for c := 0; c < cudaPrefillTCKeys*hd/4; c++ {
			kr, d := emuStageIndex(c, hd)
			require.True(t, kr >= 0 && kr < cudaPrefillTCKeys && d >= 0 && d < hd && d%4 == 0, "hd %d item %d: key %d dim %d", hd, c, kr, d)
			require.False(t, seen[[2]int{kr, d}], "hd %d item %d: key %d dim %d twice", hd, c, kr, d)
			seen[[2]int{kr, d}] = true
		}
	}
}

type emuPrefillSeq struct{ numQ, ctx int }

type emuPrefillCase struct {
	seqs          []emuPrefillSeq
	hd, group, bs int
	bf16          bool
	window        int  // sliding window (0: none)
	warp          bool // the warp kernel instead of the tensor-core one
}

func (c emuPrefillCase) String() string {
	kv := "f32"
	if c.bf16 {
		kv = "bf16"
	}
	k := "tc"
	if c.warp {
		k = "warp"
	}
	return fmt.Sprintf("seqs=%v/hd=%d/group=%d/bs=%d/%s/window=%d/%s", c.seqs, c.hd, c.group, c.bs, kv, c.window, k)
}

// emuPrefillTolerance: |got − want| ≤ emuPrefillAbsTol + emuPrefillRelTol·|want|.
// The kernel rounds q·scale·log2 e and the softmax weights P to bf16 (and K,
// V too when the cache is float32), relative error 2⁻⁹ each, and accumulates
// in float32; outputs are convex combinations of V entries in [−1, 1], so
// errors of a few 1e-3 are expected, and a wrong index gives errors of order
// 0.1 or NaN.
const emuPrefillAbsTol, emuPrefillRelTol = 1e-2, 1e-2

// runEmuPrefillCase builds a paged cache with shuffled block tables, the
// queries of every sequence with an unused row between sequences, runs the
// emulated kernel and the CPU reference, and returns the largest error. Rows
// no sequence owns must stay untouched (NaN).
func runEmuPrefillCase(t *testing.T, tc emuPrefillCase, seed uint64) float64 {
	r := rand.New(rand.NewPCG(seed, uint64(tc.hd*tc.bs)))
	const kvh = 2
	heads := kvh * tc.group
	maxBlocks, maxQ := 1, 0
	for _, s := range tc.seqs {
		maxBlocks = max(maxBlocks, ceilDiv(s.ctx, tc.bs))
		maxQ = max(maxQ, s.numQ)
	}
	numBlocks := len(tc.seqs)*maxBlocks + 2
	n := numBlocks * kvh * tc.bs * tc.hd
	l := &KVLayer{K: make([]float32, n), V: make([]float32, n), NumBlocks: numBlocks, KVHeads: kvh, BlockSize: tc.bs, HeadDim: tc.hd}
	var kc, vc emuCache
	for i := range l.K {
		l.K[i], l.V[i] = 2*r.Float32()-1, 2*r.Float32()-1
	}
	if tc.bf16 { // the cache holds bf16; the reference sees those values
		kc.bf16, vc.bf16 = make([]uint16, n), make([]uint16, n)
		for i := range l.K {
			kc.bf16[i], vc.bf16[i] = F32ToBF16(l.K[i]), F32ToBF16(l.V[i])
			l.K[i], l.V[i] = BF16ToF32(kc.bf16[i]), BF16ToF32(vc.bf16[i])
		}
	} else {
		kc.f32, vc.f32 = l.K, l.V
	}
	perm := r.Perm(numBlocks)
	tables := make([]int32, len(tc.seqs)*maxBlocks)
	for i := range tables {
		tables[i] = int32(perm[i])
	}
	row := heads * tc.hd
	var qStart, numQ, ctxLens []int32
	var seqs []AttnSeq
	rows := 0
	owned := map[int]bool{}
	for i, s := range tc.seqs {
		qStart, numQ, ctxLens = append(qStart, int32(rows)), append(numQ, int32(s.numQ)), append(ctxLens, int32(s.ctx))
		seqs = append(seqs, AttnSeq{QStart: int32(rows), NumQ: int32(s.numQ), ContextLen: int32(s.ctx), BlockTable: tables[i*maxBlocks : (i+1)*maxBlocks],
			Window: int32(tc.window)})
		for j := 0; j < s.numQ; j++ {
			owned[rows+j] = true
		}
		rows += s.numQ + 1 // one row of no sequence between and after
	}
	q := make([]float32, rows*row)
	for i := range q {
		q[i] = 2*r.Float32() - 1
	}
	scale := float32(1 / math.Sqrt(float64(tc.hd)))
	want := make([]float32, len(q))
	require.NoError(t, RefPagedAttention(want, q, l, seqs, heads, scale))
	got := make([]float32, len(q))
	for i := range got {
		got[i] = float32(math.NaN())
	}
	args := &emuPrefillArgs{out: got, q: q, Kc: kc, Vc: vc, qStart: qStart, numQ: numQ, ctxLens: ctxLens,
		tables: tables, maxBlocks: maxBlocks, heads: heads, kvh: kvh, bs: tc.bs, hd: tc.hd, scale: scale, window: tc.window}
	if tc.warp {
		emuPrefillWarp(args, ceilDiv(maxQ, cudaPrefillWarps))
	} else {
		emuPrefillTC(args, ceilDiv(maxQ, cudaPrefillTCRows))
	}
	worst := 0.0
	for i := range got {
		rw := i / row
		if !owned[rw] {
			require.True(t, math.IsNaN(float64(got[i])), "%v: row %d (no sequence's) written at %d", tc, rw, i%row)
			continue
		}
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if !(d <= emuPrefillAbsTol+emuPrefillRelTol*math.Abs(float64(want[i]))) {
			t.Fatalf("%v: row %d head %d dim %d: want %v got %v", tc, rw, (i%row)/tc.hd, i%tc.hd, want[i], got[i])
		}
		worst = max(worst, d)
	}
	return worst
}

func emuPrefillCases() []emuPrefillCase {
	shapes := [][]emuPrefillSeq{
		{{1, 1}},    // one query, nothing cached
		{{1, 150}},  // one query after a cached prefix
		{{17, 17}},  // a part tile
		{{17, 90}},  // a part tile after a prefix that is not a whole tile
		{{64, 64}},  // exactly one tile
		{{64, 128}}, // one query tile over two key tiles
		{{65, 65}},  // one row into the second query tile
		{{65, 100}},
		{{200, 200}},
		{{200, 333}},
		{{17, 40}, {130, 130}}, // two sequences of different lengths in one launch
		{{200, 201}, {3, 70}},
	}
	configs := []struct {
		hd, group, bs int
		bf16          bool
	}{
		{64, 1, 16, true},
		{128, 4, 32, true},
		{64, 4, 32, false},
		{128, 1, 16, false},
	}
	var out []emuPrefillCase
	for _, s := range shapes {
		for _, c := range configs {
			out = append(out, emuPrefillCase{seqs: s, hd: c.hd, group: c.group, bs: c.bs, bf16: c.bf16})
		}
	}
	// The other supported head dims, once each.
	for _, hd := range []int{16, 32, 48, 80, 96, 112} {
		out = append(out, emuPrefillCase{seqs: []emuPrefillSeq{{70, 90}, {5, 5}}, hd: hd, group: 2, bs: 16, bf16: hd%32 == 0})
	}
	return out
}

// emuPrefillWindowCases are chunks crossing a sliding window's edge: windows
// of one position, under a key tile, a tile, several tiles, about the
// context and past it; both kernels, f32 and bf16 caches.
func emuPrefillWindowCases() []emuPrefillCase {
	shapes := [][]emuPrefillSeq{
		{{1, 150}},             // decode-like: one query far past the window
		{{64, 64}},             // the first chunk: early rows see everything
		{{17, 90}},             // a chunk after a prefix, edge inside the chunk
		{{200, 333}},           // several query tiles, tiles skipped before each
		{{17, 40}, {130, 130}}, // two sequences in one launch
	}
	var out []emuPrefillCase
	for i, w := range []int{1, 7, 64, 100, 150, 400} {
		for j, s := range shapes {
			c := []struct {
				hd, group, bs int
				bf16          bool
			}{{64, 1, 16, true}, {128, 4, 32, false}, {32, 2, 16, true}}[(i+j)%3]
			for _, warp := range []bool{false, true} {
				out = append(out, emuPrefillCase{seqs: s, hd: c.hd, group: c.group, bs: c.bs, bf16: c.bf16, window: w, warp: warp})
			}
		}
	}
	return out
}

// The emulated kernels (tensor-core and warp) mask a sliding window as the
// CPU reference does.
func TestEmuPrefillWindowMatchesRef(t *testing.T) {
	for i, tc := range emuPrefillWindowCases() {
		t.Run(tc.String(), func(t *testing.T) {
			runEmuPrefillCase(t, tc, uint64(1000+i))
		})
	}
}

// The emulated tensor-core kernel matches the CPU reference on every case.
func TestEmuPrefillTCMatchesRef(t *testing.T) {
	worst := 0.0
	for i, tc := range emuPrefillCases() {
		t.Run(tc.String(), func(t *testing.T) {
			d := runEmuPrefillCase(t, tc, uint64(i))
			worst = max(worst, d)
		})
	}
	t.Logf("largest |emulated − reference| over all cases: %.3g (tolerance %g + %g·|want|)", worst, emuPrefillAbsTol, emuPrefillRelTol)
}
