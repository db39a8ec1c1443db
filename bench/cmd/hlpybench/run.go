package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/heaplens/heaplens/bench/internal/harness"
	"github.com/heaplens/heaplens/bench/internal/peers"
)

// bench holds the paths one invocation works with.
type bench struct {
	o         options
	peers     *peers.Peers
	tmp       string
	heaplens  string // bin/heaplens
	workloads string // bench/workloads
	warnings  []string
}

// config is one way of running a workload.
type config struct {
	Name     string `json:"name"`
	profiler string // "" or "heaplens"
	rate     uint64 // heaplens --rate; 0 = the default
	noPython bool   // heaplens --no-python
}

var (
	cfgBare      = config{Name: "bare"}
	cfgRate1     = config{Name: "heaplens --rate 1", profiler: "heaplens", rate: 1}
	cfgRate1NoPy = config{Name: "heaplens --rate 1 --no-python", profiler: "heaplens", rate: 1, noPython: true}
)

// Measurement is one run of one configuration.
type Measurement struct {
	WallS float64            `json:"wall_s"` // harness clock, start to reaped
	CPUS  float64            `json:"cpu_s"`  // the whole tree (GNU time's rusage)
	KV    map[string]float64 `json:"-"`
}

// command returns the argv that runs script with args under c.
func (b *bench) command(c config, script string, args []string) []string {
	py := append([]string{b.peers.VenvPython, filepath.Join(b.workloads, script)}, args...)
	if c.profiler != "heaplens" {
		return py
	}
	argv := []string{b.heaplens, "run", "-q", "-o", filepath.Join(b.tmp, "run.hlc")}
	if c.rate != 0 {
		argv = append(argv, "--rate", strconv.FormatUint(c.rate, 10))
	}
	if c.noPython {
		argv = append(argv, "--no-python")
	}
	return append(append(argv, "--"), py...)
}

// runOnce runs script once under c. key names the number that marks the
// workload's result line.
func (b *bench) runOnce(c config, key, script string, args ...string) (Measurement, error) {
	var m Measurement
	r, err := harness.Run(harness.Command{Argv: b.command(c, script, args), Env: harness.CleanEnv(),
		Timeout: b.o.timeout, Scratch: b.tmp})
	b.noteWarnings(c, script, r.Stderr)
	label := fmt.Sprintf("%s %s %s", c.Name, script, strings.Join(args, " "))
	if err != nil {
		return m, fmt.Errorf("%s: %w", label, err)
	}
	m.WallS, m.CPUS = r.WallS, r.CPUS
	m.KV = harness.ParseKV(harness.ResultLine(r.Stdout, key))
	if _, ok := m.KV[key]; !ok {
		return m, fmt.Errorf("%s: no %s= in output %q", label, key, r.Stdout)
	}
	return m, nil
}

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

// noteWarnings keeps heaplens' warnings (dropped records above all: a run
// that dropped samples did less work than it should have) once each.
func (b *bench) noteWarnings(c config, script, stderr string) {
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(strings.ToLower(l), "warning") {
			b.warn(fmt.Sprintf("%s %s: %s", c.Name, script, strings.TrimSpace(l)))
		}
	}
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
