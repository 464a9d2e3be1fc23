package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/cuda"
	"github.com/turnstile-llm/turnstile/internal/quant"
)

// These tests run the CUDA kernels on a real GPU and compare them with the Ref*
// functions. Without a driver or a device they skip, saying so; scripts/gpu-check.sh
// runs them on a GPU machine from a test binary built elsewhere.

type gpuEnv struct {
	drv *cuda.Driver
	dev *cuda.Device
	k   *CUDAKernels
}

func openGPU(t testing.TB) *gpuEnv {
	t.Helper()
	drv, err := cuda.LoadDriver()
	if err != nil {
		t.Skipf("no CUDA driver, skipping GPU kernel test: %v", err)
	}
	n, err := drv.DeviceCount()
	if err != nil || n == 0 {
		drv.Close()
		t.Skipf("no CUDA device (count %d), skipping GPU kernel test: %v", n, err)
	}
	nv, err := cuda.LoadNVRTC()
	if err != nil {
		drv.Close()
		t.Skipf("no NVRTC, skipping GPU kernel test: %v", err)
	}
	defer nv.Close()
	dev, err := drv.Open(0)
	require.NoError(t, err)
	cc, err := cuda.NewCubinCache(nv, "")
	require.NoError(t, err)
	mods, err := CompileCUDA(cc, dev.Props().Arch())
	require.NoError(t, err)
	env := &gpuEnv{drv: drv, dev: dev}
	require.NoError(t, dev.Do(func(c cuda.Ctx) error {
		env.k, err = LoadCUDAKernels(c, mods)
		return err
	}))
	t.Cleanup(func() {
		_ = dev.Do(func(c cuda.Ctx) error { return env.k.Unload(c) })
		require.NoError(t, dev.Close())
		drv.Close()
	})
	return env
}

func f32Bytes(f []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}

func i32Bytes(v []int32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
}

// devBuf tracks allocations of one test so they are freed together.
type devBuf struct {
	c    cuda.Ctx
	ptrs []cuda.DevicePtr
}

func (b *devBuf) alloc(t testing.TB, n int) cuda.DevicePtr {
	p, err := b.c.Alloc(uint64(max(n, 4)))
	require.NoError(t, err)
	b.ptrs = append(b.ptrs, p)
	return p
}

func (b *devBuf) bytes(t testing.TB, data []byte) cuda.DevicePtr {
	p := b.alloc(t, len(data))
	require.NoError(t, b.c.CopyHtoD(p, data))
	return p
}

func (b *devBuf) f32(t testing.TB, v []float32) cuda.DevicePtr { return b.bytes(t, f32Bytes(v)) }
func (b *devBuf) i32(t testing.TB, v []int32) cuda.DevicePtr   { return b.bytes(t, i32Bytes(v)) }

func (b *devBuf) readF32(t testing.TB, p cuda.DevicePtr, n int) []float32 {
	out := make([]float32, n)
	require.NoError(t, b.c.Synchronize())
	require.NoError(t, b.c.CopyDtoH(f32Bytes(out), p))
	return out
}

func (b *devBuf) readI32(t testing.TB, p cuda.DevicePtr, n int) []int32 {
	out := make([]int32, n)
	require.NoError(t, b.c.Synchronize())
	require.NoError(t, b.c.CopyDtoH(i32Bytes(out), p))
	return out
}

func (b *devBuf) free() {
	for _, p := range b.ptrs {
		_ = b.c.Free(p)
	}
}

// withGPU runs f on the device thread with a fresh allocation tracker.
func (e *gpuEnv) with(t testing.TB, f func(c cuda.Ctx, b *devBuf)) {
	require.NoError(t, e.dev.Do(func(c cuda.Ctx) error {
		b := &devBuf{c: c}
		defer b.free()
		f(c, b)
		return nil
	}))
}

func randF32(r *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (r.Float32()*2 - 1) * scale
	}
	return v
}

