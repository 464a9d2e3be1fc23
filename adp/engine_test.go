package adp

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/turnstile-llm/turnstile/internal/testwait"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/internal/clock"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/sim"
	"github.com/turnstile-llm/turnstile/step"
)

// byteTok is a byte-level tokenizer for tests: ids 0..255 are bytes, 256 is
// BOS, 257 is EOS.
type byteTok struct{}

func (byteTok) Encode(text string, addBOS bool) []int32 {
	var out []int32
	if addBOS {
		out = append(out, 256)
	}
	for i := 0; i < len(text); i++ {
		out = append(out, int32(text[i]))
	}
	return out
}
func (byteTok) Piece(id int32) []byte {
	if id >= 0 && id < 256 {
		return []byte{byte(id)}
	}
	return nil
}
func (byteTok) BOS() int32     { return 256 }
func (byteTok) EOS() int32     { return 257 }
func (byteTok) VocabSize() int { return 258 }

const stepTime = time.Millisecond

// engineRanks builds dp engines on simulated runners, each with its own
// virtual clock; a dummy step spends one step's time on it.
func engineRanks(t testing.TB, dp int, cfg executor.Config, eosAfter int) ([]Rank, []*EngineRank, []*clock.Virtual) {
	t.Helper()
	var ranks []Rank
	var ers []*EngineRank
	var clocks []*clock.Virtual
	chains := &Chains{}
	for i := 0; i < dp; i++ {
		vc := clock.NewVirtual(time.Unix(0, 0))
		seats := cfg.MaxBatchSize
		if cfg.Overlap {
			seats *= 2
		}
		r, err := sim.New(sim.Config{
			Capacity: step.Capacity{Seats: seats, KVBlocks: 256, BlockSize: 4, MaxContext: 128, MaxBatchTokens: 512, Vocab: 258},
			Clock:    vc, Cost: sim.Fixed(stepTime), Seed: 7, EOS: 257, EOSAfter: eosAfter, TokenMin: 32, TokenMax: 127,
		})
		require.NoError(t, err)
		c := cfg
		c.Clock = vc
		c.Model = "m"
		e, err := executor.New(c, r, byteTok{})
		require.NoError(t, err)
		er := NewEngineRank(e, func() error { return vc.Sleep(context.Background(), stepTime) }, chains)
		ranks = append(ranks, er)
		ers = append(ers, er)
		clocks = append(clocks, vc)
	}
	return ranks, ers, clocks
}

// TestEngineRanks runs mixed traffic (random prompts and lengths, EOS
// finishes that retire under overlap, shared prefixes, programs) through
// real engines with every router, checking the deployment's and every
// engine's accounting after every iteration, and that every request ends.
func TestEngineRanks(t *testing.T) {
	routers := []struct {
		name string
		mk   func() Router
	}{{"LoadBalanced", func() Router { return &LoadBalanced{} }},
		{"CacheAware", func() Router { return &CacheAware{LoadPermille: 200} }},
		{"ProgramAware", func() Router { return &ProgramAware{} }}}
	for _, rc := range routers {
		for _, overlap := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/overlap=%v", rc.name, overlap), func(t *testing.T) {
				const dp = 3
				ranks, ers, _ := engineRanks(t, dp, executor.Config{MaxBatchSize: 4, Overlap: overlap}, 5)
				d, err := New(Config{Router: rc.mk()}, ranks)
				require.NoError(t, err)
				rng := rand.New(rand.NewPCG(1, 2))
				var hs []*Handle
				prefix := "shared system prompt for every program: "
				for burst := 0; burst < 6; burst++ {
					for i := 0; i < 20; i++ {
						p := sampling.DefaultParams()
						text := fmt.Sprintf("%s%d %s", prefix, i%5, string(make([]byte, rng.IntN(20))))
						h, err := d.Submit(context.Background(), &executor.Request{
							Prompt: text, MaxTokens: 1 + rng.IntN(8), Params: p, ProgramID: fmt.Sprintf("prog%d", rng.IntN(6)),
						})
						require.NoError(t, err)
						hs = append(hs, h)
					}
					for i := 0; i < 3; i++ {
						_, err := d.Step()
						require.NoError(t, err)
						require.NoError(t, d.Check())
						for _, er := range ers {
							require.NoError(t, er.Engine().Check())
						}
					}
				}
				for it := 0; ; it++ {
					require.Less(t, it, 2000, "the deployment must drain")
					idle, err := d.Step()
					require.NoError(t, err)
					require.NoError(t, d.Check())
					for _, er := range ers {
						require.NoError(t, er.Engine().Check())
					}
					if idle {
						break
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				for _, h := range hs {
					s, err := h.Wait(ctx)
					require.NoError(t, err)
					out, err := s.ReadAll(ctx)
					require.NoError(t, err)
					require.Contains(t, []executor.FinishReason{executor.FinishStop, executor.FinishLength}, out.FinishReason)
					require.GreaterOrEqual(t, out.Usage.Completion, 1)
				}
				m := d.Snapshot()
				require.Equal(t, uint64(len(hs)), m.Routed)
				for i, r := range m.Ranks {
					require.Positive(t, r.Routed, "rank %d got no work", i)
					require.Equal(t, 0, r.Active+r.Waiting+r.Retiring, "rank %d idle at the end", i)
				}
				require.NoError(t, d.Close())
				for _, er := range ers {
					require.NoError(t, er.Engine().Close())
				}
			})
		}
	}
}

