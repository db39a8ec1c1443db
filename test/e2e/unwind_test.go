package e2e

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heaplens/heaplens/internal/unwind"
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
// the library looks for it again every 5 ms, so only the first few ms go
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
	// Twice: the tables of the second run come from the first's table cache.
	cache := filepath.Join(dir, "cache")
	for run := 1; run <= 2; run++ {
		res := runEnv(t, 2*time.Minute, []string{"HEAPLENS_UNWIND_CHECK=1", unwind.CacheEnv + "=" + cache}, heaplensBin(t),
			"run", "-o", capPath, "--rate", "4KiB", "--", bin, "1")
		if res.code != 0 || res.stdout != "done\n" {
			t.Fatalf("heaplens run %d: exit %d, stdout %q\n%s", run, res.code, res.stdout, res.stderr)
		}
		checkUnwind(t, res.stderr)
		_, id, err := unwind.BuildFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := filepath.Glob(filepath.Join(cache, hex.EncodeToString(id)+"-*.unwind")); len(m) != 1 {
			t.Errorf("run %d: the table cache holds %d tables of unwindmix, want 1", run, len(m))
		}
	}

	// Without the check the frames recorded are the tables' own: the
	// stacks must have their known shape, through frames found from rsp
	// (recurse), from rbp (vla_frame, fp_frame) and through libc (qsort).
	capPath, res := profile(t, dir, []string{"--rate", "4KiB"}, bin, "2")
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
	for _, py := range everyPython(t) {
		t.Run(py.name, func(t *testing.T) {
			w := py.where(t)
			_, capArg := w.file("py.hlc")
			res := w.heaplens(t, 2*time.Minute, []string{"HEAPLENS_UNWIND_CHECK=1"},
				"run", "-o", capArg, "--rate", "16KiB", "--", py.path, w.workload(t, "pyunwind.py"), "2")
			if res.code != 0 || res.stdout != "done\n" {
				t.Fatalf("heaplens run: exit %d, stdout %q\n%s", res.code, res.stdout, res.stderr)
			}
			checkUnwind(t, res.stderr)
		})
	}
}