func requireClose(t testing.TB, want, got []float32, tol float64, what string) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		d := math.Abs(float64(want[i]) - float64(got[i]))
		require.LessOrEqual(t, d, tol*(1+math.Abs(float64(want[i]))), "%s[%d]: want %v got %v", what, i, want[i], got[i])
	}
}

func TestGPURowKernels(t *testing.T) {
	e := openGPU(t)
	r := rand.New(rand.NewPCG(1, 2))
	e.with(t, func(c cuda.Ctx, b *devBuf) {
		var s cuda.Stream
		// RMSNorm, dim not a multiple of the block.
		rows, dim := 5, 300
		x, w := randF32(r, rows*dim, 2), randF32(r, dim, 1)
		want := make([]float32, rows*dim)
		RefRMSNorm(want, x, w, rows, dim, 1e-5)
		dx, dw := b.f32(t, x), b.f32(t, w)
		dy := b.alloc(t, 4*rows*dim)
		require.NoError(t, e.k.RMSNorm(c, s, dy, dx, dw, rows, dim, 1e-5))
		requireClose(t, want, b.readF32(t, dy, rows*dim), 1e-5, "rmsnorm")

		// RoPE with positions up to 1e5.
		pos := []int32{0, 1, 17, 4095, 100000}
		heads, hd := 4, 64
		xr := randF32(r, len(pos)*heads*hd, 1)
		wantR := append([]float32(nil), xr...)
		RefRoPE(wantR, pos, heads, hd, 10000, 1)
		dxr, dpos := b.f32(t, xr), b.i32(t, pos)
		require.NoError(t, e.k.RoPE(c, s, dxr, dpos, len(pos), heads, hd, 10000, 1))
		requireClose(t, wantR, b.readF32(t, dxr, len(xr)), 2e-5, "rope")

		// RoPEFreqs in both layouts with per-dimension factors, and bias add.
		for _, neox := range []bool{false, true} {
			freqs := RopeFreqs(hd, 500000, 1)
			for i := range freqs {
				freqs[i] /= 1 + float64(i%5)
			}
			xf := randF32(r, len(pos)*heads*hd, 1)
			wantF := append([]float32(nil), xf...)
			RefRoPEFreqs(wantF, pos, heads, hd, freqs, neox)
			fb := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(freqs))), 8*len(freqs))
			dxf := b.f32(t, xf)
			require.NoError(t, e.k.RoPEFreqs(c, s, dxf, dpos, b.bytes(t, fb), len(pos), heads, hd, neox))
			requireClose(t, wantF, b.readF32(t, dxf, len(xf)), 2e-5, fmt.Sprintf("rope freqs neox=%v", neox))
		}
		xb, bias := randF32(r, 3*40, 1), randF32(r, 40, 1)
		wantB := append([]float32(nil), xb...)
		for i := range wantB {
			wantB[i] += bias[i%40]
		}
		dxb := b.f32(t, xb)
		require.NoError(t, e.k.AddBias(c, s, dxb, b.f32(t, bias), 3, 40))
		requireClose(t, wantB, b.readF32(t, dxb, len(xb)), 0, "add bias")

		// SiLU·mul.
		n := 1000
		g, u := randF32(r, n, 6), randF32(r, n, 2)
		wantS := make([]float32, n)
		RefSiLUMul(wantS, g, u)
		dout := b.alloc(t, 4*n)
		require.NoError(t, e.k.SiLUMul(c, s, dout, b.f32(t, g), b.f32(t, u), n))
		requireClose(t, wantS, b.readF32(t, dout, n), 1e-6, "silu")
	})
}

