package policy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzLifecycle drives a Controller over a small real pool with an
// arbitrary sequence of engine calls (four programs in two prefix families)
// and checks both after every call; at the end every program is released
// and nothing may stay pinned or charged.
func FuzzLifecycle(f *testing.F) {
	f.Add([]byte{0, 0, 10, 7, 0, 1, 1, 8, 3, 0, 5, 0, 1, 12, 7, 1, 5, 3, 1})
	f.Add([]byte{1, 0, 0, 40, 0, 1, 40, 0, 2, 40, 5, 7, 0, 7, 1, 1, 0, 9, 3, 0, 5, 6, 200, 5, 0, 0, 30, 5})
	f.Add([]byte{2, 0, 3, 60, 7, 3, 0, 2, 60, 5, 3, 3, 6, 40, 5, 4, 2, 6, 90, 5, 5})
	f.Add([]byte{1, 0, 0, 50, 0, 1, 50, 0, 2, 50, 0, 3, 50, 5, 7, 0, 7, 1, 7, 2, 1, 0, 9, 1, 1, 9, 2, 0, 3, 3, 0, 5, 3, 1, 5})
	f.Fuzz(lifecycle)
}

func lifecycle(t *testing.T, ops []byte) {
	{
		if len(ops) == 0 {
			return
		}
		cfg := DefaultConfig(Accounting(1+ops[0]%3), 3)
		cfg.Buffer, cfg.Reserve = 16, 32
		cfg.Lease, cfg.ForcedResume, cfg.AgingTau = 10*time.Minute, 5*time.Minute, 30*time.Second
		r := newRig(t, cfg, 64) // 1,024 tokens
		// Contexts stay within the pool: a longer one is the engine's
		// "length" finish, not the policy's business.
		const progs, maxCtx = 4, 1000
		var (
			open [progs]bool    // a turn was submitted and has not ended
			ctx  [progs][]int32 // each program's context
			next = int32(1 << 30)
		)
		ids := [progs]string{"p0", "p1", "p2", "p3"}
		for k := range progs { // families: p0,p1 share 3 blocks, p2,p3 share 3 blocks
			ctx[k] = context(k, 0, 0)
			for j := range 48 {
				ctx[k] = append(ctx[k], int32(10_000*(k/2+1)+j))
			}
		}
		fresh := func(n int) []int32 {
			out := make([]int32, n)
			for i := range out {
				next--
				out[i] = next
			}
			return out
		}
		start := func(k int) {
			if info, ok := r.c.Program(ids[k]); !ok || !open[k] || info.State != StateActive || info.Running {
				return
			}
			r.admit(ids[k], ctx[k])
		}
		arg := func(i int) int {
			if i < len(ops) {
				return int(ops[i])
			}
			return 0
		}
		for i := 1; i < len(ops); i += 2 {
			op, k := ops[i]%8, arg(i+1)%progs
			id := ids[k]
			_, running := r.seqs[id]
			switch op {
			case 0: // a turn arrives (tool output appended) and is submitted
				if open[k] {
					continue
				}
				if n := arg(i+1)/progs%64 + 1; len(ctx[k])+n <= maxCtx {
					ctx[k] = append(ctx[k], fresh(n)...)
				}
				open[k] = true
				r.admit(id, ctx[k])
			case 1: // the running turn generates tokens
				if n := arg(i+1)%40 + 1; running && len(ctx[k])+n <= maxCtx {
					toks := fresh(n)
					if r.grow(id, toks) {
						ctx[k] = append(ctx[k], toks...)
					}
				}
			case 2: // the engine preempts it
				if running {
					require.NoError(t, r.c.Preempted(id))
					r.pool.Release(r.seqs[id])
					delete(r.seqs, id)
					r.check()
				}
			case 3: // the turn ends (finished, aborted or withdrawn)
				if open[k] {
					r.end(id)
					open[k] = false
				}
			case 4: // the program is released
				if r.c.Release(id) {
					open[k] = false
				}
				if seq, ok := r.seqs[id]; ok {
					r.pool.Release(seq)
					delete(r.seqs, id)
				}
				r.check()
			case 5:
				r.tick()
			case 6:
				r.clk.advance(time.Duration(arg(i+1)) * 10 * time.Second)
			case 7: // the engine retries an admitted turn
				start(k)
			}
			require.NoError(t, r.pool.Check())
			for k := range progs {
				info, ok := r.c.Program(ids[k])
				if !ok {
					require.False(t, open[k], "program %s forgotten with a turn open", ids[k])
					continue
				}
				require.Equal(t, info.Running, hasSeq(r, ids[k]))
				require.False(t, info.Pinned && info.State != StateActive)
			}
		}
		for k := range progs {
			r.c.Release(ids[k])
			if seq, ok := r.seqs[ids[k]]; ok {
				r.pool.Release(seq)
				delete(r.seqs, ids[k])
			}
			r.check()
		}
		r.drained()
	}
}

func hasSeq(r *rig, id string) bool { _, ok := r.seqs[id]; return ok }
