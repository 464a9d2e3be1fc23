package executor

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/grammar"
	"github.com/turnstile-llm/turnstile/guided"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/sampling"
)

// storyVocab is stories260K's vocabulary as the grammar engine sees it.
func storyVocab(t testing.TB, m *model.Llama) *grammar.Vocab {
	tok := m.Tokenizer()
	v, err := guided.VocabOf(tok, m.StopIDs(), tok.VocabSize())
	require.NoError(t, err)
	return v
}

// guidedRun runs reqs on a fresh engine with a guided decoder over the
// CPU runner, checking the engine after every step.
func guidedRun(t *testing.T, m *model.Llama, v *grammar.Vocab, mbs, kvBlocks int, ovl bool, reqs []Request) ([]Delta, Metrics) {
	t.Helper()
	seats := testSeats(t, mbs, ovl)
	r, err := model.NewCPURunner(m, model.CPURunnerConfig{Seats: seats, KVBlocks: kvBlocks, BlockSize: 8, MaxBatchTokens: 64, Workers: 1})
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Close()) }()
	g, err := guided.New(seats, v)
	require.NoError(t, err)
	eng, err := New(Config{MaxBatchSize: mbs, Overlap: ovl, Guide: g}, r, m.Tokenizer())
	require.NoError(t, err)
	defer func() { require.NoError(t, eng.Close()) }()
	streams := make([]*Stream, len(reqs))
	for i := range reqs {
		req := reqs[i]
		streams[i], err = eng.Submit(context.Background(), &req)
		require.NoError(t, err)
	}
	for step := 0; ; step++ {
		require.Less(t, step, 5000, "engine did not finish")
		progressed, err := eng.Step()
		require.NoError(t, err)
		require.NoError(t, eng.Check())
		if !progressed {
			break
		}
	}
	require.Zero(t, g.Live(), "every matcher slot is freed")
	out := make([]Delta, len(reqs))
	for i, st := range streams {
		out[i] = readAll(t, st)
	}
	return out, eng.Snapshot()
}

// TestGuidedRealModel: on stories260K, constrained requests (a JSON
// schema, a regular expression, choices) produce text their grammar
// accepts — whole when they stop, a prefix when max_tokens cuts them — in
// every sampling mode, with overlap on and off, and through recompute
// preemption (the matcher is rebuilt from the output so far); the
// unconstrained requests beside them produce what they produce alone.
func TestGuidedRealModel(t *testing.T) {
	m := loadStories(t)
	defer m.Close()
	v := storyVocab(t, m)
	schema, err := grammar.CompileJSONSchema([]byte(`{"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":1,"maximum":120},"pet":{"enum":["cat","dog","bird"]}},"required":["name","age","pet"],"additionalProperties":false}`),
		grammar.JSONOptions{Whitespace: grammar.WhitespaceCompact})
	require.NoError(t, err)
	regex, err := grammar.CompileRegex(`(Yes|No), [a-z]+ [0-9]{2}\.`, grammar.DefaultLimits)
	require.NoError(t, err)
	choice, err := grammar.CompileChoices([]string{"The cat", "The dog", "A bird in the tree"}, grammar.DefaultLimits)
	require.NoError(t, err)
	grammars := []*grammar.Grammar{schema, regex, choice}

	modes := map[string]sampling.Params{"greedy": greedy()}
	hot := greedy()
	hot.Temperature, hot.Seed, hot.HasSeed = 1.2, 7, true
	modes["temperature"] = hot
	topk := greedy()
	topk.Temperature, topk.TopK, topk.TopP, topk.Seed, topk.HasSeed = 0.9, 5, 0.9, 11, true
	modes["top-k/top-p"] = topk

	var reqs []Request
	for _, mode := range []string{"greedy", "temperature", "top-k/top-p"} {
		for _, g := range grammars {
			reqs = append(reqs, Request{Prompt: "Once upon a time", MaxTokens: 60, Params: modes[mode], Grammar: g})
		}
	}
	plain := []Request{
		{Prompt: "Tom had a big red ball", MaxTokens: 20, Params: greedy()},
		{Prompt: "The little bird", MaxTokens: 24, Params: modes["temperature"]},
	}
	alone, _ := guidedRun(t, m, v, 4, 64, false, plain)
	all := append(append([]Request(nil), plain...), reqs...)
	var ref []Delta
	for _, c := range []struct {
		name          string
		mbs, kvBlocks int
		ovl, preempt  bool
	}{
		{"batched", 16, 256, false, false},
		{"batched/overlap", 16, 256, true, false},
		{"tight-kv/overlap", 6, 12, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, met := guidedRun(t, m, v, c.mbs, c.kvBlocks, c.ovl, all)
			require.Positive(t, met.GuidedMasks)
			require.Zero(t, met.GuidedFailures)
			if c.preempt {
				require.Positive(t, met.Preemptions, "the arrangement must preempt")
			}
			for i := range plain {
				require.Equal(t, alone[i].TokenIDs, got[i].TokenIDs, "unconstrained request %d changed beside constrained ones", i)
			}
			// Masks depend on the output alone: every arrangement (batching,
			// overlap, preemption and the matcher rebuilt from the output)
			// draws the same tokens.
			if ref == nil {
				ref = got
			}
			for i := range got {
				require.Equal(t, ref[i].TokenIDs, got[i].TokenIDs, "request %d differs between arrangements", i)
			}
			for i, d := range got[len(plain):] {
				r := all[len(plain)+i]
				mt := grammar.NewMatcher(r.Grammar, v)
				require.NoError(t, mt.AcceptBytes([]byte(d.Text)), "request %d: %q is not in its language", i, d.Text)
				switch d.FinishReason {
				case FinishStop:
					require.True(t, mt.Complete(), "request %d stopped on %q, which is not complete", i, d.Text)
				case FinishLength:
					require.Len(t, d.TokenIDs, r.MaxTokens)
				default:
					t.Fatalf("request %d: finish %q", i, d.FinishReason)
				}
				t.Logf("%s %d %s %q", c.name, i, d.FinishReason, d.Text)
			}
		})
	}
}

