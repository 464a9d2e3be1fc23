package server

import (
	"context"

	"github.com/turnstile-llm/turnstile/executor"
)

// Engine is what the server needs of the engine; *executor.Engine satisfies
// it. The engine's step loop (Run) is driven by whoever built it.
type Engine interface {
	// Submit validates and queues r; the stream yields its output.
	// Cancelling ctx aborts the request by the next step boundary.
	Submit(ctx context.Context, r *executor.Request) (*executor.Stream, error)
	// Snapshot is the engine's metrics as of its last step boundary.
	Snapshot() executor.Metrics
}

// ProgramReleaser is implemented by engines whose admission policy tracks
// agentic programs (requests grouped by Request.ProgramID), the owner of
// program state. ReleaseProgram ends program id (its pinned state is
// dropped); found is false when the engine does not know it, and DELETE
// then answers 404 program_not_found. Without it, or when it returns
// executor.ErrNoPrograms (an engine built without a program policy),
// DELETE /v1/programs/{id} answers 404 not_supported.
type ProgramReleaser interface {
	ReleaseProgram(id string) (found bool, err error)
}

// ProgramStater is implemented by engines whose admission policy tracks
// program states; /metrics then exports them (programs per state, pauses
// and resumes since start) instead of the server's own active/idle view.
// A nil byState means the engine has no program policy after all.
type ProgramStater interface {
	ProgramStates() (byState map[string]int, pauses, resumes uint64)
}
