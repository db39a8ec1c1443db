// Command hlpybench measures the cost of one sampled allocation in a
// Python program: an ALLOC record with a ~50-frame mixed Python/native
// stack and at a shallow one, with and without the Python frames. The
// end-to-end comparison of Python workloads against bare runs and memray
// lives in bench/cmd/hlcompare, with the native workloads.
//
// Run it from the repository root after `make`:
//
//	go run ./bench/cmd/hlpybench [-runs 7] [-quick] [-out bench/results]
//
// It installs what it needs when it is missing (see bench/internal/peers),
// writes python.md and python.json into -out and prints the markdown.
//
// As in hlbench, every comparison is made inside one invocation: the
// configurations are interleaved run by run, in a rotated order, and
// medians are compared.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/heaplens/heaplens/bench/internal/harness"
	"github.com/heaplens/heaplens/bench/internal/peers"
)

type options struct {
	runs      int
	quick     bool
	out       string
	root      string
	setupOnly bool
	keepTemp  bool
	timeout   time.Duration
	deepN     int
	deepSize  int
	levels    []int // py_deep: C re-entries above the allocating loop (shallow, deep)
}

func main() {
	var o options
	flag.IntVar(&o.runs, "runs", 7, "interleaved runs per configuration (the median is reported)")
	flag.BoolVar(&o.quick, "quick", false, "smoke test: 3 runs, small workloads")
	flag.StringVar(&o.out, "out", filepath.Join("bench", "results"), "directory for python.md and python.json")
	flag.StringVar(&o.root, "root", ".", "repository root (holds bin/heaplens and bench/workloads)")
	flag.BoolVar(&o.setupOnly, "setup", false, "only install what is needed (Debian packages, venv), then exit")
	flag.BoolVar(&o.keepTemp, "keep", false, "keep the temporary directory (captures)")
	flag.Parse()
	o.timeout = 5 * time.Minute
	o.deepN, o.deepSize = 100_000, 1024
	o.levels = []int{0, 4}
	if o.quick {
		o.runs = 3
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
	p, err := peers.Setup(root, peers.Want{}, logf)
	if err != nil {
		return err
	}
	logf("python %s", p.Python)
	if o.setupOnly {
		return nil
	}
	b := &bench{o: o, peers: p, heaplens: filepath.Join(root, "bin", "heaplens"), workloads: filepath.Join(root, "bench", "workloads")}
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
		Python:  p.Python,
		Runs:    o.runs,
		Quick:   o.quick,
	}
	start := time.Now()
	if rep.Samples, err = b.perSample(); err != nil {
		return err
	}
	rep.Notes = notes(p)
	rep.Warnings = b.warnings
	rep.Seconds = math.Round(time.Since(start).Seconds())

	return harness.Save(o.out, "python", formatMarkdown(rep), rep)
}
