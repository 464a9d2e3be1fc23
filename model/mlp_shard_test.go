package model

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/step"
)

// shardTol bounds the sharded MLP's logits against the whole MLP's: the
// shards' partial sums are added in another order, so only float32 rounding
// may differ.
const shardTol = 1e-4

// hub joins N in-process ranks (goroutines) for the collectives of
// MLPComm: each collective deposits every rank's arguments, waits for all,
// lets each rank compute its result from all deposits, and waits again so
// that no rank reuses its buffers while a peer still reads them. Every rank
// checks that all ranks called the same collective with the same counts, as
// MPI requires, so a runner that desynchronises fails loudly.
type hub struct {
	n       int
	mu      sync.Mutex
	arrived int
	release chan struct{}
	slots   []deposit
	calls   []string // per rank, every collective it called, for the order check
}

type deposit struct {
	op     string
	counts []int
	i64    []int64
	f32    []float32
}

// hubWait bounds one barrier: a rank missing a collective fails the test
// instead of hanging it.
const hubWait = 20 * time.Second

func newHub(n int) *hub {
	return &hub{n: n, release: make(chan struct{}), slots: make([]deposit, n), calls: make([]string, n)}
}

func (h *hub) barrier() error {
	h.mu.Lock()
	ch := h.release
	h.arrived++
	if h.arrived == h.n {
		h.arrived = 0
		h.release = make(chan struct{})
		close(ch)
	}
	h.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-time.After(hubWait):
		return errors.New("hub: a rank did not join the collective within the deadline")
	}
}

// exchange deposits d for rank, waits for every rank and runs read on all
// deposits, then waits again.
func (h *hub) exchange(rank int, d deposit, read func(all []deposit) error) error {
	h.mu.Lock()
	h.slots[rank] = d
	h.calls[rank] += d.op[:1]
	h.mu.Unlock()
	if err := h.barrier(); err != nil {
		return err
	}
	h.mu.Lock()
	all := slices.Clone(h.slots)
	h.mu.Unlock()
	var err error
	for p, o := range all {
		if o.op != d.op || !slices.Equal(o.counts, d.counts) {
			err = fmt.Errorf("hub: rank %d called %s counts %v, rank %d %s counts %v", rank, d.op, d.counts, p, o.op, o.counts)
			break
		}
	}
	if err == nil {
		err = read(all)
	}
	return errors.Join(err, h.barrier())
}

// hubComm is one rank's MLPComm on a hub.
type hubComm struct {
	h    *hub
	rank int
}

func (g hubComm) Rank() int { return g.rank }
func (g hubComm) Size() int { return g.h.n }

func (g hubComm) AllgatherInt64(local, all []int64) error {
	return g.h.exchange(g.rank, deposit{op: "allgather", counts: []int{len(local)}, i64: local}, func(ds []deposit) error {
		if len(all) != len(ds)*len(local) {
			return fmt.Errorf("hub: allgather len(all) = %d", len(all))
		}
		for p, d := range ds {
			copy(all[p*len(local):], d.i64)
		}
		return nil
	})
}

func (g hubComm) AllgathervFloat32(local []float32, counts []int, all []float32) error {
	return g.h.exchange(g.rank, deposit{op: "gatherv", counts: counts, f32: local}, func(ds []deposit) error {
		off := 0
		for p, d := range ds {
			if len(d.f32) != counts[p] {
				return fmt.Errorf("hub: allgatherv rank %d sent %d floats, counts say %d", p, len(d.f32), counts[p])
			}
			off += copy(all[off:], d.f32)
		}
		if off != len(all) {
			return fmt.Errorf("hub: allgatherv filled %d of %d floats", off, len(all))
		}
		return nil
	})
}

func (g hubComm) ReduceScatterSumFloat32V(send []float32, counts []int, recv []float32) error {
	return g.h.exchange(g.rank, deposit{op: "reduce-scatter", counts: counts, f32: send}, func(ds []deposit) error {
		off := 0
		for _, n := range counts[:g.rank] {
			off += n
		}
		if len(recv) != counts[g.rank] {
			return fmt.Errorf("hub: reduce-scatter len(recv) = %d, want %d", len(recv), counts[g.rank])
		}
		for i := range recv {
			var s float32
			for _, d := range ds {
				s += d.f32[off+i]
			}
			recv[i] = s
		}
		return nil
	})
}

// shardCase is one attention-DP layout: which prompts each rank serves
// (none: the rank runs DummyStep every step) and the steps at which a rank
// with sequences idles anyway.
type shardCase struct {
	name   string
	assign [][]int       // per rank, indices into the prompts
	idle   map[int][]int // step → ranks that run DummyStep
}

