// Package progress draws the one-line text progress bar the bench commands
// show while a campaign runs: rows done of the total, percent, elapsed time,
// an estimate of the time left and what is running now. It redraws in place
// with a carriage return, so it belongs on a terminal's stderr.
package progress

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Bar is a progress bar over a known number of items. Not safe for
// concurrent use (a campaign runs its rows one at a time).
type Bar struct {
	w     io.Writer
	total int
	width int
	now   func() time.Time
	start time.Time
	last  int // length of the last line drawn, to blank leftovers
}

// New returns a bar of total items (≥ 1) drawn on w, reading wall time from
// now (time.Now in the commands; a fixed clock in tests). The bar itself
// is 30 cells wide.
func New(w io.Writer, total int, now func() time.Time) (*Bar, error) {
	if total < 1 {
		return nil, fmt.Errorf("progress: total %d < 1", total)
	}
	return &Bar{w: w, total: total, width: 30, now: now, start: now()}, nil
}

// Update redraws the bar with done of total items finished and label
// naming the item running now. done is clamped to [0, total].
func (b *Bar) Update(done int, label string) error {
	done = min(max(done, 0), b.total)
	cells := done * b.width / b.total
	elapsed := b.now().Sub(b.start).Round(time.Second)
	eta := "?"
	if done > 0 {
		left := time.Duration(float64(elapsed) * float64(b.total-done) / float64(done))
		eta = left.Round(time.Second).String()
	}
	line := fmt.Sprintf("[%s%s] %d/%d %3d%% %s elapsed, ETA %s  %s",
		strings.Repeat("#", cells), strings.Repeat(".", b.width-cells),
		done, b.total, 100*done/b.total, elapsed, eta, label)
	pad := ""
	if n := len(line); n < b.last {
		pad = strings.Repeat(" ", b.last-n)
	}
	b.last = len(line)
	if _, err := io.WriteString(b.w, "\r"+line+pad); err != nil {
		return fmt.Errorf("progress: draw: %w", err)
	}
	return nil
}

// Done ends the bar's line.
func (b *Bar) Done() error {
	if _, err := io.WriteString(b.w, "\n"); err != nil {
		return fmt.Errorf("progress: finish: %w", err)
	}
	return nil
}
