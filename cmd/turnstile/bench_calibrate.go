package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newBenchCalibrateCmd is a placeholder replaced by the calibration command.
func newBenchCalibrateCmd() *cobra.Command {
	return &cobra.Command{Use: "calibrate", Short: "fit a cost model (in progress)", Hidden: true,
		RunE: func(*cobra.Command, []string) error { return errors.New("bench calibrate: not built yet") }}
}
