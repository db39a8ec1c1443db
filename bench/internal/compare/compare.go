// Package compare measures heaplens (hlbench compare) against a bare run
// and against other memory profilers, on native and Python workloads, and checks that its
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
//     bare, under heaplens with no sample (the interposition floor) and at
//     the default rate (the sampling above it), which wall time on a noisy
//     machine cannot resolve to a few percent;
//   - exact mode: tree CPU at --rate 1 against memray's like-for-like mode
//     (--native --trace-python-allocators) on Python workloads, two of
//     them real libraries (scikit-learn, PyTorch).
//
// It builds bin/heaplens with make (unless NoBuild), installs the peers
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
package compare

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/heaplens/heaplens/bench/internal/harness"
	"github.com/heaplens/heaplens/bench/internal/peers"
	"github.com/heaplens/heaplens/internal/ring"
)

// defaultRate is heaplens' default sampling period (512 KiB).
const defaultRate = ring.DefaultRate

// Goals the issue holds the numbers to.
const (
	goalWall    = 1.05 // heaplens default rate: wall time over bare, every workload
	goalCapture = 0.01 // heaplens capture over memray's, same workload
	goalSigmas  = 4.0  // every site's error within this many predicted σ
)

// Options are compare's own settings beside the common ones.
type Options struct {
	Heaplens string          // the binary to measure; default ROOT/bin/heaplens
	Baseline string          // another heaplens binary measured beside it, "" for none
	Only     map[string]bool // workloads to run; nil = all
	NoBuild  bool            // do not run make bin/heaplens first
	Scale    bool            // the scale measurements
	Accuracy bool            // the small-size runs: --rate 1 and the accuracy section
	Peers    bool            // heaptrack and memray configurations
	// Instructions counts the target's instructions under callgrind.
	Instructions bool
	// Layouts is how many address layouts a Python workload's sampling
	// cost is counted in (InstrResult.Layouts); at least 1.
	Layouts int
	// Exact compares --rate 1 with memray's like-for-like mode.
	Exact bool
	// Overhead runs the overhead and accuracy sections.
	Overhead bool
}

// DefaultOptions runs everything.
var DefaultOptions = Options{Scale: true, Accuracy: true, Peers: true, Instructions: true, Layouts: 5, Exact: true, Overhead: true}

type options struct {
	harness.Common
	Options
	samples int // synthetic capture size for the report-time measurement
	timeout time.Duration
}

// Run runs the benchmark.
func Run(c harness.Common, x Options) error {
	if err := c.Resolve(8); err != nil { // 8: the fewest rounds whose confidence interval is narrower than the range
		return err
	}
	o := options{Common: c, Options: x, samples: 10_000_000, timeout: 10 * time.Minute}
	if o.Quick {
		o.samples = 1_000_000
	}
	return run(o)
}

var logf = harness.Logf("compare")

func run(o options) error {
	root := o.Root
	var err error
	if !o.NoBuild {
		logf("make bin/heaplens")
		cmd := exec.Command("make", "bin/heaplens")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("make bin/heaplens: %v\n%s", err, harness.LastLines(string(out), 10))
		}
	}
	if o.Heaplens == "" {
		o.Heaplens = filepath.Join(root, "bin", "heaplens")
	}
	if o.Heaplens, err = filepath.Abs(o.Heaplens); err != nil {
		return err
	}
	if _, err := os.Stat(o.Heaplens); err != nil {
		return fmt.Errorf("%v (run make in the repository root, or pass -heaplens)", err)
	}
	if o.Baseline != "" {
		if o.Baseline, err = filepath.Abs(o.Baseline); err != nil {
			return err
		}
		if _, err := os.Stat(o.Baseline); err != nil {
			return fmt.Errorf("-baseline: %w", err)
		}
	}
	p, err := peers.Setup(root, peers.Want{Heaptrack: true, Native: true, Valgrind: o.Instructions}, logf)
	if err != nil {
		return err
	}
	b := &bench{o: o, peers: p, root: root, heaplens: o.Heaplens, workloads: filepath.Join(root, "bench", "workloads")}
	tmp, done, err := o.TempDir("hlbench-compare", logf)
	if err != nil {
		return err
	}
	defer done()
	b.tmp = tmp
	rep := Report{
		Stamp: o.Stamp(),
		Peers: *p,
		Rate:  defaultRate,
		Goals: Goals{Wall: goalWall, Capture: goalCapture, Sigmas: goalSigmas},
	}
	if out, err := exec.Command(b.heaplens, "version").Output(); err == nil {
		rep.Heaplens = strings.TrimSpace(string(out))
	}

	ws, err := b.prepare(allWorkloads(o.Quick))
	if err != nil {
		return err
	}
	if rep.Startup, err = b.startup(); err != nil {
		return err
	}
	for _, w := range ws {
		if o.Exact && w.Exact != nil && o.Peers {
			e, err := b.exact(w)
			if err != nil {
				return err
			}
			if e != nil {
				rep.Exact = append(rep.Exact, *e)
			}
		}
		if w.exactOnly {
			continue
		}
		if o.Instructions {
			in, err := b.instructions(w)
			if err != nil {
				return err
			}
			if in != nil {
				rep.Instructions = append(rep.Instructions, *in)
			}
		}
		if !o.Overhead {
			continue
		}
		r, err := b.overhead(w)
		if err != nil {
			return err
		}
		if o.Accuracy {
			acc, err := b.accuracy(w, &r)
			if err != nil {
				return err
			}
			rep.Accuracy = append(rep.Accuracy, acc)
		}
		rep.Workloads = append(rep.Workloads, r)
	}
	if o.Scale {
		if rep.Scale, err = b.scale(); err != nil {
			return err
		}
	}
	rep.Finish(&b.warnings)
	rep.evaluate()
	return harness.Save(o.Out, "compare", formatMarkdown(&rep), rep)
}
