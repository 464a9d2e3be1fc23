// Package sampling turns one row of logits into one token id: greedy,
// temperature, top-k, top-p, min-p, per-request seeds and
// repetition/presence/frequency penalties, with per-seat state (seeded RNG
// and token counts) held in rows indexed by seat.
package sampling
