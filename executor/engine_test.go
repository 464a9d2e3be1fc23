package executor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/turnstile-llm/turnstile/internal/testwait"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/policy"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/seatpool"
	"github.com/turnstile-llm/turnstile/sim"
	"github.com/turnstile-llm/turnstile/step"
)

// byteTokenizer is a tiny byte-level tokenizer for tests: ids 0..255 are
// bytes, 256 is BOS, 257 is EOS. (The real one is model/tokenizer; this one
// keeps the engine's tests independent of a model file.)
type byteTokenizer struct{ pieces [256][]byte }

const (
	testBOS   = 256
	testEOS   = 257
	testVocab = 258
)

func newByteTokenizer() *byteTokenizer {
	t := &byteTokenizer{}
	for i := range t.pieces {
		t.pieces[i] = []byte{byte(i)}
	}
	return t
}

func (t *byteTokenizer) Encode(text string, addBOS bool) []int32 {
	var out []int32
	if addBOS {
		out = append(out, testBOS)
	}
	for i := 0; i < len(text); i++ {
		out = append(out, int32(text[i]))
	}
	return out
}

func (t *byteTokenizer) Piece(id int32) []byte {
	if id >= 0 && id < 256 {
		return t.pieces[id]
	}
	return nil
}
func (t *byteTokenizer) BOS() int32     { return testBOS }
func (t *byteTokenizer) EOS() int32     { return testEOS }
func (t *byteTokenizer) VocabSize() int { return testVocab }

// setup is one engine on a simulated runner with a virtual clock.
type setup struct {
	eng    *Engine
	runner *sim.Runner
	clock  *clock.Virtual
}

type opts struct {
	mbs, tokens, blocks, bs, ctx int
	overlap, charge              bool
	eosAfter                     int
	tokMin, tokMax               int32
	seatsDelta                   int
	programs                     *policy.Config
	clk                          clock.Clock
	cost                         sim.CostModel
}

func newSetup(t testing.TB, o opts) *setup {
	t.Helper()
	if o.mbs == 0 {
		o.mbs = 4
	}
	if o.tokens == 0 {
		o.tokens = 64
	}
	if o.blocks == 0 {
		o.blocks = 256
	}
	if o.bs == 0 {
		o.bs = 4
	}
	if o.ctx == 0 {
		o.ctx = 256
	}
	if o.tokMin == 0 && o.tokMax == 0 {
		o.tokMin, o.tokMax = 'a', 'a'+6
	}
	vc := clock.NewVirtual(time.Unix(1000, 0))
	var clk clock.Clock = vc
	if o.clk != nil {
		clk = o.clk
	}
	cost := o.cost
	if cost == nil {
		cost = sim.Fixed(time.Millisecond)
	}
	seats := testSeats(t, o.mbs, o.overlap)
	r, err := sim.New(sim.Config{
		Capacity: step.Capacity{Seats: seats + o.seatsDelta, KVBlocks: o.blocks, BlockSize: o.bs,
			MaxContext: o.ctx, MaxBatchTokens: o.tokens, Vocab: testVocab},
		Cost: cost, Clock: clk, Seed: 7, EOS: testEOS, EOSAfter: o.eosAfter,
		TokenMin: o.tokMin, TokenMax: o.tokMax,
	})
	require.NoError(t, err)
	eng, err := New(Config{MaxBatchSize: o.mbs, Overlap: o.overlap, Ablation: Ablation{ChargeRetiring: o.charge},
		Clock: clk, Programs: o.programs, Model: "test", Seed: 1}, r, newByteTokenizer())
	require.NoError(t, err)
	return &setup{eng: eng, runner: r, clock: vc}
}

// drive steps the engine until it is idle, checking accounting after every step.
func (s *setup) drive(t testing.TB, maxSteps int) int {
	t.Helper()
	for i := 0; i < maxSteps; i++ {
		progressed, err := s.eng.Step()
		require.NoError(t, err)
		require.NoError(t, s.eng.Check())
		if !progressed {
			return i
		}
	}
	t.Fatalf("engine still busy after %d steps", maxSteps)
	return 0
}

// testSeats is the seat count, derived once by seatpool.Seats, that an
// engine of mbs with overlap ovl and its runner are built with.
func testSeats(tb testing.TB, mbs int, ovl bool) int {
	tb.Helper()
	n, err := seatpool.Seats(seatpool.Sizing{MaxBatchSize: mbs, Overlap: ovl, DeferredTeardown: ovl})
	require.NoError(tb, err)
	return n
}

func greedy() sampling.Params { return sampling.DefaultParams() }

func readAll(t testing.TB, st *Stream) Delta {
	t.Helper()
	d, err := st.ReadAll(testwait.Ctx(t))
	require.NoError(t, err, "reading a stream to its finish")
	return d
}

// expected predicts the sim's output for a prompt: tokens until maxTokens.
func expected(r *sim.Runner, seed uint64, prompt []int32, maxTokens int) []int32 {
	toks := append([]int32(nil), prompt...)
	var out []int32
	for len(out) < maxTokens {
		tk := r.Next(seed, toks)
		out = append(out, tk)
		toks = append(toks, tk)
	}
	return out
}

