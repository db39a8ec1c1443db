package harness

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Common holds the settings every benchmark takes (the flags of
// bench/cmd/hlbench).
type Common struct {
	Runs  int    // interleaved runs per configuration; 0 = the benchmark's own default
	Quick bool   // smoke test: 3 runs, small workloads
	Out   string // directory for NAME.md and NAME.json
	Root  string // the repository root, absolute
	Keep  bool   // keep the temporary directory
}

// Register defines the common flags on fs.
func (c *Common) Register(fs *flag.FlagSet) {
	fs.IntVar(&c.Runs, "runs", 0, "interleaved runs per configuration; the median is reported (0 = each benchmark's default: 7, 8 for compare)")
	fs.BoolVar(&c.Quick, "quick", false, "smoke test: 3 runs, small workloads")
	fs.StringVar(&c.Out, "out", filepath.Join("bench", "results"), "directory for the results (NAME.md and NAME.json)")
	fs.StringVar(&c.Root, "root", ".", "repository root (holds bin/heaplens, the library and bench/workloads)")
	fs.BoolVar(&c.Keep, "keep", false, "keep the temporary directory (workload binaries, captures, callgrind files)")
}

// Resolve fills in the defaults of a benchmark whose own run count is
// runs, and makes Root absolute.
func (c *Common) Resolve(runs int) error {
	if c.Runs == 0 {
		c.Runs = runs
		if c.Quick {
			c.Runs = 3
		}
	}
	if c.Runs < 1 {
		return fmt.Errorf("-runs must be at least 1")
	}
	root, err := filepath.Abs(c.Root)
	if err != nil {
		return err
	}
	c.Root = root
	return nil
}

// Built checks that the files a benchmark measures (bin/heaplens, the
// library) exist, saying how to make them when one does not.
func (c *Common) Built(paths ...string) error {
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%v (run make in the repository root first, or pass -root)", err)
		}
	}
	return nil
}

// TempDir makes the benchmark's temporary directory; done removes it
// unless Keep, in which case its path is logged.
func (c *Common) TempDir(name string, logf func(string, ...any)) (dir string, done func(), err error) {
	dir, err = os.MkdirTemp("", name+"-")
	if err != nil {
		return "", nil, err
	}
	if c.Keep {
		logf("temporary files in %s", dir)
		return dir, func() {}, nil
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

// Logf returns a logger that prefixes messages with the benchmark's name,
// on standard error.
func Logf(name string) func(string, ...any) {
	return func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "hlbench "+name+": "+format+"\n", args...)
	}
}

// Warnings keeps the warnings of a benchmark's runs (dropped records above
// all: a run that dropped samples did less work than it should have), once
// each: warnings that differ only in numbers (addresses, pids) count as
// one, and the first is kept as written.
type Warnings struct {
	List []string
	seen map[string]bool
}

var numbers = regexp.MustCompile(`0x[0-9a-fA-F]+|\b\d{3,}\b`)

// Add records w unless an equal one was.
func (ws *Warnings) Add(w string) {
	k := numbers.ReplaceAllString(w, "N")
	if ws.seen == nil {
		ws.seen = map[string]bool{}
	}
	if !ws.seen[k] {
		ws.seen[k] = true
		ws.List = append(ws.List, w)
	}
}

// Note records the lines of a run's output that say "warning", each
// prefixed with label, except those matching a benign pattern.
func (ws *Warnings) Note(label, output string, benign ...string) {
lines:
	for _, l := range strings.Split(output, "\n") {
		if !strings.Contains(strings.ToLower(l), "warning") {
			continue
		}
		for _, b := range benign {
			if strings.Contains(l, b) {
				continue lines
			}
		}
		ws.Add(label + ": " + strings.TrimSpace(l))
	}
}

// Field extracts one number from each measurement.
func Field[M any](ms []M, f func(M) float64) []float64 {
	xs := make([]float64, len(ms))
	for i, m := range ms {
		xs[i] = f(m)
	}
	return xs
}

// Stamp is what every result starts with: when, where, how many runs, how
// long, and what went wrong on the way.
type Stamp struct {
	Date     string   `json:"date"`
	Machine  Machine  `json:"machine"`
	Runs     int      `json:"runs"`
	Quick    bool     `json:"quick"`
	Seconds  float64  `json:"seconds"`
	Warnings []string `json:"warnings,omitempty"`
	start    time.Time
}

// Stamp starts a result now.
func (c *Common) Stamp() Stamp {
	return Stamp{Date: time.Now().UTC().Format(time.RFC3339), Machine: MachineInfo(), Runs: c.Runs, Quick: c.Quick, start: time.Now()}
}

// Finish records how long the benchmark took and its warnings.
func (s *Stamp) Finish(w *Warnings) {
	s.Seconds = math.Round(time.Since(s.start).Seconds())
	s.Warnings = w.List
}

// Header is the markdown title and the line under it that says where and
// how the numbers were taken; extra goes after the machine (a Python
// version).
func (s *Stamp) Header(title, extra string) string {
	m := s.Machine
	var sb strings.Builder
	fmt.Fprintf(&sb, "# %s\n\n%s · %s, %d vCPUs · kernel %s · %s · %s", title, s.Date, m.CPU, m.CPUs, m.Kernel, m.Glibc, m.Go)
	if extra != "" {
		sb.WriteString(" · " + extra)
	}
	fmt.Fprintf(&sb, " · median of %d interleaved runs per configuration · %.0f s", s.Runs, s.Seconds)
	if s.Quick {
		sb.WriteString(" · QUICK (smoke test, not for quoting)")
	}
	return sb.String()
}
