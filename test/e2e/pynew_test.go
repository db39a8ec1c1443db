package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heaplens/heaplens/test/testenv"
)

// The Python versions newer than the machine's, Debian's stripped builds in
// the sid root (make sidroot), where the eval loop sits in a nameless .cold
// part (internal/collect/pyeval.go) and the offsets come from
// _Py_DebugOffsets.

// TestPythonNewSites is TestPythonSites on 3.14 and 3.15: at --rate 1 every
// site holds exactly its bytes (give or take an object parked in a free
// list), which it can only do if the frames are read right and the leaks
// are taken before the interpreter's shutdown (the finalizing mark), as KEEP
// is freed by it; at 64 KiB within 4σ, with the deep interleaved Python/C
// recursion's shape, also under the allocator set-ups the PyMem hooks must
// wrap (TestPythonSites says why each).
func TestPythonNewSites(t *testing.T) {
	r, ok := testenv.SidRoot(t)
	if !ok {
		return
	}
	sites := siteLines(t, filepath.Join(root, "test", "workloads", "pysites.py"))
	for _, py := range r.RootPythons(t) {
		for _, v := range []struct {
			rate uint64
			args []string
			env  string
		}{
			{1, nil, ""}, {64 << 10, nil, ""},
			{64 << 10, []string{"-X", "dev"}, ""},
			{64 << 10, nil, "PYTHONMALLOC=pymalloc_debug"},
			{64 << 10, nil, "PYTHONMALLOC=malloc"},
			{64 << 10, []string{"-X", "tracemalloc"}, ""},
		} {
			t.Run(fmt.Sprintf("%s/rate=%d%s%s", py.Name, v.rate, strings.Join(v.args, ""), v.env), func(t *testing.T) {
				w := inRoot(t, r)
				script := w.workload(t, "pysites.py")
				env := []string{"PYTHONHASHSEED=0"}
				if v.env != "" {
					env = append(env, v.env)
				}
				command := append(append([]string{py.Path}, v.args...), script)
				if v.rate == 1 {
					command = append(command, "nodeep")
				}
				testPythonSites(t, w, env, command, script, sites, v.rate, slices.Contains(v.args, "tracemalloc"), 1)
			})
		}
	}
}

// TestPythonNewDeepWithInternals checks the shape of the 150-fold
// Python → C (sorted) → Python recursion with the interpreter's native
// frames shown: every re-entry has native frames between its Python frames.
func TestPythonNewDeepWithInternals(t *testing.T) {
	r, ok := testenv.SidRoot(t)
	if !ok {
		return
	}
	for _, py := range r.RootPythons(t) {
		t.Run(py.Name, func(t *testing.T) {
			w := inRoot(t, r)
			script := w.workload(t, "pysites.py")
			line := siteLines(t, filepath.Join(root, "test", "workloads", "pysites.py"))["deep"]
			capPath, capArg := w.file("deep.hlc")
			res := w.heaplens(t, 2*time.Minute, nil, "run", "-q", "-o", capArg, "--rate", "16KiB",
				"--native-python-internals", "--", py.Path, script, "deep")
			if res.code != 0 || !strings.Contains(res.stdout, "pysites deep done") {
				t.Fatalf("exit %d: %s %s", res.code, res.stdout, res.stderr)
			}
			checkDeep(t, report(t, capPath, "leaks"), script, line, true)
		})
	}
}
