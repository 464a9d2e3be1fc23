package policy

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSeedAdmission: seed 000's capacity (468,736 tokens = 29,296 blocks ×
// 16), 32 programs whose 16,384-token contexts (1,024 blocks) share their
// first 921 blocks (14,736 tokens, 90%) and own 103 blocks (1,648 tokens).
// Programs arrive one by one; each admitted turn is prefilled at once.
//
//	A: each ACTIVE program costs 16,384 + 100 = 16,484 tokens.
//	   28 × 16,484 = 461,552 ≤ 468,736 < 478,036 = 29 × 16,484  → 28 admitted.
//	B: the first costs its 1,024 blocks; every later one hits the shared 921
//	   and is estimated, then charged, 103 blocks; plus 512 reserve each:
//	   (921 + 32 × 103) × 16 + 32 × 512 = 67,472 + 16,384 = 83,856 ≤ 468,736 → 32.
//	C: A's charge against (0.95 − 0.10) × 468,736 = 398,425.6:
//	   24 × 16,484 = 395,616 ≤ 398,425.6 < 412,100 = 25 × 16,484  → 24.
func TestSeedAdmission(t *testing.T) {
	const (
		programs = 32
		total    = 16_384
		shared   = 921 * seedBlockSize
	)
	require.Equal(t, 468_736, seedBlocks*seedBlockSize)
	for _, tc := range []struct {
		arm      Accounting
		admitted int
		used     float64
	}{
		{TokenAccounting, 28, 28 * (total + 100)},
		{BlockAccounting, 32, (921+32*103)*16 + 32*512},
		{PausingAccounting, 24, 24 * (total + 100)},
	} {
		t.Run(tc.arm.String(), func(t *testing.T) {
			r := newRig(t, DefaultConfig(tc.arm, programs), seedBlocks)
			require.Equal(t, 468_736, r.c.Capacity())
			admitted := 0
			for i := range programs {
				if r.admit(fmt.Sprint("p", i), context(i, shared, total)) {
					admitted++
				}
			}
			d := r.tick()
			require.Empty(t, d.Resumed, "nothing more fits at the step boundary")
			require.Empty(t, d.Paused)
			m := r.c.Metrics()
			require.Equal(t, tc.admitted, admitted)
			require.Equal(t, tc.admitted, m.Active)
			require.Equal(t, programs-tc.admitted, m.Waiting)
			require.Equal(t, tc.used, m.Used)
			// Both accountings are kept whatever the arm decides with.
			require.Equal(t, float64(tc.admitted*(total+100)), m.UsedTokens)
			require.Equal(t, (921+tc.admitted*103)*16+tc.admitted*512, m.UsedBlocks)

			// Every turn ends (its blocks are pinned), then every program is
			// released: the waiting ones are admitted as room frees.
			for done := 0; done < programs; {
				for i := range programs {
					id := fmt.Sprint("p", i)
					if info, ok := r.c.Program(id); ok && info.Running {
						r.end(id)
						info, _ = r.c.Program(id)
						require.True(t, info.Pinned)
						r.release(id)
						done++
					}
				}
				for i := range programs {
					id := fmt.Sprint("p", i)
					if info, ok := r.c.Program(id); ok && info.State == StateActive && !info.Running {
						require.True(t, r.admit(id, context(i, shared, total)))
					}
				}
				r.tick()
				for i := range programs {
					id := fmt.Sprint("p", i)
					if info, ok := r.c.Program(id); ok && info.State == StateActive && !info.Running {
						require.True(t, r.admit(id, context(i, shared, total)))
					}
				}
			}
			require.Equal(t, uint64(programs), r.c.Metrics().Admitted)
			r.drained()
		})
	}
}
