package e2e

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The library walks native stacks with the unwind tables the agent writes
// (docs/unwind-format.md) and leaves to libgcc only the stacks they do not
// cover. With HEAPLENS_UNWIND_CHECK=1 it walks every stack both ways and
// counts the stacks on which the two differ, and the agent prints the
// counts of each process.
var unwindCounts = regexp.MustCompile(`pid (\d+): unwind check: (\d+) native stacks walked with unwind tables, (\d+) by libgcc; (\d+) of them differed`)

// checkUnwind requires, of every process the run reports on, no stack that
// differed; and of the busiest, most stacks from the tables: the agent
// writes a module's table when the first stack through it is drained, and
// the library looks for it again every 50 ms, so only the first ~0.1 s go
// to libgcc.
func checkUnwind(t *testing.T, stderr string) {
	t.Helper()
	ms := unwindCounts.FindAllStringSubmatch(stderr, -1)
	if len(ms) == 0 {
		t.Fatalf("no unwind counts in the run's summary:\n%s", stderr)
	}
	busiest, most := "", -1
	var tables, libgcc int
	for _, m := range ms {
		tab, _ := strconv.Atoi(m[2])
		lib, _ := strconv.Atoi(m[3])
		differed, _ := strconv.Atoi(m[4])
		if differed != 0 {
			t.Errorf("pid %s: %d of %d stacks walked with the tables differed from libgcc's", m[1], differed, tab)
		}
		if tab+lib > most {
			busiest, most, tables, libgcc = m[1], tab+lib, tab, lib
		}
	}
	t.Logf("pid %s: %d stacks walked with the tables, %d by libgcc", busiest, tables, libgcc)
	if tables < 100 || tables < 2*libgcc {
		t.Errorf("pid %s: %d stacks walked with the tables, %d by libgcc: want at least 100 and two thirds from the tables", busiest, tables, libgcc)
	}
}

func TestUnwindTablesNative(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "unwindmix.c")
	capPath := filepath.Join(dir, "check.hlc")
	res := runEnv(t, 2*time.Minute, []string{"HEAPLENS_UNWIND_CHECK=1"}, heaplensBin(t),
		"run", "-o", capPath, "--rate", "4KiB", "--", bin, "2")
	if res.code != 0 || res.stdout != "done\n" {
		t.Fatalf("heaplens run: exit %d, stdout %q\n%s", res.code, res.stdout, res.stderr)
	}
	checkUnwind(t, res.stderr)

	// Without the check the frames recorded are the tables' own: the
	// stacks must have their known shape, through frames found from rsp
	// (recurse), from rbp (vla_frame, fp_frame) and through libc (qsort).
	capPath, res = profile(t, dir, []string{"--rate", "4KiB"}, bin, "2")
	if res.code != 0 || res.stdout != "done\n" {
		t.Fatalf("heaplens run: exit %d, stdout %q\n%s", res.code, res.stdout, res.stderr)
	}
	f := report(t, capPath, "allocs")
	var deep, sorted int
	for stack := range f {
		frames := strings.Split(stack, ";")
		var names []string
		for _, fr := range frames {
			names = append(names, strings.SplitN(fr, " (", 2)[0])
		}
		joined := strings.Join(names, ";")
		switch {
		case strings.HasSuffix(joined, "recurse;fp_frame;vla_frame;leaf"):
			deep++
			n := 0
			for _, name := range names {
				if name == "recurse" {
					n++
				}
			}
			if n != 41 || !strings.Contains(joined, "main;work;recurse") && !strings.Contains(joined, "start_thread;work;recurse") {
				t.Errorf("stack through recurse: %d recurse frames, want 41 under work under main or start_thread:\n%s", n, stack)
			}
		case strings.Contains(joined, ";work;") && strings.Contains(joined, "qsort") && strings.HasSuffix(joined, "cmp;leaf"):
			sorted++
		}
	}
	if deep == 0 || sorted == 0 {
		t.Errorf("%d stacks through recurse…leaf and %d through qsort…cmp;leaf, want both; report:\n%v", deep, sorted, f)
	}
}

// Python's eval loop, C functions calling back into Python, ctypes and a
// second thread, on every supported interpreter.
func TestUnwindTablesPython(t *testing.T) {
	script := filepath.Join(root, "test", "workloads", "pyunwind.py")
	for name, py := range pythons(t) {
		t.Run(name, func(t *testing.T) {
			res := runEnv(t, 2*time.Minute, []string{"HEAPLENS_UNWIND_CHECK=1"}, heaplensBin(t),
				"run", "-o", filepath.Join(t.TempDir(), "py.hlc"), "--rate", "16KiB", "--", py, script, "2")
			if res.code != 0 || res.stdout != "done\n" {
				t.Fatalf("heaplens run: exit %d, stdout %q\n%s", res.code, res.stdout, res.stderr)
			}
			checkUnwind(t, res.stderr)
		})
	}
}
