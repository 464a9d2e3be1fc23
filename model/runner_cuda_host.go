package model

import (
	"fmt"

	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/sampling"
)

// cudaHost is the CUDA runner's host half: batch validation, per-seat
// bookkeeping, the step plan written into the input staging area, and
// sampling of the rows the device does not sample. It touches no device, so
// tests drive it on any machine.
type cudaHost struct {
	capacity Capacity
	sampler  *sampling.Sampler
	seats    []cudaSeat
	checker  batchChecker

	graphSizes []int // decode batch sizes with a captured graph (ascending); nil: none
	graphMB    int   // block-table columns of every decode graph
	maxRows    int   // logits rows the device buffers hold

	// staging is the int32 step-input area (pinned in the runner): the plan
	// writes layout's sections here and the runner uploads staging[:layout.total].
	staging []int32
	layout  cudaStepLayout
	graph   int // the decode graph to launch (padded batch), or 0 for an eager step
	maxQ    int // most new tokens of one sequence (eager prefill grid)
	// rowSeq[j] is the Batch.Seqs index of logits row j, -1 for padding.
	rowSeq []int32
	// hostRows are the logits rows whose logits the host needs (host
	// sampling, or every sampled row when keep is set).
	hostRows []int32
	keep     bool
	kept     []float32 // [maxRows][Vocab] copies when keep
	keptOf   []int32   // per Batch.Seqs index: kept row or -1
	keptN    int
	// pairs receives (seat, token) of host-sampled rows (pinned in the
	// runner), uploaded to the device's last-token row.
	pairs []int32
}

// cudaSeat is what the runner remembers of one seat between steps.
type cudaSeat struct {
	seatCursor
	// deviceGreedy: plain argmax on the device serves the seat (greedy with
	// no penalty and no logprobs); else its rows are sampled on the host.
	deviceGreedy bool
}

// cudaDeviceGreedy reports whether p is served by the device's argmax exactly as
// sampling.Sampler would serve it.
func cudaDeviceGreedy(p *sampling.Params) bool {
	return p.Temperature < sampling.GreedyBelow && p.RepetitionPenalty == 1 &&
		p.PresencePenalty == 0 && p.FrequencyPenalty == 0 && !p.Logprobs && p.TopLogprobs == 0
}

// newCUDAHost sizes the host half. staging and pairs may alias pinned memory;
// staging must hold the largest step layout (see cudaHost.stagingElems).
func newCUDAHost(c Capacity, graphSizes []int, graphMB int, keep bool, staging, pairs []int32) (*cudaHost, error) {
	sampler, err := sampling.New(c.Seats, c.Vocab)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	rows := min(c.Seats, c.MaxBatchTokens)
	h := &cudaHost{
		capacity: c, sampler: sampler,
		seats: make([]cudaSeat, c.Seats), checker: newBatchChecker(c.Seats),
		graphSizes: graphSizes, graphMB: graphMB, maxRows: rows,
		staging: staging, pairs: pairs, keep: keep,
		rowSeq: make([]int32, 0, rows), hostRows: make([]int32, 0, rows),
		keptOf: make([]int32, rows),
	}
	if need := cudaStagingElems(c, rows, graphMB); len(staging) < need {
		return nil, fmt.Errorf("model: CUDA step staging holds %d int32s, the largest step needs %d", len(staging), need)
	}
	if len(pairs) < 2*rows {
		return nil, fmt.Errorf("model: CUDA sampled-token staging holds %d int32s, want %d", len(pairs), 2*rows)
	}
	if keep {
		h.kept = make([]float32, rows*c.Vocab)
	}
	return h, nil
}

// cudaTableColumns is the widest block table a sequence of c can need.
func cudaTableColumns(c Capacity) int { return (c.MaxContext + c.BlockSize - 1) / c.BlockSize }

// cudaStagingElems is the largest step layout: an eager step of every token,
// rows sequences, the widest tables (a decode graph's layout is no larger,
// as the layout grows with each argument and P ≤ rows ≤ T).
func cudaStagingElems(c Capacity, rows, graphMB int) int {
	return newCUDAStepLayout(c.MaxBatchTokens, rows, rows, max(cudaTableColumns(c), graphMB)).total
}

