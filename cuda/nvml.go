package cuda

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GPU is one device as NVML reports it.
type GPU struct {
	Index        int
	Name         string
	UUID         string
	TotalMemory  uint64 // bytes
	FreeMemory   uint64 // bytes, when discovered
	Major, Minor int    // compute capability
}

// Discover lists the GPUs through NVML (libnvidia-ml.so.1). Without the library
// or a driver it returns an error; it never exits or panics.
func Discover() ([]GPU, error) {
	lib := nvml.New()
	if r := lib.Init(); r != nvml.SUCCESS {
		return nil, fmt.Errorf("cuda: NVML init: %s", nvmlString(lib, r))
	}
	defer lib.Shutdown()
	n, r := lib.DeviceGetCount()
	if r != nvml.SUCCESS {
		return nil, fmt.Errorf("cuda: NVML device count: %s", nvmlString(lib, r))
	}
	gpus := make([]GPU, 0, n)
	for i := 0; i < n; i++ {
		d, r := lib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			return nil, fmt.Errorf("cuda: NVML device %d: %s", i, nvmlString(lib, r))
		}
		g := GPU{Index: i}
		if g.Name, r = d.GetName(); r != nvml.SUCCESS {
			return nil, fmt.Errorf("cuda: NVML device %d name: %s", i, nvmlString(lib, r))
		}
		if g.UUID, r = d.GetUUID(); r != nvml.SUCCESS {
			return nil, fmt.Errorf("cuda: NVML device %d UUID: %s", i, nvmlString(lib, r))
		}
		mem, r := d.GetMemoryInfo()
		if r != nvml.SUCCESS {
			return nil, fmt.Errorf("cuda: NVML device %d memory: %s", i, nvmlString(lib, r))
		}
		g.TotalMemory, g.FreeMemory = mem.Total, mem.Free
		if g.Major, g.Minor, r = d.GetCudaComputeCapability(); r != nvml.SUCCESS {
			return nil, fmt.Errorf("cuda: NVML device %d compute capability: %s", i, nvmlString(lib, r))
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}

// nvmlString names r; the library's own text needs it loaded.
func nvmlString(lib nvml.Interface, r nvml.Return) string {
	if r == nvml.ERROR_LIBRARY_NOT_FOUND {
		return "libnvidia-ml.so.1 not found (no NVIDIA driver)"
	}
	return fmt.Sprintf("%s (%d)", lib.ErrorString(r), int(r))
}
