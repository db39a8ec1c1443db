package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heaplens/heaplens/test/testenv"
)

// The arm64 checks (docs/platforms.md) run in the Debian 12 arm64 root of
// make armroot through qemu-user, with heaplens as the manylinux_2_17_aarch64
// wheel installs it there (the agent built with GOARCH=arm64, the library
// with aarch64-linux-gnu-gcc). qemu-user is ~10x slower than the host: make
// test runs none of them (it says so); make test-platforms, with
// -platforms, runs them all.

// arm64 installs the arm64 wheel into a venv of the arm64 root and returns
// where heaplens runs from it.
func arm64(t *testing.T) (where, bool) {
	t.Helper()
	if !*platformsFull {
		t.Skip("!!! arm64 runs only in make test-platforms (qemu-user is ~10x slower than the host): NOT run by make test")
	}
	r, ok := testenv.ARMRoot(t)
	if !ok {
		return where{}, false
	}
	return fromWheel(t, r, "aarch64"), true
}

// TestARM64Profiles checks on arm64 what a profile must get right: leaky.c's
// native sites exact at --rate 1 (through .eh_frame-driven walks without
// frame pointers), a forked child's blocks exact in its own stream,
// mapper.c's own mappings exact in the mmap kind,
// pysites.py's sites at their lines within 4σ at 64 KiB and exact at
// --rate 1, the interleaved Python → C → Python recursion's shape with the
// interpreter's native frames between, and an OpenMP region's bytes
// charged to the Python function that called it; a signal ignored when
// heaplens started is ignored in the command (the arm64 entry stub).
func TestARM64Profiles(t *testing.T) {
	w, ok := arm64(t)
	if !ok {
		return
	}
	t.Run("native-rate1", func(t *testing.T) { checkLeakyExact(t, w) })
	t.Run("fork-child", func(t *testing.T) { checkForkChild(t, w) })
	t.Run("mmap", func(t *testing.T) {
		bin := w.cc(t, "gcc", "mapper.c", "mapper")
		capPath, capArg := w.file("mapper.hlc")
		res := w.heaplens(t, 5*time.Minute, nil, "run", "-q", "-o", capArg, "--rate", "64KiB", "--seed", "3", "--", bin)
		if res.code != 0 {
			t.Fatalf("exit %d\n%s", res.code, res.stderr)
		}
		checkMapperKinds(t, capPath)
	})
	checkPysites(t, w, "/usr/bin/python3.11", 64<<10, 1)
	t.Run("interleaved", func(t *testing.T) {
		sites := siteLines(t, filepath.Join(root, "test", "workloads", "pysites.py"))
		script := w.workload(t, "pysites.py")
		capPath, capArg := w.file("deep.hlc")
		res := w.heaplens(t, 5*time.Minute, nil, "run", "-q", "-o", capArg, "--rate", "16KiB",
			"--native-python-internals", "--", "/usr/bin/python3.11", script, "deep")
		if res.code != 0 || !strings.Contains(res.stdout, "pysites deep done") {
			t.Fatalf("exit %d: %s %s", res.code, res.stdout, res.stderr)
		}
		checkDeep(t, report(t, capPath, "leaks"), script, sites["deep"], true)
	})
	t.Run("openmp", func(t *testing.T) {
		lib := w.cc(t, "gcc", "ompwork.c", "libompwork.so", "-fPIC", "-shared", "-fopenmp")
		script := w.workload(t, "pools.py")
		const n, reps = 48, 2
		capPath, capArg := w.file("omp.hlc")
		res := w.heaplens(t, 5*time.Minute, []string{"OMP_NUM_THREADS=4"}, "run", "-q", "-o", capArg, "--rate", "1", "--",
			"/usr/bin/python3.11", script, lib, "omp-one", fmt.Sprint(n), "40000", fmt.Sprint(reps))
		if res.code != 0 {
			t.Fatalf("exit %d\n%s", res.code, res.stderr)
		}
		expectCharged(t, "arm64 libgomp", load(t, capPath), 40000, n*reps*40000, "omp_job_a", "openmp", "[pool: libgomp (openmp)]", "omp_job_a")
	})
	t.Run("ignored-signal", func(t *testing.T) {
		// The Go runtime takes SIGUSR1 over as it starts (a child would get
		// it at its default): only the arm64 entry stub knows it was ignored.
		// The wheel's program itself, not its console script: under
		// qemu-user an ignored signal is lost across an exec from Python
		// (python3 execing python3 loses it too).
		show := []string{"/usr/bin/python3.11", "-c", "import signal; print(signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGUSR2))"}
		ignoring := func(argv ...string) result {
			return w.run(t, 5*time.Minute, nil, append([]string{"sh", "-c", `trap '' USR1; exec "$@"`, "sh"}, argv...)...)
		}
		if bare := ignoring(show...); bare.stdout != "1 0\n" {
			t.Fatalf("premise: bare, the command should see SIGUSR1 ignored: %q, exit %d", bare.stdout, bare.code)
		}
		_, capArg := w.file("sig.hlc")
		prog := strings.TrimSuffix(w.bin, "bin/heaplens") + "lib/python3.11/site-packages/heaplens/_bin/heaplens"
		res := ignoring(append([]string{prog, "run", "-q", "-o", capArg, "--"}, show...)...)
		if res.code != 0 || res.stdout != "1 0\n" {
			t.Errorf("SIGUSR1 ignored, SIGUSR2 not, when heaplens started: the command got %q (want \"1 0\": 1 SIG_IGN, 0 SIG_DFL), exit %d\n%s", res.stdout, res.code, res.stderr)
		}
	})
	t.Run("attach-says-x86-64-only", func(t *testing.T) {
		res := w.heaplens(t, time.Minute, nil, "attach", "1")
		if res.code == 0 || !strings.Contains(res.stderr, "x86-64 only") {
			t.Errorf("heaplens attach on arm64: exit %d, %q; want a failure saying attach is x86-64 only", res.code, res.stderr)
		}
	})
}
