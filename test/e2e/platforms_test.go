package e2e

import (
	"debug/elf"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/test/testenv"
)

// The older-glibc checks (docs/platforms.md) run in the Debian 11 root of
// make oldroot (glibc 2.31, python3.9), with heaplens as the wheel installs
// it there. make test runs a focused subset; make test-platforms, with
// -platforms, all of them.
var platformsFull = flag.Bool("platforms", false, "every older-glibc check (make test-platforms)")

// oldGlibc installs the wheel into a venv of the root with pip, as a user
// would (no network, no dependencies), and returns where heaplens runs from it.
func oldGlibc(t *testing.T) (where, bool) {
	t.Helper()
	r, ok := testenv.OldRoot(t)
	if !ok {
		return where{}, false
	}
	return fromWheel(t, r, "x86_64"), true
}

// fromWheel installs the wheel for arch (x86_64, aarch64) into a venv of the
// root r with pip, as a user would (no network, no dependencies), and
// returns where heaplens runs from it.
func fromWheel(t *testing.T, r testenv.Chroot, arch string) where {
	t.Helper()
	wheels, _ := filepath.Glob(filepath.Join(testenv.Root, "dist", "heaplens-*-py3-none-*manylinux_2_17_"+arch+".whl"))
	if len(wheels) != 1 {
		t.Fatalf("want one manylinux_2_17_%s wheel in dist/, found %v: run make wheel (make test does)", arch, wheels)
	}
	host, inside := r.TempDir(t)
	w := where{root: &r, host: host, inside: inside}
	b, err := os.ReadFile(wheels[0])
	if err != nil {
		t.Fatal(err)
	}
	whl := filepath.Base(wheels[0])
	if err := os.WriteFile(filepath.Join(host, whl), b, 0o644); err != nil {
		t.Fatal(err)
	}
	venv := filepath.Join(inside, "venv")
	limit := 3 * time.Minute
	if arch != "x86_64" {
		limit = 15 * time.Minute // ensurepip under qemu-user: 2 minutes on a loaded machine, more when busier
	}
	for _, argv := range [][]string{
		{"python3", "-m", "venv", venv},
		{venv + "/bin/pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--no-index", filepath.Join(inside, whl)},
	} {
		if res := w.run(t, limit, nil, argv...); res.code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", argv, res.code, res.stdout, res.stderr)
		}
	}
	w.bin = venv + "/bin/heaplens"
	return w
}

// cc compiles a workload inside the root with compiler and flags.
func (w where) cc(t *testing.T, compiler, src, out string, flags ...string) string {
	t.Helper()
	_, bin := w.file(out)
	args := append(append([]string{compiler, "-O2", "-g", "-pthread", "-o", bin}, flags...), w.workload(t, src))
	if res := w.run(t, 2*time.Minute, nil, args...); res.code != 0 {
		t.Fatalf("%v: exit %d\n%s", args, res.code, res.stderr)
	}
	return bin
}

// TestOldGlibcProfiles checks, on glibc 2.31 with the wheel's heaplens,
// what a profile must get right: leaky.c's native sites exact at --rate 1,
// a forked child's blocks exact in its own stream, and pysites.py's leak
// found at its line (within 4σ at 64 KiB; exact at --rate 1 with -platforms).
func TestOldGlibcProfiles(t *testing.T) {
	w, ok := oldGlibc(t)
	if !ok {
		return
	}
	t.Run("native-rate1", func(t *testing.T) { checkLeakyExact(t, w) })
	t.Run("fork-child", func(t *testing.T) { checkForkChild(t, w) })
	rates := []uint64{64 << 10}
	if *platformsFull {
		rates = append(rates, 1)
	}
	checkPysites(t, w, "/usr/bin/python3.9", rates...)
}

// checkPysites runs pysites.py with python where w says, at each rate.
func checkPysites(t *testing.T, w where, python string, rates ...uint64) {
	sites := siteLines(t, filepath.Join(root, "test", "workloads", "pysites.py"))
	for _, rate := range rates {
		t.Run(filepath.Base(python)+"/rate="+strconv.FormatUint(rate, 10), func(t *testing.T) {
			script := w.workload(t, "pysites.py")
			command := []string{python, script}
			if rate == 1 {
				command = append(command, "nodeep") // as TestPythonNewSites: the deep recursion is checked at 64 KiB
			}
			testPythonSites(t, w, []string{"PYTHONHASHSEED=0"}, command, script, sites, rate, false, 1)
		})
	}
}

