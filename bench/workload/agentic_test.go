package workload

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// seed000 is the shape of seed 000's batches, shortened contexts.
func seed000(share float64) AgenticConfig {
	return AgenticConfig{
		Seed: 700, Programs: 32, Turns: 3, Share: share, ContextTokens: 1024,
		OutputTokens: 16, ToolTokens: 64, ToolWait: time.Second, Jitter: 5 * time.Millisecond,
		ArrivalGap: 250 * time.Millisecond,
	}
}

// goldenAgentic pins the bits of seed000(0.9): a change here means every
// recorded workload changes, which must be deliberate.
const goldenAgentic = "5d233659f2f1e484975e6730ba0f31150f03a8fc61541b702fa63d421883d8ec"

func TestAgenticReproducible(t *testing.T) {
	a, err := Agentic(seed000(0.9))
	require.NoError(t, err)
	b, err := Agentic(seed000(0.9))
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.Equal(t, Digest(a), Digest(b))
	require.Equal(t, goldenAgentic, Digest(a), "same seed must reproduce the recorded bits")

	other := seed000(0.9)
	other.Seed++
	c, err := Agentic(other)
	require.NoError(t, err)
	require.NotEqual(t, Digest(a), Digest(c))

	// Programs do not depend on how many follow them.
	small := seed000(0.9)
	small.Programs = 8
	d, err := Agentic(small)
	require.NoError(t, err)
	require.Equal(t, a[:8], d)
}

// generate stands in for the engine: what each program generates in turn t.
type generator func(prog, turn, n int) []int32

func sameForAll(_, turn, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(10 + (turn+i)%50)
	}
	return out
}

func perProgram(prog, turn, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(3 + (prog*7+turn*13+i)%400)
	}
	return out
}

func TestAgenticSharingExactEveryTurn(t *testing.T) {
	tests := []struct {
		name string
		cfg  func() AgenticConfig
		gen  generator
	}{
		{"zero sharing", func() AgenticConfig { return seed000(0) }, perProgram},
		{"half", func() AgenticConfig { return seed000(0.5) }, perProgram},
		{"ninety", func() AgenticConfig { return seed000(0.9) }, perProgram},
		{"ninety, identical outputs", func() AgenticConfig { return seed000(0.9) }, sameForAll},
		{"third rounds", func() AgenticConfig { c := seed000(1.0 / 3); c.ContextTokens = 1000; return c }, perProgram},
		{"full sharing", func() AgenticConfig { return seed000(1) }, sameForAll},
		{"two programs", func() AgenticConfig { c := seed000(0.9); c.Programs = 2; return c }, perProgram},
		{"four families", func() AgenticConfig { c := seed000(0.5); c.Families = 4; return c }, sameForAll},
		{"tiny context", func() AgenticConfig { c := seed000(0.5); c.ContextTokens = 3; c.Programs = 4; return c }, perProgram},
		{"one turn", func() AgenticConfig { c := seed000(0.5); c.Turns = 1; c.ToolTokens = 0; return c }, perProgram},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg()
			progs, err := Agentic(cfg)
			require.NoError(t, err)
			require.Len(t, progs, cfg.Programs)
			prompts := make([][]int32, len(progs))
			for i, p := range progs {
				prompts[i] = p.Prompt
				require.Len(t, p.Prompt, cfg.ContextTokens)
				require.Equal(t, cfg.SharedTokens(), p.SharedTokens)
			}
			for turn := range cfg.Turns {
				s, err := VerifyTurn(progs, turn, prompts)
				require.NoError(t, err)
				if turn == 0 {
					// Realised sharing equals the requested within rounding.
					require.InDelta(t, cfg.Share, s.Ratio, 0.5/float64(cfg.ContextTokens))
				}
				if cfg.Share < 1 {
					require.Equal(t, cfg.SharedTokens()*cfg.Programs, s.SharedTokens)
				} else {
					require.GreaterOrEqual(t, s.SharedTokens, cfg.ContextTokens*cfg.Programs)
				}
				if turn == cfg.Turns-1 {
					break
				}
				for i := range progs {
					prompts[i], err = progs[i].NextPrompt(turn, prompts[i], tc.gen(i, turn, cfg.OutputTokens))
					require.NoError(t, err)
					require.Len(t, prompts[i], cfg.ContextTokens+(turn+1)*(cfg.OutputTokens+cfg.ToolTokens))
				}
			}
		})
	}
}

