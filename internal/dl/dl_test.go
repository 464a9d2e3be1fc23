package dl

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOpen(t *testing.T) {
	_, err := Open("test: nothing", nil, false)
	require.ErrorIs(t, err, ErrLibraryNotFound)
	require.ErrorContains(t, err, "test: nothing: no candidate names")

	_, err = Open("test: bogus", []string{"libturnstile-none.so.1", "/nonexistent/libx.so"}, false)
	require.ErrorIs(t, err, ErrLibraryNotFound)
	require.ErrorContains(t, err, "test: bogus: none of [libturnstile-none.so.1, /nonexistent/libx.so] could be loaded (last: ")

	for _, global := range []bool{false, true} {
		l, err := Open("test: libc", []string{"libturnstile-none.so.1", "libc.so.6"}, global)
		require.NoError(t, err)
		require.Equal(t, "libc.so.6", l.Name, "the first loadable candidate")
		require.NotNil(t, l.Handle)
		l.Close()
	}
	Library{}.Close()
}