func TestGenerateMatchesRunnerOverlapOnOff(t *testing.T) {
	var outputs [2][]Delta
	for mode, ovl := range []bool{false, true} {
		s := newSetup(t, opts{overlap: ovl, tokens: 16})
		var streams []*Stream
		for i := range 6 {
			p := greedy()
			p.Seed, p.HasSeed = uint64(100+i), true
			p.Logprobs = i%2 == 0
			st, err := s.eng.Submit(context.Background(), &Request{
				Prompt: fmt.Sprintf("prompt number %d with some text", i), MaxTokens: 10 + 3*i, Params: p})
			require.NoError(t, err)
			streams = append(streams, st)
		}
		s.drive(t, 1000)
		for i, st := range streams {
			d := readAll(t, st)
			prompt := newByteTokenizer().Encode(fmt.Sprintf("prompt number %d with some text", i), true)
			require.Equal(t, expected(s.runner, uint64(100+i), prompt, 10+3*i), d.TokenIDs, "request %d overlap=%v", i, ovl)
			require.Equal(t, FinishLength, d.FinishReason)
			require.Equal(t, len(prompt), d.Usage.Prompt)
			require.Equal(t, 10+3*i, d.Usage.Completion)
			if i%2 == 0 {
				require.Len(t, d.Logprobs, len(d.TokenIDs))
			} else {
				require.Nil(t, d.Logprobs)
			}
			var text []byte
			for _, tk := range d.TokenIDs {
				text = append(text, byte(tk))
			}
			require.Equal(t, string(text), d.Text)
			outputs[mode] = append(outputs[mode], d)
		}
		m := s.eng.Snapshot()
		require.Equal(t, uint64(6), m.Finished)
		require.Equal(t, 0, m.Running+m.Waiting+m.Retiring+m.KVBlocksUsed)
		require.NoError(t, s.eng.Close())
	}
	require.Equal(t, outputs[0], outputs[1], "overlap must not change output")
}

// TestRetiringSeat: with overlap, a request whose stop token (here EOS)
// comes out of step n is already in step n+1; it holds its seat as retiring
// for exactly that one step; admission ignores it (FIX) or counts it
// (Ablation.ChargeRetiring, BASE); liveness counts it either way.
func TestRetiringSeat(t *testing.T) {
	type trace struct{ live, retiring, running, waiting int }
	run := func(charge bool) ([]trace, Delta) {
		s := newSetup(t, opts{mbs: 1, overlap: true, eosAfter: 3, charge: charge})
		a, err := s.eng.Submit(context.Background(), &Request{Prompt: "aaaa", Params: greedy()})
		require.NoError(t, err)
		_, err = s.eng.Submit(context.Background(), &Request{Prompt: "bbbb", MaxTokens: 1, Params: greedy()})
		require.NoError(t, err)
		var tr []trace
		for range 8 {
			_, err := s.eng.Step()
			require.NoError(t, err)
			require.NoError(t, s.eng.Check())
			m := s.eng.Snapshot()
			tr = append(tr, trace{m.SeatsLive, m.SeatsRetiring, m.Running, m.Waiting})
		}
		s.drive(t, 100)
		require.NoError(t, s.eng.Close())
		return tr, readAll(t, a)
	}
	fix, da := run(false)
	require.Equal(t, FinishStop, da.FinishReason)
	require.Equal(t, int32(testEOS), da.TokenIDs[len(da.TokenIDs)-1])
	require.Len(t, da.TokenIDs, 3)
	// Steps: 1 prefill A (samples t1) | 2 decode A (future), t1 seen | 3 decode A, t2 seen
	// | 4 decode A, t3=EOS seen: A is in 4 → retiring | 5: A torn down.
	require.Equal(t, []trace{
		{1, 0, 1, 1}, {1, 0, 1, 1}, {1, 0, 1, 1},
		{0, 1, 0, 1}, // step 4 launched (A in it), then step 3 processed: EOS → retiring
		{1, 0, 1, 0}, // step 5: B admitted while A retires (not charged); step 4 teardown frees A's seat
		{0, 0, 0, 0}, // B's only token (max_tokens 1) known in advance: not planned again, finished
		{0, 0, 0, 0}, {0, 0, 0, 0},
	}, fix)
	base, _ := run(true)
	require.Equal(t, []trace{
		{1, 0, 1, 1}, {1, 0, 1, 1}, {1, 0, 1, 1},
		{0, 1, 0, 1},
		{0, 0, 0, 1}, // BASE: A's retiring seat is charged, B must wait a step
		{1, 0, 1, 0},
		{0, 0, 0, 0}, {0, 0, 0, 0},
	}, base)
}

// TestCheckSeatsInFlight: with overlap, requests that stop (EOS, not known
// in advance) while the next step that uses their seat is in flight keep
// the seat, retiring, until that step's teardown, and Check proves it after
// every step. A seat given back before its step is processed, as a detach
// that ignored the step in flight would, fails Check naming the step and
// the seat, though every count still agrees.
func TestCheckSeatsInFlight(t *testing.T) {
	run := func(t *testing.T, breakAt int) error {
		s := newSetup(t, opts{mbs: 3, overlap: true, eosAfter: 3})
		for i := range 5 {
			_, err := s.eng.Submit(context.Background(), &Request{PromptTokens: progTokens(2+i, int32(i)), Params: greedy()})
			require.NoError(t, err)
		}
		retired := 0
		for i := range 200 {
			progressed, err := s.eng.Step()
			require.NoError(t, err)
			if s.eng.retiring > 0 {
				retired++
				if retired == breakAt {
					releaseRetiringEarly(t, s.eng)
				}
			}
			if err := s.eng.Check(); err != nil {
				return err
			}
			if !progressed {
				require.Positive(t, retired, "some request retired with its step in flight (step %d)", i)
				require.NoError(t, s.eng.Close())
				return s.eng.Check()
			}
		}
		t.Fatal("engine still busy after 200 steps")
		return nil
	}
	t.Run("kept", func(t *testing.T) { require.NoError(t, run(t, 0)) })
	for _, at := range []int{1, 2} {
		t.Run(fmt.Sprintf("released early at the retirement %d", at), func(t *testing.T) {
			err := run(t, at)
			require.ErrorContains(t, err, "in flight uses seat")
			require.ErrorContains(t, err, "released before the step was processed")
		})
	}
}

