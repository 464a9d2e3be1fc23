package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/turnstile-llm/turnstile/cuda"
	"github.com/turnstile-llm/turnstile/dist/launch"
	"github.com/turnstile-llm/turnstile/dist/mpi"
)

// checkLaunch reads the MPI launcher's environment: under mpirun (or
// another MPI launcher) each process is one attention-DP rank, and --dp
// must equal the world size (both named when they differ). It records the
// launch in o.launch.
func (o *serveOptions) checkLaunch() error {
	getenv := o.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	l, err := launch.Detect(getenv)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if l.Launched && l.Size != launch.Unknown {
		if err := launch.ValidateWorld(o.dp, l); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
	}
	o.launch = l
	return nil
}

// acrossProcesses reports whether serve runs one rank per process: a
// launch by an MPI launcher with more than one process (a world of one is
// an ordinary single-process serve).
func (o *serveOptions) acrossProcesses() bool {
	return o.launch.Launched && (o.launch.Size > 1 || o.launch.Size == launch.Unknown)
}

// openWorld joins this process to the MPI world and checks it against
// --dp (the launcher's size may have been unknown).
func (o *serveOptions) openWorld() (*mpi.World, error) {
	w, err := mpi.Open()
	if err != nil {
		return nil, fmt.Errorf("serve: launched by an MPI launcher (%s): %w", o.launch.Source, err)
	}
	l := o.launch
	l.Size, l.Rank = w.Size(), w.Rank()
	if err := launch.ValidateWorld(o.dp, l); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("serve: %w", err)
	}
	return w, nil
}

// rankDevice is the device of this process's rank: under an MPI launch,
// --device cuda (no ordinal) takes the GPU of the process's local rank, as
// one process per GPU expects; an explicit cuda:N is kept.
func (o *serveOptions) rankDevice(sel cuda.Selection) cuda.Selection {
	if o.acrossProcesses() && sel.Backend == cuda.BackendCUDA && !strings.Contains(o.dev.device, ":") && o.launch.LocalRank > 0 {
		sel.Index = o.launch.LocalRank
	}
	return sel
}

// rankWorkers is the kernel workers of one rank: --workers when given,
// else the cores shared among the ranks of this host.
func (o *serveOptions) rankWorkers() int {
	if o.workers > 0 {
		return o.workers
	}
	share := o.dp
	if o.acrossProcesses() {
		share = 1
		if o.launch.LocalSize != launch.Unknown {
			share = o.launch.LocalSize
		}
	}
	if share <= 1 {
		return 0 // GOMAXPROCS
	}
	return max(1, runtime.GOMAXPROCS(0)/share)
}

// worldLineBytes is the fixed width of one rank's line in the start-up
// world listing (gathered to process 0 in one collective).
const worldLineBytes = 256

// printWorld gathers every process's line to process 0, which prints the
// world (with note after its header): one line per rank (host, device,
// sizes). Every process calls it.
func printWorld(w *mpi.World, out io.Writer, line, note string) error {
	mine := make([]byte, worldLineBytes)
	copy(mine, line)
	counts := make([]int, w.Size())
	for i := range counts {
		counts[i] = worldLineBytes
	}
	var all []byte
	if w.Rank() == 0 {
		all = make([]byte, worldLineBytes*w.Size())
	}
	if err := w.GathervBytes(mine, counts, all, 0); err != nil {
		return fmt.Errorf("serve: gathering the world: %w", err)
	}
	if w.Rank() != 0 {
		return nil
	}
	if _, err := fmt.Fprintf(out, "  world        %d processes, one attention-DP rank each (MPI: %s, %v)%s\n", w.Size(), w.Library(), w.ThreadLevel(), note); err != nil {
		return err
	}
	for r := range w.Size() {
		l := bytes.TrimRight(all[r*worldLineBytes:(r+1)*worldLineBytes], "\x00")
		if _, err := fmt.Fprintf(out, "    rank %-3d   %s\n", r, l); err != nil {
			return err
		}
	}
	return nil
}
