package nccl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/cuda"
)

// TestOneGPUAllReduce runs a one-rank communicator on device 0: all-reduce,
// all-gather, reduce-scatter and broadcast (in a group) each return their input,
// which checks the table's prototypes, the by-value unique id and the stream
// argument against a real libnccl. It skips without libcuda, a device or
// libnccl; scripts/gpu-check.sh treats that skip as a failure. Only the test
// imports package cuda: dist/nccl itself stays a leaf.
func TestOneGPUAllReduce(t *testing.T) {
	drv, err := cuda.LoadDriver()
	if err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	defer drv.Close()
	require.NoError(t, drv.Init())
	if n, err := drv.DeviceCount(); err != nil || n == 0 {
		t.Skipf("no CUDA device (count %d, err %v)", n, err)
	}
	lib, err := Open()
	if err != nil {
		t.Skipf("no NCCL: %v", err)
	}
	v, err := lib.Version()
	require.NoError(t, err)
	t.Logf("%s version %d", lib.Library(), v)
	id, err := lib.UniqueID()
	require.NoError(t, err)
	require.NotEqual(t, UniqueID{}, id, "ncclGetUniqueId left the id zero")

	dev, err := drv.Open(0)
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()

	const n = 1000
	in := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(in[4*i:], math.Float32bits(float32(i)*0.5-7))
	}
	// Do runs f on the device's own thread: no require inside it (FailNow must
	// run on the test goroutine), only returned errors.
	outs := map[string][]byte{}
	err = dev.Do(func(c cuda.Ctx) (err error) {
		comm, err := lib.InitRank(1, 0, id)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, comm.Destroy()) }()
		send, err := c.Alloc(4 * n)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, c.Free(send)) }()
		recv, err := c.Alloc(4 * n)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, c.Free(recv)) }()
		if err := c.CopyHtoD(send, in); err != nil {
			return err
		}

		s, r := uintptr(send), uintptr(recv)
		steps := []struct {
			name string
			run  func() error
		}{
			{"ncclAllReduce", func() error { return comm.AllReduceSum(s, r, n, Float32, 0) }},
			{"ncclAllGather", func() error { return comm.AllGather(s, r, n, Float32, 0) }},
			{"ncclReduceScatter", func() error { return comm.ReduceScatterSum(s, r, n, Float32, 0) }},
			{"ncclBroadcast in a group", func() error {
				if err := lib.GroupStart(); err != nil {
					return err
				}
				return errors.Join(comm.Broadcast(s, r, n, Float32, 0, 0), lib.GroupEnd())
			}},
		}
		for _, st := range steps {
			out := make([]byte, 4*n)
			for _, f := range []func() error{
				func() error { return c.MemsetD8Async(recv, 0, 4*n, cuda.Stream{}) },
				st.run,
				c.Synchronize,
				comm.AsyncError,
				func() error { return c.CopyDtoH(out, recv) },
			} {
				if err := f(); err != nil {
					return fmt.Errorf("%s: %w", st.name, err)
				}
			}
			outs[st.name] = out
		}
		return nil
	})
	require.NoError(t, err)
	require.Len(t, outs, 4)
	for name, out := range outs {
		require.Equal(t, in, out, "%s on one rank must return its input", name)
	}
}
