package workload

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"time"
)

// AgenticConfig describes a batch of agentic programs as in seed 000: N
// programs × T turns. Turn 0's prompt is a shared prefix of
// round(Share · ContextTokens) tokens taken from the program's family token
// stream, followed by a private suffix; turn t+1's prompt is turn t's prompt,
// then the tokens actually generated in turn t, then the program's tool
// output for turn t (see NextPrompt). Between a response and the next turn
// the program waits for its tool.
type AgenticConfig struct {
	// Seed determines every token id, wait and offset.
	Seed uint64
	// Programs is N ≥ 1; Turns is T ≥ 1 inference calls per program.
	Programs, Turns int
	// Share is the requested initial shared-prefix ratio s in [0, 1].
	Share float64
	// Families is the number of prefix families (programs are assigned
	// round robin, program i to family i mod Families); 0 means 1. With
	// Share > 0 each family needs at least two programs to share with.
	Families int
	// ContextTokens is the length of turn 0's prompt (≥ 1).
	ContextTokens int
	// OutputTokens is how many tokens each turn generates (≥ 1).
	OutputTokens int
	// ToolTokens is the length of the tool output appended after each
	// non-final turn (≥ 1 when Turns > 1).
	ToolTokens int
	// TurnOutputTokens and TurnToolTokens, when set, give those lengths
	// per turn instead: len(TurnOutputTokens) == Turns and
	// len(TurnToolTokens) == Turns-1, every value ≥ 1.
	TurnOutputTokens, TurnToolTokens []int
	// ToolWait is the simulated tool's latency after each non-final turn;
	// each wait is ToolWait + U[-Jitter, +Jitter] (uniform in integer ns),
	// clamped at 0.
	ToolWait, Jitter time.Duration
	// ArrivalGap is the arrival phase: program i arrives at i · ArrivalGap
	// after the batch origin (0: all at once).
	ArrivalGap time.Duration
	// Tokens is the id range prompts and tool outputs draw from; the zero
	// value means [DefaultTokenMin, DefaultTokenMax).
	Tokens TokenRange
}

// Program is one agentic program of a batch.
type Program struct {
	// ID is the program's index, 0-based; Family its prefix family.
	ID, Family int
	// Arrival is when turn 0 is submitted, from the batch origin.
	Arrival time.Duration
	// Prompt is turn 0's prompt: Prompt[:SharedTokens] is the family's
	// shared prefix, the rest is private to this program.
	Prompt []int32
	// SharedTokens is the requested shared-prefix length of turn 0.
	SharedTokens int
	// Turns holds, per turn, what the program does after that turn's
	// response (the last turn's Tool is empty and its Wait 0).
	Turns []Turn
}

// Turn is one inference call of a program and the tool call after it.
type Turn struct {
	// MaxTokens is how many tokens the call generates.
	MaxTokens int
	// Wait is the tool latency between this response and the next turn.
	Wait time.Duration
	// Tool is the tool output appended to the next turn's prompt.
	Tool []int32
}

// resolved validates c and fills defaults.
func (c AgenticConfig) resolved() (AgenticConfig, error) {
	if c.Families == 0 {
		c.Families = 1
	}
	c.Tokens = c.Tokens.resolved()
	switch {
	case c.Programs < 1:
		return c, fmt.Errorf("workload: agentic programs %d < 1", c.Programs)
	case c.Turns < 1:
		return c, fmt.Errorf("workload: agentic turns %d < 1", c.Turns)
	case math.IsNaN(c.Share) || c.Share < 0 || c.Share > 1:
		return c, fmt.Errorf("workload: agentic share %v outside [0, 1]", c.Share)
	case c.Families < 1 || c.Families > c.Programs:
		return c, fmt.Errorf("workload: agentic families %d outside [1, programs=%d]", c.Families, c.Programs)
	case c.Share > 0 && c.Programs < 2*c.Families:
		return c, fmt.Errorf("workload: agentic share %v needs ≥ 2 programs per family; %d programs in %d families", c.Share, c.Programs, c.Families)
	case c.ContextTokens < 1:
		return c, fmt.Errorf("workload: agentic context tokens %d < 1", c.ContextTokens)
	case c.OutputTokens < 1 && c.TurnOutputTokens == nil:
		return c, fmt.Errorf("workload: agentic output tokens %d < 1", c.OutputTokens)
	case c.Turns > 1 && c.ToolTokens < 1 && c.TurnToolTokens == nil:
		return c, fmt.Errorf("workload: agentic tool tokens %d < 1 with %d turns", c.ToolTokens, c.Turns)
	case c.ToolWait < 0 || c.Jitter < 0 || c.ArrivalGap < 0:
		return c, fmt.Errorf("workload: agentic tool wait %v, jitter %v and arrival gap %v must be ≥ 0", c.ToolWait, c.Jitter, c.ArrivalGap)
	}
	if c.TurnOutputTokens != nil {
		if len(c.TurnOutputTokens) != c.Turns {
			return c, fmt.Errorf("workload: agentic has %d per-turn output lengths for %d turns", len(c.TurnOutputTokens), c.Turns)
		}
		for t, n := range c.TurnOutputTokens {
			if n < 1 {
				return c, fmt.Errorf("workload: agentic output tokens of turn %d is %d < 1", t, n)
			}
		}
	}
	if c.TurnToolTokens != nil {
		if len(c.TurnToolTokens) != c.Turns-1 {
			return c, fmt.Errorf("workload: agentic has %d per-turn tool lengths for %d turns (want %d)", len(c.TurnToolTokens), c.Turns, c.Turns-1)
		}
		for t, n := range c.TurnToolTokens {
			if n < 1 {
				return c, fmt.Errorf("workload: agentic tool tokens after turn %d is %d < 1", t, n)
			}
		}
	}
	// Distinct first tokens (families' and programs') make sharing exact.
	if err := c.Tokens.validate(max(c.Programs, c.Families)); err != nil {
		return c, err
	}
	return c, nil
}

