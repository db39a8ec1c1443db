package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/heaplens/heaplens/bench/internal/harness"
)

// bench holds the paths one invocation works with.
type bench struct {
	o         options
	peers     *Peers
	tmp       string
	heaplens  string // bin/heaplens
	workloads string // bench/workloads
	warnings  []string
}

// config is one way of running a workload.
type config struct {
	Name     string `json:"name"`
	profiler string // "", "heaplens" or "memray"
	rate     uint64 // heaplens --rate; 0 = the default
	noPython bool   // heaplens --no-python
	native   bool   // memray --native
}

var (
	cfgBare         = config{Name: "bare"}
	cfgHeaplens     = config{Name: "heaplens", profiler: "heaplens"}
	cfgHeaplensNoPy = config{Name: "heaplens --no-python", profiler: "heaplens", noPython: true}
	cfgMemray       = config{Name: "memray", profiler: "memray"}
	cfgMemrayNative = config{Name: "memray --native", profiler: "memray", native: true}
	cfgRate1        = config{Name: "heaplens --rate 1", profiler: "heaplens", rate: 1}
	cfgRate1NoPy    = config{Name: "heaplens --rate 1 --no-python", profiler: "heaplens", rate: 1, noPython: true}
)

// Measurement is one run of one configuration.
type Measurement struct {
	WallS float64 `json:"wall_s"` // harness clock, start to reaped
	// CPUS is user+sys of the whole process tree the harness started (wait4
	// rusage: the child plus the descendants it reaped, so heaplens' agent
	// and its target both count).
	CPUS float64 `json:"cpu_s"`
	// TreeRSSKB is /usr/bin/time's %M (wait4's ru_maxrss of the command it
	// started): the largest peak RSS of any one process of the tree (for
	// heaplens max(agent, target), not their sum). GNU time forks, so the
	// child does not inherit the harness's own peak, as a child started by
	// Go (vfork semantics: the shared mm's peak is kept across exec) would.
	TreeRSSKB int64 `json:"tree_maxrss_kb"`
	// SelfRSSKB is the Python process's own peak RSS, printed by the
	// workload (VmHWM of /proc/self/status at its end): the target with the
	// profiler's in-process part (heaplens' ring, memray's tracker).
	SelfRSSKB    int64              `json:"self_maxrss_kb"`
	CaptureBytes int64              `json:"capture_bytes"` // heaplens .hlc or memray .bin; 0 bare
	Checksum     string             `json:"checksum,omitempty"`
	KV           map[string]float64 `json:"-"`
}

// cleanEnv is the environment without anything that would change what is
// measured: an inherited LD_PRELOAD, HEAPLENS_*, GLIBC_TUNABLES or a
// PYTHON* variable (PYTHONMALLOC above all) would turn "bare" into
// something else. PYTHONHASHSEED is fixed so every run hashes alike.
func cleanEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "LD_PRELOAD=") || strings.HasPrefix(kv, "HEAPLENS_") ||
			strings.HasPrefix(kv, "GLIBC_TUNABLES=") || strings.HasPrefix(kv, "PYTHON") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "PYTHONHASHSEED=0", "PYTHONDONTWRITEBYTECODE=1")
	return append(env, extra...)
}

// command returns the argv that runs script with args under c, and the
// capture file it writes ("" when none).
func (b *bench) command(c config, script string, args []string) (argv []string, capture string) {
	py := append([]string{b.peers.venvPython, filepath.Join(b.workloads, script)}, args...)
	switch c.profiler {
	case "heaplens":
		capture = filepath.Join(b.tmp, "run.hlc")
		argv = []string{b.heaplens, "run", "-q", "-o", capture}
		if c.rate != 0 {
			argv = append(argv, "--rate", strconv.FormatUint(c.rate, 10))
		}
		if c.noPython {
			argv = append(argv, "--no-python")
		}
		return append(append(argv, "--"), py...), capture
	case "memray":
		capture = filepath.Join(b.tmp, "run.bin")
		argv = []string{b.peers.venvPython, "-m", "memray", "run", "-q", "-f", "-o", capture}
		if c.native {
			argv = append(argv, "--native")
		}
		return append(argv, py[1:]...), capture
	}
	return py, ""
}

