package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestVersion(t *testing.T) {
	out, err := runCLI(t, "version")
	require.NoError(t, err)
	require.Contains(t, out, "turnstile dev")
}

func TestUnknownCommand(t *testing.T) {
	_, err := runCLI(t, "no-such-command")
	require.ErrorContains(t, err, "no-such-command")
}
