package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
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

// TestPythonNewHooks runs on 3.14 and 3.15 what the PyMem hooks must get
// right beyond the sites (pymem_test.go says why each matters): sampled
// objects keep pymalloc's addresses (pyaddr.py's 448-byte steps, at --rate 1
// and 4 KiB, as bare); objects made after tracemalloc stops are sampled and
// those freed after it are seen freed, with and without -X dev; and under
// PYTHONMALLOC=mimalloc the small objects are sampled and the run says the
// large ones are not.
func TestPythonNewHooks(t *testing.T) {
	r, ok := testenv.SidRoot(t)
	if !ok {
		return
	}
	traceSites := siteLines(t, filepath.Join(root, "test", "workloads", "pytracestop.py"))
	smallLine := siteLines(t, filepath.Join(root, "test", "workloads", "pysites.py"))["keep_small"]
	small := map[uint64]int{33 + 100: 100000}
	for _, py := range r.RootPythons(t) {
		t.Run(py.Name+"/addresses", func(t *testing.T) {
			w := inRoot(t, r)
			script := w.workload(t, "pyaddr.py")
			count := func(out string) int {
				m := steps448.FindStringSubmatch(out)
				if m == nil {
					t.Fatalf("no steps448 in the output: %s", out)
				}
				n, _ := strconv.Atoi(m[1])
				return n
			}
			bare := w.run(t, time.Minute, nil, py.Path, script)
			if bare.code != 0 {
				t.Fatalf("bare: exit %d\n%s", bare.code, bare.stderr)
			}
			want := count(bare.stdout)
			for _, rate := range []string{"1", "4KiB"} {
				_, capArg := w.file("addr" + rate + ".hlc")
				res := w.heaplens(t, 2*time.Minute, nil, "run", "-q", "-o", capArg, "--rate", rate, "--", py.Path, script)
				if res.code != 0 {
					t.Fatalf("rate %s: exit %d\n%s", rate, res.code, res.stderr)
				}
				if got := count(res.stdout); got < want-2 {
					t.Errorf("rate %s: %d of 999 steps are 448 bytes, bare %d: sampled objects moved", rate, got, want)
				}
			}
		})
		for _, dev := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/tracemalloc-stop/dev=%v", py.Name, dev), func(t *testing.T) {
				w := inRoot(t, r)
				script := w.workload(t, "pytracestop.py")
				command := []string{py.Path, "-X", "tracemalloc", script}
				if dev {
					command = []string{py.Path, "-X", "dev", "-X", "tracemalloc", script}
				}
				const rate = 16 << 10
				capPath, capArg := w.file("stop.hlc")
				res := w.heaplens(t, 2*time.Minute, nil, append([]string{"run", "-q", "-o", capArg, "--rate", fmt.Sprint(rate), "--seed", "5", "--"}, command...)...)
				if res.code != 0 || !strings.Contains(res.stdout, "pytracestop done") {
					t.Fatalf("exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
				}
				leaks := report(t, capPath, "leaks")
				checkSite(t, "after", leaks.atLine(script, traceSites["after"]), small, rate, 0, leaks.stacksAt(script, traceSites["after"]))
				for _, site := range []string{"before", "again"} {
					if got := leaks.atLine(script, traceSites[site]); got > 0.1*exact(small) {
						t.Errorf("%s: %.0f bytes live, want nearly none (all freed): %v", site, got, leaks.stacksAt(script, traceSites[site]))
					}
				}
			})
		}
		t.Run(py.Name+"/mimalloc", func(t *testing.T) {
			w := inRoot(t, r)
			script := w.workload(t, "pysites.py")
			capPath, capArg := w.file("mi.hlc")
			res := w.heaplens(t, 2*time.Minute, []string{"PYTHONMALLOC=mimalloc"}, "run", "-o", capArg,
				"--rate", "64KiB", "--seed", "3", "--", py.Path, script, "nodeep")
			if res.code != 0 || !strings.Contains(res.stdout, "pysites done") {
				t.Fatalf("exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
			}
			if !strings.Contains(res.stderr, "allocator is not pymalloc: objects over 512 bytes") {
				t.Errorf("the run does not say that large objects were not sampled:\n%s", res.stderr)
			}
			checkSite(t, "keep_small retained", report(t, capPath, "leaks").atLine(script, smallLine), small, 64<<10, 0, nil)
		})
	}
}

// TestWheelAndPytestPluginNew is TestWheelAndPytestPlugin on 3.14 and 3.15,
// inside the sid root: the wheel goes into a venv that sees Debian's numpy
// and pytest (--system-site-packages; the root reaches no package index),
// the C extension is built there with the root's gcc and the interpreter's
// headers, and pytest --heaplens fails exactly the expected tests.
func TestWheelAndPytestPluginNew(t *testing.T) {
	hostWheel := theWheel(t)
	for _, py := range rootPythons(t) {
		t.Run(py.name, func(t *testing.T) {
			t.Parallel()
			w := py.where(t)
			wheel := w.copy(t, hostWheel)
			project, projectIn := w.file("project")
			sampleProject(t, project)
			_, venv := w.file("venv")
			vpy := venv + "/bin/python"
			// Each step inside the root, in the project's directory.
			in := func(argv ...string) result {
				return w.run(t, 5*time.Minute, nil, append([]string{"sh", "-c", `cd "$0" && exec "$@"`, projectIn}, argv...)...)
			}
			for _, argv := range [][]string{
				{py.path, "-m", "venv", "--system-site-packages", venv},
				{venv + "/bin/pip", "install", "-q", "--no-index", "--no-deps", "--disable-pip-version-check", wheel},
				{vpy, "-c", "import numpy, pytest"},
				{"sh", "-c", `gcc -shared -fPIC -fopenmp -O1 -g -I"$("$0" -c "import sysconfig; print(sysconfig.get_paths()['include'])")" ` +
					`-o native"$("$0" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")" native.c`, vpy},
			} {
				if res := in(argv...); res.code != 0 {
					testenv.Missing(t, "%v in the sid root failed (make sidroot installs python3.%d-venv, python3-numpy, python3-pytest, gcc): exit %d\n%s%s",
						argv, py.minor, res.code, res.stdout, res.stderr)
					return
				}
			}
			for _, argv := range [][]string{{venv + "/bin/heaplens", "version"}, {vpy, "-m", "heaplens", "version"}} {
				if res := in(argv...); res.code != 0 || !strings.HasPrefix(res.stdout, "heaplens ") {
					t.Errorf("%v: exit %d, %q %s", argv, res.code, res.stdout, res.stderr)
				}
			}
			if plain := in(vpy, "-m", "pytest", "-q", "-p", "no:cacheprovider"); plain.code != 0 {
				t.Errorf("pytest without --heaplens: exit %d\n%s%s", plain.code, plain.stdout, plain.stderr)
			}
			xmlPath, xmlIn := w.file("junit.xml")
			checkPytestRun(t, in(vpy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--heaplens", "--junitxml", xmlIn), xmlPath)
		})
	}
}