// runOnce runs script once under c. key names the number that marks the
// workload's result line (the last line of standard output holding it:
// memray may print after it).
func (b *bench) runOnce(c config, key, script string, args ...string) (Measurement, error) {
	var m Measurement
	ctx, cancel := context.WithTimeout(context.Background(), b.o.timeout)
	defer cancel()
	argv, capture := b.command(c, script, args)
	timeFile := filepath.Join(b.tmp, "time.out")
	defer os.Remove(timeFile)
	argv = append([]string{timeBin, "-f", "%M", "-o", timeFile}, argv...)
	if capture != "" {
		os.Remove(capture)
		defer os.Remove(capture)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = cleanEnv(nil)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	m.WallS = time.Since(start).Seconds()
	b.noteWarnings(c, script, stderr.String())
	label := fmt.Sprintf("%s %s %s", c.Name, script, strings.Join(args, " "))
	if err != nil {
		return m, fmt.Errorf("%s: %v\n%s", label, err, lastLines(stderr.String(), 10))
	}
	ps := cmd.ProcessState
	m.CPUS = (ps.UserTime() + ps.SystemTime()).Seconds()
	if out, err := os.ReadFile(timeFile); err == nil {
		m.TreeRSSKB, _ = strconv.ParseInt(lastLines(string(out), 1), 10, 64)
	}
	line := resultLine(stdout.String(), key)
	m.KV = harness.ParseKV(line)
	if _, ok := m.KV[key]; !ok {
		return m, fmt.Errorf("%s: no %s= in output %q", label, key, stdout.String())
	}
	m.SelfRSSKB = int64(m.KV["maxrss_kb"])
	m.Checksum = rawValue(line, "checksum")
	if capture != "" {
		if st, err := os.Stat(capture); err == nil {
			m.CaptureBytes = st.Size()
		} else {
			b.warn(fmt.Sprintf("%s: no capture file written", label))
		}
	}
	return m, nil
}

// timeBin is GNU time (Debian's package time), which measures the tree's
// peak RSS.
const timeBin = "/usr/bin/time"

// hexAddr matches addresses, which differ run by run in otherwise equal warnings.
var hexAddr = regexp.MustCompile(`0x[0-9a-fA-F]+`)

// warn records w once; warnings that differ only in addresses count as one.
func (b *bench) warn(w string) {
	w = hexAddr.ReplaceAllString(w, "0x…")
	for _, x := range b.warnings {
		if x == w {
			return
		}
	}
	b.warnings = append(b.warnings, w)
}

// noteWarnings keeps the profilers' warnings (dropped records above all: a
// run that dropped samples did less work than it should have) once each.
func (b *bench) noteWarnings(c config, script, stderr string) {
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(strings.ToLower(l), "warning") {
			b.warn(fmt.Sprintf("%s %s: %s", c.Name, script, strings.TrimSpace(l)))
		}
	}
}

// resultLine is the last line of out that holds key=.
func resultLine(out, key string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		for _, f := range strings.Fields(lines[i]) {
			if strings.HasPrefix(f, key+"=") {
				return lines[i]
			}
		}
	}
	return ""
}

// rawValue is the text after key= in line, "" when absent: checksums are
// compared as printed, not as parsed floats.
func rawValue(line, key string) string {
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// interleave runs every configuration b.o.runs times, in the rotated
// order of rotation, and returns the measurements per configuration.
func (b *bench) interleave(cfgs []config, key, script string, args ...string) ([][]Measurement, error) {
	res := make([][]Measurement, len(cfgs))
	for i := 0; i < b.o.runs; i++ {
		for _, j := range harness.Rotation(len(cfgs), i) {
			m, err := b.runOnce(cfgs[j], key, script, args...)
			if err != nil {
				return nil, err
			}
			res[j] = append(res[j], m)
		}
	}
	return res, nil
}

// field extracts one number from each measurement.
func field(ms []Measurement, f func(Measurement) float64) []float64 {
	xs := make([]float64, len(ms))
	for i, m := range ms {
		xs[i] = f(m)
	}
	return xs
}
