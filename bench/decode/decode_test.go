package decode_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/bench/decode"
	"github.com/turnstile-llm/turnstile/model"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/step"
)

// counting is a runner that records each step's shape.
type counting struct {
	step.Runner
	steps, tokens, maxSeqs int
}

func (c *counting) Execute(b *step.Batch, out *step.Output) error {
	c.steps++
	c.tokens += len(b.Tokens)
	c.maxSeqs = max(c.maxSeqs, len(b.Seqs))
	return c.Runner.Execute(b, out)
}

// TestRunOnStories runs every kind of test on the real CPU runner and
// checks what each timed and computed: a fake clock advancing 1 ms per
// reading makes every timed part 1 ms.
func TestRunOnStories(t *testing.T) {
	path, err := gguf.TestModelPath()
	require.NoError(t, err)
	m, err := model.LoadLlama(path, model.LlamaOptions{})
	require.NoError(t, err)
	defer m.Close()
	tests := []decode.Test{decode.PP(64), decode.TG(16, 0), decode.TG(8, 32), decode.Batched(8, 16, 4)}
	seats, blocks, budget := decode.Sizes(tests, 16)
	require.Equal(t, 4, seats)
	require.Equal(t, 8, blocks, "4 sequences × ceil((16 + 8) / 16)")
	require.Equal(t, 64, budget)
	r, err := model.NewCPURunner(m, model.CPURunnerConfig{Seats: seats, KVBlocks: blocks, BlockSize: 16, MaxBatchTokens: budget})
	require.NoError(t, err)
	defer r.Close()
	for _, tc := range []struct {
		test                   decode.Test
		tokens, steps, maxSeqs int
	}{
		{tests[0], 64, 1, 1},
		{tests[1], 16, 16, 1},
		{tests[2], 8, 1 + 8, 1},
		{tests[3], 32, 4 + 8, 4},
	} {
		t.Run(tc.test.Name, func(t *testing.T) {
			clk := time.Unix(0, 0)
			now := func() time.Time { clk = clk.Add(time.Millisecond); return clk }
			c := &counting{Runner: r}
			res, err := decode.Run(c, tc.test, now)
			require.NoError(t, err)
			require.Equal(t, tc.tokens, res.Tokens)
			require.Equal(t, time.Millisecond, res.Elapsed)
			require.InDelta(t, float64(tc.tokens)*1000, res.TokensPerSecond(), 1e-6)
			require.Equal(t, tc.steps, c.steps)
			require.Equal(t, tc.maxSeqs, c.maxSeqs)
		})
	}
	// A test larger than the runner is refused before any step.
	_, err = decode.Run(r, decode.Batched(8, 16, 5), time.Now)
	require.ErrorContains(t, err, "needs 5 seats")
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		test decode.Test
		want string
	}{
		{decode.Test{Name: "x", Seqs: 0, Gen: 1}, "0 sequences"},
		{decode.Test{Name: "x", Seqs: 1, Gen: -1}, "gen -1"},
		{decode.Test{Name: "x", Seqs: 1}, "measures nothing"},
		{decode.Test{Name: "x", Seqs: 2, Prompt: 8}, "not 2"},
	} {
		require.ErrorContains(t, tc.test.Validate(), tc.want)
	}
	require.NoError(t, decode.TG(128, 512).Validate())
	require.Equal(t, "tg128@d512", decode.TG(128, 512).Name)
	require.Equal(t, "tg128x32", decode.Batched(128, 128, 32).Name)
}

func TestMedian(t *testing.T) {
	rs := []decode.Result{{Tokens: 10, Elapsed: time.Second}, {Tokens: 30, Elapsed: time.Second}, {Tokens: 20, Elapsed: time.Second}}
	m, err := decode.Median(rs)
	require.NoError(t, err)
	require.Equal(t, 20.0, m)
	_, err = decode.Median(nil)
	require.Error(t, err)
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		want decode.Test
	}{
		{"pp512", decode.PP(512)},
		{"tg128", decode.TG(128, 0)},
		{"tg128@d512", decode.TG(128, 512)},
		{"tg64x32", decode.Batched(64, 100, 32)},
	} {
		got, err := decode.Parse(tc.name, 100)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, got)
	}
	for _, bad := range []string{"", "pp", "tg", "xx12", "pp512x", "tg128@d", "pp0", "tg0", "tg128x0", "pp-3", "tg128@d512x4", "pp 512"} {
		_, err := decode.Parse(bad, 100)
		require.Error(t, err, "%q", bad)
	}
}
