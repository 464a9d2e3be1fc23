package mmapfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMap(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(p, []byte("hello, mapping"), 0o644))
	data, err := Map(p, 4)
	require.NoError(t, err)
	require.Equal(t, "hello, mapping", string(data))
	require.NoError(t, Unmap(data))

	_, err = Map(p, 100)
	var small *TooSmallError
	require.True(t, errors.As(err, &small))
	require.Equal(t, int64(14), small.Size)
	require.ErrorContains(t, err, p+" is 14 bytes (at least 100 expected)")

	_, err = Map(filepath.Join(dir, "missing"), 0)
	require.ErrorIs(t, err, os.ErrNotExist)

	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	data, err = Map(empty, 0)
	require.NoError(t, err)
	require.Empty(t, data)
	require.NoError(t, Unmap(data))
}

// TestRelease: dropping a mapping's resident pages keeps its contents
// readable (they fault back in from the file).
func TestRelease(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	want := make([]byte, 3*4096+17)
	for i := range want {
		want[i] = byte(i * 7)
	}
	require.NoError(t, os.WriteFile(p, want, 0o644))
	data, err := Map(p, 1)
	require.NoError(t, err)
	require.Equal(t, want, data)
	require.NoError(t, Release(data))
	require.Equal(t, want, data, "contents after Release")
	require.NoError(t, Release(nil), "nothing to release")
	require.NoError(t, Unmap(data))
}
