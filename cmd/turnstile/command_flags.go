package main

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/turnstile-llm/turnstile/sim"
)

// commandFlags are the flags that say what a command does with its engine
// rather than how the engine is built: where its results go (--out), the
// seed of its own draws (--seed) and how it prices the simulated device
// (--profile). They sit apart from engineFlags so the engine configuration
// holds only what an engine is built from; each is registered, defaulted
// and described once here.
type commandFlags struct {
	out     string // the command's output directory; "": none
	seed    uint64
	profile string // the simulated device's cost: a built-in profile's name or a profile.json (simProfile)
}

// commandFlag selects the flags of commandFlags a command registers.
type commandFlag uint

const (
	flagOut commandFlag = 1 << iota
	flagSeed
	flagProfile
)

// Defaults of the command flags, stated once.
const (
	defaultSeed = 1
	// defaultProfile is --profile's default: the profile anchored to a
	// published H200 benchmark (sim.H200Llama3_8BMeasured). The roofline
	// profile (sim.ProfileH200Roofline) stays beside it, and reproduces the
	// campaign tables published before the measured one existed.
	defaultProfile = sim.ProfileH200Measured
)

// defaultCommandFlags are the command flags before any flag is given.
func defaultCommandFlags() commandFlags {
	return commandFlags{seed: defaultSeed, profile: defaultProfile}
}

// register adds the flags in which to f, each with the field's current
// value as its default (a command whose study fixes another default sets
// the field first).
func (c *commandFlags) register(f *pflag.FlagSet, which commandFlag) {
	has := func(x commandFlag) bool { return which&x != 0 }
	if has(flagSeed) {
		f.Uint64Var(&c.seed, "seed", c.seed, "seed of the command's random draws (sampling, traffic and workloads, weights); the same seed gives the same run")
	}
	if has(flagOut) {
		f.StringVar(&c.out, "out", c.out, "directory the command writes its results into, created if missing (\"\": none)")
	}
	if has(flagProfile) {
		f.StringVar(&c.profile, "profile", c.profile, "the simulated device's step cost: a built-in profile ("+
			strings.Join(sim.BuiltInProfiles(), ", ")+"; see docs/experiments.md) or the profile.json `FILE` that bench calibrate --out DIR writes")
	}
}