// shardSteps is the number of steps of the schedule below.
const shardSteps = 7

// shardPart is sequence seq's share of step st (ok false: it sits out),
// chosen so that the steps cover: no rank sampling (step 0), ranks sampling
// while rank 1 does not (step 1), prefill mixed with decode (step 2), and
// plain decode.
func shardPart(rank, st int, prompt []int32) (toks []int32, sample, ok bool) {
	half := len(prompt) / 2
	switch st {
	case 0:
		return prompt[:half], false, true
	case 1:
		if rank == 1 {
			return prompt[half : half+1], false, true
		}
		return prompt[half:], true, true
	case 2:
		if rank == 1 {
			return prompt[half+1:], true, true
		}
	}
	return []int32{step.FutureToken}, true, true
}

// rankRun is what one rank's runner produced at each step: per part, the
// sampled token and a copy of its logits (nil when not sampled).
type rankRun struct {
	toks   [][]int32
	logits [][][]float32
}

// runRank drives runner r through the schedule for the prompts of rank, on
// the calling goroutine, returning errors instead of failing (it may run
// off the test goroutine).
func runRank(r *CPURunner, rank int, c shardCase, prompts [][]int32) (rankRun, error) {
	h := &harness{r: r}
	var seqs []*tseq
	for j, pi := range c.assign[rank] {
		if len(prompts[pi]) < 4 {
			return rankRun{}, fmt.Errorf("rank %d: prompt %d has %d tokens, the schedule splits it into 3 non-empty chunks", rank, pi, len(prompts[pi]))
		}
		seqs = append(seqs, newSeq(int32(j), iota32(j*16, 16)...))
	}
	var run rankRun
	for st := range shardSteps {
		var parts []part
		if !slices.Contains(c.idle[st], rank) {
			for j, s := range seqs {
				if toks, sample, ok := shardPart(rank, st, prompts[c.assign[rank][j]]); ok {
					parts = append(parts, part{s, toks, sample})
				}
			}
		}
		if len(parts) == 0 {
			run.toks, run.logits = append(run.toks, nil), append(run.logits, nil)
			if err := r.DummyStep(); err != nil {
				return run, fmt.Errorf("rank %d step %d dummy: %w", rank, st, err)
			}
			continue
		}
		h.build(parts...)
		if err := r.Execute(&h.b, &h.out); err != nil {
			return run, fmt.Errorf("rank %d step %d: %w", rank, st, err)
		}
		if err := r.Check(); err != nil {
			return run, fmt.Errorf("rank %d step %d check: %w", rank, st, err)
		}
		toks := make([]int32, len(parts))
		logits := make([][]float32, len(parts))
		for i, p := range parts {
			p.s.started = true
			p.s.ctx += int32(len(p.toks))
			toks[i] = h.out.Tokens[i]
			if l := r.Logits(i); l != nil {
				logits[i] = slices.Clone(l)
			}
		}
		run.toks, run.logits = append(run.toks, toks), append(run.logits, logits)
	}
	return run, nil
}

// shardConfig is every runner's configuration in these tests.
func shardConfig(g MLPComm) CPURunnerConfig {
	return CPURunnerConfig{Seats: 4, KVBlocks: 64, BlockSize: 16, MaxBatchTokens: 128, Workers: 2, KeepLogits: true, MLP: g}
}