// The embedding gathers of every type (the block types' in quant.cu) equal
// the CPU reference bit for bit.
func TestGPUEmbedding(t *testing.T) {
	e := openGPU(t)
	r := rand.New(rand.NewPCG(3, 4))
	vocab, cols := 50, 512 // a multiple of every block size
	vals := randF32(r, vocab*cols, 1)
	tokens := []int32{0, 49, 7, 7, 23}
	for _, dt := range Types {
		t.Run(dt.String(), func(t *testing.T) {
			table, err := Quantize(dt, vocab, cols, vals)
			require.NoError(t, err)
			want := make([]float32, len(tokens)*cols)
			RefEmbedding(want, table, tokens)
			e.with(t, func(c cuda.Ctx, b *devBuf) {
				out := b.alloc(t, 4*len(want))
				require.NoError(t, e.k.Embedding(c, cuda.Stream{}, out, b.bytes(t, table.Data), dt, b.i32(t, tokens), len(tokens), vocab, cols))
				require.Equal(t, want, b.readF32(t, out, len(want)))
			})
		})
	}
}

// Every block type's device dequantiser (ts_dequant_<type>_bf16) gives the
// host's bits: internal/quant's float32 rounded to bf16, on random blocks
// (every code, mask and packed-scale bit random, finite f16 scales) of a
// small matrix and of one past the grid-stride bound.
func TestGPUDequantBlockTypes(t *testing.T) {
	e := openGPU(t)
	for _, dt := range Types {
		if dt.BlockElems() <= 1 {
			continue
		}
		for _, shape := range [][2]int{{37, 4 * dt.BlockElems()}, {cudaMaxElemBlocks * cudaElemThreads / 1024 * 3, 1024}} {
			rows, cols := shape[0], shape[1]
			t.Run(fmt.Sprintf("%v/%dx%d", dt, rows, cols), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(dt), uint64(rows)))
				data := randQuantRows(r, dt, rows, cols)
				f := make([]float32, rows*cols)
				require.NoError(t, quant.Dequantize(quant.Type(dt), data, f))
				want := make([]uint16, len(f))
				for i, v := range f {
					want[i] = F32ToBF16(v)
				}
				got := make([]uint16, len(f))
				e.with(t, func(c cuda.Ctx, b *devBuf) {
					out := b.alloc(t, 2*len(got))
					require.NoError(t, e.k.DequantToBF16(c, cuda.Stream{}, out, b.bytes(t, data), dt, rows, cols))
					require.NoError(t, c.Synchronize())
					require.NoError(t, c.CopyDtoH(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(got))), 2*len(got)), out))
				})
				for i := range want {
					if want[i] != got[i] {
						t.Fatalf("%v element (%d, %d): device bf16 %#04x, host %#04x (float32 %g)", dt, i/cols, i%cols, got[i], want[i], f[i])
					}
				}
			})
		}
	}
}

