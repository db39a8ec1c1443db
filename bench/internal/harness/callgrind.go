package harness

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// CallgrindTotals returns the first event count (Ir) of the "totals:"
// line of a callgrind output file, or of "summary:" when there is no totals
// line (both are written; older versions wrote only summary).
func CallgrindTotals(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var summary string
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "totals:"); ok {
			return firstUint(v)
		}
		if v, ok := strings.CutPrefix(line, "summary:"); ok && summary == "" {
			summary = v
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if summary != "" {
		return firstUint(summary)
	}
	return 0, errors.New("no totals: or summary: line")
}

// CallgrindFile is CallgrindTotals of the file at path.
func CallgrindFile(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := CallgrindTotals(f)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

func firstUint(s string) (uint64, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0, fmt.Errorf("empty count %q", s)
	}
	return strconv.ParseUint(f[0], 10, 64)
}
