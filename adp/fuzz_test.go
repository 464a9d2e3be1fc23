package adp

import (
	"fmt"
	"testing"

	"github.com/turnstile-llm/turnstile/executor"
)

// FuzzRoute builds rank states and pending requests from bytes and checks every
// router's contract: placements only on ranks with room and never past it,
// every request placed when admission allows, Room never negative, and the
// same inputs give the same assignment.
func FuzzRoute(f *testing.F) {
	f.Add([]byte{2, 2, 0, 1, 8, 2, 1, 0, 8, 4, 8, 8, 8, 8}, uint8(0))
	f.Add([]byte{4, 2, 0, 2, 8, 2, 1, 1, 8, 2, 0, 0, 9, 2, 2, 0, 1, 6, 30, 1, 7, 200}, uint8(3))
	f.Add([]byte{8, 255, 7, 3, 1, 0, 0, 0, 0, 64, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, flags uint8) {
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			v := int(data[0])
			data = data[1:]
			return v
		}
		dp := next()%8 + 1
		states := make([]RankState, dp)
		for i := range states {
			s := &states[i]
			s.Capacity = next()%16 + 1
			s.Active, s.Waiting, s.Retiring = next()%9, next()%5, next()%9
			tok := next()%64 + 1
			s.ActiveTokens, s.WaitingTokens, s.RetiringTokens = s.Active*tok, s.Waiting*tok, s.Retiring*tok
		}
		n := next() % 40
		pending := make([]Pending, n)
		for j := range pending {
			pending[j] = Pending{Tokens: next() + 1, Program: fmt.Sprintf("p%d", next()%5)}
		}
		for i := range states {
			for j := range pending {
				states[i].Hits = append(states[i].Hits, min(next(), pending[j].Tokens))
				states[i].Resident = append(states[i].Resident, next()%3 == 0)
			}
		}
		p := Ablation{Engine: executor.Ablation{ChargeRetiring: flags&1 != 0}, PlaceRetiring: flags&2 != 0}
		routers := []func() Router{
			func() Router { return &LoadBalanced{} },
			func() Router { return &CacheAware{LoadPermille: int64(flags) * 10} },
			func() Router { return &ProgramAware{} },
		}
		for ri, mk := range routers {
			var l Loads
			ComputeLoads(states, p, &l)
			room := append([]int(nil), l.Room...)
			m := min(n, l.Admit)
			out := make([]int, m)
			mk().Route(&l, pending[:m], out)
			placed := make([]int, dp)
			for j, r := range out {
				if r < -1 || r >= dp {
					t.Fatalf("router %d: request %d placed on rank %d of %d", ri, j, r, dp)
				}
				if r == -1 {
					t.Fatalf("router %d: request %d unplaced with %d admitted", ri, j, m)
				}
				placed[r]++
			}
			for i := range placed {
				if placed[i] > room[i] {
					t.Fatalf("router %d: rank %d took %d with room %d", ri, i, placed[i], room[i])
				}
				if l.Room[i] != room[i]-placed[i] {
					t.Fatalf("router %d: rank %d room %d after %d placed from %d", ri, i, l.Room[i], placed[i], room[i])
				}
			}
			var l2 Loads
			ComputeLoads(states, p, &l2)
			out2 := make([]int, m)
			mk().Route(&l2, pending[:m], out2)
			for j := range out {
				if out[j] != out2[j] {
					t.Fatalf("router %d: not deterministic at request %d: %d then %d", ri, j, out[j], out2[j])
				}
			}
		}
	})
}