func TestAgenticPerTurnLengths(t *testing.T) {
	cfg := seed000(0.9)
	cfg.OutputTokens, cfg.ToolTokens = 0, 0
	cfg.TurnOutputTokens, cfg.TurnToolTokens = []int{4, 16, 9}, []int{100, 7}
	progs, err := Agentic(cfg)
	require.NoError(t, err)
	prompts := make([][]int32, len(progs))
	for i, p := range progs {
		require.Equal(t, []int{4, 16, 9}, []int{p.Turns[0].MaxTokens, p.Turns[1].MaxTokens, p.Turns[2].MaxTokens})
		require.Len(t, p.Turns[0].Tool, 100)
		require.Len(t, p.Turns[1].Tool, 7)
		prompts[i] = p.Prompt
	}
	wantLen := []int{1024, 1024 + 4 + 100, 1024 + 4 + 100 + 16 + 7}
	for turn := range 3 {
		s, err := VerifyTurn(progs, turn, prompts)
		require.NoError(t, err)
		require.Equal(t, wantLen[turn]*32, s.PromptTokens)
		if turn == 2 {
			break
		}
		for i := range progs {
			prompts[i], err = progs[i].NextPrompt(turn, prompts[i], perProgram(i, turn, progs[i].Turns[turn].MaxTokens))
			require.NoError(t, err)
		}
	}
}

func TestAgenticWaitsAndArrivals(t *testing.T) {
	cfg := seed000(0.5)
	progs, err := Agentic(cfg)
	require.NoError(t, err)
	var waits []time.Duration
	for i, p := range progs {
		require.Equal(t, time.Duration(i)*250*time.Millisecond, p.Arrival)
		require.Equal(t, i%1, p.Family)
		require.Len(t, p.Turns, cfg.Turns)
		last := p.Turns[cfg.Turns-1]
		require.Zero(t, last.Wait)
		require.Empty(t, last.Tool)
		for _, turn := range p.Turns[:cfg.Turns-1] {
			require.Equal(t, cfg.OutputTokens, turn.MaxTokens)
			require.Len(t, turn.Tool, cfg.ToolTokens)
			require.InDelta(t, float64(cfg.ToolWait), float64(turn.Wait), float64(cfg.Jitter))
			for _, tok := range turn.Tool {
				require.True(t, tok >= DefaultTokenMin && tok < DefaultTokenMax, "tool token %d", tok)
			}
			waits = append(waits, turn.Wait)
		}
		for _, tok := range p.Prompt {
			require.True(t, tok >= DefaultTokenMin && tok < DefaultTokenMax, "prompt token %d", tok)
		}
	}
	slices.Sort(waits)
	require.Less(t, waits[0], waits[len(waits)-1], "jitter must vary the waits")

	cfg.Jitter = 0
	progs, err = Agentic(cfg)
	require.NoError(t, err)
	for _, p := range progs {
		require.Equal(t, cfg.ToolWait, p.Turns[0].Wait)
	}
	cfg.Jitter, cfg.ToolWait = time.Second, time.Millisecond // clamps at 0
	progs, err = Agentic(cfg)
	require.NoError(t, err)
	for _, p := range progs {
		require.GreaterOrEqual(t, p.Turns[0].Wait, time.Duration(0))
	}
}