func (c AgenticConfig) outputTokens(t int) int {
	if c.TurnOutputTokens != nil {
		return c.TurnOutputTokens[t]
	}
	return c.OutputTokens
}

func (c AgenticConfig) toolTokens(t int) int {
	if c.TurnToolTokens != nil {
		return c.TurnToolTokens[t]
	}
	return c.ToolTokens
}

// SharedTokens is the requested shared-prefix length of turn 0:
// round(Share · ContextTokens), so the realised ratio is within
// 0.5 / ContextTokens of Share.
func (c AgenticConfig) SharedTokens() int {
	return int(math.Round(c.Share * float64(c.ContextTokens)))
}

// Agentic generates the programs of c.
//
// Exactness: the families' streams start with distinct tokens and every
// program's private suffix (and every tool output) starts with a token
// distinct from every other program's, so two programs' prompts agree on
// exactly the shared prefix at every turn, whatever they generate (when
// Share < 1; with Share = 1 they agree at least on the whole turn-0 prompt).
func Agentic(c AgenticConfig) ([]Program, error) {
	c, err := c.resolved()
	if err != nil {
		return nil, err
	}
	shared := c.SharedTokens()
	famFirst := newStream(c.Seed, purposeDistinct, 0).distinct(c.Families, c.Tokens)
	families := make([][]int32, c.Families)
	for f := range families {
		if shared > 0 {
			s := newStream(c.Seed, purposeFamily, f)
			families[f] = s.tokens(append(make([]int32, 0, shared), famFirst[f]), shared-1, c.Tokens)
		}
	}
	privFirst := newStream(c.Seed, purposeDistinct, 1).distinct(c.Programs, c.Tokens)
	toolFirst := newStream(c.Seed, purposeDistinct, 2).distinct(c.Programs, c.Tokens)
	progs := make([]Program, c.Programs)
	for i := range progs {
		s := newStream(c.Seed, purposeProgram, i)
		f := i % c.Families
		prompt := make([]int32, 0, c.ContextTokens)
		prompt = append(prompt, families[f]...)
		if private := c.ContextTokens - shared; private > 0 {
			prompt = s.tokens(append(prompt, privFirst[i]), private-1, c.Tokens)
		}
		turns := make([]Turn, c.Turns)
		for t := range turns {
			turns[t].MaxTokens = c.outputTokens(t)
			if t == c.Turns-1 {
				continue
			}
			n := c.toolTokens(t)
			turns[t].Wait = s.jittered(c.ToolWait, c.Jitter)
			turns[t].Tool = s.tokens(append(make([]int32, 0, n), toolFirst[i]), n-1, c.Tokens)
		}
		progs[i] = Program{
			ID: i, Family: f, Arrival: time.Duration(i) * c.ArrivalGap,
			Prompt: prompt, SharedTokens: shared, Turns: turns,
		}
	}
	return progs, nil
}

// NextPrompt returns the prompt of turn t+1: prev (turn t's prompt), then
// generated (what turn t actually generated), then turn t's tool output.
// It returns a new slice; t must be a non-final turn.
func (p *Program) NextPrompt(t int, prev, generated []int32) ([]int32, error) {
	if t < 0 || t >= len(p.Turns)-1 {
		return nil, fmt.Errorf("workload: program %d has no turn after turn %d (turns: %d)", p.ID, t, len(p.Turns))
	}
	out := make([]int32, 0, len(prev)+len(generated)+len(p.Turns[t].Tool))
	out = append(out, prev...)
	out = append(out, generated...)
	return append(out, p.Turns[t].Tool...), nil
}

