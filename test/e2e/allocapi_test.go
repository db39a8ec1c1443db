package e2e

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Programs that allocate through their allocator's own API (allocapi.c:
// jemalloc's mallocx family, mimalloc's mi_*, gperftools' tc_*) run as
// bare; at --rate 1 every site is exact, and no mapping of the allocator's
// is counted; at 4 KiB each site lies within its sampling interval.
func TestAllocatorAPIs(t *testing.T) {
	for _, a := range []struct{ name, define, lib, header string }{
		{"jemalloc", "-DJE", "-ljemalloc", "/usr/include/jemalloc/jemalloc.h"},
		{"mimalloc", "-DMI", "-lmimalloc", "/usr/include/mimalloc.h"},
		{"tcmalloc", "-DTC", "-ltcmalloc", "/usr/include/gperftools/tcmalloc.h"},
	} {
		t.Run(a.name, func(t *testing.T) {
			if _, err := os.Stat(a.header); err != nil {
				t.Fatalf("!!! %s's headers are not installed (scripts/deps.sh installs them): %v", a.name, err)
			}
			dir := t.TempDir()
			bin := build(t, dir, "allocapi.c", a.define, a.lib)
			capPath := profiledAsBare(t, dir, nil, []string{"512KiB", "4KiB", "1"}, bin)
			checkExact(t, capPath)
			allocs, leaks := report(t, capPath, "allocs"), report(t, capPath, "leaks")
			if got := allocs.site("cross_free"); got != 100*7000 {
				t.Errorf("cross_free allocated %.0f bytes at --rate 1, want 700000", got)
			}
			if got := leaks.site("cross_free"); got != 0 {
				t.Errorf("cross_free holds %.0f bytes at exit at --rate 1: its blocks, freed with free(), were not forgotten", got)
			}
			sampled := filepath.Join(dir, "rate4KiB.hlc")
			allocs, leaks = report(t, sampled, "allocs"), report(t, sampled, "leaks")
			within(t, "keep_blocks held", leaks.site("keep_blocks"), 200, 3000, 4<<10, leaks, "keep_blocks")
			within(t, "churn allocated", allocs.site("churn"), 1000, 5000, 4<<10, allocs, "churn")
			within(t, "cross_free allocated", allocs.site("cross_free"), 100, 7000, 4<<10, allocs, "cross_free")
			if got := leaks.site("churn") + leaks.site("cross_free") + leaks.site("grow_block"); got != 0 {
				t.Errorf("%.0f bytes of freed blocks held at exit at 4 KiB", got)
			}
		})
	}
}

// A program that probes for jemalloc (a weak reference, dlsym) finds what
// it finds bare: absent without jemalloc, present with it preloaded, where
// its mallocx calls are then seen, exact at --rate 1.
func TestAllocatorProbe(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "allocprobe.c", "-ldl")
	profiledAsBare(t, t.TempDir(), nil, []string{"512KiB", "1"}, bin)
	const je = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
	if _, err := os.Stat(je); err != nil {
		t.Fatalf("!!! %s is not installed (scripts/deps.sh installs it): %v", je, err)
	}
	capPath := profiledAsBare(t, dir, []string{"LD_PRELOAD=" + je}, []string{"512KiB", "1"}, bin)
	if text := reportText(t, capPath); !strings.Contains(text, "malloc was jemalloc") {
		t.Errorf("the report does not name jemalloc:\n%s", text)
	}
	if got := report(t, capPath, "allocs").site("probe_alloc"); got != 50*10000 {
		t.Errorf("probe_alloc allocated %.0f bytes through mallocx at --rate 1, want 500000", got)
	}
	if got := report(t, capPath, "leaks").site("probe_alloc"); got != 0 {
		t.Errorf("probe_alloc holds %.0f bytes at exit, freed with dallocx", got)
	}
}

