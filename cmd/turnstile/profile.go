package main

import (
	"errors"
	"fmt"

	"github.com/turnstile-llm/turnstile/bench/calibrate"
	"github.com/turnstile-llm/turnstile/sim"
)

// simProfile resolves --profile, the one way every command prices the
// simulated device: a built-in profile's name (sim.BuiltIn) or the path of
// a profile.json written by bench calibrate, whose host terms are zero (a
// recorder sees device time only). overlap sets the profile's Overlap. It
// returns the cost model and a name for the command's header.
func (c *commandFlags) simProfile(overlap bool) (sim.Linear, string, error) {
	if c.profile == "" {
		return sim.Linear{}, "", errors.New("--profile is empty: name a built-in profile or a profile.json")
	}
	if sim.IsBuiltIn(c.profile) {
		l, err := sim.BuiltIn(c.profile, overlap)
		return l, "built-in " + c.profile, err
	}
	prof, err := calibrate.ReadProfile(c.profile)
	if err != nil {
		return sim.Linear{}, "", fmt.Errorf("--profile %q: neither a built-in profile (%v) nor a readable profile file: %w",
			c.profile, sim.BuiltInProfiles(), err)
	}
	l := prof.Linear
	l.Overlap = overlap
	return l, fmt.Sprintf("fitted %s (%s runner, %s)", c.profile, prof.Runner, prof.Model), nil
}
