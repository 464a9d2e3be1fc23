package mpi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/adp"
)

// The gather point across processes: each MPI process reports one rank's
// state, the states travel as adp's fixed-size rows (adp.Exchange over
// this package's World, which satisfies adp.Collective), and every process
// runs the same routers on the same gathered states. Placements must agree
// on every process and equal the one-process placement (adp.Local) of the
// same states.

// gatherPending is how many pending requests every rank routes.
const gatherPending = 12

// rankStateFor is rank r's deterministic state at iteration it: loads that
// differ per rank and per iteration, cache hits and residencies for the
// pending requests.
func rankStateFor(r, it int) adp.RankState {
	s := adp.RankState{Capacity: 6 + r%3, Active: (r*7 + it) % 5, ActiveTokens: 100*(r+1) + 37*it,
		Waiting: (r + it) % 2, WaitingTokens: 13 * ((r + it) % 2), Retiring: (r + 2*it) % 3, RetiringTokens: 9 * ((r + 2*it) % 3)}
	for j := range gatherPending {
		s.Hits = append(s.Hits, ((r+1)*(j+it))%5*16)
		s.Resident = append(s.Resident, (r+j+it)%4 == 0)
	}
	return s
}

// pendingFor is the pending requests at iteration it.
func pendingFor(it int) []adp.Pending {
	p := make([]adp.Pending, gatherPending)
	for j := range p {
		p[j] = adp.Pending{Tokens: 20 + (j*11+it)%50, Program: fmt.Sprintf("p%d", (j+it)%5)}
	}
	return p
}

// routeAll gathers local (this process's ranks) through c into size·len(local)
// ranks and routes the pending requests with each router for 5 iterations; it
// returns a hash of every placement.
func routeAll(t testing.TB, c adp.Collective, local func(it int) []adp.RankState, ranks int) string {
	t.Helper()
	var x adp.Exchange
	all := make([]adp.RankState, ranks)
	h := sha256.New()
	for it := range 5 {
		l := local(it)
		require.NoError(t, x.Counts(c, l, all))
		require.NoError(t, x.Matches(c, l, all, gatherPending))
		for _, r := range []adp.Router{&adp.LoadBalanced{}, &adp.CacheAware{LoadPermille: 500}, &adp.ProgramAware{}} {
			var loads adp.Loads
			adp.ComputeLoads(all, adp.Ablation{}, &loads)
			pending := pendingFor(it)
			n := min(len(pending), loads.Admit)
			out := make([]int, n)
			r.Route(&loads, pending[:n], out)
			fmt.Fprintf(h, "%d %T %v;", it, r, out)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

var placementLine = regexp.MustCompile(`(?m)^rank (\d+) placements ([0-9a-f]+)$`)

// TestMPIGatherRoute: 1, 2 and 4 processes agree on every placement, and
// agree with one process holding every rank.
func TestMPIGatherRoute(t *testing.T) {
	mpirunPath(t)
	for _, np := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			want := routeAll(t, adp.Local{}, func(it int) []adp.RankState {
				s := make([]adp.RankState, np)
				for r := range s {
					s[r] = rankStateFor(r, it)
				}
				return s
			}, np)
			out, err := runMPI(t, np, "gather-route")
			require.NoError(t, err, "mpirun -np %d:\n%s", np, out)
			m := placementLine.FindAllStringSubmatch(out, -1)
			require.Len(t, m, np, "every rank reports its placements:\n%s", out)
			for _, l := range m {
				require.Equal(t, want, l[2], "rank %s placed differently from the one-process gather:\n%s", l[1], out)
			}
		})
	}
}

// gatherRouteWorker is one process's side of TestMPIGatherRoute.
func gatherRouteWorker(t *testing.T, w *World) {
	hash := routeAll(t, w, func(it int) []adp.RankState { return []adp.RankState{rankStateFor(w.Rank(), it)} }, w.Size())
	fmt.Printf("rank %d placements %s\n", w.Rank(), hash)
}

// The compiler checks what the doc says: World is an adp.Comm (and so an
// adp.Collective).
var _ adp.Comm = (*World)(nil)

// BenchmarkGatherRoute is one iteration of the gather point across 2 and 4
// MPI processes, one rank each: the counts' allgather, the match
// allgather and LoadBalanced routing of gatherPending pending requests,
// timed on rank 0 over benchAllgatherIters iterations (ns/op). local is
// the same iteration in one process (adp.Local), measured here for the
// side-by-side figure.
func BenchmarkGatherRoute(b *testing.B) {
	mpirunPath(b)
	b.Run("local", func(b *testing.B) {
		var x adp.Exchange
		local := make([]adp.RankState, 2)
		for r := range local {
			local[r] = rankStateFor(r, 0)
		}
		all := make([]adp.RankState, 2)
		pending := pendingFor(0)
		out := make([]int, len(pending))
		var loads adp.Loads
		router := &adp.LoadBalanced{}
		b.ReportAllocs()
		for b.Loop() {
			if err := x.Counts(adp.Local{}, local, all); err != nil {
				b.Fatal(err)
			}
			if err := x.Matches(adp.Local{}, local, all, gatherPending); err != nil {
				b.Fatal(err)
			}
			adp.ComputeLoads(all, adp.Ablation{}, &loads)
			n := min(len(pending), loads.Admit)
			router.Route(&loads, pending[:n], out[:n])
		}
	})
	for _, np := range []int{2, 4} {
		var res map[string]float64
		b.Run(fmt.Sprintf("np%d", np), func(b *testing.B) {
			if res == nil {
				res = runBench(b, np, "bench-gather-route", benchAllgatherIters)
			}
			ns, ok := res["gather-route"]
			require.True(b, ok, "rank 0 reported no gather-route figure: %v", res)
			b.ReportMetric(ns, "ns/op")
			b.ReportMetric(ns/1e3, "us/iteration")
		})
	}
}

// benchGatherRouteWorker times one gather-and-route iteration.
func benchGatherRouteWorker(t *testing.T, w *World) {
	var x adp.Exchange
	local := []adp.RankState{rankStateFor(w.Rank(), 0)}
	all := make([]adp.RankState, w.Size())
	pending := pendingFor(0)
	out := make([]int, len(pending))
	var loads adp.Loads
	router := &adp.LoadBalanced{}
	ns := timeIters(t, w, iters(t), func() error {
		if err := x.Counts(w, local, all); err != nil {
			return err
		}
		if err := x.Matches(w, local, all, gatherPending); err != nil {
			return err
		}
		adp.ComputeLoads(all, adp.Ablation{}, &loads)
		n := min(len(pending), loads.Admit)
		router.Route(&loads, pending[:n], out[:n])
		return nil
	})
	if w.Rank() == 0 {
		fmt.Printf("bench gather-route %.1f\n", ns)
	}
}