// releaseRetiringEarly gives back one retiring seat (and its blocks) at
// once instead of at its step's teardown, keeping every count consistent:
// the breakage only the steps in flight reveal.
func releaseRetiringEarly(t *testing.T, e *Engine) {
	t.Helper()
	for i := range e.steps {
		st := &e.steps[i]
		if len(st.teardown) == 0 {
			continue
		}
		r := st.teardown[len(st.teardown)-1]
		st.teardown = st.teardown[:len(st.teardown)-1]
		e.retiring--
		require.NoError(t, e.seats.Release(r.seat))
		if r.hasKV {
			e.kv.Release(r.kv)
		}
		return
	}
	t.Fatal("no retiring seat to release")
}

// TestRetiringCountsForLiveness: Run must not block while a request retires.
func TestRetiringCountsForLiveness(t *testing.T) {
	s := newSetup(t, opts{mbs: 1, overlap: true, eosAfter: 2})
	st, err := s.eng.Submit(context.Background(), &Request{Prompt: "x", Params: greedy()})
	require.NoError(t, err)
	for i := 0; s.eng.Snapshot().Retiring == 0; i++ {
		require.Less(t, i, 100, "stepped %d times waiting for the request to retire", i)
		_, err := s.eng.Step()
		require.NoError(t, err)
	}
	// Only a retiring request is left: the loop must still make progress.
	progressed, err := s.eng.Step()
	require.NoError(t, err)
	require.True(t, progressed)
	require.Equal(t, 0, s.eng.Snapshot().Retiring)
	progressed, err = s.eng.Step()
	require.NoError(t, err)
	require.False(t, progressed, "nothing live: the loop may block")
	require.Equal(t, FinishStop, readAll(t, st).FinishReason)
	require.NoError(t, s.eng.Close())
}

