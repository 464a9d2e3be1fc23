// Command turnstile is the CLI of the turnstile inference executor: it wires the
// packages together and owns every flag.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "turnstile:", err)
		os.Exit(1)
	}
}
