package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// knownSite is a function's known bytes allocated, and held at exit.
type knownSite struct {
	fn            string
	allocs, leaks float64
}

// allocSites are allocsites.c's sites.
var allocSites = []knownSite{
	{"keep_blocks", 200 * 3000, 200 * 3000},
	{"churn", 1000 * 5000, 0},
	{"grow_block", 4096 * (16 * 17 / 2), 0}, // realloc to 4, 8, … 64 KiB: each step's new size
}

// buildLib compiles a workload into a shared library.
func buildLib(t *testing.T, dir, src string) string {
	t.Helper()
	out := filepath.Join(dir, strings.TrimSuffix(src, ".c")+".so")
	if b, err := exec.Command("gcc", "-O2", "-g", "-shared", "-fPIC", "-o", out, filepath.Join(root, "test", "workloads", src)).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", src, err, b)
	}
	return out
}

// profiledAsBare runs command under heaplens with env at each rate and
// requires its exit status and output to be the bare run's; it returns the
// capture of the --rate 1 run.
func profiledAsBare(t *testing.T, dir string, env []string, rates []string, command ...string) string {
	t.Helper()
	bare := runEnv(t, 2*time.Minute, env, command[0], command[1:]...)
	if bare.code != 0 {
		t.Fatalf("%v fails bare: exit %d\n%s%s", command, bare.code, bare.stdout, bare.stderr)
	}
	var exact string
	for _, rate := range rates {
		capPath := filepath.Join(dir, "rate"+rate+".hlc")
		args := append([]string{"run", "-q", "-o", capPath, "--rate", rate, "--ring-size", "256MiB", "--"}, command...)
		res := runEnv(t, 5*time.Minute, env, heaplensBin(t), args...)
		if res.code != bare.code || res.stdout != bare.stdout || res.stderr != bare.stderr {
			t.Fatalf("rate %s: exit %d, stdout %q, stderr %q; bare: exit %d, %q, %q",
				rate, res.code, res.stdout, res.stderr, bare.code, bare.stdout, bare.stderr)
		}
		if rate == "1" {
			exact = capPath
		}
	}
	return exact
}

// checkExact requires the sites' exact totals at --rate 1, and no
// mapping: the program maps nothing itself, so anything of the mmap kind
// would be the allocator's own mappings counted a second time.
func checkExact(t *testing.T, capPath string) {
	t.Helper()
	if text := reportText(t, capPath); !strings.Contains(text, "dropped: 0\n") {
		t.Fatalf("records were dropped: the exact checks cannot be made\n%s", text)
	}
	exactSites(t, capPath, allocSites)
	if m := reportWith(t, capPath, "--view", "allocs", "--kind", "mmap"); m.total() != 0 {
		t.Errorf("%.0f bytes of mappings in a program that maps nothing: the allocator's own, counted twice\n%v", m.total(), m)
	}
}

// exactSites requires each site's exact totals at --rate 1.
func exactSites(t *testing.T, capPath string, sites []knownSite) {
	t.Helper()
	allocs, leaks := report(t, capPath, "allocs"), report(t, capPath, "leaks")
	for _, s := range sites {
		if got := allocs.site(s.fn); got != s.allocs {
			t.Errorf("%s allocated %.0f bytes at --rate 1, want %.0f", s.fn, got, s.allocs)
		}
		if got := leaks.site(s.fn); got != s.leaks {
			t.Errorf("%s holds %.0f bytes at exit at --rate 1, want %.0f", s.fn, got, s.leaks)
		}
	}
}

// A malloc that starts every block right after a guard page: the word
// below a block is unmapped. Its program runs as bare, and every site is
// exact at --rate 1.
func TestGuardPageAllocator(t *testing.T) {
	dir := t.TempDir()
	lib, bin := buildLib(t, dir, "guardalloc.c"), build(t, dir, "allocsites.c")
	capPath := profiledAsBare(t, dir, []string{"LD_PRELOAD=" + lib}, []string{"512KiB", "4KiB", "1"}, bin)
	checkExact(t, capPath)
	if text := reportText(t, capPath); !strings.Contains(text, "malloc was "+lib) {
		t.Errorf("the report does not name the allocator %s:\n%s", lib, text)
	}
}