// runEngineLadder runs the context-only ladder on real engines and returns
// requests per virtual second, the per-rank routed counts and rank 0's
// routing share at the last saturated gather.
func runEngineLadder(t testing.TB, dp int, m mode) (float64, []uint64, [2]int) {
	ranks, ers, clocks := engineRanks(t, dp, executor.Config{MaxBatchSize: 2, Overlap: m.overlap, Ablation: executor.Ablation{ChargeRetiring: m.charge}}, 0)
	d, err := New(Config{Ablation: Ablation{Engine: executor.Ablation{ChargeRetiring: m.charge}}}, ranks)
	require.NoError(t, err)
	total := 100 * dp
	var hs []*Handle
	for i := 0; i < total; i++ {
		h, err := d.Submit(context.Background(), &executor.Request{
			PromptTokens: []int32{256, int32(32 + i%90), 40, 41, 42, 43, 44}, MaxTokens: 1, Params: sampling.DefaultParams()})
		require.NoError(t, err)
		hs = append(hs, h)
	}
	var share [2]int
	for it := 0; ; it++ {
		require.Less(t, it, 100*total, "stepped %d times waiting for the deployment to drain", it)
		q := d.Snapshot().Queued
		idle, err := d.Step()
		require.NoError(t, err)
		if q >= 2*dp {
			share = routedShare(d)
		}
		if idle {
			break
		}
	}
	var per []uint64
	for _, r := range d.Snapshot().Ranks {
		per = append(per, r.Routed)
	}
	require.NoError(t, d.Close())
	for _, er := range ers {
		require.NoError(t, er.Engine().Check())
		require.NoError(t, er.Engine().Close())
	}
	return float64(total) / clocks[0].Elapsed().Seconds(), per, share
}

// TestEngineLadder runs seed 004's ladder on real engines with simulated
// runners: rank 0's share is on a rung under every arm.
func TestEngineLadder(t *testing.T) {
	for _, dp := range []int{2, 4} {
		routed := map[string][]uint64{}
		for _, m := range []mode{modeBASE, modeFIX, modeOVLOFF} {
			rate, per, share := runEngineLadder(t, dp, m)
			t.Logf("dp=%d %s: %.0f req/vs, per-rank %v, rank-0 share %d/%d", dp, m.name, rate, per, share[0], share[1])
			require.True(t, onRung(dp, share[0], share[1]), "dp=%d %s: share %d/%d", dp, m.name, share[0], share[1])
			routed[m.name] = per
		}
		require.Equal(t, routed["OVLOFF"], routed["FIX"], "dp=%d: FIX's per-rank counts equal OVLOFF's", dp)
	}
}

// BenchmarkEngineLadder is BenchmarkLadder on real engines with simulated
// runners (1 ms per step, virtual time): requests per virtual second for
// each arm, side by side.
func BenchmarkEngineLadder(b *testing.B) {
	for _, dp := range []int{2, 4} {
		b.Run(fmt.Sprintf("dp=%d", dp), func(b *testing.B) {
			var fix, base, off float64
			same := 1.0
			for b.Loop() {
				var fixPer, offPer []uint64
				fix, fixPer, _ = runEngineLadder(b, dp, modeFIX)
				base, _, _ = runEngineLadder(b, dp, modeBASE)
				off, offPer, _ = runEngineLadder(b, dp, modeOVLOFF)
				for i := range fixPer {
					if fixPer[i] != offPer[i] {
						same = 0
					}
				}
			}
			b.ReportMetric(fix, "FIX-req/vs")
			b.ReportMetric(base, "BASE-req/vs")
			b.ReportMetric(off, "OVLOFF-req/vs")
			b.ReportMetric(100*(fix/base-1), "FIXgain-%")
			b.ReportMetric(same, "FIX=OVLOFF-routing")
		})
	}
}

