package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newBenchADPCmd is a placeholder replaced by the adp campaign command.
func newBenchADPCmd() *cobra.Command {
	return &cobra.Command{Use: "adp", Short: "seed 004 attention-DP campaign (in progress)", Hidden: true,
		RunE: func(*cobra.Command, []string) error { return errors.New("bench adp: not built yet") }}
}