// check validates b against the capacity and seat state without changing
// anything (the Batch contract every runner enforces).
func (h *cudaHost) check(b *Batch) error { return h.checker.check(b, h.capacity, h) }

func (h *cudaHost) cursor(seat int32) *seatCursor { return &h.seats[seat].seatCursor }

// prepare validates b, starts the sampler state of starting sequences and
// writes the step's inputs into the staging area. It chooses a decode graph
// when every sequence has one new token and a captured size fits.
func (h *cudaHost) prepare(b *Batch) error {
	if err := h.check(b); err != nil {
		return err
	}
	for i := range b.Seqs {
		sb := &b.Seqs[i]
		if !sb.Start {
			continue
		}
		if err := h.sampler.StartWithOutput(sb.Seat, sb.Params, sb.History, int(sb.NumOutput)); err != nil {
			return fmt.Errorf("model: seq %d (seat %d): %w", i, sb.Seat, err)
		}
		p := *sb.Params
		_ = p.Validate(h.capacity.Vocab) // checked above; normalises
		h.seats[sb.Seat] = cudaSeat{seatCursor: seatCursor{started: true}, deviceGreedy: cudaDeviceGreedy(&p)}
	}
	n := len(b.Seqs)
	h.graph = 0
	if len(h.graphSizes) > 0 && len(b.Tokens) == n && n <= h.graphSizes[len(h.graphSizes)-1] {
		p, err := kernels.PadBatch(n, h.graphSizes)
		if err != nil {
			return fmt.Errorf("model: %w", err)
		}
		h.graph = p
	}
	bs := int32(h.capacity.BlockSize)
	h.rowSeq, h.hostRows = h.rowSeq[:0], h.hostRows[:0]
	h.maxQ = 0
	mb := 0
	for i := range b.Seqs {
		sb := &b.Seqs[i]
		h.maxQ = max(h.maxQ, int(sb.NumTokens))
		mb = max(mb, int((sb.ContextLen+bs-1)/bs))
		if h.graph > 0 || sb.Sample {
			h.rowSeq = append(h.rowSeq, int32(i))
		}
	}
	if h.graph > 0 {
		h.layout = newCUDAStepLayout(h.graph, h.graph, h.graph, h.graphMB)
		for len(h.rowSeq) < h.graph {
			h.rowSeq = append(h.rowSeq, -1)
		}
	} else {
		h.layout = newCUDAStepLayout(len(b.Tokens), n, len(h.rowSeq), mb)
	}
	l := &h.layout
	s := h.staging[:l.total]
	tok, pos, slot, seat := s[l.tok:l.tok+l.T], s[l.pos:l.pos+l.T], s[l.slot:l.slot+l.T], s[l.seat:l.seat+l.T]
	for i := range b.Seqs {
		sb := &b.Seqs[i]
		for j := sb.TokenStart; j < sb.TokenStart+sb.NumTokens; j++ {
			p := b.Positions[j]
			tok[j], pos[j], seat[j] = b.Tokens[j], p, sb.Seat
			slot[j] = sb.BlockTable[p/bs]*bs + p%bs
		}
		s[l.qStart+i], s[l.numQ+i], s[l.ctxLen+i] = sb.TokenStart, sb.NumTokens, sb.ContextLen
		row := s[l.tables+i*l.MB : l.tables+(i+1)*l.MB]
		need := int((sb.ContextLen + bs - 1) / bs)
		copy(row, sb.BlockTable[:need])
		clear(row[need:])
	}
	// Padding rows of a decode graph.
	for j := n; j < l.N; j++ {
		cudaPadRow(s, l, j)
	}
	for j, si := range h.rowSeq {
		last := int32(-1)
		gather := int32(j)
		if si >= 0 {
			sb := &b.Seqs[si]
			gather = sb.TokenStart + sb.NumTokens - 1
			if sb.Sample {
				if h.seats[sb.Seat].deviceGreedy {
					last = sb.Seat
				}
				if h.keep || !h.seats[sb.Seat].deviceGreedy {
					h.hostRows = append(h.hostRows, int32(j))
				}
			}
		}
		s[l.gather+j], s[l.lastSeat+j] = gather, last
	}
	return nil
}