// TestEngineRefuses: a request the rank's engine refuses (a token outside
// its vocabulary) fails its handle with an error naming the rank and the
// field, is counted as refused, and does not disturb the rest.
func TestEngineRefuses(t *testing.T) {
	ranks, ers, _ := engineRanks(t, 2, executor.Config{MaxBatchSize: 2, Overlap: true}, 0)
	d, err := New(Config{}, ranks)
	require.NoError(t, err)
	bad, err := d.Submit(context.Background(), &executor.Request{PromptTokens: []int32{1, 9999}, MaxTokens: 1, Params: sampling.DefaultParams()})
	require.NoError(t, err)
	good, err := d.Submit(context.Background(), &executor.Request{PromptTokens: []int32{1, 2}, MaxTokens: 1, Params: sampling.DefaultParams()})
	require.NoError(t, err)
	for it := 0; ; it++ {
		require.Less(t, it, 100, "stepped %d times waiting for the deployment to go idle", it)
		idle, err := d.Step()
		require.NoError(t, err)
		require.NoError(t, d.Check())
		if idle {
			break
		}
	}
	_, err = bad.Wait(testwait.Ctx(t))
	require.ErrorContains(t, err, "adp: rank 0 refused the request")
	require.ErrorContains(t, err, "prompt_tokens[1]: token 9999")
	s, err := good.Wait(testwait.Ctx(t))
	require.NoError(t, err, "waiting for the good request's handle")
	out, err := s.ReadAll(testwait.Ctx(t))
	require.NoError(t, err, "reading the good request's stream")
	require.Equal(t, executor.FinishLength, out.FinishReason)
	m := d.Snapshot()
	require.Equal(t, uint64(1), m.Refused)
	require.Equal(t, uint64(1), m.Routed)
	require.NoError(t, d.Close())
	for _, er := range ers {
		require.NoError(t, er.Engine().Close())
	}
}

// TestEngineRetiringTornDownBeforeIdle: on real engines, a request that
// ends with EOS under overlap retires for one step; the deployment keeps
// stepping until that teardown and only then blocks, so no seat is left
// retiring while it waits.
func TestEngineRetiringTornDownBeforeIdle(t *testing.T) {
	ranks, ers, _ := engineRanks(t, 2, executor.Config{MaxBatchSize: 2, Overlap: true}, 1)
	d, err := New(Config{}, ranks)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	s, err := d.SubmitStream(ctx, &executor.Request{PromptTokens: []int32{256, 50, 51, 52, 53}, MaxTokens: 8, Params: sampling.DefaultParams()})
	require.NoError(t, err)
	out, err := s.ReadAll(ctx)
	require.NoError(t, err)
	require.Equal(t, executor.FinishStop, out.FinishReason, "EOS: a finish seen only when its step is processed")
	// The deployment may have blocked once before the request arrived, so
	// an idle wait alone does not mark the end: wait for it together with
	// every rank's teardown. A deployment that blocked with the seat still
	// retiring would never step again and this would time out.
	require.Eventually(t, func() bool {
		if d.Snapshot().IdleWaits == 0 {
			return false
		}
		for _, er := range ers {
			if em := er.Engine().Snapshot(); em.Retiring != 0 || em.SeatsRetiring != 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond)
	m := d.Snapshot()
	stop()
	require.NoError(t, testwait.Recv(t, done, "Run to return after its context ended"))
	for i, er := range ers {
		em := er.Engine().Snapshot()
		require.Zero(t, em.Retiring, "rank %d", i)
		require.Zero(t, em.SeatsRetiring, "rank %d: torn down before the deployment blocked", i)
		require.Zero(t, em.SeatsLive, "rank %d", i)
		require.NoError(t, er.Engine().Check())
		require.NoError(t, er.Engine().Close())
	}
	require.Equal(t, uint64(1), m.Ranks[0].GathersRetiring, "rank 0 held the retiring request at one gather")
}

// BenchmarkGatherRouteEngine is the gather and placement of one iteration on
// real engines: dp = 8 engines each running 256 requests (max batch 320, so
// 64 per rank may enter), 64 queued requests placed; for the match readers
// every rank matches the placed requests (prompts hashed once, shared through
// Chains) against its KV pool, or counts its programs.
func BenchmarkGatherRouteEngine(b *testing.B) {
	const dp, perRank, placed = 8, 256, 64
	engines := make([]*EngineRank, dp)
	chains := &Chains{}
	for i := range engines {
		vc := clock.NewVirtual(time.Unix(0, 0))
		r, err := sim.New(sim.Config{
			Capacity: step.Capacity{Seats: 640, KVBlocks: 4096, BlockSize: 16, MaxContext: 1024, MaxBatchTokens: 32768, Vocab: 258},
			Clock:    vc, Seed: 7, EOS: 257, TokenMin: 32, TokenMax: 127,
		})
		if err != nil {
			b.Fatal(err)
		}
		e, err := executor.New(executor.Config{MaxBatchSize: 320, Overlap: true, Clock: vc, Model: "m"}, r, byteTok{})
		if err != nil {
			b.Fatal(err)
		}
		for j := 0; j < perRank; j++ {
			p := make([]int32, 64)
			for k := range p {
				p[k] = int32(32 + (i*perRank+j+k)%90)
			}
			if _, err := e.Submit(context.Background(), &executor.Request{PromptTokens: p, MaxTokens: 900,
				Params: sampling.DefaultParams(), ProgramID: fmt.Sprintf("p%d", j%32)}); err != nil {
				b.Fatal(err)
			}
		}
		for k := 0; k < 4; k++ {
			if _, err := e.Step(); err != nil {
				b.Fatal(err)
			}
		}
		engines[i] = NewEngineRank(e, nil, chains)
	}
	reqs := make([]*executor.Request, placed)
	pending := make([]Pending, placed)
	for j := range reqs {
		p := make([]int32, 48+j)
		for k := range p {
			p[k] = int32(32 + (j+k)%90)
		}
		reqs[j] = &executor.Request{PromptTokens: p, Params: sampling.DefaultParams(), ProgramID: fmt.Sprintf("p%d", j%40)}
		pending[j] = Pending{Tokens: len(p), Program: reqs[j].ProgramID}
	}
	routers := []struct {
		name string
		r    Router
	}{{"LoadBalanced", &LoadBalanced{}}, {"CacheAware", &CacheAware{LoadPermille: 500}}, {"ProgramAware", &ProgramAware{}}}
	for _, rc := range routers {
		b.Run(rc.name, func(b *testing.B) {
			var need Needs
			if wr, ok := rc.r.(MatchReader); ok {
				need = wr.Reads()
			}
			states := make([]RankState, dp)
			var l Loads
			out := make([]int, placed)
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				for i, r := range engines {
					r.State(&states[i])
				}
				ComputeLoads(states, Ablation{}, &l)
				n := min(placed, l.Admit)
				chains.pending = chains.pending[:0] // new pending requests every iteration: hash them
				if need.Hits || need.Resident {
					for i, r := range engines {
						r.Match(&states[i], reqs[:n], need)
					}
				}
				rc.r.Route(&l, pending[:n], out[:n])
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N)/1e3, "cpu-µs/op")
			if l.Admit != dp*(320-perRank) {
				b.Fatalf("admit %d, want %d", l.Admit, dp*(320-perRank))
			}
		})
	}
	for _, r := range engines {
		_ = r.Engine().Close()
	}
}

