package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
