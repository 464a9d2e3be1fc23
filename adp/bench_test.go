package adp

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/turnstile-llm/turnstile/executor"
)

// BenchmarkLadder reports, side by side, FIX, BASE and OVLOFF throughput
// on the saturated context-only workload (requests per virtual second; one
// step = 1 ms of virtual time) with k penalised ranks, FIX's gain over BASE,
// whether FIX routed exactly as OVLOFF (1 = every per-rank count equal), and
// the same two for FIX with placement that adds retiring work back
// (PlaceRetiring).
func BenchmarkLadder(b *testing.B) {
	for _, dp := range []int{2, 4} {
		for _, k := range []int{1, dp} {
			b.Run(fmt.Sprintf("dp=%d/k=%d", dp, k), func(b *testing.B) {
				var fix, base, off, place float64
				var fixPer, offPer, placePer []uint64
				for b.Loop() {
					fix, fixPer = ladderRate(b, dp, k, modeFIX, Ablation{})
					base, _ = ladderRate(b, dp, k, modeBASE, Ablation{})
					off, offPer = ladderRate(b, dp, k, modeOVLOFF, Ablation{})
					place, placePer = ladderRate(b, dp, k, modeFIX, Ablation{PlaceRetiring: true})
				}
				b.ReportMetric(fix, "FIX-req/vs")
				b.ReportMetric(base, "BASE-req/vs")
				b.ReportMetric(off, "OVLOFF-req/vs")
				b.ReportMetric(100*(fix/base-1), "FIXgain-%")
				b.ReportMetric(equal(fixPer, offPer), "FIX=OVLOFF-routing")
				b.ReportMetric(place, "FIXplace-req/vs")
				b.ReportMetric(equal(placePer, offPer), "FIXplace=OVLOFF-routing")
			})
		}
	}
}

func equal(a, b []uint64) float64 {
	if slices.Equal(a, b) {
		return 1
	}
	return 0
}

// BenchmarkGatherRoute is the per-iteration cost of the gather (every rank
// fills its state, 256 live requests each, 16 programs) plus routing a
// 64 pending requests, at dp = 8; wire=true exchanges the states
// through the gather's wire format (Exchange over Local), as the
// deployment does.
func BenchmarkGatherRoute(b *testing.B) {
	const dp, perRank, placed = 8, 256, 64
	routers := []struct {
		name string
		r    Router
	}{{"LoadBalanced", &LoadBalanced{}}, {"CacheAware", &CacheAware{LoadPermille: 500}}, {"ProgramAware", &ProgramAware{}}}
	for _, rc := range routers {
		for _, onWire := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/wire=%v", rc.name, onWire), func(b *testing.B) {
				ranks := make([]*ctxRank, dp)
				for i := range ranks {
					ranks[i] = newCtxRank(2*perRank, true, false)
					for j := 0; j < perRank; j++ {
						q := &executor.Request{PromptTokens: make([]int32, 64+j%64), ProgramID: fmt.Sprintf("p%d", (i*perRank+j)%(16*dp))}
						q.PromptTokens[0] = int32(j)
						if _, err := ranks[i].Submit(context.Background(), q); err != nil {
							b.Fatal(err)
						}
					}
				}
				reqs := make([]*executor.Request, placed)
				pending := make([]Pending, placed)
				for j := range reqs {
					reqs[j] = &executor.Request{PromptTokens: make([]int32, 32+j), ProgramID: fmt.Sprintf("p%d", j%40)}
					pending[j] = Pending{Tokens: 32 + j, Program: reqs[j].ProgramID}
				}
				states := make([]RankState, dp)
				gathered := make([]RankState, dp)
				var x Exchange
				var l Loads
				out := make([]int, placed)
				var need Needs
				if wr, ok := rc.r.(MatchReader); ok {
					need = wr.Reads()
				}
				b.ReportAllocs()
				cpu0 := cpuTime()
				for b.Loop() {
					for i, r := range ranks {
						r.State(&states[i])
					}
					g := states
					if onWire {
						if err := x.Counts(Local{}, states, gathered); err != nil {
							b.Fatal(err)
						}
						g = gathered
					}
					ComputeLoads(g, Ablation{}, &l)
					if need.Hits || need.Resident {
						for i, r := range ranks {
							r.Match(&states[i], reqs[:min(len(reqs), l.Admit)], need)
						}
						if onWire {
							if err := x.Matches(Local{}, states, gathered, placed); err != nil {
								b.Fatal(err)
							}
						}
					}
					rc.r.Route(&l, pending[:min(len(pending), l.Admit)], out[:min(len(pending), l.Admit)])
				}
				// CPU time, not wall time: this machine is shared and the wall
				// clock counts other processes' turns.
				b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N)/1e3, "cpu-µs/op")
			})
		}
	}
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