// checkLeakyExact builds leaky.c where w says and checks its native sites
// exact at --rate 1: every byte at its function, through frames without a
// frame pointer.
func checkLeakyExact(t *testing.T, w where) {
	bin := w.cc(t, "gcc", "leaky.c", "leaky", "-fomit-frame-pointer")
	capPath, capArg := w.file("leaky.hlc")
	res := w.heaplens(t, 5*time.Minute, nil, "run", "-q", "-o", capArg, "--rate", "1", "--ring-size", "256MiB", "--", bin)
	if res.code != 0 {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	leaks, allocs := report(t, capPath, "leaks"), report(t, capPath, "allocs")
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"keep_small leaked", leaks.site("keep_small"), leakyThreads * smallN * smallSz},
		{"keep_large leaked", leaks.site("keep_large"), leakyThreads * largeN * largeSz},
		{"churn allocated", allocs.site("churn"), leakyThreads * churnN * churnSz},
		{"churn leaked", leaks.site("churn"), 0},
		{"grow allocated", allocs.site("grow"), leakyThreads * 4096 * (1<<11 - 1)},
	} {
		if c.got != c.want {
			t.Errorf("%s: %.0f bytes, want exactly %.0f", c.what, c.got, c.want)
		}
	}
}

// checkForkChild checks, where w says, that a forked child's blocks are
// exact in its own stream at --rate 1.
func checkForkChild(t *testing.T, w where) {
	bin := w.cc(t, "gcc", "killme.c", "killme")
	capPath, capArg := w.file("killme.hlc")
	res := w.heaplens(t, time.Minute, nil, "run", "-q", "-o", capArg, "--rate", "1", "--", bin, "child")
	if res.code != 0 {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	c := load(t, capPath)
	leaks := heap.Leaks(c, heap.Options{})
	found := false
	for _, p := range c.Processes {
		if got := streamSite(c, leaks, p.Stream, "", 0, "hold"); got > 0 {
			found = true
			if p.PID == c.Processes[0].PID || got != 100*65536 {
				t.Errorf("pid %d (first pid %d) holds %.0f bytes in hold(), want exactly %d in the forked child", p.PID, c.Processes[0].PID, got, 100*65536)
			}
		}
	}
	if !found {
		t.Errorf("no process holds the blocks of hold(): the forked child was not profiled")
	}
}

// TestOldGlibcNeverBrokenStart simulates each reason the library would not
// load (a library needing a newer glibc than the root's, its directory on a
// noexec mount, a 32-bit program, a musl program; the last two also as a
// child of a profiled shell) and requires what a bare run gives: the same
// standard output, standard error and exit status, plus, when heaplens
// itself starts the program, one line saying why. Each premise is checked
// too: preloaded by hand, the library breaks that start.
func TestOldGlibcNeverBrokenStart(t *testing.T) {
	w, ok := oldGlibc(t)
	if !ok {
		return
	}
	prog := w.cc(t, "gcc", "startup.c", "startup")
	bare := w.run(t, time.Minute, nil, prog)
	if bare.code != 5 || bare.stdout != "startup out 8\n" || bare.stderr != "startup err\n" {
		t.Fatalf("bare startup: exit %d, %q, %q", bare.code, bare.stdout, bare.stderr)
	}
	// same runs argv under heaplens run -q and wants bare's output exactly
	// (-q prints nothing of heaplens's), with heaplens's reason, when line
	// is set, among the capture's notes; it returns the capture and the
	// text report, whose notes name what ran unprofiled.
	same := func(t *testing.T, env []string, line string, bare result, argv ...string) (string, string) {
		t.Helper()
		capPath, capArg := w.file("run.hlc")
		res := w.heaplens(t, time.Minute, env, append([]string{"run", "-q", "-o", capArg, "--"}, argv...)...)
		if res.code != bare.code || res.stdout != bare.stdout || res.stderr != bare.stderr {
			t.Errorf("under heaplens: exit %d, stdout %q, stderr %q; bare: exit %d, %q, %q", res.code, res.stdout, res.stderr, bare.code, bare.stdout, bare.stderr)
		}
		text := run(t, time.Minute, heaplensBin(t), "report", capPath, "--format", "text").stdout
		if line != "" && !strings.Contains(text, line) {
			t.Errorf("the capture's notes do not give heaplens's reason, with %q:\n%s", line, text)
		}
		return capPath, text
	}

	t.Run("newer-glibc-library", func(t *testing.T) {
		// Built on this machine (glibc ≥ 2.34) without the pins: it needs dlopen@GLIBC_2.34.
		src := filepath.Join(t.TempDir(), "newer.c")
		os.WriteFile(src, []byte("#include <dlfcn.h>\nvoid *hl_newer(const char *p) { return dlopen(p, RTLD_NOW); }\n"), 0o644)
		lib, libIn := w.file("libnewer.so")
		if b, err := exec.Command("gcc", "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
			t.Fatalf("gcc: %v\n%s", err, b)
		}
		pre := w.run(t, time.Minute, []string{"LD_PRELOAD=" + libIn}, prog)
		if pre.code == bare.code || !strings.Contains(pre.stderr, "GLIBC_2.34' not found") {
			t.Fatalf("premise: preloaded by hand, libnewer.so should stop the program starting; exit %d, %q", pre.code, pre.stderr)
		}
		same(t, []string{"HEAPLENS_LIBRARY_FILE=" + libIn}, "has no GLIBC_2.34", bare, prog)
	})

	t.Run("noexec", func(t *testing.T) {
		nx, nxIn := w.file("nx")
		os.Mkdir(nx, 0o755)
		// Mounted inside the run's own mount namespace: nothing is left on the host.
		mountNX := func(env []string, argv ...string) []string {
			return append([]string{"sh", "-c", `mount -t tmpfs -o noexec,mode=755 tmpfs "$0" && exec env "$@"`, nxIn}, append(env, argv...)...)
		}
		pre := w.run(t, time.Minute, nil, mountNX(nil, "sh", "-c", `cp "$0" "$1" && LD_PRELOAD="$1" "$2"`,
			w.bin[:len(w.bin)-len("bin/heaplens")]+"lib/python3.9/site-packages/heaplens/_lib/libheaplens.so", nxIn+"/lib.so", prog)...)
		if !strings.Contains(pre.stderr, "cannot be preloaded") {
			t.Fatalf("premise: a library on a noexec mount should not load: exit %d, %q", pre.code, pre.stderr)
		}
		nxCap, nxCapIn := w.file("nx.hlc")
		res := w.run(t, time.Minute, nil, mountNX([]string{"XDG_CACHE_HOME=" + nxIn, "TMPDIR=" + nxIn}, w.bin, "run", "-q", "-o", nxCapIn, "--", prog)...)
		if res.stderr != bare.stderr || res.stdout != bare.stdout || res.code != bare.code {
			t.Errorf("library directory noexec: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
		}
		if text := run(t, time.Minute, heaplensBin(t), "report", nxCap, "--format", "text").stdout; !strings.Contains(text, "noexec") {
			t.Errorf("library directory noexec: the capture's notes do not say why it ran unprofiled:\n%s", text)
		}
		// Only the cache directory noexec: the library goes to TMPDIR, and the program is profiled.
		_, capIn := w.file("cache-nx.hlc")
		res = w.run(t, time.Minute, nil, mountNX([]string{"XDG_CACHE_HOME=" + nxIn}, w.bin, "run", "-q", "--rate", "1", "-o", capIn, "--", prog)...)
		if res.code != bare.code || res.stdout != bare.stdout || res.stderr != bare.stderr {
			t.Errorf("cache directory noexec: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
		}
		capPath, _ := w.file("cache-nx.hlc")
		if got := report(t, capPath, "allocs").site("main"); got < 100 {
			t.Errorf("cache directory noexec: main allocated %.0f bytes in the profile, want at least its 100", got)
		}
	})

	foreign := []struct{ name, cc, line, note string }{
		{"32-bit", "gcc", "it is a 32-bit program for i386", "it is a 32-bit program"},
		{"musl", "musl-gcc", "musl's loader", "it runs under musl's loader"},
	}
	for _, f := range foreign {
		t.Run(f.name, func(t *testing.T) {
			var flags []string
			if f.name == "32-bit" {
				flags = []string{"-m32"}
			}
			bin := w.cc(t, f.cc, "startup.c", "startup-"+f.name, flags...)
			b := w.run(t, time.Minute, nil, bin)
			if b.code != 5 || !strings.HasPrefix(b.stdout, "startup out ") {
				t.Fatalf("bare: exit %d, %q, %q", b.code, b.stdout, b.stderr)
			}
			pre := w.run(t, time.Minute, []string{"LD_PRELOAD=" + w.bin[:len(w.bin)-len("bin/heaplens")] + "lib/python3.9/site-packages/heaplens/_lib/libheaplens.so"}, bin)
			if pre.stderr == b.stderr && pre.code == b.code {
				t.Errorf("premise: preloaded by hand, the library should break or change this start; it did not (exit %d, %q)", pre.code, pre.stderr)
			}
			same(t, nil, f.line, b, bin)
			// As a child of a profiled shell: the exec decides, not the agent.
			script := `"$0"; echo "child $?"`
			bs := w.run(t, time.Minute, nil, "sh", "-c", script, bin)
			_, text := same(t, nil, "", bs, "sh", "-c", script, bin)
			if !strings.Contains(text, "ran unprofiled: "+f.note) {
				t.Errorf("the report does not name the %s child as unprofiled and why:\n%s", f.name, text)
			}
		})
	}
}

// TestBinaryNeedsGlibc217 checks that bin/heaplens and the wheel's heaplens
// need no symbol version newer than glibc 2.17 (make builds them without
// cgo: static programs, which need none).
func TestBinaryNeedsGlibc217(t *testing.T) {
	bins := []string{heaplensBin(t), filepath.Join(testenv.Root, "python", "heaplens", "_bin", "heaplens")}
	for _, bin := range bins {
		f, err := elf.Open(bin)
		if err != nil {
			t.Errorf("%v (make wheel builds the wheel's heaplens)", err)
			continue
		}
		bad, err := testenv.NewerThanGlibc217(f)
		f.Close()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			t.Errorf("%s: %v", bin, err)
		}
		for _, v := range bad {
			t.Errorf("%s needs %s, newer than glibc 2.17 allows", bin, v)
		}
	}
}