// finish records the step's results: devTok[j] is the device argmax of
// logits row j; rowLogits(j) returns row j's logits on the host (valid for
// the rows in hostRows; the slice may be modified). It fills out (resized to
// len(b.Seqs)) and h.pairs, and returns the number of host-sampled pairs the
// device's last-token row must receive.
func (h *cudaHost) finish(b *Batch, out *Output, devTok []int32, rowLogits func(j int) []float32) (int, error) {
	out.Resize(len(b.Seqs))
	vocab := h.capacity.Vocab
	h.keptN = len(b.Seqs)
	for i := range b.Seqs {
		sb := &b.Seqs[i]
		st := &h.seats[sb.Seat]
		st.kvLen = sb.ContextLen
		if i < len(h.keptOf) {
			h.keptOf[i] = -1
		}
		if !sb.Sample {
			out.Tokens[i], out.Logprobs[i] = -1, 0
			st.hasLast = false
		}
	}
	npairs := 0
	kept := 0
	for j, si := range h.rowSeq {
		if si < 0 || !b.Seqs[si].Sample {
			continue
		}
		sb := &b.Seqs[si]
		st := &h.seats[sb.Seat]
		var row []float32
		if h.keep || !st.deviceGreedy {
			row = rowLogits(j)
			if len(row) != vocab {
				return 0, fmt.Errorf("model: logits row %d has %d values, want vocab %d", j, len(row), vocab)
			}
		}
		if h.keep {
			copy(h.kept[kept*vocab:(kept+1)*vocab], row)
			h.keptOf[si] = int32(kept)
			kept++
		}
		var tok int32
		if st.deviceGreedy {
			tok = devTok[j]
			out.Logprobs[si] = 0
		} else {
			ch := sampling.Choice{
				TopTokens:   out.TopTokens[int(si)*sampling.MaxTopLogprobs : int(si+1)*sampling.MaxTopLogprobs],
				TopLogprobs: out.TopLogprobs[int(si)*sampling.MaxTopLogprobs : int(si+1)*sampling.MaxTopLogprobs],
			}
			if err := h.sampler.Sample(sb.Seat, row, &ch); err != nil {
				return 0, fmt.Errorf("model: seq %d (seat %d): %w", si, sb.Seat, err)
			}
			tok = ch.Token
			out.Logprobs[si] = ch.Logprob
			h.pairs[2*npairs], h.pairs[2*npairs+1] = sb.Seat, tok
			npairs++
		}
		if tok < 0 || int(tok) >= vocab {
			return 0, fmt.Errorf("model: seq %d (seat %d): sampled token %d outside vocab %d", si, sb.Seat, tok, vocab)
		}
		out.Tokens[si] = tok
		st.last, st.hasLast = tok, true
	}
	return npairs, nil
}

// logits returns the kept logits of Batch.Seqs[i] of the latest step, or nil.
func (h *cudaHost) logits(i int) []float32 {
	if h.kept == nil || i < 0 || i >= h.keptN || i >= len(h.keptOf) || h.keptOf[i] < 0 {
		return nil
	}
	v := h.capacity.Vocab
	r := int(h.keptOf[i])
	return h.kept[r*v : (r+1)*v]
}

// checkSeats verifies the per-seat bookkeeping and the sampler's.
func (h *cudaHost) checkSeats() error {
	for i, s := range h.seats {
		if !s.started && (s.kvLen != 0 || s.hasLast || s.deviceGreedy) {
			return fmt.Errorf("model: seat %d is not started but holds %d positions (has last token %v)", i, s.kvLen, s.hasLast)
		}
		if s.kvLen < 0 || int(s.kvLen) > h.capacity.MaxContext {
			return fmt.Errorf("model: seat %d holds %d positions, outside [0, %d]", i, s.kvLen, h.capacity.MaxContext)
		}
		if s.hasLast && (s.last < 0 || int(s.last) >= h.capacity.Vocab) {
			return fmt.Errorf("model: seat %d last token %d outside vocab %d", i, s.last, h.capacity.Vocab)
		}
	}
	return h.sampler.Check()
}
