// Package launch detects whether this process was started by an MPI launcher
// (mpirun, mpiexec, srun with PMIx) and where it sits in the job, from the
// environment the launcher sets. It needs no MPI library and no cgo, so the
// command line can decide before loading MPI whether a --dp N run is one process
// (goroutine ranks) or one rank of N processes. It reads the world rank and
// size, and the local rank and size on this host, from Open MPI's, PMIx's
// or PMI's variables; ValidateWorld checks --dp against the world size.
package launch

import (
	"errors"
	"fmt"
	"strconv"
)

// Unknown is the value of a Launch field the launcher did not publish.
const Unknown = -1

// The environment variables Detect reads, by launcher.
const (
	// Open MPI's mpirun.
	EnvOMPIRank      = "OMPI_COMM_WORLD_RANK"
	EnvOMPISize      = "OMPI_COMM_WORLD_SIZE"
	EnvOMPILocalRank = "OMPI_COMM_WORLD_LOCAL_RANK"
	EnvOMPILocalSize = "OMPI_COMM_WORLD_LOCAL_SIZE"
	// PMIx (Slurm's srun --mpi=pmix, PRRTE): the rank only.
	EnvPMIxRank = "PMIX_RANK"
	// The generic PMI-1/PMI-2 names (MPICH's Hydra, Slurm's srun --mpi=pmi2),
	// and MPICH's local rank.
	EnvPMIRank      = "PMI_RANK"
	EnvPMISize      = "PMI_SIZE"
	EnvMPILocalRank = "MPI_LOCALRANKID"
	EnvMPILocalSize = "MPI_LOCALNRANKS"
)

// Launch is where this process sits in an MPI job.
type Launch struct {
	// Launched: an MPI launcher started this process (its rank variable is set).
	// When false the other fields are zero and the process is a job of its own.
	Launched bool
	// Source names the variable the rank came from, e.g. "OMPI_COMM_WORLD_RANK".
	Source string
	// Rank is the world rank, in [0, Size) when Size is known.
	Rank int
	// Size is the world size (ranks in the job), or Unknown: PMIx publishes no
	// size in the environment, so MPI's own Comm_size is then the authority.
	Size int
	// LocalRank is the rank among the job's processes on this host (the GPU a
	// rank takes on CUDA), or Unknown.
	LocalRank int
	// LocalSize is the number of the job's processes on this host (they
	// share its cores), or Unknown.
	LocalSize int
}

// ErrWorldMismatch is wrapped by ValidateWorld's error when --dp differs from the
// launched world.
var ErrWorldMismatch = errors.New("--dp differs from the MPI world size")

// Detect reads the launcher's variables through env (os.Getenv in production;
// an empty string means unset). Open MPI's OMPI_COMM_WORLD_* variables come
// first, then PMIX_RANK, then PMI_RANK/PMI_SIZE. A process with none of the rank
// variables set was not launched by MPI: Launch{} and no error. A malformed or
// out-of-range value, or a rank without the size its launcher always sets, is
// an error naming the variable and its value.
func Detect(env func(string) string) (Launch, error) {
	switch {
	case env(EnvOMPIRank) != "":
		return detect(env, EnvOMPIRank, EnvOMPISize, EnvOMPILocalRank, EnvOMPILocalSize, true)
	case env(EnvPMIxRank) != "":
		// PMIx launchers may also set PMI_SIZE; without it the size is unknown.
		return detect(env, EnvPMIxRank, EnvPMISize, EnvMPILocalRank, EnvMPILocalSize, false)
	case env(EnvPMIRank) != "":
		return detect(env, EnvPMIRank, EnvPMISize, EnvMPILocalRank, EnvMPILocalSize, true)
	}
	return Launch{}, nil
}

// detect reads one launcher's rank, size, local-rank and local-size
// variables; needSize makes an unset size an error.
func detect(env func(string) string, rankVar, sizeVar, localVar, localSizeVar string, needSize bool) (Launch, error) {
	l := Launch{Launched: true, Source: rankVar, Size: Unknown, LocalRank: Unknown, LocalSize: Unknown}
	var err error
	if l.Rank, err = parse(env, rankVar, 0); err != nil {
		return Launch{}, err
	}
	if env(sizeVar) != "" {
		if l.Size, err = parse(env, sizeVar, 1); err != nil {
			return Launch{}, err
		}
		if l.Rank >= l.Size {
			return Launch{}, fmt.Errorf("launch: %s=%d is outside [0, %s=%d)", rankVar, l.Rank, sizeVar, l.Size)
		}
	} else if needSize {
		return Launch{}, fmt.Errorf("launch: %s=%d is set but %s is not", rankVar, l.Rank, sizeVar)
	}
	if env(localVar) != "" {
		if l.LocalRank, err = parse(env, localVar, 0); err != nil {
			return Launch{}, err
		}
		if l.Size != Unknown && l.LocalRank >= l.Size {
			return Launch{}, fmt.Errorf("launch: %s=%d is outside [0, %s=%d)", localVar, l.LocalRank, sizeVar, l.Size)
		}
	}
	if env(localSizeVar) != "" {
		if l.LocalSize, err = parse(env, localSizeVar, 1); err != nil {
			return Launch{}, err
		}
		if l.LocalRank != Unknown && l.LocalRank >= l.LocalSize {
			return Launch{}, fmt.Errorf("launch: %s=%d is outside [0, %s=%d)", localVar, l.LocalRank, localSizeVar, l.LocalSize)
		}
	}
	return l, nil
}

// parse reads variable name as a decimal integer of at least min.
func parse(env func(string) string, name string, min int) (int, error) {
	v := env(name)
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("launch: %s=%q is not a decimal integer", name, v)
	}
	if n < min {
		return 0, fmt.Errorf("launch: %s=%q is below %d", name, v, min)
	}
	return n, nil
}

// ValidateWorld checks --dp dp against the launch: a process not launched by MPI
// may run any dp ≥ 1 in one process; a launched one must have dp equal to the
// world size. A launch whose size is Unknown is an error: set l.Size from MPI's
// Comm_size first.
func ValidateWorld(dp int, l Launch) error {
	if dp < 1 {
		return fmt.Errorf("launch: --dp %d: must be at least 1", dp)
	}
	if !l.Launched {
		return nil
	}
	if l.Size == Unknown {
		return fmt.Errorf("launch: --dp %d: the launcher (%s) published no world size; check against MPI's size", dp, l.Source)
	}
	if dp != l.Size {
		return fmt.Errorf("launch: --dp %d but the MPI world has %d ranks (--dp must equal mpirun's -np): %w",
			dp, l.Size, ErrWorldMismatch)
	}
	return nil
}
