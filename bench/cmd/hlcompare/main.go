// Command hlcompare measures heaplens against a bare run and against other
// memory profilers, on native and Python workloads, and checks that its
// sampled estimates are as accurate as the sampling math predicts:
//
//   - overhead: wall time, CPU time (the whole process tree, agent
//     included), peak RSS and capture size, bare, under heaplens at its
//     default rate and at --rate 1, under heaptrack, and under memray
//     (default, --native and --aggregate) for Python workloads;
//   - accuracy: per known allocation site, heaplens' estimate at the
//     default rate (several seeds) against the exact value of a --rate 1
//     run, with the error in units of the standard deviation the sampling
//     math predicts (internal/heap.Stddev);
//   - scale: the agent's throughput at --rate 1 with several allocating
//     threads (records per second, drops), and the time `heaplens report`
//     takes on a synthetic capture of 10 million samples;
//   - start-up: the fixed cost of `heaplens run`, with the symbol cache
//     warm and cold;
//   - instructions: the target's own instruction count under callgrind,
//     bare and under heaplens, which wall time on a noisy machine cannot
//     resolve to a few percent.
//
// Run it from the repository root:
//
//	go run ./bench/cmd/hlcompare [-runs 8] [-quick] [-out bench/results]
//
// It builds bin/heaplens with make (unless -no-build), installs the peers
// it compares with when they are missing (heaptrack, sqlite3, g++, numpy,
// GNU time from Debian; memray with pip into bench/.venv), and writes
// compare.md and compare.json into -out. A peer that cannot be installed
// is reported loudly and its cells read "n/a (reason)".
//
// The machines this runs on are small and noisy: every comparison is made
// inside one invocation, the configurations of a workload are interleaved
// run by run in a rotated order (harness.Rotation), and wall times are
// compared round by round, with a confidence interval
// (harness.PairedRatio) that says when a goal is beyond this machine's
// resolution.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/heaplens/heaplens/bench/internal/harness"
	"github.com/heaplens/heaplens/bench/internal/peers"
)

// defaultRate is heaplens' default sampling period (512 KiB).
const defaultRate = 512 << 10

// Goals the issue holds the numbers to.
const (
	goalWall    = 1.05 // heaplens default rate: wall time over bare, every workload
	goalCapture = 0.01 // heaplens capture over memray's, same workload
	goalSigmas  = 4.0  // every site's error within this many predicted σ
)

type options struct {
	runs     int
	quick    bool
	out      string
	root     string
	heaplens string // the binary to measure; default ROOT/bin/heaplens
	baseline string // another heaplens binary measured beside it, "" for none
	only     map[string]bool
	noBuild  bool
	keepTemp bool
	scale    bool
	accuracy bool // the small-size runs: --rate 1 and the accuracy section
	peers    bool // heaptrack and memray configurations
	// instructions counts the target's instructions under callgrind.
	instructions bool
	samples      int // synthetic capture size for the report-time measurement
	timeout      time.Duration
}