func TestGPUAttention(t *testing.T) {
	e := openGPU(t)
	cases := []struct {
		name              string
		bf16              bool
		heads, kvh, hd    int
		blockSize, splits int   // splits cut each row by its own context (DecodeSplitRange)
		ctx               []int // per sequence; 0 is a padding row
		numQ              []int // prefill queries per sequence
		window            int   // sliding window (0: none)
	}{
		// 16 splits of rows of 1, 3, 7 blocks: most splits empty, merged as neutral.
		{"f32 gqa4 splits", false, 8, 2, 64, 16, 16, []int{1, 37, 100, 0}, []int{1, 5, 33, 0}, 0},
		// 3 splits of 13 blocks (5, 5, 3) and of a 1-block row (1, 0, 0).
		{"bf16 gqa8 hd128", true, 16, 2, 128, 16, 3, []int{200, 3}, []int{64, 3}, 0},
		{"f32 mha hd80 bs32", false, 4, 4, 80, 32, 1, []int{65, 64}, []int{2, 64}, 0},
		// Rows of 1, 17 and 300 positions (1, 2, 19 blocks) in 16 splits.
		{"f32 gqa2 ragged 16 splits", false, 4, 2, 64, 16, 16, []int{1, 17, 300}, []int{1, 17, 40}, 0},
		// Sliding windows: smaller than most contexts (splits cover only
		// the blocks the window sees), equal to one, larger than all;
		// prefill chunks that cross the window's edge.
		{"f32 gqa4 window 40", false, 8, 2, 64, 16, 4, []int{1, 37, 40, 300, 0}, []int{1, 20, 40, 130, 0}, 40},
		{"bf16 gqa8 hd128 window 7", true, 16, 2, 128, 16, 3, []int{200, 3, 70}, []int{100, 3, 70}, 7},
		{"bf16 mha window 100", true, 4, 4, 64, 32, 2, []int{65, 99, 333}, []int{65, 50, 200}, 100},
		{"f32 gqa2 window 1000", false, 4, 2, 64, 16, 16, []int{1, 17, 300}, []int{1, 17, 40}, 1000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, uint64(tc.hd)))
			maxBlocks := 0
			for _, cl := range tc.ctx {
				maxBlocks = max(maxBlocks, ceilDiv(cl, tc.blockSize))
			}
			maxBlocks = max(maxBlocks, 1)
			numBlocks := len(tc.ctx)*maxBlocks + 3
			l := &KVLayer{NumBlocks: numBlocks, KVHeads: tc.kvh, BlockSize: tc.blockSize, HeadDim: tc.hd}
			l.K = make([]float32, numBlocks*tc.kvh*tc.blockSize*tc.hd)
			l.V = make([]float32, len(l.K))
			// Tables: a shuffled permutation of blocks, so pages are not contiguous.
			perm := r.Perm(numBlocks)
			tables := make([]int32, len(tc.ctx)*maxBlocks)
			var slots []int32
			var kRows, vRows []float32
			kvRow := tc.kvh * tc.hd
			for i, cl := range tc.ctx {
				for j := 0; j < maxBlocks; j++ {
					tables[i*maxBlocks+j] = int32(perm[i*maxBlocks+j])
				}
				tab := tables[i*maxBlocks : (i+1)*maxBlocks]
				pos := make([]int32, cl)
				k, v := randF32(r, cl*kvRow, 1), randF32(r, cl*kvRow, 1)
				if tc.bf16 { // the reference sees what the bf16 cache holds
					for j := range k {
						k[j], v[j] = BF16ToF32(F32ToBF16(k[j])), BF16ToF32(F32ToBF16(v[j]))
					}
				}
				for p := range pos {
					pos[p] = int32(p)
					slots = append(slots, tab[p/tc.blockSize]*int32(tc.blockSize)+int32(p%tc.blockSize))
				}
				require.NoError(t, KVWrite(l, k, v, pos, tab))
				kRows, vRows = append(kRows, k...), append(vRows, v...)
			}
			slots = append(slots, -1) // a padding token writes nothing
			kRows, vRows = append(kRows, make([]float32, kvRow)...), append(vRows, make([]float32, kvRow)...)
			scale := float32(1 / math.Sqrt(float64(tc.hd)))
			row := tc.heads * tc.hd
			elem := 4
			if tc.bf16 {
				elem = 2
			}

			e.with(t, func(c cuda.Ctx, b *devBuf) {
				var s cuda.Stream
				cacheBytes := len(l.K) * elem
				kv := CUDAKV{K: b.alloc(t, cacheBytes), V: b.alloc(t, cacheBytes), BF16: tc.bf16,
					NumBlocks: numBlocks, KVHeads: tc.kvh, BlockSize: tc.blockSize, HeadDim: tc.hd}
				require.NoError(t, c.MemsetD8Async(kv.K, 0, uint64(cacheBytes), s))
				require.NoError(t, c.MemsetD8Async(kv.V, 0, uint64(cacheBytes), s))
				require.NoError(t, e.k.KVWrite(c, s, kv, b.f32(t, kRows), b.f32(t, vRows), b.i32(t, slots), len(slots)))
				if !tc.bf16 {
					require.Equal(t, l.K, b.readF32(t, kv.K, len(l.K)), "K cache after KVWrite")
					require.Equal(t, l.V, b.readF32(t, kv.V, len(l.V)), "V cache after KVWrite")
				}
				dTables := b.i32(t, tables)

				// Decode: one query per sequence at its last position.
				q := randF32(r, len(tc.ctx)*row, 1)
				want := make([]float32, len(q))
				var seqs []AttnSeq
				for i, cl := range tc.ctx {
					if cl > 0 {
						seqs = append(seqs, AttnSeq{QStart: int32(i), NumQ: 1, ContextLen: int32(cl), BlockTable: tables[i*maxBlocks : (i+1)*maxBlocks],
							Window: int32(tc.window)})
					}
				}
				require.NoError(t, RefPagedAttention(want, q, l, seqs, tc.heads, scale))
				ctxLens := make([]int32, len(tc.ctx))
				for i, cl := range tc.ctx {
					ctxLens[i] = int32(cl)
				}
				d := DecodeShape{Batch: len(tc.ctx), Heads: tc.heads, MaxBlocks: maxBlocks, Splits: tc.splits, Window: tc.window}
				ob, mb := DecodeScratchBytes(d, tc.hd)
				out := b.alloc(t, 4*len(q))
				require.NoError(t, e.k.DecodeAttention(c, s, out, b.f32(t, q), kv, dTables, b.i32(t, ctxLens), d, scale,
					b.alloc(t, int(ob)), b.alloc(t, int(mb))))
				requireClose(t, want, b.readF32(t, out, len(q)), gpuAttnTolF32, "decode")

				// Prefill: the last numQ positions of each sequence.
				var qStart, numQ []int32
				rows, maxQ := 0, 0
				seqs = seqs[:0]
				for i, cl := range tc.ctx {
					nq := tc.numQ[i]
					qStart, numQ = append(qStart, int32(rows)), append(numQ, int32(nq))
					if nq > 0 {
						seqs = append(seqs, AttnSeq{QStart: int32(rows), NumQ: int32(nq), ContextLen: int32(cl), BlockTable: tables[i*maxBlocks : (i+1)*maxBlocks],
							Window: int32(tc.window)})
					}
					rows += nq
					maxQ = max(maxQ, nq)
				}
				qp := randF32(r, rows*row, 1)
				wantP := make([]float32, len(qp))
				require.NoError(t, RefPagedAttention(wantP, qp, l, seqs, tc.heads, scale))
				outP := b.alloc(t, 4*len(qp))
				// Every kernel that takes the shape: the warp kernel (float32
				// throughout) and, for head dims it handles, the tensor-core
				// one (bf16 operands, whatever the cache).
				kernels := []PrefillKernel{PrefillWarp}
				if prefillTCHeadDim(tc.hd) {
					kernels = append(kernels, PrefillTensorCore)
				}
				for _, pk := range kernels {
					p := PrefillShape{Seqs: len(tc.ctx), Heads: tc.heads, MaxQ: maxQ, MaxBlocks: maxBlocks, Kernel: pk, Window: tc.window}
					require.NoError(t, e.k.PrefillAttention(c, s, outP, b.f32(t, qp), kv, b.i32(t, qStart), b.i32(t, numQ), b.i32(t, ctxLens), dTables, p, scale))
					requireClose(t, wantP, b.readF32(t, outP, len(qp)), gpuPrefillTol(tc.bf16 || pk == PrefillTensorCore), "prefill "+pk.String())
				}
			})
		})
	}
}