// C++'s new and delete, which jemalloc, tcmalloc and mimalloc define
// themselves (never through malloc), preloaded: the program (allocnew.cpp)
// runs as bare and its sites are exact at --rate 1, those in its own code
// and one in libstdc++'s; the same under glibc, where libstdc++'s new calls
// malloc.
func TestAllocatorNew(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "allocnew.cpp")
	sites := []knownSite{
		{"keep_new", 200 * 3000, 200 * 3000},
		{"churn_new", 1000 * (5000 + 24), 0},
		{"lib_strings", 100 * 4001, 0},
	}
	for _, a := range []struct{ name, lib string }{
		{"glibc", ""},
		{"jemalloc", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"},
		{"tcmalloc", "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"},
		{"mimalloc", "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2"},
	} {
		t.Run(a.name, func(t *testing.T) {
			var env []string
			if a.lib != "" {
				if _, err := os.Stat(a.lib); err != nil {
					t.Fatalf("!!! %s is not installed (scripts/deps.sh installs it): %v", a.lib, err)
				}
				env = []string{"LD_PRELOAD=" + a.lib}
			}
			capPath := profiledAsBare(t, t.TempDir(), env, []string{"512KiB", "1"}, bin)
			exactSites(t, capPath, sites)
		})
	}
}

// An executable with an allocator of its own beside malloc (ownalloc.c, a
// bundled je_-prefixed one) runs as bare; its blocks are not seen, its
// 4 chunks of 1 MiB are, once, as mappings, and the run says so.
func TestOwnAllocatorSaid(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "ownalloc.c")
	capPath := profiledAsBare(t, dir, nil, []string{"512KiB", "1"}, bin)
	if got := report(t, capPath, "allocs").site("fill_blocks"); got != 4<<20 {
		t.Errorf("fill_blocks allocated %.0f bytes at --rate 1, want its 4 chunks' mappings, 4194304 bytes, once", got)
	}
	want := "own jemalloc are not seen: only its mappings are, 4 MiB in 4 sampled mappings"
	if text := reportText(t, capPath); !strings.Contains(text, want) {
		t.Errorf("the report does not say %q:\n%s", want, text)
	}
}

// heaplens attach to a program that allocates only through mallocx and
// sdallocx (jeloop.c): the library routes their GOT entries at load, so a
// session starts and sees them; at --rate 1 every block is its 10,000
// bytes, and each was freed. It prints and exits as an undisturbed twin.
func TestAttachAllocatorAPI(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "jeloop.c", "-ljemalloc")
	bare, tg := twins(t, dir, false, bin)
	time.Sleep(300 * time.Millisecond)
	capPath := attachFor(t, dir, tg.pid(), time.Second, "1")
	sameAsBare(t, bare, tg)
	got := report(t, capPath, "allocs").site("je_loop")
	if got < 100*10000 || math.Mod(got, 10000) != 0 {
		t.Errorf("je_loop allocated %.0f bytes in a 1 s session at --rate 1, want a whole number of 10,000-byte blocks, at least 100", got)
	}
	if held := report(t, capPath, "leaks").site("je_loop"); held > 10000 {
		t.Errorf("je_loop holds %.0f bytes at the detach: its blocks freed with sdallocx were not forgotten", held)
	}
}

// A plugin loaded with dlopen after start that calls mallocx (jeplug.c),
// its GOT read-only (-z now) or bound lazily: its entries are routed at the
// rescan its first sampled malloc brings, and at --rate 1 its mallocx
// blocks are exact, as is the output.
func TestAllocatorAPIPlugin(t *testing.T) {
	dir := t.TempDir()
	host := build(t, dir, "jehost.c", "-ldl", "-Wl,--no-as-needed", "-ljemalloc")
	for _, bind := range []string{"now", "lazy"} {
		t.Run(bind, func(t *testing.T) {
			plugin := filepath.Join(dir, "jeplug_"+bind+".so")
			if b, err := exec.Command("gcc", "-O2", "-g", "-shared", "-fPIC", "-Wl,-z,"+bind, "-o", plugin,
				filepath.Join(root, "test", "workloads", "jeplug.c"), "-ljemalloc").CombinedOutput(); err != nil {
				t.Fatalf("gcc jeplug.c: %v\n%s", err, b)
			}
			capPath := profiledAsBare(t, t.TempDir(), nil, []string{"512KiB", "1"}, host, plugin)
			if got := report(t, capPath, "allocs").site("plugin_work"); got != 100+100*10000 {
				t.Errorf("plugin_work allocated %.0f bytes at --rate 1, want 1000100 (malloc's 100, mallocx's 100 × 10,000)", got)
			}
			if got := report(t, capPath, "leaks").site("plugin_work"); got != 0 {
				t.Errorf("plugin_work holds %.0f bytes at exit", got)
			}
		})
	}
}
