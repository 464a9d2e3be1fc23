package executor

// Flush processes every step in flight (its teardown, then its sampled
// tokens, exactly as Step would when it waits for it) without planning or
// launching a step, and reports whether it processed any. With overlap off
// nothing is ever left in flight after Step, so it does nothing.
//
// It is for a caller that must see a step's results before it reports
// state: an attention-DP rank that processes its step before the next
// gather ("early", package adp). Requests whose last token was in that step
// are then torn down, not retiring, when the rank is gathered.
//
// Decision: Flush takes no submissions, aborts or program releases from
// the queues; they wait for the next Step, which drains them before it
// plans. Flush changes only what the steps in flight already decided, so
// a Flush between two Steps never changes what the second one admits
// beyond what processing the results does (seats and blocks freed, tokens
// known), and a waiting request is never admitted outside Step. The engine
// stays consistent (Check passes) after it, as after Step.
//
// Loop-owned like Step: never concurrently with Run, Step or itself.
func (e *Engine) Flush() (bool, error) {
	processed := false
	for e.pipe.InFlight() > 0 {
		d, err := e.pipe.Wait()
		if err != nil {
			return processed, err
		}
		if err := e.process(d); err != nil {
			return processed, err
		}
		processed = true
	}
	e.publish()
	return processed, nil
}