func TestAgenticConfigErrors(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*AgenticConfig)
		wantErr string
	}{
		{"no programs", func(c *AgenticConfig) { c.Programs = 0 }, "programs 0 < 1"},
		{"no turns", func(c *AgenticConfig) { c.Turns = 0 }, "turns 0 < 1"},
		{"share above 1", func(c *AgenticConfig) { c.Share = 1.5 }, "share 1.5 outside"},
		{"share NaN", func(c *AgenticConfig) { c.Share = math.NaN() }, "share NaN outside"},
		{"too many families", func(c *AgenticConfig) { c.Families = 33 }, "families 33 outside"},
		{"lonely family", func(c *AgenticConfig) { c.Families = 17 }, "≥ 2 programs per family"},
		{"no context", func(c *AgenticConfig) { c.ContextTokens = 0 }, "context tokens 0"},
		{"no output", func(c *AgenticConfig) { c.OutputTokens = 0 }, "output tokens 0"},
		{"no tool output", func(c *AgenticConfig) { c.ToolTokens = 0 }, "tool tokens 0 < 1 with 3 turns"},
		{"negative wait", func(c *AgenticConfig) { c.ToolWait = -1 }, "must be ≥ 0"},
		{"per-turn outputs", func(c *AgenticConfig) { c.TurnOutputTokens = []int{1, 2} }, "2 per-turn output lengths for 3 turns"},
		{"per-turn output zero", func(c *AgenticConfig) { c.TurnOutputTokens = []int{1, 0, 2} }, "output tokens of turn 1 is 0"},
		{"per-turn tools", func(c *AgenticConfig) { c.TurnToolTokens = []int{1, 2, 3} }, "3 per-turn tool lengths for 3 turns (want 2)"},
		{"per-turn tool zero", func(c *AgenticConfig) { c.TurnToolTokens = []int{0, 2} }, "tool tokens after turn 0 is 0"},
		{"tiny vocabulary", func(c *AgenticConfig) { c.Tokens = TokenRange{Min: 3, Max: 10} }, "holds 7 ids but 32 distinct"},
		{"empty vocabulary", func(c *AgenticConfig) { c.Tokens = TokenRange{Min: 5, Max: 5} }, "[5, 5) is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := seed000(0.5)
			tc.edit(&cfg)
			_, err := Agentic(cfg)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestMeasureSharingByHand(t *testing.T) {
	prompts := [][]int32{{1, 2, 3}, {6}, {1, 2, 4}, {1, 5}, {1, 2, 3, 9}}
	s := MeasureSharing(4, prompts)
	require.Equal(t, []int{3, 0, 2, 1, 3}, s.Shared)
	require.Equal(t, 9, s.SharedTokens)
	require.Equal(t, 13, s.PromptTokens)
	require.InEpsilon(t, 9.0/13, s.Ratio, 1e-12)
	require.Equal(t, 4, s.Turn)
	require.Zero(t, MeasureSharing(0, nil).Ratio)
}

func TestVerifyTurnCatchesWrongPrompts(t *testing.T) {
	progs, err := Agentic(seed000(0.5))
	require.NoError(t, err)
	shared := progs[0].SharedTokens
	fresh := func() [][]int32 {
		out := make([][]int32, len(progs))
		for i, p := range progs {
			out[i] = slices.Clone(p.Prompt)
		}
		return out
	}
	tests := []struct {
		name    string
		edit    func([][]int32) [][]int32
		wantErr string
	}{
		{"count", func(p [][]int32) [][]int32 { return p[:3] }, "3 prompts for 32 programs"},
		{"history rewritten", func(p [][]int32) [][]int32 { p[5][shared+3]++; return p }, "program 5's turn-1 prompt does not extend"},
		{"truncated", func(p [][]int32) [][]int32 { p[2] = p[2][:10]; return p }, "program 2's turn-1 prompt does not extend"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifyTurn(progs, 1, tc.edit(fresh()))
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
	// A program whose recorded turn-0 prompt shares more than declared
	// (e.g. a generator bug) is caught from the token ids.
	bad := slices.Clone(progs)
	bad[7].Prompt = slices.Clone(bad[6].Prompt)
	prompts := make([][]int32, len(bad))
	for i, p := range bad {
		prompts[i] = p.Prompt
	}
	_, err = VerifyTurn(bad, 0, prompts)
	require.ErrorContains(t, err, "shares 1024 prompt tokens at turn 0, want 512")
	// And one sharing less than declared.
	bad = slices.Clone(progs)
	bad[3].Prompt = slices.Clone(bad[3].Prompt)
	bad[3].Prompt[shared-1]++
	for i, p := range bad {
		prompts[i] = p.Prompt
	}
	_, err = VerifyTurn(bad, 0, prompts)
	require.ErrorContains(t, err, "program 3 shares 511 prompt tokens at turn 0, want 512")

	_, err = progs[0].NextPrompt(2, nil, nil)
	require.ErrorContains(t, err, "no turn after turn 2")
}

// FuzzAgentic generates small batches from fuzzed parameters and checks
// exact sharing at every turn with fuzzed generated tokens.
func FuzzAgentic(f *testing.F) {
	f.Add(uint64(1), uint8(4), uint8(3), uint8(50), uint8(1), uint8(20), []byte{1, 2, 3})
	f.Add(uint64(9), uint8(2), uint8(1), uint8(100), uint8(1), uint8(1), []byte{})
	f.Add(uint64(5), uint8(9), uint8(2), uint8(0), uint8(3), uint8(7), []byte{7, 7, 7, 7})
	f.Fuzz(func(t *testing.T, seed uint64, n, turns, sharePct, fams, ctx uint8, gen []byte) {
		cfg := AgenticConfig{
			Seed: seed, Programs: int(n%16) + 1, Turns: int(turns%4) + 1, Share: float64(sharePct%101) / 100,
			Families: int(fams%4) + 1, ContextTokens: int(ctx%64) + 1, OutputTokens: 2, ToolTokens: 3,
		}
		progs, err := Agentic(cfg)
		if cfg.Families > cfg.Programs || (cfg.SharedTokens() > 0 || cfg.Share > 0) && cfg.Programs < 2*cfg.Families {
			require.Error(t, err)
			return
		}
		require.NoError(t, err)
		prompts := make([][]int32, len(progs))
		for i, p := range progs {
			prompts[i] = p.Prompt
		}
		for turn := range cfg.Turns {
			_, err := VerifyTurn(progs, turn, prompts)
			require.NoError(t, err)
			if turn == cfg.Turns-1 {
				break
			}
			for i := range progs {
				g := []int32{3, 4}
				if len(gen) > 0 {
					g = []int32{int32(gen[(i+turn)%len(gen)]), 5}
				}
				prompts[i], err = progs[i].NextPrompt(turn, prompts[i], g)
				require.NoError(t, err)
			}
		}
	})
}

// FuzzMeasureSharing checks the radix split against the definition: each
// prompt's shared length is its longest common prefix with any other,
// computed pairwise.
func FuzzMeasureSharing(f *testing.F) {
	f.Add([]byte{3, 1, 2, 3, 2, 1, 2, 1, 6, 4, 1, 2, 3, 9})
	f.Add([]byte{2, 5, 5, 2, 5, 5, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		// raw encodes prompts as (length, tokens...) over a 3-token alphabet
		// so that long shared prefixes are common.
		var prompts [][]int32
		for len(raw) > 0 && len(prompts) < 12 {
			n := min(int(raw[0]%8), len(raw)-1)
			p := make([]int32, n)
			for i := range p {
				p[i] = int32(raw[1+i] % 3)
			}
			prompts = append(prompts, p)
			raw = raw[1+n:]
		}
		got := MeasureSharing(1, prompts)
		total := 0
		for i := range prompts {
			want := 0
			for j := range prompts {
				if j != i {
					want = max(want, commonPrefix(prompts[i], prompts[j]))
				}
			}
			require.Equal(t, want, got.Shared[i], "prompt %d of %v", i, prompts)
			total += want
		}
		require.Equal(t, total, got.SharedTokens)
	})
}