func TestGPUArgmaxSample(t *testing.T) {
	e := openGPU(t)
	r := rand.New(rand.NewPCG(7, 8))
	vocab := 32000
	type row struct {
		temp, topP, minP, u float32
		topK                int32
		want                func(x []float32) int32
	}
	top3Lowest := func(x []float32) int32 { // lowest id among the 3 largest
		idx := topIndices(x, 3)
		return min(idx[0], idx[1], idx[2])
	}
	argmax := func(x []float32) int32 { return RefArgmax(x) }
	rows := []row{
		{temp: 0, topP: 1, want: argmax},
		{temp: 1, topK: 1, topP: 1, u: 0.7, want: argmax},
		{temp: 1, topK: 3, topP: 1, u: 0, want: top3Lowest},
		{temp: 0.8, topP: 1e-6, u: 0.5, want: argmax},
		{temp: 1.3, topP: 1, minP: 1, u: 0.99, want: argmax},
	}
	logits := randF32(r, len(rows)*vocab, 8)
	e.with(t, func(c cuda.Ctx, b *devBuf) {
		var s cuda.Stream
		dl := b.f32(t, logits)
		am := b.alloc(t, 4*len(rows))
		require.NoError(t, e.k.Argmax(c, s, am, dl, len(rows), vocab))
		got := b.readI32(t, am, len(rows))
		for i := range rows {
			require.Equal(t, RefArgmax(logits[i*vocab:(i+1)*vocab]), got[i], "argmax row %d", i)
		}
		p := SampleParams{}
		temps, topPs, minPs, us := make([]float32, len(rows)), make([]float32, len(rows)), make([]float32, len(rows)), make([]float32, len(rows))
		topKs := make([]int32, len(rows))
		for i, rw := range rows {
			temps[i], topPs[i], minPs[i], us[i], topKs[i] = rw.temp, rw.topP, rw.minP, rw.u, rw.topK
		}
		p.Temperature, p.TopP, p.MinP, p.U, p.TopK = b.f32(t, temps), b.f32(t, topPs), b.f32(t, minPs), b.f32(t, us), b.i32(t, topKs)
		out := b.alloc(t, 4*len(rows))
		require.NoError(t, e.k.Sample(c, s, out, dl, len(rows), vocab, p))
		got = b.readI32(t, out, len(rows))
		for i, rw := range rows {
			require.Equal(t, rw.want(logits[i*vocab:(i+1)*vocab]), got[i], "sample row %d", i)
		}
	})
}

