package serveload

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// ResidentBytes is this process's resident set size (VmRSS in
// /proc/self/status), bytes. It fails where /proc is absent (not Linux).
func ResidentBytes() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("serveload: resident memory: %w", err)
	}
	defer f.Close()
	return parseVmRSS(f)
}

// parseVmRSS reads the "VmRSS:  1234 kB" line of a /proc/PID/status file.
func parseVmRSS(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmRSS:"))
		if !ok {
			continue
		}
		fields := strings.Fields(string(rest))
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("serveload: VmRSS line %q: want \"VmRSS: N kB\"", sc.Text())
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || kb < 0 {
			return 0, fmt.Errorf("serveload: VmRSS value %q: not a non-negative integer", fields[0])
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("serveload: reading status: %w", err)
	}
	return 0, fmt.Errorf("serveload: no VmRSS line in status")
}

// LoadAverage is the 1-minute load average (/proc/loadavg), for reports
// from a shared machine. It fails where /proc is absent.
func LoadAverage() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, fmt.Errorf("serveload: load average: %w", err)
	}
	return parseLoadAvg(b)
}

// parseLoadAvg reads the first field of /proc/loadavg.
func parseLoadAvg(b []byte) (float64, error) {
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("serveload: /proc/loadavg %q: empty", b)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("serveload: /proc/loadavg field %q: not a non-negative number", f[0])
	}
	return v, nil
}
