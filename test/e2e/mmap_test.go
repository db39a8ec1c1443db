package e2e

import (
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heaplens/heaplens/test/testenv"
)

const miB = 1 << 20

// TestMmapKind runs test/workloads/mapper.c, whose mappings have exact
// sizes, at a rate far below them (every one is sampled with probability
// 1 − e^(−size/rate) ≥ 1 − e^(−16), and weighs 1/that): the mmap kind holds
// the program's own anonymous mappings, mremap and sbrk growth, and nothing
// glibc's malloc mapped for it or a file mapping.
func TestMmapKind(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "mapper.c")
	capPath, res := profile(t, dir, []string{"--rate", "64KiB", "--seed", "3"}, bin)
	if res.code != 0 {
		t.Fatalf("mapper under heaplens: exit %d\n%s", res.code, res.stderr)
	}
	if strings.Contains(res.stderr, "of RSS is free memory held in glibc's arenas") {
		t.Errorf("the summary blames glibc's arenas in a program that frees nothing:\n%s", res.stderr)
	}
	checkMapperKinds(t, capPath)
	// Residency: each block had only its first page touched.
	capPath, res = profile(t, dir, []string{"--rate", "64KiB"}, bin, "linger")
	if res.code != 0 {
		t.Fatalf("mapper linger: exit %d\n%s", res.code, res.stderr)
	}
	rep := run(t, time.Minute, heaplensBin(t), "report", capPath, "--view", "leaks")
	for _, want := range []string{"4.0 KiB of   64.0 MiB (  0%)", "4.0 KiB of   16.0 MiB (  0%)", "8.0 KiB of   32.0 MiB (  0%)"} {
		if !strings.Contains(rep.stdout, want) {
			t.Errorf("the leaks report lacks the residency %q:\n%s", want, rep.stdout)
		}
	}
	// The text report says which function got the memory.
	text := run(t, time.Minute, heaplensBin(t), "report", capPath, "--view", "leaks")
	for _, want := range []string{"by mmap", "by mremap", "by sbrk"} {
		if !strings.Contains(text.stdout, want) {
			t.Errorf("the leaks report does not say %q:\n%s", want, text.stdout)
		}
	}
}

// TestNoDoubleCounting: a C program that only mallocs has no mmap kind at
// rate 1, whatever glibc maps for it; and a Python program's objects are
// counted once, as pymem, not again as the arenas pymalloc maps for them.
func TestNoDoubleCounting(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "diffsites.c")
	capPath, res := profile(t, dir, []string{"--rate", "1"}, bin, "1")
	if res.code != 0 {
		t.Fatalf("diffsites: exit %d\n%s", res.code, res.stderr)
	}
	if m := reportWith(t, capPath, "--view", "allocs", "--kind", "mmap"); m.total() != 0 {
		t.Errorf("a malloc-only program has %.0f bytes of mappings at rate 1: %v", m.total(), m)
	}
	// diffsites.c's exact totals: 20000·256 + 8·1 MiB + 20000·4096 + 256·64 KiB.
	want := float64(20000*256 + 8*miB + 20000*4096 + 256*64<<10)
	if got := reportWith(t, capPath, "--view", "allocs", "--kind", "malloc").site("main"); got != want {
		t.Errorf("malloc kind: %.0f bytes allocated, want exactly %.0f", got, want)
	}
	for _, py := range everyPython(t) {
		t.Run(py.name, func(t *testing.T) {
			w := py.where(t)
			capPath, res := w.profile(t, []string{"--rate", "64KiB"}, py.path, w.workload(t, "pyarenas.py"), "200000")
			if res.code != 0 {
				t.Fatalf("exit %d\n%s", res.code, res.stderr)
			}
			// 200,000 tuples and 400,000 floats: about 20 MiB of pymalloc
			// objects; at 64 KiB the estimate's σ is about 1.2 MiB.
			pymem := reportWith(t, capPath, "--view", "leaks", "--kind", "pymem").site("fill")
			if pymem < 16*miB {
				t.Errorf("%.0f bytes of objects in fill, want about 20 MiB", pymem)
			}
			if m := reportWith(t, capPath, "--view", "allocs", "--kind", "mmap"); m.total() > 1*miB {
				t.Errorf("%.0f bytes of mappings: pymalloc's arenas counted again? %v", m.total(), fmt.Sprint(m))
			}
		})
	}
}

// TestOpenBLASBuffers: OpenBLAS (Debian's pthread build, 2 threads) maps
// its buffers itself. The calling thread's buffer is charged to the Python
// function whose product needed it, the worker's to the import that started
// the worker (the creator method): each under the call that started it.
func TestOpenBLASBuffers(t *testing.T) {
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import numpy").Run(); err != nil {
		testenv.Missing(t, "%s cannot import numpy (scripts/deps.sh installs python3-numpy): the OpenBLAS case does NOT run", py)
		return
	}
	dir := t.TempDir()
	capPath := filepath.Join(dir, "blas.hlc")
	res := runEnv(t, 2*time.Minute, []string{"OPENBLAS_NUM_THREADS=2"}, heaplensBin(t), "run", "-q", "--rate", "64KiB", "-o", capPath, "--",
		py, filepath.Join(root, "test", "workloads", "pyblas.py"))
	if res.code != 0 {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	maps := reportWith(t, capPath, "--view", "allocs", "--kind", "mmap")
	if got := maps.site("matmul_site"); got < 1*miB {
		t.Errorf("%.0f bytes of OpenBLAS buffers under matmul_site, want the calling thread's buffer: %v", got, maps)
	}
	var started float64
	for st, v := range maps {
		if strings.Contains(st, "[pool: libopenblas (creator)]") && strings.Contains(st, "pyblas.py:5)") {
			started += v
		}
	}
	if started < 1*miB {
		t.Errorf("%.0f bytes of the worker's buffer under the import that started it (pyblas.py:5): %v", started, maps)
	}
}

// checkMapperKinds checks a capture of mapper.c at 64 KiB: its mappings'
// exact sizes in the mmap kind, and nothing of malloc's there.
func checkMapperKinds(t *testing.T, capPath string) {
	t.Helper()
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 0.001*want+1 {
			t.Errorf("%s: %.0f bytes, want %.0f", what, got, want)
		}
	}
	leaks := reportWith(t, capPath, "--view", "leaks", "--kind", "mmap")
	near("leaked mmap, map_big", leaks.site("map_big"), 64*miB)
	near("leaked mmap, map_grow", leaks.site("map_grow"), 16*miB)
	near("leaked mmap, grow_break", leaks.site("grow_break"), 1*miB)
	near("leaked mmap in all", leaks.total(), 81*miB)
	allocs := reportWith(t, capPath, "--view", "allocs", "--kind", "mmap")
	near("allocated mmap, map_temp", allocs.site("map_temp"), 8*miB)
	near("allocated mmap, map_grow (4 MiB, then 16 MiB)", allocs.site("map_grow"), 20*miB)
	near("allocated mmap in all", allocs.total(), 93*miB)
	for _, fn := range []string{"malloc_big", "map_file"} {
		if got := allocs.site(fn); got != 0 {
			t.Errorf("%s counted as a mapping: %.0f bytes in %v", fn, got, allocs.stacksWith(fn))
		}
	}
	malloc := reportWith(t, capPath, "--view", "leaks", "--kind", "malloc")
	near("leaked malloc, malloc_big", malloc.site("malloc_big"), 32*miB)
	if got := malloc.site("map_big") + malloc.site("map_grow"); got != 0 {
		t.Errorf("mappings counted as malloc: %.0f bytes", got)
	}
}