func TestStartupValidation(t *testing.T) {
	tests := []struct {
		name  string
		delta int
		want  []string
	}{
		{"runner smaller than seat pool", -1, []string{"seat pool has 8 seats but runner buffers holds 7"}},
		{"runner larger than seat pool", +1, []string{"seat pool has 8 seats but runner buffers holds 9"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := sim.New(sim.Config{
				Capacity: step.Capacity{Seats: 8 + tc.delta, KVBlocks: 16, BlockSize: 4, MaxContext: 64,
					MaxBatchTokens: 32, Vocab: testVocab},
				Clock: clock.NewVirtual(time.Unix(0, 0)),
			})
			require.NoError(t, err)
			_, err = New(Config{MaxBatchSize: 4, Overlap: true}, r, newByteTokenizer())
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
	r, err := sim.New(sim.Config{Capacity: step.Capacity{Seats: 4, KVBlocks: 16, BlockSize: 4, MaxContext: 64,
		MaxBatchTokens: 32, Vocab: testVocab}, Clock: clock.Real{}})
	require.NoError(t, err)
	cfgErrs := []struct {
		cfg  Config
		want string
	}{
		{Config{MaxBatchSize: 0}, "MaxBatchSize must be > 0, got 0"},
		{Config{MaxBatchSize: 4, MaxNumBatchedTokens: 33}, "MaxNumBatchedTokens 33 exceeds the runner's MaxBatchTokens 32"},
		{Config{MaxBatchSize: 4, BlockSize: 16}, "BlockSize 16 differs from the runner's 4"},
		{Config{MaxBatchSize: 4, Overlap: true}, "seat pool has 8 seats but runner buffers holds 4"},
		{Config{MaxBatchSize: 4, Overlap: true}, "seatpool.Seats derives 8 seats for MaxBatchSize 4 with overlap true"},
		{Config{MaxBatchSize: 2}, "seatpool.Seats derives 2 seats for MaxBatchSize 2 with overlap false"},
		{Config{MaxBatchSize: 2}, "seat pool has 2 seats but runner buffers holds 4"},
	}
	for _, c := range cfgErrs {
		_, err := New(c.cfg, r, newByteTokenizer())
		require.ErrorContains(t, err, c.want)
	}
	_, err = New(Config{MaxBatchSize: 4}, r, newByteTokenizer())
	require.NoError(t, err)
}

func TestSubmitValidation(t *testing.T) {
	s := newSetup(t, opts{ctx: 64, blocks: 8, bs: 4})
	bad := func(mod func(*Request)) *Request {
		r := &Request{Prompt: "hello", Params: greedy()}
		mod(r)
		return r
	}
	tests := []struct {
		name string
		req  *Request
		want string
	}{
		{"nil", nil, "nil request"},
		{"empty prompt", bad(func(r *Request) { r.Prompt = "" }), "prompt: empty"},
		{"negative max_tokens", bad(func(r *Request) { r.MaxTokens = -1 }), "max_tokens: must be >= 0, got -1"},
		{"negative temperature", bad(func(r *Request) { r.Params.Temperature = -0.5 }), "temperature -0.5"},
		{"top_p zero", bad(func(r *Request) { r.Params.TopP = 0 }), "top_p 0"},
		{"top_p above one", bad(func(r *Request) { r.Params.TopP = 1.5 }), "top_p 1.5"},
		{"empty stop string", bad(func(r *Request) { r.Stop = []string{"ok", ""} }), "stop[1]: empty stop string"},
		{"stop token outside vocab", bad(func(r *Request) { r.StopTokenIDs = []int32{999} }), "stop_token_ids[0]: token 999 outside vocab [0, 258)"},
		{"prompt token outside vocab", bad(func(r *Request) { r.PromptTokens = []int32{1, -3} }), "prompt_tokens[1]: token -3"},
		{"longer than context", bad(func(r *Request) { r.PromptTokens = make([]int32, 64) }), "64 tokens, but the model context is 64"},
		{"larger than pool", bad(func(r *Request) { r.PromptTokens = make([]int32, 40) }), "40 tokens (+1 to generate) do not fit the KV pool: kvpool: request of 41 tokens exceeds the whole pool of 32 tokens"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, err := s.eng.Submit(context.Background(), tc.req)
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, st)
		})
	}
	require.Equal(t, uint64(0), s.eng.Snapshot().Submitted)
	progressed, err := s.eng.Step()
	require.NoError(t, err)
	require.False(t, progressed, "nothing may be queued by a refused request")
}

func TestStopConditions(t *testing.T) {
	s := newSetup(t, opts{tokMin: 'a', tokMax: 'a' + 3, eosAfter: 40})
	// Find, from the sim's deterministic stream, a stop string that occurs.
	prompt := newByteTokenizer().Encode("stop test", true)
	exp := expected(s.runner, 5, prompt, 45)
	stop := string([]byte{byte(exp[6]), byte(exp[7])})
	var text []byte
	for _, tk := range exp {
		text = append(text, byte(tk))
	}
	cut := indexOf(string(text), stop)
	p := greedy()
	p.Seed, p.HasSeed = 5, true
	tests := []struct {
		name       string
		req        Request
		wantText   string
		wantTokens int
		reason     FinishReason
		stopString string
	}{
		{"stop string excluded", Request{Prompt: "stop test", Stop: []string{"zzz", stop}, Params: p}, string(text[:cut]), cut + 2, FinishStop, stop},
		{"stop token id", Request{Prompt: "stop test", StopTokenIDs: []int32{exp[4]}, Params: p}, "", 0, FinishStop, ""},
		{"max tokens", Request{Prompt: "stop test", MaxTokens: 5, Params: p}, string(text[:5]), 5, FinishLength, ""},
		{"eos", Request{Prompt: "stop test", Params: p}, string(text[:39]), 40, FinishStop, ""},
		{"ignore eos runs to context", Request{Prompt: "stop test", IgnoreEOS: true, Params: p}, "", 256 - len(prompt), FinishLength, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, err := s.eng.Submit(context.Background(), &tc.req)
			require.NoError(t, err)
			s.drive(t, 2000)
			d := readAll(t, st)
			require.Equal(t, tc.reason, d.FinishReason)
			require.Equal(t, tc.stopString, d.StopString, "the stop string that ended the output")
			if tc.name == "stop token id" {
				first := indexOf32(exp, exp[4])
				require.Equal(t, exp[:first+1], d.TokenIDs)
				require.Equal(t, string(text[:first]), d.Text)
				return
			}
			require.Len(t, d.TokenIDs, tc.wantTokens)
			if tc.wantText != "" {
				require.Equal(t, tc.wantText, d.Text)
			}
		})
	}
	require.NoError(t, s.eng.Close())
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func indexOf32(s []int32, v int32) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// TestPrefixCacheReuse: a second request with the same prompt reuses the
// first one's full blocks and produces the same output (the sim reads the
// last input token back through the block table, so wrong reuse would show).
func TestPrefixCacheReuse(t *testing.T) {
	for _, ovl := range []bool{false, true} {
		s := newSetup(t, opts{overlap: ovl, bs: 4})
		p := greedy()
		p.Seed, p.HasSeed = 9, true
		req := Request{Prompt: "a shared prompt of some length", MaxTokens: 8, Params: p}
		first, err := s.eng.Submit(context.Background(), &req)
		require.NoError(t, err)
		s.drive(t, 100)
		second, err := s.eng.Submit(context.Background(), &req)
		require.NoError(t, err)
		s.drive(t, 100)
		d1, d2 := readAll(t, first), readAll(t, second)
		require.Equal(t, d1.TokenIDs, d2.TokenIDs)
		require.Equal(t, 0, d1.Usage.CachedPrompt)
		// 31 prompt tokens: 7 full blocks of 4 are cached (the last token is always recomputed).
		require.Equal(t, 28, d2.Usage.CachedPrompt)
		require.Equal(t, uint64(28), s.eng.Snapshot().PrefixHitTokens)
		require.NoError(t, s.eng.Close())
	}
}

// TestAdmissionOneAtATime: program admission (the policy with one ACTIVE
// program) lets one request run at a time; every admission is matched by
// one release, and all three requests run to their length.
func TestAdmissionOneAtATime(t *testing.T) {
	pc := policy.DefaultConfig(policy.BlockAccounting, 1)
	s := newSetup(t, opts{programs: &pc, mbs: 4})
	var streams []*Stream
	for i := range 3 {
		st, err := s.eng.Submit(context.Background(), &Request{Prompt: "abc", MaxTokens: 4, Params: greedy(),
			ProgramID: fmt.Sprint("p", i), ProgramRelease: true})
		require.NoError(t, err)
		streams = append(streams, st)
	}
	for range 200 {
		progressed, err := s.eng.Step()
		require.NoError(t, err)
		require.NoError(t, s.eng.Check())
		require.LessOrEqual(t, s.eng.Snapshot().Running, 1, "program admission allows one at a time")
		if !progressed {
			break
		}
	}
	for _, st := range streams {
		require.Equal(t, FinishLength, readAll(t, st).FinishReason)
	}
	m := s.eng.Snapshot().Programs
	require.Zero(t, m.Waiting+m.Active+m.Paused, "every admission must be matched by one release")
	require.Equal(t, uint64(3), m.Admitted)
	require.Equal(t, uint64(3), m.Released)
	require.NoError(t, s.eng.Close())
}

// TestStress: 1,000 requests with random lengths, stop strings and aborts on
// a KV pool small enough to force preemption; accounting is checked after
// every step; every request ends cleanly; nothing leaks.
func TestStress(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, mode := range []struct {
		name            string
		overlap, charge bool
		n               int
	}{{"overlap", true, false, 1000}, {"plain", false, false, 300}, {"charge-retiring", true, true, 200}} {
		t.Run(mode.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(42, uint64(mode.n)))
			s := newSetup(t, opts{overlap: mode.overlap, charge: mode.charge, mbs: 8, tokens: 48,
				blocks: 40, bs: 4, ctx: 96, eosAfter: 50})
			type sub struct {
				st     *Stream
				cancel context.CancelFunc
				abort  bool
				prompt []int32
				seed   uint64
			}
			var subs []sub
			submit := func() {
				ctx, cancel := context.WithCancel(context.Background())
				n := 1 + rng.IntN(40)
				prompt := make([]byte, n)
				for i := range prompt {
					prompt[i] = byte('a' + rng.IntN(3)) // small alphabet: shared prefixes happen
				}
				var stops []string
				if rng.IntN(3) == 0 {
					stops = []string{string([]byte{byte('a' + rng.IntN(6)), byte('a' + rng.IntN(6))})}
				}
				p := greedy()
				p.Logprobs = rng.IntN(2) == 0
				p.Seed, p.HasSeed = uint64(len(subs)), true
				st, err := s.eng.Submit(ctx, &Request{Prompt: string(prompt), MaxTokens: rng.IntN(60),
					Stop: stops, Params: p, CacheSalt: []string{"", "t1"}[rng.IntN(2)]})
				require.NoError(t, err)
				subs = append(subs, sub{st: st, cancel: cancel, abort: rng.IntN(10) == 0,
					prompt: newByteTokenizer().Encode(string(prompt), true), seed: p.Seed})
			}
			steps := 0
			for len(subs) < mode.n || steps < 5 {
				for k := rng.IntN(4); k > 0 && len(subs) < mode.n; k-- {
					submit()
				}
				// Abort a random earlier request now and then.
				if len(subs) > 0 && rng.IntN(3) == 0 {
					if x := subs[rng.IntN(len(subs))]; x.abort {
						x.cancel()
					}
				}
				_, err := s.eng.Step()
				require.NoError(t, err)
				require.NoError(t, s.eng.Check())
				steps++
			}
			s.drive(t, 100000)
			var fin, ab int
			for _, x := range subs {
				d := readAll(t, x.st)
				switch d.FinishReason {
				case FinishAbort:
					require.True(t, x.abort, "only cancelled requests abort")
					ab++
				case FinishStop, FinishLength:
					fin++
				default:
					t.Fatalf("finish reason %q", d.FinishReason)
				}
				// Output is exact despite preemption, overlap and prefix reuse:
				// every token but a final EOS is what the sim computes for the
				// sequence (EOSAfter restarts its count after a recompute).
				ids := d.TokenIDs
				if n := len(ids); n > 0 && ids[n-1] == testEOS {
					ids = ids[:n-1]
				}
				require.Equal(t, expected(s.runner, x.seed, x.prompt, len(ids)), ids)
				x.cancel()
			}
			m := s.eng.Snapshot()
			require.Equal(t, uint64(fin), m.Finished)
			require.Equal(t, uint64(ab), m.Aborted)
			require.Positive(t, m.Preemptions, "the pool is small enough to force preemption")
			if mode.overlap {
				require.Positive(t, m.Reservations, "futures open blocks under overlap")
			}
			// Every admission's charge (its seat, its blocks) was returned.
			require.Equal(t, 0, m.Running+m.Waiting+m.Retiring+m.KVBlocksUsed+m.SeatsLive+m.SeatsRetiring)
			require.NoError(t, s.eng.Close())
			require.NoError(t, s.eng.Check())
			t.Logf("%s: %d finished, %d aborted, %d preemptions, %d reservations, %d prefix-hit tokens, %d steps",
				mode.name, fin, ab, m.Preemptions, m.Reservations, m.PrefixHitTokens, m.Steps)
		})
	}
	waitGoroutines(t, before)
}