// The library takes a table's rows and bucket index as the file has them
// (checking them one by one would cost every process ~10 instructions a
// row): tables whose header is right and whose rows, rules and index are
// not (docs/unwind-format.md) must give wrong stacks at worst, never a
// read outside the table or the stack. The library runs without an agent,
// on tables written for it, the program and libc before it starts.
func TestHostileUnwindTables(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "unwindmix.c")
	lib := filepath.Join(root, "internal", "launch", "lib", "libheaplens.so")
	bare := run(t, time.Minute, bin, "1")
	if bare.code != 0 || bare.stdout != "done\n" {
		t.Fatalf("unwindmix without heaplens: exit %d, %q", bare.code, bare.stdout)
	}
	type module struct {
		name    string
		table   []byte
		rows    int
		corrupt bool // the library's own is not: a walk starts in it
	}
	var mods []module
	for _, path := range []string{lib, bin, "/lib/x86_64-linux-gnu/libc.so.6"} {
		table, id, err := unwind.BuildFile(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		mods = append(mods, module{"unwind." + hex.EncodeToString(id), table, int(binary.LittleEndian.Uint32(table[12:])), path != lib})
	}
	const hdr = 96
	le := binary.LittleEndian
	words := func(b []byte, from, n int, f func(i int, w uint32) uint32) {
		for i := range n {
			le.PutUint32(b[from+4*i:], f(i, le.Uint32(b[from+4*i:])))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name    string
		corrupt func(b []byte, rows int)
	}{
		{"as built", func(b []byte, rows int) {}},
		{"index random", func(b []byte, rows int) {
			words(b, hdr+8*rows, (len(b)-hdr-8*rows)/4, func(int, uint32) uint32 { return rng.Uint32() })
		}},
		{"index past the rows", func(b []byte, rows int) {
			words(b, hdr+8*rows, (len(b)-hdr-8*rows)/4, func(int, uint32) uint32 { return ^uint32(0) })
		}},
		{"index decreasing", func(b []byte, rows int) {
			words(b, hdr+8*rows, (len(b)-hdr-8*rows)/4, func(i int, _ uint32) uint32 { return uint32(max(rows-1-i, 0)) })
		}},
		{"addresses random", func(b []byte, rows int) { // all but the last row's, which sizes the index
			words(b, hdr, rows-1, func(int, uint32) uint32 { return rng.Uint32() })
		}},
		{"rules random", func(b []byte, rows int) {
			words(b, hdr+4*rows, rows, func(int, uint32) uint32 { return rng.Uint32() })
		}},
		{"rules of every frame 8 bytes", func(b []byte, rows int) {
			words(b, hdr+4*rows, rows, func(int, uint32) uint32 { return 8 })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rings := filepath.Join(t.TempDir(), "rings")
			if err := os.Mkdir(rings, 0o700); err != nil {
				t.Fatal(err)
			}
			for _, m := range mods {
				b := append([]byte(nil), m.table...)
				if m.corrupt {
					tc.corrupt(b, m.rows)
				}
				if err := os.WriteFile(filepath.Join(rings, m.name), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			env := []string{"LD_PRELOAD=" + lib, "HEAPLENS_DIR=" + rings, "HEAPLENS_RATE=4096"}
			res := runEnv(t, time.Minute, env, bin, "1")
			if res.code != bare.code || res.stdout != bare.stdout || res.stderr != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; bare: exit %d, stdout %q", res.code, res.stdout, res.stderr, bare.code, bare.stdout)
			}
		})
	}
}

// In a Python process a walk splices onto the thread's last one where a
// frame's rule and CFA are the kept walk's, and checks every return address
// from there (preload/unwind.c). splicecallers reaches one function from
// different callers at equal depth, switching at random: the frames at and
// below it match the last walk's, the callers do not, one frame out (A, B)
// or two (P, Q). At --rate 1 each route's stack must carry exactly its
// count times its size, no stack may mix routes, and the tables' walks must
// equal libgcc's.
func TestUnwindSplice(t *testing.T) {
	dir := t.TempDir()
	lib := build(t, dir, "splicecallers.c", "-shared", "-fPIC")
	script := filepath.Join(root, "test", "workloads", "splicecallers.py")
	capPath := filepath.Join(dir, "splice.hlc")
	res := runEnv(t, 2*time.Minute, []string{"HEAPLENS_UNWIND_CHECK=1"}, heaplensBin(t),
		"run", "-o", capPath, "--rate", "1", "--", "/usr/bin/python3", script, lib, "20000")
	if res.code != 0 {
		t.Fatalf("heaplens run (check mode): exit %d\n%s", res.code, res.stderr)
	}
	checkUnwind(t, res.stderr)

	capPath, res = profile(t, dir, []string{"-q", "--rate", "1"}, "/usr/bin/python3", script, lib, "20000")
	if res.code != 0 {
		t.Fatalf("heaplens run: exit %d\n%s", res.code, res.stderr)
	}
	var count [4]float64
	var same int
	if _, err := fmt.Sscanf(strings.TrimSpace(res.stdout), "A=%g B=%g P=%g Q=%g same_cfa=%d", &count[0], &count[1], &count[2], &count[3], &same); err != nil {
		t.Fatalf("splicecallers printed %q: %v", res.stdout, err)
	}
	if same != 1 {
		t.Fatalf("!!! mid's CFA differed between routes (the compiler laid the routes' frames out differently): the test does not test the splice's case")
	}
	routes := []struct {
		suffix string
		size   float64
	}{
		{"splice_run;route_a;mid;leaf", 1000},
		{"splice_run;route_b;mid;leaf", 2000},
		{"splice_run;route_p;shared;mid;leaf", 3000},
		{"splice_run;route_q;shared;mid;leaf", 4000},
	}
	var got [4]float64
	for stack, bytes := range report(t, capPath, "allocs") {
		var names []string
		for _, fr := range strings.Split(stack, ";") {
			names = append(names, strings.SplitN(fr, " (", 2)[0])
		}
		joined := strings.Join(names, ";")
		if !strings.HasSuffix(joined, ";leaf") {
			continue
		}
		found := false
		for i, r := range routes {
			if strings.HasSuffix(joined, ";"+r.suffix) {
				got[i] += bytes
				found = true
			}
		}
		if !found {
			t.Errorf("a stack of leaf through no route (%.0f bytes): %s", bytes, stack)
		}
	}
	for i, r := range routes {
		if want := count[i] * r.size; got[i] != want {
			t.Errorf("%s: %.0f bytes, want exactly %.0f (%.0f calls of %.0f B)", r.suffix, got[i], want, count[i], r.size)
		}
	}
}
