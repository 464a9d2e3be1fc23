package grammar

import (
	"errors"
	"fmt"
)

// CompileRegex compiles a regular expression (RE2 syntax, as Go's
// regexp/syntax parses it with Perl flags) that the whole output must
// match, as vLLM's guided_regex does. Anchors are allowed and redundant;
// word boundaries, multi-line anchors, backreferences and lookaround are
// refused with an error naming them.
func CompileRegex(pattern string, lim Limits) (*Grammar, error) {
	if lim.States <= 0 {
		lim = DefaultLimits
	}
	e, err := regexExpr(pattern)
	if err != nil {
		return nil, err
	}
	var b Builder
	g, err := b.buildWith(b.Rule("regex", e), lim, newBudget(lim))
	if err != nil {
		return nil, fmt.Errorf("regular expression %q: %w", pattern, err)
	}
	return g, nil
}

// CompileChoices compiles a list of strings the output must be exactly
// one of (vLLM's guided_choice).
func CompileChoices(choices []string, lim Limits) (*Grammar, error) {
	if lim.States <= 0 {
		lim = DefaultLimits
	}
	if len(choices) == 0 {
		return nil, errors.New("choices: the list is empty")
	}
	alts := make([]*Expr, len(choices))
	for i, c := range choices {
		if c == "" {
			return nil, fmt.Errorf("choices: choice %d is empty", i)
		}
		alts[i] = Lit(c)
	}
	var b Builder
	g, err := b.buildWith(b.Rule("choice", Alt(alts...)), lim, newBudget(lim))
	if err != nil {
		return nil, fmt.Errorf("choices: %w", err)
	}
	return g, nil
}

// IsUnsupported reports whether err refuses a feature the compilers do not
// support (as opposed to malformed input or a size limit).
func IsUnsupported(err error) bool { return errors.Is(err, errUnsupported) }

// IsTooLarge reports whether err refuses input past a limit (states,
// rules, time, ambiguity).
func IsTooLarge(err error) bool { return errors.Is(err, errTooLarge) }
