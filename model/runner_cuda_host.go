package model

import (
	"fmt"

	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/step"
)

// cudaHost is the CUDA runner's host half: batch validation, per-seat
// bookkeeping, the step plan written into the input staging area, and
// sampling of the rows the device does not sample. It touches no device, so
// tests drive it on any machine.
type cudaHost struct {
	*seatHost
	capacity step.Capacity
	seats    []cudaSeat

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
	// pairs receives (seat, token) of host-sampled rows (pinned in the
	// runner), uploaded to the device's last-token row.
	pairs []int32
}

// cudaSeat is what the runner remembers of one seat between steps.
type cudaSeat struct {
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
func newCUDAHost(c step.Capacity, graphSizes []int, graphMB int, keep bool, staging, pairs []int32) (*cudaHost, error) {
	rows := min(c.Seats, c.MaxBatchTokens)
	// The KV cache is sized after the dry run (setKVBlocks); until then the
	// checker holds one block, and no step is checked before.
	planning := c
	planning.KVBlocks = max(c.KVBlocks, 1)
	sh, err := newSeatHost(planning, rows, keep)
	if err != nil {
		return nil, err
	}
	h := &cudaHost{
		seatHost: sh, capacity: c,
		seats:      make([]cudaSeat, c.Seats),
		graphSizes: graphSizes, graphMB: graphMB, maxRows: rows,
		staging: staging, pairs: pairs, keep: keep,
		rowSeq: make([]int32, 0, rows), hostRows: make([]int32, 0, rows),
	}
	if need := cudaStagingElems(c, rows, graphMB); len(staging) < need {
		return nil, fmt.Errorf("model: CUDA step staging holds %d int32s, the largest step needs %d", len(staging), need)
	}
	if len(pairs) < 2*rows {
		return nil, fmt.Errorf("model: CUDA sampled-token staging holds %d int32s, want %d", len(pairs), 2*rows)
	}
	return h, nil
}

// setKVBlocks fixes the KV cache's size once the runner has planned it
// (after the dry run, before any step is checked).
func (h *cudaHost) setKVBlocks(n int) error {
	c := h.capacity
	c.KVBlocks = n
	checker, err := step.NewChecker(c)
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	h.capacity, h.checker = c, checker
	return nil
}

// cudaTableColumns is the widest block table a sequence of c can need.
func cudaTableColumns(c step.Capacity) int { return (c.MaxContext + c.BlockSize - 1) / c.BlockSize }

// cudaStagingElems is the largest step layout: an eager step of every token,
// rows sequences, the widest tables (a decode graph's layout is no larger,
// as the layout grows with each argument and P ≤ rows ≤ T).
func cudaStagingElems(c step.Capacity, rows, graphMB int) int {
	return newCUDAStepLayout(c.MaxBatchTokens, rows, rows, max(cudaTableColumns(c), graphMB)).total
}

// prepare validates b, starts the sampler state of starting sequences and
// writes the step's inputs into the staging area. It chooses a decode graph
// when every sequence has one new token and a captured size fits.
func (h *cudaHost) prepare(b *step.Batch) error {
	if err := h.begin(b); err != nil {
		return err
	}
	for i := range b.Seqs {
		sb := &b.Seqs[i]
		if !sb.Start {
			continue
		}
		p := *sb.Params
		_ = p.Validate(h.capacity.Vocab) // checked by begin; normalises
		h.seats[sb.Seat] = cudaSeat{deviceGreedy: cudaDeviceGreedy(&p)}
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
func (h *cudaHost) finish(b *step.Batch, out *step.Output, devTok []int32, rowLogits func(j int) []float32) (int, error) {
	h.resetOutput(b, out)
	npairs := 0
	for j, si := range h.rowSeq {
		if si < 0 || !b.Seqs[si].Sample {
			continue
		}
		sb := &b.Seqs[si]
		if !h.seats[sb.Seat].deviceGreedy {
			tok, err := h.sample(b, out, int(si), rowLogits(j))
			if err != nil {
				return 0, err
			}
			h.pairs[2*npairs], h.pairs[2*npairs+1] = sb.Seat, tok
			npairs++
			continue
		}
		if h.keep {
			row := rowLogits(j)
			if len(row) != h.capacity.Vocab {
				return 0, fmt.Errorf("model: logits row %d has %d values, want vocab %d", j, len(row), h.capacity.Vocab)
			}
			h.keepRow(int(si), row)
		}
		if err := h.record(b, out, int(si), devTok[j], 0); err != nil {
			return 0, err
		}
	}
	h.end(b, out)
	return npairs, nil
}

// checkSeats verifies the per-seat bookkeeping and the sampler's.
func (h *cudaHost) checkSeats() error {
	for i, s := range h.seats {
		if s.deviceGreedy && !h.checker.Seat(int32(i)).Started {
			return fmt.Errorf("model: seat %d is not started but is marked for device sampling", i)
		}
	}
	return h.check()
}
