package kernels

import (
	"fmt"
	"math"
)

// The Ref* functions are plain-Go references for every kernel: simple
// loops, float64 accumulation, no blocking. Tests compare the C (and CUDA)
// kernels against them; they are far too slow for serving.

// RefMatMul computes y = x·Wᵀ with W dequantized exactly to float32 and
// every dot product accumulated in float64.
func RefMatMul(y, x []float32, m int, W Matrix) error {
	if err := W.Validate(); err != nil {
		return err
	}
	if len(x) != m*W.Cols || len(y) != m*W.Rows {
		return fmt.Errorf("kernels: RefMatMul m=%d needs x of %d and y of %d floats, got %d and %d",
			m, m*W.Cols, m*W.Rows, len(x), len(y))
	}
	wrow := make([]float64, W.Cols)
	wf := make([]float32, W.Cols)
	for n := 0; n < W.Rows; n++ {
		W.Row(n, wf)
		for c, v := range wf {
			wrow[c] = float64(v)
		}
		for i := 0; i < m; i++ {
			var s float64
			for c, wv := range wrow {
				s += float64(x[i*W.Cols+c]) * wv
			}
			y[i*W.Rows+n] = float32(s)
		}
	}
	return nil
}

// RefRMSNorm is the reference RMSNorm (see Workers.RMSNorm).
func RefRMSNorm(y, x, weight []float32, rows, dim int, eps float32) {
	for r := 0; r < rows; r++ {
		var ss float64
		for _, v := range x[r*dim : (r+1)*dim] {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(dim)+float64(eps))
		for i := 0; i < dim; i++ {
			y[r*dim+i] = float32(float64(x[r*dim+i]) * inv * float64(weight[i]))
		}
	}
}

// RefRoPE is the reference RoPE (see RoPE).
func RefRoPE(x []float32, positions []int32, heads, headDim int, theta, freqScale float32) {
	for r, p := range positions {
		for i := 0; i < headDim/2; i++ {
			ang := float64(p) * float64(freqScale) * math.Pow(float64(theta), -2*float64(i)/float64(headDim))
			c, s := math.Cos(ang), math.Sin(ang)
			for h := 0; h < heads; h++ {
				o := r*heads*headDim + h*headDim + 2*i
				a, b := float64(x[o]), float64(x[o+1])
				x[o] = float32(a*c - b*s)
				x[o+1] = float32(a*s + b*c)
			}
		}
	}
}

// RefRoPEFreqs is the reference RoPEFreqs.
func RefRoPEFreqs(x []float32, positions []int32, heads, headDim int, freqs []float64, neox bool) {
	half := headDim / 2
	for r, p := range positions {
		for i := 0; i < half; i++ {
			ia, ib := 2*i, 2*i+1
			if neox {
				ia, ib = i, i+half
			}
			ang := float64(p) * freqs[i]
			c, s := math.Cos(ang), math.Sin(ang)
			for h := 0; h < heads; h++ {
				o := r*heads*headDim + h*headDim
				a, b := float64(x[o+ia]), float64(x[o+ib])
				x[o+ia] = float32(a*c - b*s)
				x[o+ib] = float32(a*s + b*c)
			}
		}
	}
}

// RefSiLUMul is the reference SiLU·mul (see SiLUMul).
func RefSiLUMul(y, gate, up []float32) {
	for i := range y {
		g := float64(gate[i])
		y[i] = float32(g / (1 + math.Exp(-g)) * float64(up[i]))
	}
}

