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

// TestRelease: dropping resident pages of a mapping, whole or any part of
// it, keeps its contents readable (they fault back in from the file), and a
// slice outside the mapping is left alone.
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
	for _, r := range [][2]int{{0, len(data)}, {100, 5000}, {4096, 8192}, {1, 2}, {len(data) - 1, len(data)}} {
		require.NoError(t, Release(data, data[r[0]:r[1]]), "range %v", r)
		require.Equal(t, want, data, "contents after releasing %v", r)
	}
	other := make([]byte, 3*4096)
	other[5000] = 9
	require.NoError(t, Release(data, other), "a slice outside the mapping")
	require.Equal(t, byte(9), other[5000], "memory outside the mapping is untouched")
	require.NoError(t, Release(nil, data))
	require.NoError(t, Release(data, nil))
	require.NoError(t, Unmap(data))
}
