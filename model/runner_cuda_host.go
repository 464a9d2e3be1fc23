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

	// Cascade decode graphs (setCascade): cascTiles[i] is the most
	// shared-prefix tiles of the graph for graphSizes[i] (0: that size has
	// none), perTile the members one tile holds. tiles and members are the
	// step's tile list and member rows (kernels.AppendCascadeTiles).
	// window is the model's sliding window (0: none): a member whose window
	// leaves out part of its context is no member on the device (the shared
	// pass is unmasked); kept is its group's remaining members.
	cascTiles            []int
	perTile              int
	window               int32
	tiles, members, kept []int32

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

// setCascade enables cascade decode graphs: maxTiles[i] (parallel to the
// graph sizes) is the tile bound the graph of size i was captured with, 0
// where that size has no cascade graph; perTile is the members per tile;
// window the sliding window in positions (0: none).
func (h *cudaHost) setCascade(perTile int, maxTiles []int, window int32) error {
	if len(maxTiles) != len(h.graphSizes) || perTile <= 0 {
		return fmt.Errorf("model: cascade plan of %d tile bounds (%d members per tile) for %d graph sizes", len(maxTiles), perTile, len(h.graphSizes))
	}
	if window < 0 {
		return fmt.Errorf("model: cascade plan with sliding window %d, want ≥ 0 (0: none)", window)
	}
	h.cascTiles, h.perTile, h.window = maxTiles, perTile, window
	h.tiles, h.members, h.kept = make([]int32, 0, 3*h.maxRows), make([]int32, 0, h.maxRows), make([]int32, 0, h.maxRows)
	return nil
}

// cascadeTiles is the tile bound of the cascade graph of padded batch p (0:
// none).
func (h *cudaHost) cascadeTiles(p int) int {
	if i := cudaGraphIndex(h.graphSizes, p); i >= 0 && i < len(h.cascTiles) {
		return h.cascTiles[i]
	}
	return 0
}

// fillCascade writes b's groups into the cascade sections of l in s: each
// member row's start block is its group's shared run, every other row's 0,
// and the tiles of every group over the member rows (batch rows are b.Seqs
// indices in a decode graph). As on the CPU (kernels' cascade), a member
// whose sliding window does not cover its whole context stays a plain row:
// the decode kernel masks its window, the shared pass would not.
func (h *cudaHost) fillCascade(b *step.Batch, s []int32, l *cudaStepLayout) error {
	start := s[l.startBlk : l.startBlk+l.N]
	clear(start)
	h.tiles, h.members = h.tiles[:0], h.members[:0]
	for _, g := range b.Groups {
		m := b.Members(g)
		if h.window > 0 {
			h.kept = h.kept[:0]
			for _, i := range m {
				if b.Seqs[i].ContextLen <= h.window {
					h.kept = append(h.kept, i)
				}
			}
			m = h.kept
		}
		h.tiles, h.members = kernels.AppendCascadeTiles(h.tiles, h.members, m, g.SharedBlocks, h.perTile)
		for _, i := range m {
			start[i] = g.SharedBlocks
		}
	}
	if n := len(h.tiles) / 3; n > l.MT || len(h.members) > l.N {
		return fmt.Errorf("model: %d groups make %d shared-prefix tiles of %d members, the batch-%d graph holds %d tiles of %d rows",
			len(b.Groups), n, len(h.members), l.N, l.MT, l.N)
	}
	copy(s[l.cascTiles:], h.tiles)
	s[l.cascNum] = int32(len(h.tiles) / 3)
	copy(s[l.cascMembers:], h.members)
	return nil
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
// as the layout grows with each argument and P ≤ rows ≤ T), or a cascade
// decode graph of rows rows (its tiles are at most its rows,
// kernels.CascadeMaxTiles).
func cudaStagingElems(c step.Capacity, rows, graphMB int) int {
	eager := newCUDAStepLayout(c.MaxBatchTokens, rows, rows, max(cudaTableColumns(c), graphMB)).total
	casc := newCUDAStepLayout(rows, rows, rows, graphMB).withCascade(rows).total
	return max(eager, casc)
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
		// Groups pick the graph that attends their shared runs once; a step
		// without any replays the plain graph, today's launches.
		if mt := h.cascadeTiles(h.graph); mt > 0 && len(b.Groups) > 0 {
			h.layout = h.layout.withCascade(mt)
		}
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
	if l.MT > 0 {
		if err := h.fillCascade(b, s, l); err != nil {
			return err
		}
	}
	for j, si := range h.rowSeq {
		last := int32(-1)
		gather := int32(j)
		if si >= 0 {
			sb := &b.Seqs[si]
			gather = sb.TokenStart + sb.NumTokens - 1
			if sb.Sample {
				// A constrained sequence is drawn on the host, under its
				// token mask (ready only after the forward pass).
				device := h.seats[sb.Seat].deviceGreedy && !sb.Constrained
				if device {
					last = sb.Seat
				}
				if h.keep || !device {
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
	if err := h.waitMasks(b); err != nil {
		return 0, err
	}
	h.resetOutput(b, out)
	npairs := 0
	for j, si := range h.rowSeq {
		if si < 0 || !b.Seqs[si].Sample {
			continue
		}
		sb := &b.Seqs[si]
		if !h.seats[sb.Seat].deviceGreedy || sb.Constrained {
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