func main() {
	var o options
	var only string
	flag.IntVar(&o.runs, "runs", 8, "interleaved rounds: runs per configuration (8 is the fewest whose confidence interval is narrower than the range)")
	flag.BoolVar(&o.quick, "quick", false, "smoke test: 3 runs, small workloads, 1M-sample synthetic capture")
	flag.StringVar(&o.out, "out", filepath.Join("bench", "results"), "directory for compare.md and compare.json")
	flag.StringVar(&o.root, "root", ".", "repository root")
	flag.StringVar(&o.heaplens, "heaplens", "", "heaplens binary to measure (default ROOT/bin/heaplens)")
	flag.StringVar(&o.baseline, "baseline", "", "another heaplens binary to measure beside -heaplens, interleaved (an A/B of two builds)")
	flag.StringVar(&only, "only", "", "comma-separated workloads to run (default all)")
	flag.BoolVar(&o.noBuild, "no-build", false, "do not run make bin/heaplens first")
	flag.BoolVar(&o.keepTemp, "keep", false, "keep the temporary directory (captures, built workloads)")
	flag.BoolVar(&o.scale, "scale", true, "run the scale measurements")
	flag.BoolVar(&o.accuracy, "accuracy", true, "run --rate 1 and the accuracy section (small sizes)")
	flag.BoolVar(&o.instructions, "instructions", true, "count the target's instructions under callgrind, bare and under heaplens (small sizes)")
	flag.BoolVar(&o.peers, "peers", true, "run heaptrack and memray (false: bare and heaplens only, for A/B runs of heaplens builds)")
	flag.Parse()
	o.timeout = 10 * time.Minute
	o.samples = 10_000_000
	if o.quick {
		o.runs = 3
		o.samples = 1_000_000
	}
	if o.runs < 1 {
		fmt.Fprintln(os.Stderr, "hlcompare: -runs must be at least 1")
		os.Exit(2)
	}
	if only != "" {
		o.only = map[string]bool{}
		for _, w := range strings.Split(only, ",") {
			o.only[strings.TrimSpace(w)] = true
		}
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "hlcompare:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "hlcompare: "+format+"\n", args...)
}

func run(o options) error {
	root, err := filepath.Abs(o.root)
	if err != nil {
		return err
	}
	if !o.noBuild {
		logf("make bin/heaplens")
		cmd := exec.Command("make", "bin/heaplens")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("make bin/heaplens: %v\n%s", err, harness.LastLines(string(out), 10))
		}
	}
	if o.heaplens == "" {
		o.heaplens = filepath.Join(root, "bin", "heaplens")
	}
	if o.heaplens, err = filepath.Abs(o.heaplens); err != nil {
		return err
	}
	if _, err := os.Stat(o.heaplens); err != nil {
		return fmt.Errorf("%v (run make in the repository root, or pass -heaplens)", err)
	}
	if o.baseline != "" {
		if o.baseline, err = filepath.Abs(o.baseline); err != nil {
			return err
		}
		if _, err := os.Stat(o.baseline); err != nil {
			return fmt.Errorf("-baseline: %w", err)
		}
	}
	p, err := peers.Setup(root, peers.Want{Heaptrack: true, Native: true, Valgrind: o.instructions}, logf)
	if err != nil {
		return err
	}
	b := &bench{o: o, peers: p, root: root, heaplens: o.heaplens, workloads: filepath.Join(root, "bench", "workloads")}
	if b.tmp, err = os.MkdirTemp("", "hlcompare-"); err != nil {
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
		Peers:   *p,
		Runs:    o.runs,
		Quick:   o.quick,
		Rate:    defaultRate,
		Goals:   Goals{Wall: goalWall, Capture: goalCapture, Sigmas: goalSigmas},
	}
	if out, err := exec.Command(b.heaplens, "version").Output(); err == nil {
		rep.Heaplens = strings.TrimSpace(string(out))
	}
	start := time.Now()

	ws, err := b.prepare(allWorkloads(o.quick))
	if err != nil {
		return err
	}
	if rep.Startup, err = b.startup(); err != nil {
		return err
	}
	for _, w := range ws {
		r, err := b.overhead(w)
		if err != nil {
			return err
		}
		if o.accuracy {
			acc, err := b.accuracy(w, &r)
			if err != nil {
				return err
			}
			rep.Accuracy = append(rep.Accuracy, acc)
		}
		if o.instructions {
			in, err := b.instructions(w)
			if err != nil {
				return err
			}
			if in != nil {
				rep.Instructions = append(rep.Instructions, *in)
			}
		}
		rep.Workloads = append(rep.Workloads, r)
	}
	if o.scale {
		if rep.Scale, err = b.scale(); err != nil {
			return err
		}
	}
	rep.Warnings = b.warnings
	rep.Seconds = math.Round(time.Since(start).Seconds())
	rep.evaluate()
	return harness.Save(o.out, "compare", formatMarkdown(&rep), rep)
}
