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
