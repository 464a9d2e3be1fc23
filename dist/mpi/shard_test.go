package mpi

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/step"
)

// The tensor-parallel MLP across processes: every rank runs the real
// stories260K model with its MLP sharded over a Dup of the world (the
// deployment's own collectives keep the world), serving its own sequences,
// and checks each step's logits and greedy tokens against a local runner
// with the whole MLP on the same batches.

// A World (and its Dup) is what the sharded CPU runner's MLP runs on.
var _ model.MLPComm = (*World)(nil)

// shardTol bounds a sharded logits row against the whole MLP's, relative to
// the row's largest magnitude: only the summation order differs.
const shardTol = 1e-4

// shardPrompts are the prompts the ranks serve, dealt round-robin: over both
// ranks of 2 (rank 1 has fewer), over all but the last rank of more (the
// last has none and runs DummyStep every step).
var shardPrompts = []string{
	"Once upon a time",
	"The little dog ran to the park and",
	"Lily and Ben were friends. One day they",
	"Tom had a big red ball",
	"Mom said",
}

// shardIdle lists, per step, the ranks that run DummyStep although they
// have sequences; every rank of every np idles at step 5.
var shardIdle = map[int][]int{2: {1}, 4: {1, 2}, 5: {0, 1, 2, 3}}

// shardSteps is the steps each worker runs: a prefill, then decode.
const shardSteps = 7

// TestMPIShardedMLP: 2 and 4 processes, each rank's logits equal to the
// whole MLP's within shardTol and its greedy tokens identical.
func TestMPIShardedMLP(t *testing.T) {
	mpirunPath(t)
	_, err := gguf.TestModelPath()
	require.NoError(t, err)
	for _, np := range []int{2, 4} {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			out, err := runMPI(t, np, "mlp-shard")
			require.NoError(t, err, "mpirun -np %d:\n%s", np, out)
			requireEveryRankOK(t, out, np)
			for _, m := range comparedLine.FindAllString(out, -1) {
				t.Log(m)
			}
		})
	}
}

var comparedLine = regexp.MustCompile(`(?m)^rank \d+ compared .*$`)

// shardSeq is one sequence of a worker: its seat, blocks, prompt and the
// positions already cached.
type shardSeq struct {
	seat    int32
	table   []int32
	prompt  []int32
	ctx     int32
	started bool
	params  sampling.Params
}

// buildShardStep fills b with step st of seqs: the whole prompt at step 0,
// then one FutureToken each.
func buildShardStep(b *step.Batch, seqs []*shardSeq, st int) {
	b.Tokens, b.Positions, b.Seqs = b.Tokens[:0], b.Positions[:0], b.Seqs[:0]
	for _, s := range seqs {
		toks := []int32{step.FutureToken}
		if st == 0 {
			toks = s.prompt
		}
		start := int32(len(b.Tokens))
		for j, tok := range toks {
			b.Tokens = append(b.Tokens, tok)
			b.Positions = append(b.Positions, s.ctx+int32(j))
		}
		ctx := s.ctx + int32(len(toks))
		b.Seqs = append(b.Seqs, step.SeqBatch{
			Seat: s.seat, TokenStart: start, NumTokens: int32(len(toks)), ContextLen: ctx,
			BlockTable: s.table, Sample: true, Start: !s.started, Params: &s.params, History: s.prompt,
		})
	}
}

// relErr is max|a-b| / max|b|.
func relErr(a, b []float32) float64 {
	var d, s float64
	for i := range b {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
		s = math.Max(s, math.Abs(float64(b[i])))
	}
	return d / math.Max(s, 1e-30)
}

// shardWorker is one rank of TestMPIShardedMLP. Meanwhile a second
// goroutine runs allgathers on the world itself, as the deployment's gather
// point does: the Dup's collectives must not wait on them.
func shardWorker(t *testing.T, w *World) {
	path, err := gguf.TestModelPath()
	require.NoError(t, err)
	m, err := model.LoadLlama(path, model.LlamaOptions{MaxContext: 512})
	require.NoError(t, err)
	defer m.Close()
	d, err := w.Dup()
	require.NoError(t, err)

	cfg := model.CPURunnerConfig{Seats: 4, KVBlocks: 16, BlockSize: 16, MaxBatchTokens: 64, Workers: 1, KeepLogits: true}
	whole, err := model.NewCPURunner(m, cfg)
	require.NoError(t, err)
	cfg.MLP = d
	sharded, err := model.NewCPURunner(m, cfg)
	require.NoError(t, err)
	require.Equal(t, whole.MLPWeightBytes()/int64(w.Size()), sharded.MLPWeightBytes())

	gathered := make(chan error, 1)
	go func() {
		local, all := []int64{int64(w.Rank())}, make([]int64, w.Size())
		for range 50 {
			if err := w.AllgatherInt64(local, all); err != nil {
				gathered <- err
				return
			}
		}
		gathered <- nil
	}()

	// Two runners, two seat sets: each sees the same sequences.
	var seqs [2][]*shardSeq
	serving := w.Size()
	if serving > 2 {
		serving--
	}
	for i := w.Rank(); w.Rank() < serving && i < len(shardPrompts); i += serving {
		for k := range seqs {
			j := int32(len(seqs[k]))
			seqs[k] = append(seqs[k], &shardSeq{
				seat: j, table: []int32{2 * j, 2*j + 1}, prompt: m.Tokenizer().Encode(shardPrompts[i], true),
				params: sampling.DefaultParams(),
			})
		}
	}
	var b step.Batch
	var outs [2]step.Output
	var worst float64
	compared := 0
	for st := range shardSteps {
		if len(seqs[0]) == 0 || (st > 0 && slices.Contains(shardIdle[st], w.Rank())) {
			require.NoError(t, sharded.DummyStep(), "rank %d step %d", w.Rank(), st)
			continue
		}
		logits := make([][][]float32, 2)
		for k, r := range []*model.CPURunner{whole, sharded} {
			buildShardStep(&b, seqs[k], st)
			require.NoError(t, r.Execute(&b, &outs[k]), "rank %d step %d runner %d", w.Rank(), st, k)
			for i, s := range seqs[k] {
				s.started = true
				s.ctx += b.Seqs[i].NumTokens
				logits[k] = append(logits[k], slices.Clone(r.Logits(i)))
			}
		}
		require.Equal(t, outs[0].Tokens, outs[1].Tokens, "rank %d step %d: greedy tokens", w.Rank(), st)
		for i := range logits[0] {
			e := relErr(logits[1][i], logits[0][i])
			require.LessOrEqual(t, e, shardTol, "rank %d step %d seq %d: logits", w.Rank(), st, i)
			worst = max(worst, e)
			compared++
		}
	}
	require.NoError(t, <-gathered)
	require.NoError(t, sharded.Close())
	require.NoError(t, whole.Close())
	require.NoError(t, d.Close())
	fmt.Printf("rank %d compared %d logits rows, max relative error %.2g\n", w.Rank(), compared, worst)
	fmt.Printf("rank %d ok\n", w.Rank())
}