func waitGoroutines(t *testing.T, before int) {
	t.Helper()
	for i := 0; i < 2000 && runtime.NumGoroutine() > before; i++ {
		time.Sleep(time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), before, "goroutine leak")
}

// TestRunLoop drives Run on its own goroutine: concurrent submits, an abort
// by context, and shutdown that aborts what is left and releases everything.
func TestRunLoop(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, ovl := range []bool{false, true} {
		s := newSetup(t, opts{overlap: ovl, clk: clock.Real{}, cost: sim.Fixed(100 * time.Microsecond)})
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.eng.Run(ctx) }()

		ok, err := s.eng.Submit(context.Background(), &Request{Prompt: "fine", MaxTokens: 5, Params: greedy()})
		require.NoError(t, err)
		require.Equal(t, FinishLength, readAll(t, ok).FinishReason)

		rctx, cancelReq := context.WithCancel(context.Background())
		long, err := s.eng.Submit(rctx, &Request{Prompt: "long", IgnoreEOS: true, Params: greedy()})
		require.NoError(t, err)
		_, err = long.Recv(testwait.Ctx(t)) // it is running
		require.NoError(t, err, "waiting for the long request's first token")
		cancelReq()
		require.Equal(t, FinishAbort, readAll(t, long).FinishReason)

		left, err := s.eng.Submit(context.Background(), &Request{Prompt: "left", IgnoreEOS: true, Params: greedy()})
		require.NoError(t, err)
		stop()
		require.NoError(t, testwait.Recv(t, done, "Run to return after its context ended"))
		require.Equal(t, FinishAbort, readAll(t, left).FinishReason)
		_, err = s.eng.Submit(context.Background(), &Request{Prompt: "late", Params: greedy()})
		require.ErrorIs(t, err, ErrClosed)
		require.NoError(t, s.eng.Check())
		m := s.eng.Snapshot()
		require.Equal(t, 0, m.KVBlocksUsed+m.SeatsLive+m.SeatsRetiring)
		require.Equal(t, uint64(2), m.Aborted)
	}
	waitGoroutines(t, before)
}

