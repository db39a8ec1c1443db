package pycost

import (
	"fmt"
	"path/filepath"
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
	warnings  harness.Warnings
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
	b.warnings.Note(c.Name+" "+script, r.Stderr)
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

// interleave runs every configuration b.o.Runs times, in the rotated
// order of rotation, and returns the measurements per configuration.
func (b *bench) interleave(cfgs []config, key, script string, args ...string) ([][]Measurement, error) {
	res := make([][]Measurement, len(cfgs))
	for i := 0; i < b.o.Runs; i++ {
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
