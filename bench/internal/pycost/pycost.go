// Package pycost measures the cost of one sampled allocation in a Python
// program (hlbench python): an ALLOC record with a ~50-frame mixed
// Python/native stack and at a shallow one, with and without the Python
// frames. The end-to-end comparison of Python workloads against bare runs
// and memray is in package compare, with the native workloads. It
// installs what it needs when it is missing (see package peers) and writes
// python.md and python.json.
//
// As in malloccost, every comparison is made inside one invocation: the
// configurations are interleaved run by run, in a rotated order, and
// medians are compared.
package pycost

import (
	"path/filepath"
	"time"

	"github.com/heaplens/heaplens/bench/internal/harness"
	"github.com/heaplens/heaplens/bench/internal/peers"
)

type options struct {
	harness.Common
	timeout  time.Duration
	deepN    int
	deepSize int
	levels   []int // py_deep: C re-entries above the allocating loop (shallow, deep)
}

// Run runs the benchmark.
func Run(c harness.Common) error {
	if err := c.Resolve(7); err != nil {
		return err
	}
	o := options{Common: c, timeout: 5 * time.Minute, deepN: 100_000, deepSize: 1024, levels: []int{0, 4}}
	if o.Quick {
		o.deepN = 30_000
	}
	return run(o)
}

var logf = harness.Logf("python")

func run(o options) error {
	root := o.Root
	p, err := peers.Setup(root, peers.Want{}, logf)
	if err != nil {
		return err
	}
	logf("python %s", p.Python)
	b := &bench{o: o, peers: p, heaplens: filepath.Join(root, "bin", "heaplens"), workloads: filepath.Join(root, "bench", "workloads")}
	if err := o.Built(b.heaplens); err != nil {
		return err
	}
	tmp, done, err := o.TempDir("hlbench-python", logf)
	if err != nil {
		return err
	}
	defer done()
	b.tmp = tmp

	rep := Report{
		Stamp:  o.Stamp(),
		Python: p.Python,
	}
	if rep.Samples, err = b.perSample(); err != nil {
		return err
	}
	if n := len(rep.Samples); n > 0 {
		deep := rep.Samples[n-1]
		if rep.Instructions, err = b.instructions(deep.Levels, deep.Frames()); err != nil {
			return err
		}
	}
	rep.Notes = notes(p)
	rep.Finish(&b.warnings)

	return harness.Save(o.Out, "python", formatMarkdown(rep), rep)
}
