// Command hlpybench measures what heaplens costs a Python program: the
// end-to-end wall time, CPU time, peak RSS and capture size of an
// allocation-heavy pure-Python workload and a numpy workload, bare, under
// heaplens (default rate, and --no-python) and under memray (default and
// --native) for comparison; and the cost of one sampled allocation at a
// ~50-frame mixed Python/native stack and at a shallow one.
//
// Run it from the repository root after `make`:
//
//	go run ./bench/cmd/hlpybench [-runs 7] [-quick] [-out bench/results]
//
// It installs its peers itself when they are missing (python3-numpy,
// python3-venv and python3-pip from Debian; memray with pip into the venv
// bench/.venv, made with --system-site-packages so Debian's numpy is seen),
// writes python.md and python.json into -out and prints the markdown.
//
// As in hlbench, every comparison is made inside one invocation: the
// configurations of a workload are interleaved run by run, in a rotated
// order, and medians are compared.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/heaplens/heaplens/bench/internal/harness"
)

// defaultRate is heaplens' default sampling period (512 KiB), the rate of
// the end-to-end runs: the overhead a user sees without tuning anything.
const defaultRate = 512 << 10

// goalRatio is the goal for heaplens' wall time over bare at the
// default rate.
const goalRatio = 1.05

type options struct {
	runs      int
	quick     bool
	out       string
	root      string
	setupOnly bool
	keepTemp  bool
	timeout   time.Duration
	// workload sizes
	churnRounds int
	numpyIters  int
	numpyN      int
	deepN       int
	deepSize    int
	levels      []int // py_deep: C re-entries above the allocating loop (shallow, deep)
}

func main() {
	var o options
	flag.IntVar(&o.runs, "runs", 7, "interleaved runs per configuration (the median is reported)")
	flag.BoolVar(&o.quick, "quick", false, "smoke test: 3 runs, small workloads")
	flag.StringVar(&o.out, "out", filepath.Join("bench", "results"), "directory for python.md and python.json")
	flag.StringVar(&o.root, "root", ".", "repository root (holds bin/heaplens and bench/workloads)")
	flag.BoolVar(&o.setupOnly, "setup", false, "only install the peers (Debian packages, venv, memray), then exit")
	flag.BoolVar(&o.keepTemp, "keep", false, "keep the temporary directory (captures)")
	flag.Parse()
	o.timeout = 5 * time.Minute
	o.churnRounds, o.numpyIters, o.numpyN = 1400, 240, 1_000_000
	o.deepN, o.deepSize = 100_000, 1024
	o.levels = []int{0, 4}
	if o.quick {
		o.runs = 3
		o.churnRounds, o.numpyIters, o.numpyN = 40, 20, 500_000
		o.deepN = 30_000
	}
	if o.runs < 1 {
		fmt.Fprintln(os.Stderr, "hlpybench: -runs must be at least 1")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "hlpybench:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "hlpybench: "+format+"\n", args...)
}

func run(o options) error {
	root, err := filepath.Abs(o.root)
	if err != nil {
		return err
	}
	peers, err := setup(root, logf)
	if err != nil {
		return err
	}
	logf("python %s, numpy %s, memray %s%s", peers.Python, peers.Numpy, orDash(peers.Memray), peers.MemrayReason)
	if o.setupOnly {
		return nil
	}
	b := &bench{o: o, peers: peers, heaplens: filepath.Join(root, "bin", "heaplens"), workloads: filepath.Join(root, "bench", "workloads")}
	if _, err := os.Stat(b.heaplens); err != nil {
		return fmt.Errorf("%v (run make in the repository root first, or pass -root)", err)
	}
	b.tmp, err = os.MkdirTemp("", "hlpybench-")
	if err != nil {
		return err
	}
	if o.keepTemp {
		logf("temporary files in %s", b.tmp)
	} else {
		defer os.RemoveAll(b.tmp)
	}

	rep := Report{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Machine: harness.MachineInfo(),
		Peers:   *peers,
		Runs:    o.runs,
		Quick:   o.quick,
		Rate:    defaultRate,
		Goal:    goalRatio,
	}
	start := time.Now()
	if rep.Samples, err = b.perSample(); err != nil {
		return err
	}
	for _, w := range b.endToEndWorkloads() {
		r, err := b.endToEnd(w)
		if err != nil {
			return err
		}
		rep.Workloads = append(rep.Workloads, r)
	}
	rep.Notes = notes(peers)
	rep.Warnings = b.warnings
	rep.Seconds = math.Round(time.Since(start).Seconds())

	return harness.Save(o.out, "python", formatMarkdown(rep), rep)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
