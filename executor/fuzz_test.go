package executor

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzEngine applies a random sequence of submits, aborts and steps (each
// input byte is one operation) to a small engine, with Check after each, and
// asserts that after Close every request ended and nothing is held.
func FuzzEngine(f *testing.F) {
	f.Add([]byte{0, 1, 2, 7, 7, 7, 4, 7, 7, 3, 7, 7, 7, 7}, true)
	f.Add([]byte{0x10, 0x21, 0x32, 0x43, 0x57, 0x67, 0x77, 0x84, 0x97, 0xa7}, false)
	f.Add([]byte{0xf0, 0xf1, 0xf2, 0xf3, 0xf0, 0xf1, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}, true)
	f.Fuzz(func(t *testing.T, ops []byte, ovl bool) {
		if len(ops) > 400 {
			ops = ops[:400]
		}
		s := newSetup(t, opts{overlap: ovl, mbs: 3, tokens: 12, blocks: 12, bs: 2, ctx: 24, eosAfter: 6})
		var streams []*Stream
		var cancels []context.CancelFunc
		for _, op := range ops {
			switch arg := int(op >> 4); op & 7 {
			case 0, 1, 2, 3: // submit: prompt length and max tokens from the high bits
				ctx, cancel := context.WithCancel(context.Background())
				prompt := make([]int32, 1+arg%10)
				for i := range prompt {
					prompt[i] = int32('a' + (i*arg)%3)
				}
				req := &Request{PromptTokens: prompt, MaxTokens: int(op & 3 * 4), Params: greedy()}
				if arg%4 == 1 {
					req.Stop = []string{"ab"}
				}
				st, err := s.eng.Submit(ctx, req)
				require.NoError(t, err)
				streams = append(streams, st)
				cancels = append(cancels, cancel)
			case 4: // abort one
				if len(cancels) > 0 {
					cancels[arg%len(cancels)]()
				}
			default:
				_, err := s.eng.Step()
				require.NoError(t, err)
			}
			require.NoError(t, s.eng.Check())
		}
		require.NoError(t, s.eng.Close())
		require.NoError(t, s.eng.Check())
		for _, st := range streams {
			d := readAll(t, st)
			require.NotEqual(t, FinishNone, d.FinishReason)
		}
		m := s.eng.Snapshot()
		require.Equal(t, 0, m.Running+m.Waiting+m.Retiring+m.KVBlocksUsed+m.SeatsLive+m.SeatsRetiring)
		require.Equal(t, uint64(len(streams)), m.Finished+m.Aborted)
		for _, c := range cancels {
			c()
		}
	})
}