func TestHistogram(t *testing.T) {
	var h Histogram
	require.Equal(t, time.Duration(0), h.Quantile(0.5))
	for _, d := range []time.Duration{0, 500 * time.Nanosecond, 3 * time.Microsecond, time.Millisecond, -1} {
		h.Observe(d)
	}
	require.Equal(t, uint64(5), h.Count)
	require.Equal(t, uint64(3), h.Buckets[0])
	require.Equal(t, uint64(1), h.Buckets[2]) // [2µs, 4µs)
	require.Equal(t, time.Millisecond, h.Max)
	require.Equal(t, time.Microsecond, h.Quantile(0.5))
	require.Equal(t, time.Millisecond, h.Quantile(1))
	require.Equal(t, (time.Millisecond+3*time.Microsecond+500)/5, h.Mean())
}

// TestBlockSizeOneLongRow: block size 1 (every future token opens a block)
// with rows outgrowing their preallocation.
func TestBlockSizeOneLongRow(t *testing.T) {
	for _, ovl := range []bool{false, true} {
		s := newSetup(t, opts{overlap: ovl, bs: 1, ctx: 700, blocks: 1400, mbs: 2})
		p := greedy()
		p.Seed, p.HasSeed = 3, true
		var streams []*Stream
		for range 2 {
			st, err := s.eng.Submit(context.Background(), &Request{Prompt: "xyz", MaxTokens: 600, IgnoreEOS: true, Params: p})
			require.NoError(t, err)
			streams = append(streams, st)
		}
		for range 5000 {
			progressed, err := s.eng.Step()
			require.NoError(t, err)
			if !progressed {
				break
			}
		}
		require.NoError(t, s.eng.Check())
		want := expected(s.runner, 3, newByteTokenizer().Encode("xyz", true), 600)
		for _, st := range streams {
			require.Equal(t, want, readAll(t, st).TokenIDs)
		}
		if ovl {
			require.Positive(t, s.eng.Snapshot().Reservations)
		} else {
			require.Zero(t, s.eng.Snapshot().Reservations, "no future tokens without overlap")
		}
		require.NoError(t, s.eng.Close())
	}
}

// copyCounter is a sim runner that counts the future tokens it is given.
type copyCounter struct {
	*sim.Runner
	futures int
}

func (c *copyCounter) Execute(b *step.Batch, out *step.Output) error {
	for _, t := range b.Tokens {
		if t == step.FutureToken {
			c.futures++
		}
	}
	return c.Runner.Execute(b, out)
}