// Sharing is the shared-prefix structure of one turn, reconstructed from
// token ids alone.
type Sharing struct {
	// Turn is the turn the prompts belong to.
	Turn int `json:"turn"`
	// Shared[i] is the longest prefix program i's prompt shares with any
	// other program's prompt of the same turn.
	Shared []int `json:"shared"`
	// SharedTokens is ΣShared; PromptTokens is Σ prompt lengths.
	SharedTokens int `json:"shared_tokens"`
	PromptTokens int `json:"prompt_tokens"`
	// Ratio is SharedTokens / PromptTokens (0 when there are no tokens).
	Ratio float64 `json:"ratio"`
}

// MeasureSharing reconstructs the shared-prefix structure of prompts (one
// per program, same turn) from token ids: for each prompt, the longest
// prefix it shares with any other. Prompts are grouped by their tokens
// position by position (a most-significant-first radix split), so each
// token of a shared region is read once per prompt sharing it: O(Σ shared
// tokens), not a sort's repeated comparisons of long common prefixes.
func MeasureSharing(turn int, prompts [][]int32) Sharing {
	s := Sharing{Turn: turn, Shared: make([]int, len(prompts))}
	all := make([]int, len(prompts))
	for i := range all {
		all[i] = i
	}
	splitShared(prompts, all, 0, s.Shared)
	for i, p := range prompts {
		s.SharedTokens += s.Shared[i]
		s.PromptTokens += len(p)
	}
	if s.PromptTokens > 0 {
		s.Ratio = float64(s.SharedTokens) / float64(s.PromptTokens)
	}
	return s
}

// splitShared handles a group of prompts (indices, ≥ 2 of them) that agree
// on their first depth tokens: it extends depth while they all agree, then
// records that every member shares depth tokens with another, and splits
// the group by the next token into subgroups, recursing into those of two
// or more.
func splitShared(prompts [][]int32, group []int, depth int, shared []int) {
	for len(group) > 1 {
		for agree(prompts, group, depth) {
			depth++
		}
		for _, i := range group {
			shared[i] = max(shared[i], depth)
		}
		// Split by the token at depth; prompts that end at depth drop out
		// (they already share all of themselves).
		byTok := map[int32][]int{}
		var order []int32
		for _, i := range group {
			if depth < len(prompts[i]) {
				t := prompts[i][depth]
				if byTok[t] == nil {
					order = append(order, t)
				}
				byTok[t] = append(byTok[t], i)
			}
		}
		group = nil
		for _, t := range order {
			if sub := byTok[t]; len(sub) > 1 {
				if group == nil {
					group = sub // continue with one subgroup in this loop
					continue
				}
				splitShared(prompts, sub, depth+1, shared)
			}
		}
		depth++
	}
}

// agree reports whether every prompt of group has a token at depth and
// they are all the same.
func agree(prompts [][]int32, group []int, depth int) bool {
	first := prompts[group[0]]
	if depth >= len(first) {
		return false
	}
	t := first[depth]
	for _, i := range group[1:] {
		if depth >= len(prompts[i]) || prompts[i][depth] != t {
			return false
		}
	}
	return true
}

func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// VerifyTurn checks the prompts actually sent at turn t (prompts[i] for
// progs[i]) against the programs: each prompt extends the program's turn-0
// prompt, and each shares with the others exactly its SharedTokens (at
// least, when the whole turn-0 prompt is shared). It returns the measured
// sharing, so the harness can record the realised ratio of every turn.
func VerifyTurn(progs []Program, t int, prompts [][]int32) (Sharing, error) {
	if len(prompts) != len(progs) {
		return Sharing{}, fmt.Errorf("workload: turn %d has %d prompts for %d programs", t, len(prompts), len(progs))
	}
	for i, p := range progs {
		if !slices.Equal(prompts[i][:min(len(p.Prompt), len(prompts[i]))], p.Prompt) {
			return Sharing{}, fmt.Errorf("workload: program %d's turn-%d prompt does not extend its turn-0 prompt (lengths %d and %d, first difference at %d)",
				p.ID, t, len(prompts[i]), len(p.Prompt), commonPrefix(prompts[i], p.Prompt))
		}
	}
	s := MeasureSharing(t, prompts)
	for i, p := range progs {
		got, want := s.Shared[i], p.SharedTokens
		exact := want < len(p.Prompt)
		if got < want || (exact && got != want) {
			return s, fmt.Errorf("workload: program %d shares %d prompt tokens at turn %d, want %d", p.ID, got, t, want)
		}
	}
	return s, nil
}

// Digest is a hex SHA-256 of the programs' every id, length, wait and
// offset (little endian), for reproducibility checks and for recording which
// workload a row ran.
func Digest(progs []Program) string {
	h := sha256.New()
	w := func(v any) { _ = binary.Write(h, binary.LittleEndian, v) } // hash writes never fail
	for _, p := range progs {
		w([]int64{int64(p.ID), int64(p.Family), int64(p.Arrival), int64(p.SharedTokens), int64(len(p.Prompt))})
		w(p.Prompt)
		w(int64(len(p.Turns)))
		for _, t := range p.Turns {
			w([]int64{int64(t.MaxTokens), int64(t.Wait), int64(len(t.Tool))})
			w(t.Tool)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
