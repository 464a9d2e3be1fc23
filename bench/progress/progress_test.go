package progress

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clockAt is a manual clock for tests.
type clockAt struct{ t time.Time }

func (c *clockAt) now() time.Time { return c.t }

func TestBar(t *testing.T) {
	c := &clockAt{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var buf bytes.Buffer
	b, err := New(&buf, 4, c.now)
	require.NoError(t, err)
	steps := []struct {
		advance time.Duration
		done    int
		label   string
		want    string
	}{
		{0, 0, "calibration A s0", "\r[..............................] 0/4   0% 0s elapsed, ETA ?  calibration A s0"},
		{10 * time.Second, 1, "calibration b1 s0", "\r[#######.......................] 1/4  25% 10s elapsed, ETA 30s  calibration b1 s0"},
		{10 * time.Second, 3, "x", "\r[######################........] 3/4  75% 20s elapsed, ETA 7s  x" + "                 "},
		{5 * time.Second, 9, "done", "\r[##############################] 4/4 100% 25s elapsed, ETA 0s  done"},
	}
	for _, s := range steps {
		c.t = c.t.Add(s.advance)
		buf.Reset()
		require.NoError(t, b.Update(s.done, s.label))
		require.Equal(t, s.want, buf.String())
	}
	buf.Reset()
	require.NoError(t, b.Done())
	require.Equal(t, "\n", buf.String())

	_, err = New(&buf, 0, c.now)
	require.ErrorContains(t, err, "total 0 < 1")
	bad, err := New(failWriter{}, 1, c.now)
	require.NoError(t, err)
	require.ErrorContains(t, bad.Update(0, ""), "disk full")
	require.ErrorContains(t, bad.Done(), "disk full")
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }
