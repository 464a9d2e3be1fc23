package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newBenchAgenticCmd is a placeholder replaced by the agentic campaign command.
func newBenchAgenticCmd() *cobra.Command {
	return &cobra.Command{Use: "agentic", Short: "seed 000 agentic campaign (in progress)", Hidden: true,
		RunE: func(*cobra.Command, []string) error { return errors.New("bench agentic: not built yet") }}
}
