// Package sampling turns one row of logits into one token id: greedy,
// temperature, top-k, top-p, min-p, per-request seeds and
// repetition/presence/frequency penalties, with per-seat state (seeded RNG
// and token counts) held in rows indexed by seat.
//
// Runners call Sampler.Sample once per sequence per step. The pipeline
// follows vLLM's order: repetition penalty (prompt and output tokens),
// presence and frequency penalties (output tokens), temperature, min_p,
// top_k, top_p, then a draw from the seat's PCG stream.
//
// Decisions worth knowing:
//   - Logprobs are taken after penalties and temperature, before truncation;
//     greedy requests report them at temperature 1.
//   - NaN logits are -Inf; +Inf logits are the largest float32 (they share the
//     mass); a row with nothing above -Inf is uniform.
//   - top_k keeps every token tied with the k-th; top_p keeps the shortest
//     most-likely-first prefix (ties by lower id) whose mass reaches top_p of
//     what min_p and top_k kept.
//   - Requests without a seed get mix(seed base, n) for the Sampler's n-th
//     unseeded Start, so a run replays exactly.
//
// Cost: a few passes over the row (scale and max, exp weights, draw), with
// top-k by quickselect on a sample-estimated short list and top-p by binary-
// exponent buckets (only the boundary bucket is sorted); no allocation per
// call once a seat's penalty table has grown to its sequence's distinct
// tokens. Penalty counts live in a small per-seat open-addressing table,
// not a vocab-sized array.
package sampling
