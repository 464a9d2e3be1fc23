package adp

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/executor"
	"github.com/turnstile-llm/turnstile/sampling"
)

func sampleBulletin() bulletin {
	p := sampling.DefaultParams()
	p.Temperature, p.TopK, p.Seed, p.HasSeed, p.Logprobs, p.TopLogprobs = 0.7, 40, 99, true, true, 3
	return bulletin{
		aborts:   []uint64{3, 17},
		releases: []release{{ticket: 1, id: "prog-a"}, {ticket: 2, id: ""}},
		ids:      []uint64{21, 22},
		reqs: []*executor.Request{
			{Prompt: "héllo", MaxTokens: 5, Params: p, Stop: []string{"\n", "END"}, StopTokenIDs: []int32{2, 9},
				IgnoreEOS: true, CacheSalt: "tenant", ProgramID: "prog-a", ProgramRelease: true},
			{PromptTokens: []int32{1, 500, -0 + 7}, Params: sampling.DefaultParams()},
		},
	}
}

// TestBulletinRoundTrip: what process 0 broadcasts decodes to the same
// requests, aborts and releases on every other process.
func TestBulletinRoundTrip(t *testing.T) {
	w := sampleBulletin()
	var b wireBuf
	w.encode(&b)
	var got bulletin
	require.NoError(t, decodeBulletin(b, &got))
	require.Equal(t, w.aborts, got.aborts)
	require.Equal(t, w.releases, got.releases)
	require.Equal(t, w.ids, got.ids)
	require.Equal(t, w.reqs, got.reqs)

	var empty bulletin
	b = b[:0]
	empty.encode(&b)
	require.NoError(t, decodeBulletin(b, &got))
	require.Empty(t, got.aborts)
	require.Empty(t, got.releases)
	require.Empty(t, got.reqs)
}

// TestRepliesRoundTrip: every record kind a process sends process 0.
func TestRepliesRoundTrip(t *testing.T) {
	d := executor.Delta{Text: "a b", TokenIDs: []int32{4, 5}, Logprobs: []float32{-0.5, -1.25},
		TopLogprobs:  [][]executor.TokenLogprob{{{Token: 4, Logprob: -0.5}}, {{Token: 5, Logprob: -1.25}, {Token: 6, Logprob: -2}}},
		FinishReason: executor.FinishStop, Usage: executor.Usage{Prompt: 3, Completion: 2, CachedPrompt: 1}}
	var b wireBuf
	putDelta(&b, 7, &d)
	putDelta(&b, 8, &executor.Delta{Text: "x"})
	putRefused(&b, 9, errString("bad prompt"))
	putReleaseReply(&b, 4, true, nil)
	putMetrics(&b, 3, []byte(`{"Steps":2}`))
	var got []reply
	require.NoError(t, decodeReplies(b, func(r *reply) error { got = append(got, *r); return nil }))
	require.Len(t, got, 5)
	require.Equal(t, reply{kind: recDelta, id: 7, delta: d}, got[0])
	require.Equal(t, reply{kind: recDelta, id: 8, delta: executor.Delta{Text: "x"}}, got[1])
	require.Equal(t, reply{kind: recRefused, id: 9, text: "bad prompt"}, got[2])
	require.Equal(t, reply{kind: recRelease, id: 4, found: true}, got[3])
	require.Equal(t, reply{kind: recMetrics, rank: 3, metrics: []byte(`{"Steps":2}`)}, got[4])
}

type errString string

func (e errString) Error() string { return string(e) }

// TestDecodeRefusesCorrupt: truncated or altered bytes are errors naming
// what was being read, never a panic.
func TestDecodeRefusesCorrupt(t *testing.T) {
	w := sampleBulletin()
	var b wireBuf
	w.encode(&b)
	var got bulletin
	for n := range len(b) {
		require.Error(t, decodeBulletin(b[:n], &got), "truncated at %d of %d", n, len(b))
	}
	require.ErrorContains(t, decodeBulletin(append(append([]byte(nil), b...), 0), &got), "1 trailing bytes")
	require.ErrorContains(t, decodeReplies([]byte{99}, func(*reply) error { return nil }), "unknown kind 99")
	require.ErrorContains(t, decodeBulletin([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, &got), "aborts: length")
}

// FuzzDecode: arbitrary bytes never panic the decoders, and what decodes
// re-encodes to bytes that decode to the same thing.
func FuzzDecode(f *testing.F) {
	w := sampleBulletin()
	var b wireBuf
	w.encode(&b)
	f.Add([]byte(b))
	var r wireBuf
	putDelta(&r, 1, &executor.Delta{Text: "t", TokenIDs: []int32{1}, FinishReason: executor.FinishLength})
	f.Add([]byte(r))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got bulletin
		if decodeBulletin(data, &got) == nil {
			var again wireBuf
			got.encode(&again)
			var back bulletin
			require.NoError(t, decodeBulletin(again, &back))
			var twice wireBuf // bytes, not values: a float may be NaN
			back.encode(&twice)
			require.Equal(t, []byte(again), []byte(twice))
		}
		_ = decodeReplies(data, func(*reply) error { return nil })
	})
}