// TestEngineCacheAwareHit: after a prompt ran on rank 1, the KV-aware router
// sends a request sharing its prefix to rank 1 (a real kvpool hit through the
// shared chains), while the default router sends it to the tie's lower
// index, rank 0.
func TestEngineCacheAwareHit(t *testing.T) {
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(40 + i)
	}
	for _, c := range []struct {
		name string
		r    Router
		want int
	}{{"CacheAware", &CacheAware{}, 1}, {"LoadBalanced", &LoadBalanced{}, 0}} {
		t.Run(c.name, func(t *testing.T) {
			ranks, ers, _ := engineRanks(t, 2, executor.Config{MaxBatchSize: 2, Overlap: true}, 0)
			// Warm rank 1's cache directly, then let it go idle.
			warm, err := ers[1].Submit(context.Background(), &executor.Request{PromptTokens: prompt, MaxTokens: 1, Params: sampling.DefaultParams()})
			require.NoError(t, err)
			for i := 0; i < 4; i++ {
				_, err := ers[1].Step()
				require.NoError(t, err)
			}
			_, err = warm.ReadAll(testwait.Ctx(t))
			require.NoError(t, err, "reading the warm-up request")

			var s RankState
			ers[1].State(&s)
			q := &executor.Request{PromptTokens: append(append([]int32(nil), prompt...), 7, 8, 9), MaxTokens: 1, Params: sampling.DefaultParams()}
			ers[1].Match(&s, []*executor.Request{q}, Needs{Hits: true})
			require.Equal(t, []int{40}, s.Hits, "ten full blocks of 4 cached on rank 1")
			ers[0].Match(&s, []*executor.Request{q}, Needs{Hits: true})
			require.Equal(t, []int{0}, s.Hits)

			d, err := New(Config{Router: c.r}, ranks)
			require.NoError(t, err)
			h, err := d.Submit(context.Background(), q)
			require.NoError(t, err)
			_, err = d.Step()
			require.NoError(t, err)
			require.Equal(t, c.want, h.Rank())
			require.NoError(t, d.Close())
			for _, er := range ers {
				require.NoError(t, er.Engine().Close())
			}
		})
	}
}
