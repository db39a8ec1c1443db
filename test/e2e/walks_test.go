package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heaplens/heaplens/test/testenv"
)

// Native walks that never leave the stack they are on (preload/stacks.c,
// docs/unwind-format.md "Stacks"): programs that switch stacks under the
// library, bare and profiled, must exit and print the same, and the
// allocations made on the switched stacks must be in the profile with their
// bytes exact at --rate 1.

// repeatedAsBare runs command bare once and profiled `runs` times with flags,
// and requires of each profiled run the bare run's exit status and output.
func repeatedAsBare(t *testing.T, runs int, flags []string, command ...string) {
	t.Helper()
	bare := run(t, 2*time.Minute, command[0], command[1:]...)
	if bare.code != 0 || !strings.HasSuffix(bare.stdout, "done\n") {
		t.Fatalf("%v bare: exit %d, stdout %q, stderr %q", command, bare.code, bare.stdout, bare.stderr)
	}
	dir := t.TempDir()
	failed := 0
	for i := 0; i < runs; i++ {
		capPath := filepath.Join(dir, fmt.Sprintf("run%d.hlc", i))
		args := append(append(append([]string{"run", "-q", "-o", capPath}, flags...), "--"), command...)
		res := run(t, 2*time.Minute, heaplensBin(t), args...)
		if res.code != bare.code || res.stdout != bare.stdout {
			failed++
			t.Errorf("%v run %d of %d: exit %d, stdout %q; bare: exit %d, stdout %q\nstderr: %s",
				flags, i+1, runs, res.code, res.stdout, bare.code, bare.stdout, res.stderr)
		}
	}
	t.Logf("%v: %d of %d profiled runs as bare", flags, runs-failed, runs)
}

// exactCapture runs command profiled at --rate 1 for an exact check: as
// bare, and with no record dropped. A ring that filled because the agent fell
// behind on a loaded machine drops records rather than slow the program (a
// dropped allocation is missing from the profile): such a run is said loudly
// and made again, up to three times.
func exactCapture(t *testing.T, command ...string) string {
	t.Helper()
	bare := run(t, 2*time.Minute, command[0], command[1:]...)
	capPath := filepath.Join(t.TempDir(), "exact.hlc")
	for try := 1; ; try++ {
		args := append([]string{"run", "-o", capPath, "--rate", "1", "--ring-size", "256MiB", "--"}, command...)
		res := run(t, 2*time.Minute, heaplensBin(t), args...)
		if res.code != bare.code || res.stdout != bare.stdout {
			t.Fatalf("--rate 1: exit %d, stdout %q; bare: exit %d, stdout %q\nstderr: %s", res.code, res.stdout, bare.code, bare.stdout, res.stderr)
		}
		m := dropped.FindStringSubmatch(res.stderr)
		if m == nil {
			t.Fatalf("the run's summary does not count dropped records:\n%s", res.stderr)
		}
		if m[1] == "0" && m[2] == "0" {
			return capPath
		}
		if try == 3 {
			t.Fatalf("every run dropped records (last: %s allocations, %s frees): the exact checks cannot be made", m[1], m[2])
		}
		t.Logf("!!! run %d dropped %s allocation and %s free records (ring full under load): running again", try, m[1], m[2])
	}
}

// exactAt requires the bytes of the stacks through fn (a native function,
// or a Python frame "name (file:line)") to be want, exactly.
func exactAt(t *testing.T, f folded, fn string, want float64) {
	t.Helper()
	var got float64
	for stack, v := range f {
		if strings.Contains(stack, ";"+fn) {
			got += v
		}
	}
	if got != want {
		t.Errorf("%s: %.0f bytes in the profile, want exactly %.0f; stacks there:\n%s", fn, got, want, strings.Join(f.stacksWith(fn), "\n"))
	} else {
		t.Logf("%s: %.0f bytes, exact", fn, got)
	}
}

