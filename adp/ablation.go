package adp

import "github.com/turnstile-llm/turnstile/executor"

// Ablation is the deployment's experiment switches, each of which restores
// a rule whose absence an experiment measures: for experiments only, never
// for serving (the zero value).
type Ablation struct {
	// Engine is the one source of the ranks' engines' switches: build each
	// engine with it (New refuses an EngineRank built otherwise). Its
	// ChargeRetiring also counts retiring requests against admission and in
	// the routing load at the gather, as engines without the retiring rule
	// do.
	Engine executor.Ablation
	// PlaceRetiring adds retiring work back into the placement load (never
	// into admission). Off by default: a retiring request needs no compute
	// in the next step, so it is not what placement balances, and leaving
	// it out makes routing with overlap equal routing without it.
	PlaceRetiring bool
	// LocalLiveness restores the broken liveness rule: a process whose
	// ranks hold only retiring requests counts itself idle and waits for
	// work of its own before the next gather, instead of entering the
	// gather its peers wait in.
	LocalLiveness bool
}

// localLivenessWait is the broken rule (Ablation.LocalLiveness): a process
// whose ranks hold only retiring requests, and nothing queued, waits for
// work of its own before the gather.
func (d *Deployment) localLivenessWait() {
	if !d.cfg.Ablation.LocalLiveness {
		return
	}
	retiring, other := 0, len(d.queue)
	for i, r := range d.ranks {
		r.State(&d.local[i])
		s := &d.local[i]
		retiring += s.Retiring
		other += s.Active + s.Waiting
	}
	if retiring == 0 || other > 0 {
		return
	}
	d.wd.enter("its own queue wait (retiring requests not counted for liveness)")
	<-d.in.wake // nothing else wakes it: the point of the experiment
}
