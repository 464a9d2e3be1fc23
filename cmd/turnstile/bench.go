package main

import "github.com/spf13/cobra"

// newBenchCmd is the parent of the benchmark subcommands; each lives in its
// own bench_*.go file and is added here.
func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run benchmarks and experiments",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newBenchServeCmd(), newBenchAgenticCmd(), newBenchADPCmd(), newBenchCalibrateCmd(), newBenchDecodeCmd(), newBenchSchemaCmd())
	return cmd
}