// pythonWith is Debian's python3 if it imports every module named; else the
// test says so loudly and fails (scripts/deps.sh installs them).
func pythonWith(t *testing.T, modules ...string) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import "+strings.Join(modules, ", ")).CombinedOutput(); err != nil {
		t.Logf("!!! %s cannot import %v (scripts/deps.sh installs python3-greenlet, python3-gevent and python3-eventlet): %v\n%s", py, modules, err, out)
		testenv.Missing(t, "%s without %v: the greenlet test does NOT run", py, modules)
		return ""
	}
	return py
}

// greenlet switches 100 greenlets, each at its own depth and resumed from
// varying depths, copying each one's slice of the C stack in and out: above
// a greenlet's base lies another's stack, or stale data. libgcc's walk
// followed it into freed memory (SIGSEGV in most runs at the default rate,
// in every run at --rate 1, with --no-python too). gevent's and eventlet's
// hubs switch the same way.
func TestGreenletStacks(t *testing.T) {
	py := pythonWith(t, "greenlet", "gevent", "eventlet")
	if py == "" {
		return
	}
	script := filepath.Join(root, "test", "workloads", "greenlets.py")
	line := siteLines(t, script)["glet"]
	const rounds = 50
	var want float64 // bytes objects of 2000+i bytes: 33 bytes of header, the rest zeroed
	for i := 0; i < 100; i++ {
		want += rounds * float64(33+2000+i)
	}
	site := fmt.Sprintf("dive (%s:%d)", script, line)
	for _, mode := range []string{"greenlet", "gevent", "eventlet"} {
		t.Run(mode, func(t *testing.T) {
			command := []string{py, script, strconv.Itoa(rounds), mode}
			runs := [3]int{5, 2, 3} // default rate, --no-python, --rate 1
			if mode == "greenlet" {
				runs = [3]int{8, 3, 4} // the switching that crashed the most
			}
			repeatedAsBare(t, runs[0], nil, command...)
			repeatedAsBare(t, runs[1], []string{"--no-python"}, command...)
			if mode == "eventlet" {
				// Importing eventlet makes ~0.5 M allocations (40 s at --rate 1
				// here): its greenlets switch as gevent's, exact there.
				repeatedAsBare(t, 3, []string{"--rate", "4KiB"}, command...)
				return
			}
			repeatedAsBare(t, runs[2], []string{"--rate", "1"}, command...)
			capPath := exactCapture(t, command...)
			// The site's blocks are malloc's (over pymalloc's 512 bytes); the small
			// objects the interpreter makes at the same line are pymem's.
			leaks := reportWith(t, capPath, "--view", "leaks", "--kind", "malloc")
			exactAt(t, leaks, site, want)
			if mode != "greenlet" {
				return // gevent's hub starts every greenlet from the same frames, which stay in place above them
			}
			// Resumed from varying depths, a greenlet's stack ends at its first
			// frame (above it: another's), marked at its root; the reports say how
			// many were cut so.
			const cut = "[outer frames cut: the walk could not follow the stack further]"
			marked := 0
			for _, stack := range leaks.stacksWith(site) {
				if frames := strings.Split(stack, ";"); len(frames) > 1 && frames[1] == cut {
					marked++
				}
			}
			if marked == 0 {
				t.Errorf("no stack at %s is marked %q at its root", site, cut)
			}
			if r := run(t, time.Minute, heaplensBin(t), "report", capPath); !strings.Contains(r.stdout, "sampled stacks end where the native walk could not follow") {
				t.Errorf("the report does not say that stacks were cut:\n%s", r.stdout)
			}
		})
	}
}

// contexts runs 16 coroutines on 32 KiB stacks (makecontext/swapcontext),
// 8 from malloc, 8 mapped each on its own above a guard page: walks on them
// must stay on them, and end at the context's entry.
func TestUcontextStacks(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "contexts.c")
	const rounds = 200
	repeatedAsBare(t, 5, nil, bin, strconv.Itoa(rounds))
	repeatedAsBare(t, 3, []string{"--rate", "1"}, bin, strconv.Itoa(rounds))
	capPath := exactCapture(t, bin, strconv.Itoa(rounds))
	var want float64
	for i := 0; i < 16; i++ {
		want += rounds * float64(1000+i)
	}
	allocs := report(t, capPath, "allocs")
	exactAt(t, allocs, "ctx_alloc (", want)
	// Each stack runs from the context's entry (body) down to the site, with
	// its own depth of dive frames: nothing of main's stack above it.
	for stack := range allocs {
		if strings.Contains(stack, "ctx_alloc (") && (!strings.Contains(stack, ";body (") || strings.Contains(stack, "main (")) {
			t.Errorf("a context's stack does not start at its entry: %s", stack)
		}
	}
}

