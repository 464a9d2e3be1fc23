package archtest

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/turnstile-llm/turnstile/"

// listed is what `go list -deps -json` says of one package.
type listed struct {
	ImportPath string
	Standard   bool
	CgoFiles   []string
}

// goListDeps runs `go list -deps` on pkg (relative to the module root).
func goListDeps(t *testing.T, pkg string) []listed {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the import boundary needs the go command on PATH: %v", err)
		}
		t.Skipf("no go command on PATH: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-deps", "-json", "github.com/turnstile-llm/turnstile/"+pkg)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
	}
	require.NoError(t, err, "go list -deps %s", pkg)
	var deps []listed
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		deps = append(deps, p)
	}
	return deps
}

// TestCoreLinksNoCgo: the engine, the policy, the ranks, the server, the
// pools, the grammar engine and the guided decoder build without the kernels, the CUDA bindings, NVML or any cgo
// package outside the standard library; the step contract links nothing
// third-party and only sampling of ours. A regression names the package
// and the dependency that crossed the line.
func TestCoreLinksNoCgo(t *testing.T) {
	forbidden := []string{module + "kernels", module + "cuda", module + "model", module + "dist", "github.com/NVIDIA/go-nvml"}
	for _, pkg := range []string{"executor", "sim", "server", "policy", "adp", "kvpool", "seatpool", "overlap", "step", "grammar", "guided"} {
		t.Run(pkg, func(t *testing.T) {
			for _, d := range goListDeps(t, pkg) {
				for _, f := range forbidden {
					require.False(t, d.ImportPath == f || strings.HasPrefix(d.ImportPath, f+"/"),
						"%s links %s", pkg, d.ImportPath)
				}
				require.True(t, d.Standard || len(d.CgoFiles) == 0, "%s links cgo package %s", pkg, d.ImportPath)
			}
		})
	}
	for _, d := range goListDeps(t, "step") {
		if d.Standard || d.ImportPath == module+"step" {
			continue
		}
		require.Equal(t, module+"sampling", d.ImportPath, "step is a leaf: only sampling of ours, nothing third-party")
	}
}

// TestToolcallLeaf: the tool-call parser imports only the standard
// library (no cgo), so the server and its tests use it without anything of
// the engine's.
func TestToolcallLeaf(t *testing.T) {
	for _, d := range goListDeps(t, "toolcall") {
		require.True(t, d.Standard || d.ImportPath == module+"toolcall", "toolcall links %s: it imports only the standard library", d.ImportPath)
		require.True(t, len(d.CgoFiles) == 0 || d.Standard, "toolcall links cgo package %s", d.ImportPath)
	}
}

// TestDistLeaves: the MPI and NCCL bindings and the launch detection import
// nothing of ours but the shared loader (internal/dl), and the launch
// detection links no cgo, so the command can read the launch before it
// loads MPI.
func TestDistLeaves(t *testing.T) {
	for _, pkg := range []string{"dist/mpi", "dist/nccl", "dist/launch"} {
		t.Run(pkg, func(t *testing.T) {
			for _, d := range goListDeps(t, pkg) {
				if d.Standard || d.ImportPath == module+pkg || d.ImportPath == module+"internal/dl" {
					continue
				}
				require.False(t, strings.HasPrefix(d.ImportPath, module), "%s links %s: it must import nothing of ours but internal/dl", pkg, d.ImportPath)
			}
		})
	}
	for _, d := range goListDeps(t, "dist/launch") {
		require.True(t, d.Standard || len(d.CgoFiles) == 0, "dist/launch links cgo package %s", d.ImportPath)
	}
}

// TestModelLinksNoMPI: model defines the MLPComm its sharded MLP consumes
// and never links dist/mpi (cmd wires a World in), so model builds and runs
// on a machine without MPI and the two packages cannot form a cycle.
func TestModelLinksNoMPI(t *testing.T) {
	for _, d := range goListDeps(t, "model") {
		require.NotEqual(t, module+"dist/mpi", d.ImportPath, "model links dist/mpi")
	}
}
