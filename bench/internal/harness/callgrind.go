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

// CallgrindObjects returns the first event's self cost (the instructions
// executed in its own code, not in what it calls) per object file of a
// callgrind output file (format: valgrind's docs/callgrind-format). A
// cost line after calls= is the call's inclusive cost and is not counted;
// names compressed as "(N)" are those of ob= and cob= lines alike.
func CallgrindObjects(r io.Reader) (map[string]uint64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	names := map[string]string{}
	out := map[string]uint64{}
	npos, ob, call := 1, "", false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if c := line[0]; c >= '0' && c <= '9' || c == '+' || c == '-' || c == '*' {
			if call { // the inclusive cost of the call above: the callee's, counted where it ran
				call = false
				continue
			}
			f := strings.Fields(line)
			if len(f) <= npos {
				continue // no cost: a position only
			}
			n, err := strconv.ParseUint(f[npos], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("cost line %q: %w", line, err)
			}
			out[ob] += n
			continue
		}
		key, v, _ := strings.Cut(line, "=")
		switch key {
		case "ob":
			ob = objectName(names, v)
		case "cob":
			objectName(names, v)
		case "calls":
			call = true
		}
		if p, ok := strings.CutPrefix(line, "positions:"); ok {
			npos = len(strings.Fields(p))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// objectName resolves "(N) name" (defining N) or "(N)" to the name.
func objectName(names map[string]string, v string) string {
	if !strings.HasPrefix(v, "(") {
		return v
	}
	id, name, _ := strings.Cut(v, ")")
	if name = strings.TrimSpace(name); name != "" {
		names[id] = name
		return name
	}
	return names[id]
}

// CallgrindObjectsFile is CallgrindObjects of the file at path.
func CallgrindObjectsFile(path string) (map[string]uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := CallgrindObjects(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}
