package kvpool

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestChainMatchesPrefix checks that chain lookups give exactly what the
// hashing lookups give, for every prompt length around block boundaries,
// including a chain built incrementally with Extend.
func TestChainMatchesPrefix(t *testing.T) {
	p, err := New(Config{NumBlocks: 64, BlockSize: 4})
	require.NoError(t, err)
	k := Keys{Model: "m", Salt: "s"}
	stored := seqTokens(7, 40)
	s := p.NewSeq(k)
	require.NoError(t, p.Append(s, stored))
	p.Release(s)
	require.NoError(t, p.Check())

	for n := 0; n <= 41; n++ {
		prompt := append(append([]int32{}, stored[:min(n, 40)]...), make([]int32, max(0, n-40))...)
		var whole, grown Chain
		require.NoError(t, whole.Reset(k, 4, prompt))
		require.NoError(t, grown.Reset(k, 4, nil))
		for i := 0; i < len(prompt); i += 3 {
			grown.Extend(prompt[i:min(i+3, len(prompt))])
		}
		require.Equal(t, whole.Hashes(), grown.Hashes(), "n=%d", n)
		require.Equal(t, n, grown.Tokens())

		want := p.PeekPrefix(k, prompt)
		require.Equal(t, want, p.PeekChain(&whole), "peek n=%d", n)

		s1 := p.NewSeq(k)
		hit, err := p.MatchChain(s1, &grown)
		require.NoError(t, err)
		require.Equal(t, want, hit, "match n=%d", n)
		require.Equal(t, hit, p.Tokens(s1))
		require.NoError(t, p.Check())
		require.NoError(t, p.Append(s1, prompt[hit:]))
		require.NoError(t, p.Check())
		p.Release(s1)
		require.NoError(t, p.Check())
	}
	require.Zero(t, p.Referenced())
}

func TestChainRefusesForeignKeysAndSizes(t *testing.T) {
	p, err := New(Config{NumBlocks: 16, BlockSize: 4})
	require.NoError(t, err)
	toks := seqTokens(1, 12)
	s := p.NewSeq(Keys{Model: "m", Salt: "a"})
	require.NoError(t, p.Append(s, toks))
	p.Release(s)

	var other Chain
	require.NoError(t, other.Reset(Keys{Model: "m", Salt: "b"}, 4, toks))
	require.Zero(t, p.PeekChain(&other), "a different salt never hits")
	s2 := p.NewSeq(Keys{Model: "m", Salt: "a"})
	_, err = p.MatchChain(s2, &other)
	require.ErrorContains(t, err, "differ")

	var wrongSize Chain
	require.NoError(t, wrongSize.Reset(Keys{Model: "m", Salt: "a"}, 8, toks))
	_, err = p.MatchChain(s2, &wrongSize)
	require.ErrorContains(t, err, "block size 8")
	require.Zero(t, p.PeekChain(&wrongSize))

	require.ErrorContains(t, wrongSize.Reset(Keys{}, 3, toks), "block size 3")
	p.Release(s2)
	require.NoError(t, p.Check())
}

// BenchmarkPeekChain32K is the longest-prefix lookup over 32,768 tokens with
// the chain hashed once up front (as a queued request or a router holds it).
func BenchmarkPeekChain32K(b *testing.B) {
	p, _, _, c := cachedChain(b, 32768)
	const want = 32768 - 16
	b.ReportAllocs()
	reportCPU(b)
	for b.Loop() {
		if hit := p.PeekChain(c); hit != want {
			b.Fatalf("hit %d", hit)
		}
	}
}

// BenchmarkSeq2048FullHitChain is the full-hit cycle as the executor runs
// it: the request's Chain was hashed once at submission, so admission is
// NewSeq + MatchChain + Append of the last block + Release, with no hashing
// of the hit blocks.
func BenchmarkSeq2048FullHitChain(b *testing.B) {
	p, k, toks, c := cachedChain(b, 2048)
	b.ReportAllocs()
	reportCPU(b)
	for b.Loop() {
		s := p.NewSeq(k)
		hit, err := p.MatchChain(s, c)
		if err != nil || hit != 2048-16 {
			b.Fatalf("hit %d, err %v", hit, err)
		}
		if err := p.Append(s, toks[hit:]); err != nil {
			b.Fatal(err)
		}
		p.Release(s)
	}
	b.StopTimer()
	if err := p.Check(); err != nil {
		b.Fatal(err)
	}
}

// cachedChain is a 4,096-block pool (block size 16) whose cache holds the
// first n tokens of seqTokens(0, ...) under keys k, and the Chain of those
// tokens hashed once, for the chain benchmarks.
func cachedChain(b *testing.B, n int) (*Pool, Keys, []int32, *Chain) {
	b.Helper()
	p, err := New(Config{NumBlocks: 4096, BlockSize: 16})
	if err != nil {
		b.Fatal(err)
	}
	toks := seqTokens(0, n)
	k := Keys{Model: "m"}
	s := p.NewSeq(k)
	if err := p.Append(s, toks); err != nil {
		b.Fatal(err)
	}
	p.Release(s)
	var c Chain
	if err := c.Reset(k, 16, toks); err != nil {
		b.Fatal(err)
	}
	return p, k, toks, &c
}

// TestChainResetAcrossKeys: a Chain reused under other keys (another model or
// cache salt) hashes from those keys' root, never the previous one's, and
// agrees with ChainHashes every time.
func TestChainResetAcrossKeys(t *testing.T) {
	toks := seqTokens(3, 100)
	var c Chain
	for _, k := range []Keys{{Model: "m"}, {Model: "m", Salt: "tenant-a"}, {Model: "m2"}, {Model: "m"}} {
		require.NoError(t, c.Reset(k, 16, toks))
		want, err := ChainHashes(k, 16, toks, nil)
		require.NoError(t, err)
		require.Equal(t, want, c.Hashes(), "keys %+v", k)
		require.Equal(t, k, c.Keys())
	}
}