// mostUsed is what altstack prints with paint: the most of its alternate
// signal stack one handler call used.
var mostUsed = regexp.MustCompile(`most used (\d+)\n`)

// A SIGUSR1 handler allocating on a 6 and a 7 KiB sigaltstack (above
// MINSIGSTKSZ; the kernel's frame takes ~3.3 KiB of it with AVX-512) works
// bare; a sample must not overflow it: it uses at most 1 KiB of the stack it
// runs on, walks through the signal frame without libgcc (which alone uses
// more), and is dropped if even that is not left.
func TestSmallSignalStack(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "altstack.c", "-Wl,-z,now") // bare, a lazy binding in the handler would need ~3 KiB itself
	const rounds = 2000
	repeatedAsBare(t, 5, nil, bin, strconv.Itoa(rounds))
	repeatedAsBare(t, 3, []string{"--rate", "1"}, bin, strconv.Itoa(rounds))
	allocs := report(t, exactCapture(t, bin, strconv.Itoa(rounds)), "allocs")
	exactAt(t, allocs, "handler_alloc (", 2*rounds*1200)
	// Through the signal frame to the code the signal interrupted.
	for stack := range allocs {
		if strings.Contains(stack, "handler_alloc (") && !strings.Contains(stack, "main (altstack.c") {
			t.Errorf("a handler's stack does not reach main through the signal frame: %s", stack)
		}
	}

	// The sample's own use of the alternate stack: painted before each
	// signal, measured after; at --rate 1 every handler call is sampled.
	used := func(args ...string) int {
		res := run(t, time.Minute, args[0], args[1:]...)
		m := mostUsed.FindStringSubmatch(res.stdout)
		if res.code != 0 || m == nil {
			t.Fatalf("%v: exit %d, stdout %q, stderr %s", args, res.code, res.stdout, res.stderr)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	bare := used(bin, "200", "paint")
	profiled := used(heaplensBin(t), "run", "-q", "-o", filepath.Join(dir, "paint.hlc"), "--rate", "1", "--", bin, "200", "paint")
	t.Logf("most of the alternate stack used by a handler call: %d bytes bare, %d profiled: a sample's %d", bare, profiled, profiled-bare)
	if profiled-bare > 1024 {
		t.Errorf("a sample used %d bytes of the signal stack, want at most 1 KiB", profiled-bare)
	}

	// A stack 600 bytes larger than the handler needs bare leaves no room
	// for a sample: it is dropped (counted), not taken over the stack's end.
	tight := strconv.Itoa((bare + 600 + 63) &^ 63)
	command := []string{bin, "200", "plain", tight, tight}
	bareTight := run(t, time.Minute, command[0], command[1:]...)
	res := run(t, time.Minute, heaplensBin(t), append([]string{"run", "-o", filepath.Join(dir, "tight.hlc"), "--rate", "1", "--"}, command...)...)
	m := dropped.FindStringSubmatch(res.stderr)
	if bareTight.code != 0 || res.code != 0 || res.stdout != bareTight.stdout || m == nil {
		t.Fatalf("on %s-byte signal stacks: exit %d, stdout %q; bare: exit %d, stdout %q\nstderr: %s", tight, res.code, res.stdout, bareTight.code, bareTight.stdout, res.stderr)
	}
	t.Logf("on %s-byte signal stacks: as bare, %s of the 400 handler allocations dropped", tight, m[1])
	if n, _ := strconv.Atoi(m[1]); n < 400 {
		t.Errorf("on %s-byte signal stacks %d allocations dropped, want the 400 of the handler: a sample there would have overflowed the stack", tight, n)
	}
}
