package e2e

import (
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heaplens/heaplens/internal/heap"
)

// Sampling must not change how long an object lives. pylookup.py looks up
// 5000 names that V lacks, a million times: CPython's type attribute cache
// (4096 entries) keeps the last name string of each entry, and from 3.10 on
// it picks the entry by the string's address. Bare, at most 4096 strings of
// at most 64 bytes outlive the loop. A profiler that moves sampled strings
// to other addresses strands them in entries no sibling evicts: it reported
// 1–67 MiB here. The estimate is unbiased, so the mean over 10 seeds at the
// default rate must stay within 4σ (of 10 runs) of that bound.
func TestPythonLookupLifetimes(t *testing.T) {
	const seeds, rate = 10, 512 << 10
	held := map[uint64]int{64: 4096}
	bound := exact(held) + 4*heap.Stddev(held, rate)/math.Sqrt(seeds)
	for _, py := range everyPython(t) {
		t.Run(py.name, func(t *testing.T) {
			t.Parallel()
			w := py.where(t)
			script := w.workload(t, "pylookup.py")
			var sum float64
			var each []string
			for seed := 1; seed <= seeds; seed++ {
				capPath, res := w.profile(t, []string{"-q", "--seed", fmt.Sprint(seed)}, py.path, script, "1000000")
				if res.code != 0 {
					t.Fatalf("seed %d: exit %d\n%s", seed, res.code, res.stderr)
				}
				var got float64
				for stack, v := range report(t, capPath, "leaks") {
					if strings.Contains(stack, ";lookup_loop (") {
						got += v
					}
				}
				sum += got
				each = append(each, strconv.FormatFloat(got/(1<<20), 'f', 2, 64))
			}
			if mean := sum / seeds; mean > bound {
				t.Errorf("leaks under lookup_loop: mean %.2f MiB over seeds 1–%d (%v MiB), want ≤ %.2f MiB", mean/(1<<20), seeds, each, bound/(1<<20))
			} else {
				t.Logf("leaks under lookup_loop: %v MiB", each)
			}
		})
	}
}

var steps448 = regexp.MustCompile(`steps448=(\d+)`)

// Sampled objects keep the addresses pymalloc gives them: pyaddr.py counts
// the 448-byte steps between 1000 objects allocated in a row; profiled at
// --rate 1 (every object sampled) and at 4 KiB, the count is the bare run's.
func TestPythonAddresses(t *testing.T) {
	script := filepath.Join(root, "test", "workloads", "pyaddr.py")
	count := func(t *testing.T, out string) int {
		m := steps448.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no steps448 in the output: %s", out)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	for name, py := range pythons(t) {
		t.Run(name, func(t *testing.T) {
			bare := run(t, time.Minute, py, script)
			if bare.code != 0 {
				t.Fatalf("bare: exit %d\n%s", bare.code, bare.stderr)
			}
			want := count(t, bare.stdout)
			for _, rate := range []string{"1", "4KiB"} {
				_, res := profile(t, t.TempDir(), []string{"-q", "--rate", rate}, py, script)
				if res.code != 0 {
					t.Fatalf("rate %s: exit %d\n%s", rate, res.code, res.stderr)
				}
				if got := count(t, res.stdout); got < want-2 {
					t.Errorf("rate %s: %d of 999 steps are 448 bytes, bare %d: sampled objects moved", rate, got, want)
				}
			}
		})
	}
}

// CPython 3.13's PYTHONMALLOC=mimalloc serves every object itself, so
// objects over pymalloc's 512 bytes never reach malloc: the small ones are
// still sampled through the hooks, and the run says that the large ones
// are not.
func TestPythonForeignAllocator(t *testing.T) {
	py, ok := pythons(t)["pyenv-3.13"]
	if !ok {
		t.Fatal("needs pyenv's CPython 3.13 (pyenv install 3.13)")
	}
	script := filepath.Join(root, "test", "workloads", "pysites.py")
	capPath := filepath.Join(t.TempDir(), "mi.hlc")
	res := runEnv(t, 2*time.Minute, []string{"PYTHONMALLOC=mimalloc"}, heaplensBin(t), "run", "-o", capPath,
		"--rate", "64KiB", "--seed", "3", "--", py, script, "nodeep")
	if res.code != 0 || !strings.Contains(res.stdout, "pysites done") {
		t.Fatalf("exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	if !strings.Contains(res.stderr, "allocator is not pymalloc: objects over 512 bytes") {
		t.Errorf("the run does not say that large objects were not sampled:\n%s", res.stderr)
	}
	line := siteLines(t, script)["keep_small"]
	sizes := map[uint64]int{33 + 100: 100000}
	got := report(t, capPath, "leaks").atLine(script, line)
	checkSite(t, "keep_small retained", got, sizes, 64<<10, 0, nil)
}

// tracemalloc started first wraps whatever the domains hold; stopping it
// puts that back, and with -X dev (where the library had to wrap
// tracemalloc itself) its hooks go with it. They must come back: the
// objects made after the stop are sampled, and the ones made before it and
// freed after it are seen freed. (tracemalloc's own tables, allocated from
// malloc on those lines, may stay: a few KiB, against the 13 MB of objects
// that would stay if their frees were missed.)
func TestPythonTracemallocStop(t *testing.T) {
	script := filepath.Join(root, "test", "workloads", "pytracestop.py")
	sites := siteLines(t, script)
	const rate = 16 << 10
	for name, py := range pythons(t) {
		for _, dev := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/dev=%v", name, dev), func(t *testing.T) {
				command := []string{py, "-X", "tracemalloc", script}
				if dev {
					command = []string{py, "-X", "dev", "-X", "tracemalloc", script}
				}
				capPath, res := profile(t, t.TempDir(), []string{"-q", "--rate", fmt.Sprint(rate), "--seed", "5"}, command...)
				if res.code != 0 || !strings.Contains(res.stdout, "pytracestop done") {
					t.Fatalf("exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
				}
				leaks := report(t, capPath, "leaks")
				checkSite(t, "after", leaks.atLine(script, sites["after"]), map[uint64]int{33 + 100: 100000}, rate, 0, leaks.stacksAt(script, sites["after"]))
				for _, site := range []string{"before", "again"} {
					if got := leaks.atLine(script, sites[site]); got > 0.1*exact(map[uint64]int{33 + 100: 100000}) {
						t.Errorf("%s: %.0f bytes live, want nearly none (all freed): %v", site, got, leaks.stacksAt(script, sites[site]))
					}
				}
			})
		}
	}
}