// TestGuidedStartupValidation: the guided decoder is a seat consumer
// checked both ways, and its vocabulary must be the runner's.
func TestGuidedStartupValidation(t *testing.T) {
	m := loadStories(t)
	defer m.Close()
	v := storyVocab(t, m)
	seats := testSeats(t, 4, true)
	r, err := model.NewCPURunner(m, model.CPURunnerConfig{Seats: seats, KVBlocks: 32, BlockSize: 8, MaxBatchTokens: 64, Workers: 1})
	require.NoError(t, err)
	defer r.Close()
	for _, n := range []int{seats - 1, seats + 1} {
		g, err := guided.New(n, v)
		require.NoError(t, err)
		_, err = New(Config{MaxBatchSize: 4, Overlap: true, Guide: g}, r, m.Tokenizer())
		require.ErrorContains(t, err, "guided decoder matcher slots")
		require.ErrorContains(t, err, fmt.Sprint(n))
		require.ErrorContains(t, err, fmt.Sprint(seats))
	}
	short, err := grammar.NewVocab([][]byte{[]byte("a"), nil}, []bool{false, true}, []int32{1})
	require.NoError(t, err)
	g, err := guided.New(seats, short)
	require.NoError(t, err)
	_, err = New(Config{MaxBatchSize: 4, Overlap: true, Guide: g}, r, m.Tokenizer())
	require.ErrorContains(t, err, "vocabulary has 2 tokens, the runner's logits 512")

	gr, err := grammar.CompileRegex("a+", grammar.DefaultLimits)
	require.NoError(t, err)
	eng, err := New(Config{MaxBatchSize: 4, Overlap: true}, r, m.Tokenizer())
	require.NoError(t, err)
	_, err = eng.Submit(context.Background(), &Request{Prompt: "x", Grammar: gr, Params: greedy()})
	require.ErrorContains(t, err, "no guided decoder")
	require.NoError(t, eng.Close())
	g, err = guided.New(seats, v)
	require.NoError(t, err)
	eng, err = New(Config{MaxBatchSize: 4, Overlap: true, Guide: g}, r, m.Tokenizer())
	require.NoError(t, err)
	_, err = eng.Submit(context.Background(), &Request{Prompt: "x", Grammar: gr, Params: greedy(), IgnoreEOS: true})
	require.ErrorContains(t, err, "ignore_eos")
	require.NoError(t, eng.Close())
}

// TestGuidedFailure: a request whose matcher fails (here a grammar more
// ambiguous than its limits allow) ends aborted with the reason; the
// others run on.
func TestGuidedFailure(t *testing.T) {
	m := loadStories(t)
	defer m.Close()
	v := storyVocab(t, m)
	lim := grammar.DefaultLimits
	lim.Configs = 1
	g, err := grammar.CompileGBNF(`root ::= x | y
x ::= "T" [a-z ]*
y ::= "T" [a-z ]* "!"`, lim)
	require.NoError(t, err)
	bad := greedy()
	out, met := guidedRun(t, m, v, 4, 64, true, []Request{
		{Prompt: "Once upon a time", MaxTokens: 8, Params: bad, Grammar: g},
		{Prompt: "The little bird", MaxTokens: 8, Params: greedy()},
	})
	require.Equal(t, FinishAbort, out[0].FinishReason)
	require.ErrorContains(t, out[0].Err, "structured output")
	require.Equal(t, uint64(1), met.GuidedFailures)
	require.Equal(t, FinishLength, out[1].FinishReason)
}
