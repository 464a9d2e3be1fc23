package calibrate

import (
	"fmt"

	"github.com/turnstile-llm/turnstile/bench/workload"
)

// familyTraffic is a set's shared-prefix traffic: families of requests whose
// prompts begin with the same prefix, so the engine's decode batches hold
// groups (step.Group) of varying size and shared length, which is what the
// fit needs to price a shared pair apart from a context token.
type familyTraffic struct {
	// prime holds one request per family, its prompt the family's prefix
	// and one output token: run first and to completion, it leaves the
	// prefix's blocks cached, so every member admitted later maps the same
	// blocks. (Members admitted in one step would each compute the prefix
	// and share nothing: a block is found by prefix only once written.)
	prime []workload.Request
	// members are the families' requests, family by family: the prefix,
	// then a short tail of their own.
	members []workload.Request
	// prefixTokens is Σ prefix lengths, to size the KV cache so that no
	// family's prefix is evicted while its members wait.
	prefixTokens int
}

// families draws n member requests (at least two) in families for batch
// size mbs, max context maxCtx and block size bs, seeded by seed.
func families(seed uint64, n, mbs, maxCtx, bs int) (familyTraffic, error) {
	// What the families cycle through: members per family (capped at the
	// batch) and prefix length as a fraction of the max context (rounded
	// down to whole blocks, at least two).
	familySizes := [...]int{2, 3, 4, 8, 16, 32}
	prefixFractions := [...]float64{1.0 / 16, 1.0 / 8, 1.0 / 4, 3.0 / 8}
	var ft familyTraffic
	if mbs < 2 || n < 2 {
		return ft, fmt.Errorf("calibrate: shared-prefix families need a batch and %d requests of at least 2 (batch %d)", n, mbs)
	}
	tails, err := workload.Chat(workload.ChatConfig{Seed: seed, Requests: n,
		Input:  workload.LogNormal{Median: float64(maxCtx) / 64, Sigma: 0.8, Min: 1, Max: maxCtx / 16},
		Output: workload.LogNormal{Median: float64(maxCtx) / 16, Sigma: 0.5, Min: 8, Max: maxCtx / 4}})
	if err != nil {
		return ft, err
	}
	for f, next := 0, 0; next < n; f++ {
		size := min(familySizes[f%len(familySizes)], mbs, n-next)
		if n-next-size == 1 { // never leave a family of one
			size++
		}
		shared := max(2*bs, int(prefixFractions[f%len(prefixFractions)]*float64(maxCtx))/bs*bs)
		pre, err := workload.ContextHeavy(workload.ContextHeavyConfig{Seed: seed ^ uint64(f+1)*0x9e3779b97f4a7c15, Requests: 1,
			InputTokens: shared, OutputTokens: 1})
		if err != nil {
			return ft, err
		}
		prefix := pre[0].Prompt
		ft.prime = append(ft.prime, workload.Request{ID: f, Prompt: prefix, MaxTokens: 1})
		ft.prefixTokens += len(prefix)
		for range size {
			t := tails[next]
			prompt := append(append(make([]int32, 0, len(prefix)+len(t.Prompt)), prefix...), t.Prompt...)
			ft.members = append(ft.members, workload.Request{ID: next, Prompt: prompt, MaxTokens: t.MaxTokens})
			next++
		}
	}
	return ft, nil
}
