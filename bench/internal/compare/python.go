package compare

import (
	"path/filepath"
	"time"

	"github.com/heaplens/heaplens/bench/internal/harness"
	"github.com/heaplens/heaplens/bench/internal/peers"
)

// hlbench python: the cost of one sampled allocation in a Python program,
// an ALLOC record with a ~50-frame mixed Python/native stack and with a
// shallow one, with and without the Python frames (py_deep), on the same
// runner as the comparison: configurations interleaved run by run in a
// rotated order, medians compared. It writes python.md and python.json.

// pyOptions are the per-sample benchmark's sizes.
type pyOptions struct {
	deepN    int
	deepSize int
	levels   []int // py_deep: C re-entries above the allocating loop (shallow, deep)
}

// cfgRate1NoPy samples the same allocations as cfgRate1 with the native
// stack only.
var cfgRate1NoPy = config{Name: "heaplens --rate 1 --no-python", profiler: "heaplens", rate: 1, noPython: true}

// pyDeep is bench/workloads/py_deep.py: LEVELS C re-entries above a loop
// that allocates N bytes objects of SIZE bytes and nothing else.
var pyDeep = &workload{Name: "py_deep", Kind: "python", python: true, key: "ns_per_alloc",
	command: func(b *bench, args []string) []string {
		return append([]string{b.peers.VenvPython, filepath.Join(b.workloads, "py_deep.py")}, args...)
	}}

var pylogf = harness.Logf("python")

// RunPython runs the per-sample benchmark.
func RunPython(c harness.Common) error {
	if err := c.Resolve(7); err != nil {
		return err
	}
	o := pyOptions{deepN: 100_000, deepSize: 1024, levels: []int{0, 4}}
	if c.Quick {
		o.deepN = 30_000
	}
	p, err := peers.Setup(c.Root, peers.Want{Valgrind: true}, pylogf)
	if err != nil {
		return err
	}
	pylogf("python %s", p.Python)
	b := &bench{o: options{Common: c, timeout: 5 * time.Minute}, peers: p, root: c.Root,
		heaplens: filepath.Join(c.Root, "bin", "heaplens"), workloads: filepath.Join(c.Root, "bench", "workloads")}
	if err := c.Built(b.heaplens); err != nil {
		return err
	}
	tmp, done, err := c.TempDir("hlbench-python", pylogf)
	if err != nil {
		return err
	}
	defer done()
	b.tmp = tmp

	rep := PyReport{Stamp: c.Stamp(), Python: p.Python}
	if rep.Samples, err = b.perSample(o); err != nil {
		return err
	}
	if n := len(rep.Samples); n > 0 {
		deep := rep.Samples[n-1]
		if rep.Instructions, err = b.sampleInstructions(deep.Levels, deep.Frames()); err != nil {
			return err
		}
	}
	rep.Notes = pyNotes(p)
	rep.Finish(&b.warnings)
	return harness.Save(c.Out, "python", formatPyMarkdown(rep), rep)
}
