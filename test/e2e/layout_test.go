package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heaplens/heaplens/test/testenv"
)

// TestSamplingKeepsTheLayout: what the library maps at and after a
// thread's first sample (its scratch, unwind tables, a larger sampled set)
// takes no address space the program's later mappings would have had.
// With address randomization off, test/workloads/maplayout.c's mappings
// made after samples on two threads land where they land in a run with no
// sample. (Mapped anywhere, the scratch moved py_server's later pymalloc
// arenas, and with them the interpreter's own instruction count:
// docs/benchmarks.md, "The program's layout after the first sample".)
func TestSamplingKeepsTheLayout(t *testing.T) {
	setarch, err := exec.LookPath("setarch")
	if err != nil {
		testenv.Missing(t, "setarch (util-linux): TestSamplingKeepsTheLayout does NOT run")
		return
	}
	dir := t.TempDir()
	bin := build(t, dir, "maplayout.c")
	var layout [2]string
	for i, rate := range []string{"281474976710656", "512KiB"} { // no sample; the default rate
		capPath := filepath.Join(dir, "run"+string(rune('0'+i))+".hlc")
		res := run(t, time.Minute, setarch, "-R", heaplensBin(t), "run", "-q", "-o", capPath, "--rate", rate, "--seed", "5", "--", bin)
		if res.code != 0 || !strings.HasPrefix(res.stdout, "layout=") {
			t.Fatalf("maplayout at rate %s: exit %d, output %q\n%s", rate, res.code, res.stdout, res.stderr)
		}
		layout[i] = res.stdout
		var onThread, onMain bool // churn sampled on each thread: each mapped its scratch
		stacks := report(t, capPath, "allocs")
		for stack := range stacks {
			onThread = onThread || strings.Contains(stack, "start_thread") && strings.Contains(stack, "churn")
			onMain = onMain || strings.Contains(stack, "main (") && strings.Contains(stack, "churn")
		}
		if sampled := i == 1; onThread != sampled || onMain != sampled || !sampled && len(stacks) != 0 {
			t.Fatalf("maplayout at rate %s: sampled on the thread %v, on main %v (%d stacks)", rate, onThread, onMain, len(stacks))
		}
	}
	if layout[0] != layout[1] {
		t.Errorf("the program's mappings moved once samples were taken:\nno sample: %s  sampled: %s", layout[0], layout[1])
	}
}