// checkSharded runs case c twice: each rank alone with the whole MLP, and
// every rank at once (goroutines) with the MLP sharded across them; every
// token must agree and every logits row within shardTol.
func checkSharded(t *testing.T, m *Llama, c shardCase, prompts [][]int32) {
	n := len(c.assign)
	want := make([]rankRun, n)
	for rank := range n {
		// Float32 activations: the sharded ranks gather every rank's rows,
		// so their MatMuls may see more rows (another kernel) than the
		// whole MLP's; only summation order may differ then.
		r := newExactRunner(t, m, shardConfig(nil))
		var err error
		want[rank], err = runRank(r, rank, c, prompts)
		require.NoError(t, err)
	}
	h := newHub(n)
	runners := make([]*CPURunner, n)
	for rank := range n {
		runners[rank] = newExactRunner(t, m, shardConfig(hubComm{h, rank}))
	}
	got := make([]rankRun, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for rank := range n {
		wg.Go(func() { got[rank], errs[rank] = runRank(runners[rank], rank, c, prompts) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	for rank := 1; rank < n; rank++ {
		require.Equal(t, h.calls[0], h.calls[rank], "rank %d called other collectives than rank 0", rank)
	}
	for rank := range n {
		require.Equal(t, want[rank].toks, got[rank].toks, "rank %d: greedy tokens", rank)
		for st := range want[rank].logits {
			for i, w := range want[rank].logits[st] {
				g := got[rank].logits[st][i]
				require.Equal(t, w == nil, g == nil, "rank %d step %d part %d: sampled", rank, st, i)
				if w != nil {
					require.LessOrEqual(t, relErr(g, w), shardTol, "rank %d step %d part %d: logits", rank, st, i)
				}
			}
		}
	}
}

var shardCases = []shardCase{
	{name: "N2", assign: [][]int{{0, 1, 2}, {3}}, idle: map[int][]int{4: {1}}},
	{name: "N2/rank0 idle", assign: [][]int{{5, 7}, {1, 2}}, idle: map[int][]int{3: {0}, 5: {0, 1}}},
	{name: "N4", assign: [][]int{{0, 1}, {2}, {3, 4}, {}}, idle: map[int][]int{5: {2}}},
}

// TestShardedMLPMatchesWhole: the real stories260K model (F32, FFN 172)
// with its MLP sharded over 2 and 4 in-process ranks, each rank serving its
// own sequences (one rank none: it runs DummyStep), gives each rank the
// logits and greedy tokens of the whole MLP.
func TestShardedMLPMatchesWhole(t *testing.T) {
	m := loadStories(t)
	prompts := encodeAll(m, storyPrompts)
	for _, c := range shardCases {
		t.Run(c.name, func(t *testing.T) { checkSharded(t, m, c, prompts) })
	}
}

// TestShardedMLPWeightTypes: the column shard of ffn_down is copied per
// type (F16, BF16 and Q8_0 rows are bytes, not floats): a synthetic model
// with every type still matches the whole MLP.
func TestShardedMLPWeightTypes(t *testing.T) {
	spec := smallSpec(gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16, gguf.TypeQ8_0)
	spec.FFN, spec.Layers, spec.Vocab = 128, 4, 96
	m := loadSynth(t, spec)
	prompts := make([][]int32, 8)
	for i := range prompts {
		prompts[i] = iota32(3+i*5, 6+i)
	}
	for _, c := range []shardCase{
		{name: "N2", assign: [][]int{{0, 1}, {2}}},
		{name: "N4", assign: [][]int{{0}, {1, 2}, {}, {3}}},
	} {
		t.Run(c.name, func(t *testing.T) { checkSharded(t, m, c, prompts) })
	}
}

// TestShardedMLPBlockTypes: ffn_down column shards of the legacy block
// types fall on their 32-column blocks and of the K-quants on their
// 256-column super-blocks, and still match the whole MLP.
func TestShardedMLPBlockTypes(t *testing.T) {
	legacy := smallSpec(gguf.TypeQ4_0, gguf.TypeQ4_1, gguf.TypeQ5_0, gguf.TypeQ5_1)
	legacy.FFN, legacy.Layers = 128, 4
	kq := kquantSpec(gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K)
	kq.FFN = 512
	prompts := make([][]int32, 4)
	for i := range prompts {
		prompts[i] = iota32(3+i*5, 6+i)
	}
	for _, tc := range []struct {
		name string
		spec synthSpec
		c    shardCase
	}{
		{"legacy N4", legacy, shardCase{name: "N4", assign: [][]int{{0}, {1, 2}, {}, {3}}}},
		{"k-quants N2", kq, shardCase{name: "N2", assign: [][]int{{0, 1}, {2, 3}}}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkSharded(t, loadSynth(t, tc.spec), tc.c, prompts) })
	}
	_, err := NewCPURunner(loadSynth(t, kquantSpec(gguf.TypeQ4_K)), shardConfig(fixedComm{0, 2}))
	require.ErrorContains(t, err, "FFN 256 in 2 MLP shards is 128 columns each, not a multiple of the Q4_K block size 256")
}

// fixedComm is an MLPComm of a given rank and size that must never be
// called (construction tests).
type fixedComm struct{ rank, size int }

func (g fixedComm) Rank() int                       { return g.rank }
func (g fixedComm) Size() int                       { return g.size }
func (fixedComm) AllgatherInt64(_, _ []int64) error { return errors.New("fixedComm: called") }
func (fixedComm) AllgathervFloat32(_ []float32, _ []int, _ []float32) error {
	return errors.New("fixedComm: called")
}
func (fixedComm) ReduceScatterSumFloat32V(_ []float32, _ []int, _ []float32) error {
	return errors.New("fixedComm: called")
}

func TestShardedMLPConfigErrors(t *testing.T) {
	stories := loadStories(t)
	q8 := smallSpec(gguf.TypeQ8_0)
	q8.FFN = 128
	quant := loadSynth(t, q8)
	for _, tc := range []struct {
		name string
		m    *Llama
		g    MLPComm
		want string
	}{
		{"FFN 172 into 3", stories, fixedComm{0, 3}, "FFN 172 does not split into 3 equal MLP shards"},
		{"FFN 172 into 8", stories, fixedComm{1, 8}, "FFN 172 does not split into 8 equal MLP shards"},
		{"size 0", stories, fixedComm{0, 0}, "MLP.Size() = 0, want ≥ 1"},
		{"rank past size", stories, fixedComm{2, 2}, "MLP.Rank() = 2 outside [0, 2)"},
		{"negative rank", stories, fixedComm{-1, 4}, "MLP.Rank() = -1 outside [0, 4)"},
		{"Q8_0 block", quant, fixedComm{0, 8}, "FFN 128 in 8 MLP shards is 16 columns each, not a multiple of the Q8_0 block size 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewCPURunner(tc.m, shardConfig(tc.g))
			require.ErrorContains(t, err, tc.want)
		})
	}
	// On the block boundary a quantized model shards.
	r := newTestRunner(t, quant, shardConfig(fixedComm{3, 4}))
	require.Equal(t, quantMLPBytes(quant)/4, r.MLPWeightBytes())
}

// quantMLPBytes is the whole MLP's weight bytes of m.
func quantMLPBytes(m *Llama) int64 {
	var n int64
	for _, l := range m.layers {
		n += int64(len(l.gate.Data) + len(l.up.Data) + len(l.down.Data))
	}
	return n
}

// TestMLPWeightBytes: a sharded runner holds 1/N of the MLP's weights; Size
// 1 is the whole MLP.
func TestMLPWeightBytes(t *testing.T) {
	m := loadStories(t)
	whole := quantMLPBytes(m)
	require.Equal(t, int64(5*3*172*64*4), whole, "stories260K: 5 layers × 3 F32 matrices of 172×64")
	require.Equal(t, whole, newTestRunner(t, m, shardConfig(nil)).MLPWeightBytes())
	for _, n := range []int{1, 2, 4} {
		for rank := range n {
			r := newTestRunner(t, m, shardConfig(fixedComm{rank, n}))
			require.Equal(t, whole/int64(n), r.MLPWeightBytes(), "rank %d of %d", rank, n)
		}
	}
}

// TestDummyStepWithoutShards: with the whole MLP DummyStep has nothing to
// join and does nothing; after Close it reports the closed runner.
func TestDummyStepWithoutShards(t *testing.T) {
	m := loadStories(t)
	r, err := NewCPURunner(m, shardConfig(nil))
	require.NoError(t, err)
	require.NoError(t, r.DummyStep())
	require.NoError(t, r.Close())
	require.ErrorIs(t, r.DummyStep(), ErrRunnerClosed)
}

// loneGroup is rank 0 of 2 whose peer never has a token: the collectives
// reduce to copies, with no allocation of their own, so the runner's
// allocations can be measured.
type loneGroup struct{}

func (loneGroup) Rank() int { return 0 }
func (loneGroup) Size() int { return 2 }
func (loneGroup) AllgatherInt64(local, all []int64) error {
	copy(all, local)
	clear(all[len(local):])
	return nil
}
func (loneGroup) AllgathervFloat32(local []float32, _ []int, all []float32) error {
	copy(all, local)
	return nil
}
func (loneGroup) ReduceScatterSumFloat32V(send []float32, _ []int, recv []float32) error {
	copy(recv, send)
	return nil
}

// TestShardedZeroAllocs: a sharded runner's steady-state decode steps and
// dummy steps allocate nothing (the gathered buffers are sized at
// construction).
func TestShardedZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	m := loadStories(t)
	r := newTestRunner(t, m, shardConfig(loneGroup{}))
	h := newHarness(t, r)
	prompts := encodeAll(m, storyPrompts[:4])
	seqs := make([]*tseq, 4)
	parts := make([]part, 4)
	for i := range seqs {
		seqs[i] = newSeq(int32(i), iota32(i*16, 16)...)
		parts[i] = part{seqs[i], prompts[i], true}
	}
	h.step(parts...)
	for i := range parts {
		parts[i].toks = []int32{step.FutureToken}
	}
	h.step(parts...) // warm the sampler and kernel scratch
	h.build(parts...)
	for i := range h.b.Seqs {
		h.b.Seqs[i].BlockTable = seqs[i].table
	}
	allocs := testing.AllocsPerRun(20, func() {
		for i := range h.b.Seqs {
			h.b.Seqs[i].Start = false
		}
		require.NoError(t, r.Execute(&h.b, &h.out))
		require.NoError(t, r.DummyStep())
		for i := range h.b.Seqs {
			h.b.Seqs[i].ContextLen++
			h.b.Positions[i]++
		}
	})
	require.Zero(t, allocs)
}