// topIndices returns the ids of the n largest values, largest first.
func topIndices(x []float32, n int) []int32 {
	idx := make([]int32, 0, n)
	used := map[int32]bool{}
	for range n {
		best := int32(-1)
		for i, v := range x {
			if !used[int32(i)] && (best < 0 || v > x[best]) {
				best = int32(i)
			}
		}
		used[best] = true
		idx = append(idx, best)
	}
	return idx
}

func TestGPUGemm(t *testing.T) {
	e := openGPU(t)
	lt, err := cuda.LoadCublasLt()
	if err != nil {
		t.Skipf("no cuBLASLt, skipping GEMM test: %v", err)
	}
	defer lt.Close()
	r := rand.New(rand.NewPCG(9, 10))
	m, n, k := 3, 70, 64
	wv, xv := randF32(r, n*k, 1), randF32(r, m*k, 1)
	for _, tc := range []struct {
		dt  DType
		cdt cuda.DType
		tol float64
	}{{F32, cuda.F32, 1e-4}, {BF16, cuda.BF16, 1e-4}, {F16, cuda.F16, 1e-4}} {
		t.Run(tc.dt.String(), func(t *testing.T) {
			W, err := Quantize(tc.dt, n, k, wv)
			require.NoError(t, err)
			// The reference multiplies the x the GPU sees (rounded to the GEMM type).
			xr := append([]float32(nil), xv...)
			for i := range xr {
				switch tc.dt {
				case BF16:
					xr[i] = BF16ToF32(F32ToBF16(xr[i]))
				case F16:
					xr[i] = F16ToF32(F32ToF16(xr[i]))
				}
			}
			want := make([]float32, m*n)
			require.NoError(t, RefMatMul(want, xr, m, W))
			e.with(t, func(c cuda.Ctx, b *devBuf) {
				var s cuda.Stream
				g, err := c.NewGemm(lt, 4<<20)
				require.NoError(t, err)
				defer func() { require.NoError(t, c.DestroyGemm(g)) }()
				dx := b.f32(t, xv)
				if tc.dt != F32 {
					cast := b.alloc(t, 2*m*k)
					require.NoError(t, e.k.CastF32(c, s, cast, dx, m*k, tc.cdt))
					dx = cast
				}
				dy := b.alloc(t, 4*m*n)
				require.NoError(t, c.MatmulWT(g, tc.cdt, m, n, k, dx, b.bytes(t, W.Data), dy, s))
				requireClose(t, want, b.readF32(t, dy, m*n), tc.tol, "gemm")
			})
		})
	}
}

