package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at link time with -ldflags "-X main.version=..."; the
// default says the binary was built from a source tree.
var version = "dev"

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "turnstile",
		Short:         "turnstile: an LLM inference executor with exact KV and seat accounting",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCmd())
	root.AddCommand(newPoolsCmd())
	root.AddCommand(newGenerateCmd())
	root.AddCommand(newModelCmd())
	root.AddCommand(newServeCmd())
	root.AddCommand(newBenchCmd())
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the Go toolchain and the VCS revision",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rev := "unknown"
			if info, ok := debug.ReadBuildInfo(); ok {
				for _, s := range info.Settings {
					if s.Key == "vcs.revision" {
						rev = s.Value
					}
				}
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "turnstile %s (%s, %s/%s, rev %s)\n",
				version, runtime.Version(), runtime.GOOS, runtime.GOARCH, rev)
			return err
		},
	}
}

// untilSignal runs run with a context that ends on SIGINT or SIGTERM: the
// long-running commands drain (serve) or stop (bench) on either.
func untilSignal(cmd *cobra.Command, run func(context.Context) error) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx)
}
