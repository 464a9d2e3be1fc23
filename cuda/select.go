package cuda

import (
	"fmt"
	"strconv"
	"strings"
)

// Backend is where the kernels run.
type Backend int

// Backends.
const (
	BackendAuto Backend = iota // CUDA when usable, else the CPU
	BackendCPU
	BackendCUDA
)

func (b Backend) String() string {
	switch b {
	case BackendAuto:
		return "auto"
	case BackendCPU:
		return "cpu"
	case BackendCUDA:
		return "cuda"
	}
	return fmt.Sprintf("Backend(%d)", int(b))
}

// Selection is a parsed --device value.
type Selection struct {
	Backend Backend
	Index   int // CUDA device ordinal; 0 unless "cuda:N"
}

func (s Selection) String() string {
	if s.Backend == BackendCUDA {
		return fmt.Sprintf("cuda:%d", s.Index)
	}
	return s.Backend.String()
}

// ParseSelection parses a --device value: "auto", "cpu", "cuda" or "cuda:N".
func ParseSelection(v string) (Selection, error) {
	switch s := strings.TrimSpace(strings.ToLower(v)); {
	case s == "auto":
		return Selection{Backend: BackendAuto}, nil
	case s == "cpu":
		return Selection{Backend: BackendCPU}, nil
	case s == "cuda":
		return Selection{Backend: BackendCUDA}, nil
	case strings.HasPrefix(s, "cuda:"):
		n, err := strconv.Atoi(s[len("cuda:"):])
		if err != nil || n < 0 {
			return Selection{}, fmt.Errorf("--device %q: the device index after cuda: must be a non-negative integer", v)
		}
		return Selection{Backend: BackendCUDA, Index: n}, nil
	}
	return Selection{}, fmt.Errorf("--device %q: want auto, cpu, cuda or cuda:N", v)
}

// Prober says whether CUDA device index can be used; nil means yes.
type Prober func(index int) error

// Resolve turns sel into a concrete CPU or CUDA selection. For auto it probes
// device 0 and falls back to the CPU, returning the reason (one line, for the
// log); for an explicit cuda it returns the probe's error.
func Resolve(sel Selection, probe Prober) (resolved Selection, reason string, err error) {
	switch sel.Backend {
	case BackendCPU:
		return sel, "cpu requested", nil
	case BackendCUDA:
		if err := probe(sel.Index); err != nil {
			return Selection{}, "", fmt.Errorf("--device %s: %w", sel, err)
		}
		return sel, fmt.Sprintf("%s requested", sel), nil
	case BackendAuto:
		cuda := Selection{Backend: BackendCUDA}
		if err := probe(0); err != nil {
			return Selection{Backend: BackendCPU}, "using the CPU: CUDA unavailable: " + oneLine(err.Error()), nil
		}
		return cuda, "using cuda:0: driver, device and NVRTC found", nil
	}
	return Selection{}, "", fmt.Errorf("--device: unknown backend %v", sel.Backend)
}

func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// ProbeCUDA is the Prober for this machine: it needs the driver, device index
// and NVRTC. It releases what it loaded.
func ProbeCUDA(index int) error {
	drv, err := LoadDriver()
	if err != nil {
		return err
	}
	defer drv.Close()
	n, err := drv.DeviceCount()
	if err != nil {
		return err
	}
	if index >= n {
		return fmt.Errorf("cuda: device %d out of range: the driver reports %d devices", index, n)
	}
	nv, err := LoadNVRTC()
	if err != nil {
		return err
	}
	nv.Close()
	return nil
}