// A captured graph replays the kernels on whatever the input buffers hold.
func TestGPUGraph(t *testing.T) {
	e := openGPU(t)
	r := rand.New(rand.NewPCG(11, 12))
	rows, dim := 4, 512
	w := randF32(r, dim, 1)
	e.with(t, func(c cuda.Ctx, b *devBuf) {
		s, err := c.NewStream()
		require.NoError(t, err)
		defer func() { require.NoError(t, c.DestroyStream(s)) }()
		dx, dw, dy, dz := b.alloc(t, 4*rows*dim), b.f32(t, w), b.alloc(t, 4*rows*dim), b.alloc(t, 4*rows*dim)
		require.NoError(t, c.BeginCapture(s))
		require.NoError(t, e.k.RMSNorm(c, s, dy, dx, dw, rows, dim, 1e-6))
		require.NoError(t, e.k.SiLUMul(c, s, dz, dy, dx, rows*dim))
		g, err := c.EndCapture(s)
		require.NoError(t, err)
		ge, err := c.Instantiate(g)
		require.NoError(t, err)
		defer func() {
			require.NoError(t, c.DestroyGraphExec(ge))
			require.NoError(t, c.DestroyGraph(g))
		}()
		for step := range 3 {
			x := randF32(r, rows*dim, float32(step+1))
			require.NoError(t, c.CopyHtoD(dx, f32Bytes(x)))
			// The copy ran on the legacy stream, which s (non-blocking) does not wait for.
			require.NoError(t, c.Synchronize())
			require.NoError(t, c.LaunchGraph(ge, s))
			require.NoError(t, c.Sync(s))
			y := make([]float32, rows*dim)
			RefRMSNorm(y, x, w, rows, dim, 1e-6)
			want := make([]float32, rows*dim)
			RefSiLUMul(want, y, x)
			requireClose(t, want, b.readF32(t, dz, rows*dim), 1e-5, "graph step")
		}
	})
}

// TestGPUStartup logs the cold (empty cache) and warm start-up times: compile or
// read every kernel and load the modules. It asserts only that both work.
func TestGPUStartup(t *testing.T) {
	e := openGPU(t)
	nv, err := cuda.LoadNVRTC()
	require.NoError(t, err)
	defer nv.Close()
	dir := t.TempDir()
	for _, phase := range []string{"cold", "warm"} {
		start := time.Now()
		cc, err := cuda.NewCubinCache(nv, dir)
		require.NoError(t, err)
		mods, err := CompileCUDA(cc, e.dev.Props().Arch())
		require.NoError(t, err)
		e.with(t, func(c cuda.Ctx, b *devBuf) {
			k, err := LoadCUDAKernels(c, mods)
			require.NoError(t, err)
			require.NoError(t, k.Unload(c))
		})
		compiles, hits := cc.Stats()
		gpuResult(t, "kernel start-up, "+phase+" cubin cache", fmt.Sprintf("%v (%d compiles, %d hits)", time.Since(start).Round(time.Millisecond), compiles, hits), "-", "-")
	}
}
