// Package guided is structured output's side of the engine: the guided
// decoder, one grammar matcher slot and one token-mask row per seat (a
// seat-indexed consumer, sized from seatpool.Seats and validated with the
// others at start-up), and the cache of compiled grammars shared between
// requests. It knows grammars and seats, not HTTP or the step loop.
//
// A request's constraint is a Spec (a JSON Schema, any JSON object, a
// regular expression, a list of choices, a GBNF grammar or a structural
// tag: free text and tagged JSON values, as tool calls are). The server
// compiles it through a Cache before submitting the request, on the
// request's goroutine, so a slow or failing compilation costs that request
// alone (and becomes a 400 naming the field); at most a few compile at
// once. The engine starts a seat's matcher when the request takes its
// seat, accepts each sampled token into it, fills the seat's mask row
// before each step that samples it, and frees the slot at teardown.
package guided