// TestFutureOpensBlockWithoutCopy: under overlap, future tokens that open a
// block have their slot reserved in kvpool, so the runner writes their KV
// in place: no extra step runs, and the
// output (which the sim derives from the KV it reads back) is exact.
func TestFutureOpensBlockWithoutCopy(t *testing.T) {
	for _, bs := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("bs=%d", bs), func(t *testing.T) {
			s := newSetup(t, opts{overlap: true, bs: bs})
			cc := &copyCounter{Runner: s.runner}
			eng, err := New(Config{MaxBatchSize: 4, Overlap: true, Clock: s.clock, Model: "test", Seed: 1}, cc, newByteTokenizer())
			require.NoError(t, err)
			prompt := []int32{testBOS, 'x'}
			p := greedy()
			p.Seed, p.HasSeed = 5, true
			st, err := eng.Submit(context.Background(), &Request{PromptTokens: prompt, MaxTokens: 9, IgnoreEOS: true, Params: p})
			require.NoError(t, err)
			for range 50 {
				progressed, err := eng.Step()
				require.NoError(t, err)
				require.NoError(t, eng.Check())
				if !progressed {
					break
				}
			}
			m := eng.Snapshot()
			require.Equal(t, expected(s.runner, 5, prompt, 9), readAll(t, st).TokenIDs)
			require.Equal(t, 8, cc.futures, "every decode after the first used its future token")
			require.Equal(t, uint64(9), m.Steps, "the prefill and 8 decodes, nothing else")
			// Positions 2..9 hold the 8 future inputs; those opening a block:
			require.Equal(t, uint64(9/bs-1/bs), m.Reservations)
			require.NoError(t, eng.Close())
			require.Equal(t, 0, eng.Snapshot().KVBlocksUsed)
			require.NoError(t, eng.Check())
		})
	}
}

// TestSeed004Occupancy reproduces seed 004 on the sim: requests end with a
// stop token (not known in advance), so under overlap each finishing one
// retires for a step. Charging it (BASE) leaves its seat unusable for
// admission and the batch runs short; FIX admits in its place, like the
// plain loop (OVLOFF) does.
func TestSeed004Occupancy(t *testing.T) {
	run := func(ovl, charge bool) (steps uint64, occupancy float64) {
		s := newSetup(t, opts{mbs: 2, overlap: ovl, charge: charge})
		for i := range 24 {
			// A stop token among 6 equally likely ones: lengths vary, so
			// finishes are staggered.
			_, err := s.eng.Submit(context.Background(), &Request{Prompt: fmt.Sprintf("r%02d", i),
				StopTokenIDs: []int32{'a'}, Params: greedy()})
			require.NoError(t, err)
		}
		s.drive(t, 10000)
		m := s.eng.Snapshot()
		require.Equal(t, uint64(24), m.Finished)
		require.NoError(t, s.eng.Close())
		return m.Steps, float64(m.GeneratedTokens) / float64(m.Steps)
	}
	offSteps, offOcc := run(false, false)
	fixSteps, fixOcc := run(true, false)
	baseSteps, baseOcc := run(true, true)
	t.Logf("steps / sampled tokens per step: OVLOFF %d / %.3f, FIX %d / %.3f, BASE %d / %.3f",
		offSteps, offOcc, fixSteps, fixOcc, baseSteps, baseOcc)
	require.Less(t, fixSteps, baseSteps, "charging retiring requests must cost steps")
	require.Greater(t, fixOcc, baseOcc)
}