// Debian's jemalloc, tcmalloc and mimalloc, preloaded as services do: a C
// program and a Python one run as bare, their sites are exact at --rate 1,
// and the allocators' own mappings are not counted.
func TestPreloadedAllocators(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "allocsites.c")
	script := filepath.Join(root, "test", "workloads", "allocsites.py")
	stash := regexp.MustCompile(`stash_blocks (\d+)`)
	glibcCap := profiledAsBare(t, t.TempDir(), nil, []string{"1"}, "/usr/bin/python3", script)
	glibcChurn := report(t, glibcCap, "allocs").site("churn")
	for _, a := range []struct{ name, lib string }{
		{"jemalloc", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"},
		{"tcmalloc", "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"},
		{"mimalloc", "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2"},
	} {
		t.Run(a.name, func(t *testing.T) {
			if _, err := os.Stat(a.lib); err != nil {
				t.Fatalf("!!! %s is not installed (scripts/deps.sh installs it): %v", a.lib, err)
			}
			env := []string{"LD_PRELOAD=" + a.lib}
			sub := t.TempDir()
			capPath := profiledAsBare(t, sub, env, []string{"512KiB", "1"}, bin)
			checkExact(t, capPath)
			if text := reportText(t, capPath); !strings.Contains(text, "malloc was "+a.name+" ("+a.lib+")") {
				t.Errorf("the report does not name %s:\n%s", a.name, text)
			}
			py := t.TempDir()
			capPath = profiledAsBare(t, py, env, []string{"512KiB", "1"}, "/usr/bin/python3", script)
			bare := runEnv(t, time.Minute, env, "/usr/bin/python3", script)
			m := stash.FindStringSubmatch(bare.stdout)
			if m == nil {
				t.Fatalf("allocsites.py printed no total: %q", bare.stdout)
			}
			want, _ := strconv.ParseFloat(m[1], 64)
			if got := report(t, capPath, "leaks").site("stash_blocks"); got != want {
				t.Errorf("python: stash_blocks holds %.0f bytes at exit at --rate 1, want %.0f", got, want)
			}
			// What churn allocates (its bytearrays, and the ints it counts
			// with) does not depend on malloc: the same as under glibc.
			if got, want := report(t, capPath, "allocs").site("churn"), glibcChurn; got != want || want < 2000*(100<<10) {
				t.Errorf("python: churn allocated %.0f bytes at --rate 1, want %.0f as under glibc", got, want)
			}
		})
	}
}

// A library loaded with RTLD_DEEPBIND binds free and malloc to libc's,
// past heaplens: it frees blocks the program allocated, and hands out
// blocks the program frees. Nothing aborts at any rate; at --rate 1 the
// blocks it freed are not leaks (their addresses were reused, which proves
// them freed), and the reuse site is exact.
func TestDeepBindFrees(t *testing.T) {
	dir := t.TempDir()
	lib, bin := buildLib(t, dir, "deeplib.c"), build(t, dir, "deepmain.c", "-ldl")
	capPath := profiledAsBare(t, dir, nil, []string{"512KiB", "4KiB", "1"}, bin, lib)
	leaks := report(t, capPath, "leaks")
	for _, fn := range []string{"handed_over", "taken_back", "reuse"} {
		if got := leaks.site(fn); got != 0 {
			t.Errorf("%s holds %.0f bytes at exit at --rate 1, want 0 (freed, through libc or ours)", fn, got)
		}
	}
	allocs := report(t, capPath, "allocs")
	if got := allocs.site("reuse"); got != 1000*4000 {
		t.Errorf("reuse allocated %.0f bytes at --rate 1, want 4000000", got)
	}
	if got := allocs.site("handed_over"); got != 1000*4000 {
		t.Errorf("handed_over allocated %.0f bytes at --rate 1, want 4000000", got)
	}
}

// An executable that defines malloc comes before every preloaded library:
// it runs as bare, and the run says its allocations were not seen.
func TestOwnMallocSaid(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "allocsites.c", filepath.Join(root, "test", "workloads", "guardalloc.c"))
	bare := run(t, time.Minute, bin)
	_, res := profile(t, dir, nil, bin)
	if res.code != bare.code || res.stdout != bare.stdout {
		t.Fatalf("exit %d, stdout %q; bare: exit %d, %q", res.code, res.stdout, bare.code, bare.stdout)
	}
	if !strings.Contains(res.stderr, "the executable defines its own malloc") {
		t.Errorf("the run does not say the program's allocations went unseen:\n%s", res.stderr)
	}
}