// RefSoftmax is the reference softmax (see Softmax).
func RefSoftmax(x []float32) {
	if len(x) == 0 {
		return
	}
	mx := float64(x[0])
	for _, v := range x {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	e := make([]float64, len(x))
	for i, v := range x {
		e[i] = math.Exp(float64(v) - mx)
		sum += e[i]
	}
	for i := range x {
		x[i] = float32(e[i] / sum)
	}
}

// RefArgmax is the reference argmax (see Argmax).
func RefArgmax(x []float32) int32 {
	if len(x) == 0 {
		return -1
	}
	key := func(v float32) float32 { // the sampler's order
		switch {
		case v != v:
			return float32(math.Inf(-1))
		case v > math.MaxFloat32:
			return math.MaxFloat32
		}
		return v
	}
	best, bv := 0, key(x[0])
	for i, v := range x {
		if k := key(v); k > bv {
			best, bv = i, k
		}
	}
	return int32(best)
}

// RefEmbedding is the reference embedding gather (see Embedding).
func RefEmbedding(out []float32, table Matrix, tokens []int32) {
	for i, t := range tokens {
		table.Row(int(t), out[i*table.Cols:(i+1)*table.Cols])
	}
}

// RefAttention is dense causal attention for one sequence: q and out are
// [numQ][heads*headDim], k and v are [ctx][kvHeads*headDim] (positions
// 0..ctx-1); query i sits at position ctx-numQ+i. float64 throughout.
func RefAttention(out, q, k, v []float32, numQ, ctx, heads, kvHeads, headDim int, scale float32) {
	RefAttentionWindow(out, q, k, v, numQ, ctx, heads, kvHeads, headDim, 0, scale)
}

// RefAttentionWindow is RefAttention with a sliding window of window
// positions (0: none): the query at position pos attends to the positions
// p with pos-window < p ≤ pos only (see AttnSeq.Window).
func RefAttentionWindow(out, q, k, v []float32, numQ, ctx, heads, kvHeads, headDim, window int, scale float32) {
	group := heads / kvHeads
	s := make([]float64, ctx)
	for i := 0; i < numQ; i++ {
		pos := ctx - numQ + i
		lo := 0
		if window > 0 {
			lo = max(0, pos-window+1)
		}
		for h := 0; h < heads; h++ {
			kh := h / group
			qv := q[(i*heads+h)*headDim : (i*heads+h+1)*headDim]
			mx := math.Inf(-1)
			for p := lo; p <= pos; p++ {
				kv := k[(p*kvHeads+kh)*headDim:]
				var d float64
				for c, qc := range qv {
					d += float64(qc) * float64(kv[c])
				}
				s[p] = d * float64(scale)
				mx = math.Max(mx, s[p])
			}
			var sum float64
			for p := lo; p <= pos; p++ {
				s[p] = math.Exp(s[p] - mx)
				sum += s[p]
			}
			o := out[(i*heads+h)*headDim : (i*heads+h+1)*headDim]
			for c := range o {
				var a float64
				for p := lo; p <= pos; p++ {
					a += s[p] * float64(v[(p*kvHeads+kh)*headDim+c])
				}
				o[c] = float32(a / sum)
			}
		}
	}
}

// RefPagedAttention gathers each sequence's K/V out of the paged layer and
// runs RefAttentionWindow with the sequence's window (see Workers.PagedAttention for the arguments).
func RefPagedAttention(out, q []float32, l *KVLayer, seqs []AttnSeq, heads int, scale float32) error {
	if err := l.Validate(); err != nil {
		return err
	}
	row := heads * l.HeadDim
	kvRow := l.KVHeads * l.HeadDim
	for i, s := range seqs {
		if s.Window < 0 {
			return fmt.Errorf("kernels: RefPagedAttention seq %d has window %d, want ≥ 0 (0: none)", i, s.Window)
		}
		if err := l.checkTable(s.BlockTable, int(s.ContextLen)); err != nil {
			return fmt.Errorf("seq %d: %w", i, err)
		}
		ctx := int(s.ContextLen)
		k := make([]float32, ctx*kvRow)
		v := make([]float32, ctx*kvRow)
		for p := 0; p < ctx; p++ {
			blk, slot := int(s.BlockTable[p/l.BlockSize]), p%l.BlockSize
			for h := 0; h < l.KVHeads; h++ {
				src := ((blk*l.KVHeads+h)*l.BlockSize + slot) * l.HeadDim
				l.readRow(k[p*kvRow+h*l.HeadDim:], src, l.HeadDim, false)
				l.readRow(v[p*kvRow+h*l.HeadDim:], src, l.HeadDim, true)
			}
		}
		q0, q1 := int(s.QStart)*row, int(s.QStart+s.NumQ)*row
		RefAttentionWindow(out[q0:q1], q[q0:q1], k, v, int(s.NumQ), ctx, heads, l.KVHeads, l.HeadDim, int(s.Window), scale)
	}
	return nil
}