// TestSubmitCancelledContext: a request whose context is already cancelled
// is aborted at a step boundary soon after (the abort comes from
// context.AfterFunc's goroutine) and releases everything.
func TestSubmitCancelledContext(t *testing.T) {
	s := newSetup(t, opts{overlap: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st, err := s.eng.Submit(ctx, &Request{Prompt: "never", Params: greedy()})
	require.NoError(t, err)
	var d Delta
	// The abort arrives from context.AfterFunc's goroutine.
	stepUntil(t, s, "the cancelled request's finish", func() bool {
		var ok bool
		d, ok, _ = st.TryRecv()
		return ok && d.FinishReason != FinishNone
	})
	require.Equal(t, FinishAbort, d.FinishReason)
	require.NoError(t, s.eng.Close())
	require.Equal(t, 0, s.eng.Snapshot().KVBlocksUsed)
}

// startRecorder is a sim runner that records what each Start carries.
type startRecorder struct {
	*sim.Runner
	starts []step.SeqBatch // History copied
}

func (r *startRecorder) Execute(b *step.Batch, out *step.Output) error {
	for _, sb := range b.Seqs {
		if sb.Start {
			sb.History = append([]int32(nil), sb.History...)
			r.starts = append(r.starts, sb)
		}
	}
	return r.Runner.Execute(b, out)
}

// TestStartNumOutput: a request resumed after preemption starts its seat with
// its generated tokens at the end of History, and NumOutput says how many:
// the runner counts them as output, not prompt, for the penalties.
func TestStartNumOutput(t *testing.T) {
	for _, ovl := range []bool{false, true} {
		t.Run(fmt.Sprintf("overlap=%v", ovl), func(t *testing.T) {
			s := newSetup(t, opts{overlap: ovl, bs: 4, blocks: 10, mbs: 2})
			rec := &startRecorder{Runner: s.runner}
			eng, err := New(Config{MaxBatchSize: 2, Overlap: ovl, Clock: s.clock, Model: "test"}, rec, newByteTokenizer())
			require.NoError(t, err)
			prompts := map[uint64][]int32{}
			var streams []*Stream
			for i := range 2 {
				p := greedy()
				p.Seed, p.HasSeed = uint64(10+i), true
				prompt := []int32{testBOS, 'p', int32('0' + i), 'q', 'r'}
				prompts[p.Seed] = prompt
				st, err := eng.Submit(context.Background(), &Request{PromptTokens: prompt, MaxTokens: 30, IgnoreEOS: true, Params: p})
				require.NoError(t, err)
				streams = append(streams, st)
			}
			for range 500 {
				progressed, err := eng.Step()
				require.NoError(t, err)
				require.NoError(t, eng.Check())
				if !progressed {
					break
				}
			}
			for _, st := range streams {
				require.Len(t, readAll(t, st).TokenIDs, 30)
			}
			require.Positive(t, eng.Snapshot().Preemptions, "10 blocks of 4 cannot hold both")
			resumed := 0
			for _, sb := range rec.starts {
				prompt := prompts[sb.Params.Seed]
				n := int(sb.NumOutput)
				require.GreaterOrEqual(t, n, 0)
				require.Equal(t, prompt, sb.History[:len(sb.History)-n], "the prompt comes first")
				require.Equal(t, append([]int32{}, expected(s.runner, sb.Params.Seed, prompt, n)...),
					sb.History[len(sb.History)-n:], "then exactly the tokens generated so far")
				if n > 0 {
					resumed++
				}
			}
			require.Positive(t, resumed, "a preempted request resumed with output")
			require.NoError(t, eng.Close())
		})
	}
}

// spaceTokenizer is byteTokenizer with SentencePiece's add_space_prefix:
// encoded text gets one leading space.
type spaceTokenizer struct{ *byteTokenizer }

func (t spaceTokenizer) Encode(text string, addBOS bool) []int32 {
	if text != "" {
		text = " " + text
	}
	return t.byteTokenizer.Encode(text, addBOS)
}

// TestLeadingSpace: output after a prompt with no text (just BOS) loses the
// space prefix's one leading space; after prompt text it is kept, and a
// tokenizer without a space prefix never strips.
func TestLeadingSpace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tok    Tokenizer
		prompt []int32
		want   string
	}{
		{"no prefix, BOS only", newByteTokenizer(), []int32{testBOS}, "    "},
		{"prefix, BOS only", spaceTokenizer{newByteTokenizer()}, []int32{testBOS}, "   "},
		{"prefix, control tokens only", spaceTokenizer{newByteTokenizer()}, []int32{testBOS, testEOS}, "   "},
		{"prefix, after prompt text", spaceTokenizer{newByteTokenizer()}, []int32{testBOS, 'x'}, "    "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t, opts{tokMin: ' ', tokMax: ' ' + 1}) // the sim always answers a space
			eng, err := New(Config{MaxBatchSize: 4, Clock: s.clock, Model: "test"}, s.runner, tc.tok)
			require.NoError(t, err)
			st, err := eng.Submit(context.Background(), &Request{PromptTokens: tc.prompt, MaxTokens: 4, IgnoreEOS: true, Params: greedy()})
			require.NoError(t, err)
			for range 20 {
				progressed, err := eng.Step()
				require.NoError(t, err)
				if !progressed {
					break
				}
			}
			d := readAll(t, st)
			require.Equal(t, []int32{' ', ' ', ' ', ' '}, d.TokenIDs, "ids are never altered")
			require.Equal(t, tc.want, d.Text)
			require.NoError(t, eng.Close())
		})
	}
}

// TestContextOnlyFinishingNotCharged: seed 004's context-only traffic (one
// output token each) with max batch 2. Under overlap a request's only token
// is in flight while the next step is planned; its finish is known, so it is
// never planned again and — like a retiring request — must not hold an
// admission slot (FIX). BASE (Ablation.ChargeRetiring) charges it and runs at half
// batch; without overlap (OVLOFF) the question never arises.
func TestContextOnlyFinishingNotCharged(t *testing.T) {
	const n = 8
	run := func(ovl, charge bool) (steps uint64, perStep []int) {
		s := newSetup(t, opts{mbs: 2, overlap: ovl, charge: charge})
		for i := range n {
			_, err := s.eng.Submit(context.Background(), &Request{Prompt: fmt.Sprintf("c%d", i), MaxTokens: 1, Params: greedy()})
			require.NoError(t, err)
		}
		prev := uint64(0)
		for range 4 * n {
			_, err := s.eng.Step()
			require.NoError(t, err)
			require.NoError(t, s.eng.Check())
			m := s.eng.Snapshot()
			perStep = append(perStep, int(m.PromptTokens-prev))
			prev = m.PromptTokens
			if m.Finished == n {
				break
			}
		}
		require.Equal(t, uint64(n), s.eng.Snapshot().Finished)
		require.NoError(t, s.eng.Close())
		return uint64(len(perStep)), perStep // step-loop iterations, empty ones included
	}
	offSteps, _ := run(false, false)
	fixSteps, fixAdm := run(true, false)
	baseSteps, baseAdm := run(true, true)
	t.Logf("steps: OVLOFF %d, FIX %d, BASE %d; prompt tokens admitted per step FIX %v BASE %v", offSteps, fixSteps, baseSteps, fixAdm, baseAdm)
	require.Equal(t, uint64(n/2), offSteps, "OVLOFF: two requests a step")
	require.LessOrEqual(t, fixSteps, offSteps+1, "FIX: two a step, plus the pipeline's last step")
	require.Equal(t, []int{6, 6, 6, 6, 0}, fixAdm, "FIX admits a full batch every step")
	require.GreaterOrEqual(t, baseSteps, 2*offSteps, "BASE: the finishing pair blocks the next admission every other step")
	require.Equal(t, []int{6, 0, 6, 0, 6, 0, 6, 0}, baseAdm)
}
