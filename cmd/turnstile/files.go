package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/turnstile-llm/turnstile/bench/progress"
	"github.com/turnstile-llm/turnstile/bench/report"
)

// writeFile creates path and fills it with write through a temporary file
// renamed into place, so a failed write never leaves a partial file under
// the final name (a model, a report).
func writeFile(path string, write func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

// rowLog is what a campaign command does with each row as it completes:
// append it to DIR/rows.csv (so a crash loses nothing) and redraw the
// progress bar. Close finishes both.
type rowLog struct {
	f   *os.File // nil without a directory
	csv *report.CSVWriter
	bar *progress.Bar
}

// openRowLog starts a log of total rows; dir "" writes no CSV.
func openRowLog(dir string, total int, progressOut io.Writer) (*rowLog, error) {
	bar, err := progress.New(progressOut, total, time.Now)
	if err != nil {
		return nil, err
	}
	l := &rowLog{bar: bar}
	if dir == "" {
		return l, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	if l.f, err = os.Create(filepath.Join(dir, "rows.csv")); err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	if l.csv, err = report.NewCSVWriter(l.f); err != nil {
		l.f.Close()
		return nil, fmt.Errorf("rows.csv: %w", err)
	}
	return l, nil
}

// row records row, the done-th of the log, labelled on the bar.
func (l *rowLog) row(row *report.Row, done int, label string) error {
	if l.csv != nil {
		if err := l.csv.Write(row); err != nil {
			return err
		}
	}
	return l.bar.Update(done, label)
}

// progress redraws the bar without a row (e.g. between campaigns).
func (l *rowLog) progress(done int, label string) error { return l.bar.Update(done, label) }

// Close ends the bar and closes rows.csv; it returns the first error.
func (l *rowLog) Close() error {
	err := l.bar.Done()
	if l.f != nil {
		if cerr := l.f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("rows.csv: %w", cerr)
		}
	}
	return err
}
