package e2e

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heaplens/heaplens/internal/heap"
)

// The leaky workload's sites (test/workloads/leaky.c): 4 threads each.
const (
	leakyThreads    = 4
	smallN, smallSz = 20000, 256
	largeN, largeSz = 16, 1 << 20
	churnN, churnSz = 50000, 4096
)

// within fails unless got lies within k standard deviations of want, where
// the deviation is that of the Horvitz–Thompson estimate of count blocks of
// size bytes sampled at rate.
func within(t *testing.T, what string, got float64, count int, size uint64, rate uint64, f folded, fn string) {
	t.Helper()
	want := float64(count) * float64(size)
	sd := heap.Stddev(map[uint64]int{size: count}, rate)
	const k = 4 // 4σ: a false failure about once in 16,000 runs
	if math.Abs(got-want) > k*sd+1 {
		t.Errorf("%s: estimated %.0f bytes, want %.0f ± %.0f (4σ at rate %d)\nstacks with %s:\n%s",
			what, got, want, k*sd, rate, fn, strings.Join(f.stacksWith(fn), "\n"))
	} else {
		t.Logf("%s: estimated %.0f, exact %.0f, error %+.2f%% (σ %.2f%%)", what, got, want, 100*(got-want)/want, 100*sd/want)
	}
}

func TestKnownSitesSampled(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "leaky.c")
	const rate = 16 << 10
	capPath, res := profile(t, dir, []string{"--rate", "16KiB", "--seed", "7"}, bin)
	if res.code != 0 {
		t.Fatalf("heaplens run: exit %d\n%s", res.code, res.stderr)
	}
	leaks := report(t, capPath, "leaks")
	allocs := report(t, capPath, "allocs")
	within(t, "keep_small leaked", leaks.site("keep_small"), leakyThreads*smallN, smallSz, rate, leaks, "keep_small")
	within(t, "keep_large leaked", leaks.site("keep_large"), leakyThreads*largeN, largeSz, rate, leaks, "keep_large")
	within(t, "churn allocated", allocs.site("churn"), leakyThreads*churnN, churnSz, rate, allocs, "churn")
	if v := leaks.site("churn"); v != 0 {
		t.Errorf("churn is freed at once but leaks shows %.0f bytes: %v", v, leaks.stacksWith("churn"))
	}
	if v := leaks.site("grow"); v != 0 {
		t.Errorf("grow frees its buffer but leaks shows %.0f bytes", v)
	}
	if allocs.site("grow") == 0 {
		t.Errorf("grow reallocs ~32 MiB in all but allocs shows nothing")
	}
	// Every stack starts with the process and ends where the program allocates.
	for stack := range leaks {
		frames := strings.Split(stack, ";")
		if !strings.HasPrefix(frames[0], "[") || !strings.Contains(frames[0], " leaky]") {
			t.Errorf("first frame %q does not name the process as [PID leaky]", frames[0])
		}
	}
	for _, fn := range []string{"keep_small", "keep_large"} {
		for _, stack := range leaks.stacksWith(fn + " (") {
			if !strings.Contains(stack, "worker (leaky.c:") || !strings.Contains(stack, fn+" (leaky.c:") {
				t.Errorf("stack of %s lacks file:line frames down from worker: %s", fn, stack)
			}
		}
	}
}

func TestRate1IsExact(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "leaky.c")
	// A ring big enough that nothing is dropped: exactness needs every record.
	capPath, res := profile(t, dir, []string{"--rate", "1", "--ring-size", "256MiB"}, bin)
	if res.code != 0 {
		t.Fatalf("heaplens run: exit %d\n%s", res.code, res.stderr)
	}
	leaks := report(t, capPath, "leaks")
	allocs := report(t, capPath, "allocs")
	checks := []struct {
		what string
		got  float64
		want float64
	}{
		{"keep_small leaked", leaks.site("keep_small"), leakyThreads * smallN * smallSz},
		{"keep_large leaked", leaks.site("keep_large"), leakyThreads * largeN * largeSz},
		{"keep_small allocated", allocs.site("keep_small"), leakyThreads * smallN * smallSz},
		{"churn allocated", allocs.site("churn"), leakyThreads * churnN * churnSz},
		{"churn leaked", leaks.site("churn"), 0},
		{"grow leaked", leaks.site("grow"), 0},
		// realloc from 4 KiB doubling to 4 MiB: 4 KiB·(2^11 − 1) per thread
		{"grow allocated", allocs.site("grow"), leakyThreads * 4096 * (1<<11 - 1)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %.0f bytes, want exactly %.0f", c.what, c.got, c.want)
		}
	}
	text := run(t, time.Minute, heaplensBin(t), "report", capPath, "--view", "leaks", "--format", "text")
	if !strings.Contains(text.stdout, "dropped") {
		t.Errorf("text report does not state dropped events:\n%s", text.stdout)
	}
}

// Each thread's countdown starts from a drawn gap, not from zero: otherwise
// the first allocation of every thread would be sampled, and 2000 threads
// making one small allocation each would be overstated ~65-fold.
func TestNoFirstAllocationBias(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "threads_once.c")
	const threads, size, rate = 2000, 1000, 64 << 10
	capPath, res := profile(t, dir, []string{"-q", "--rate", "64KiB", "--seed", "11"}, bin)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	leaks := report(t, capPath, "leaks")
	within(t, "one allocation per thread", leaks.site("one_allocation"), threads, size, rate, leaks, "one_allocation")
}

// A stack deeper than the library records is cut, and every report says so
// at its root; a shallow one is not.
func TestDeepStackMarkedCut(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "deepstack.c")
	capPath, res := profile(t, dir, []string{"--rate", "64KiB", "--seed", "5"}, bin)
	if res.code != 0 || res.stdout != "5001 11\n" {
		t.Fatalf("heaplens run: exit %d, stdout %q\n%s", res.code, res.stdout, res.stderr)
	}
	const cut = "[outer frames cut: the stack had more than 4096]"
	var deep, shallow int
	for stack := range report(t, capPath, "leaks") {
		frames := strings.Split(stack, ";")
		n := 0
		for _, f := range frames {
			if strings.HasPrefix(f, "down (") {
				n++
			}
		}
		switch {
		case n > 100:
			deep++
			if frames[1] != cut || n < 4000 || n > 4096 {
				t.Errorf("deep stack: root %q, %d down frames; want %q at the root and 4000–4096 frames", frames[1], n, cut)
			}
		case n == 11:
			shallow++
			if strings.Contains(stack, cut) {
				t.Errorf("a stack of 11 calls is marked cut: %s", stack)
			}
		}
	}
	if deep != 1 || shallow != 1 {
		t.Errorf("%d deep and %d shallow stacks, want one of each", deep, shallow)
	}
}

// A sampled block shrunk by realloc to a size the sampler passes over stays
// where glibc puts it (in place, as in a bare run: test/workloads/shrink.c
// prints how many shrinks moved), and leaves the profile: only the blocks
// grown back to BIG and kept are leaks.
func TestReallocShrinkInPlace(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "shrink.c")
	bare := run(t, time.Minute, bin)
	if bare.code != 0 || !strings.HasPrefix(bare.stdout, "shrinks moved=0 ") {
		t.Fatalf("shrink without heaplens: exit %d, %q (glibc should shrink in place)", bare.code, bare.stdout)
	}
	const rounds, big = 8, 8 << 20
	for _, r := range []struct {
		flag string
		rate uint64
	}{{"512KiB", 512 << 10}, {"4KiB", 4 << 10}} {
		t.Run("rate="+r.flag, func(t *testing.T) {
			capPath, res := profile(t, dir, []string{"-q", "--rate", r.flag, "--seed", "3"}, bin)
			if res.code != 0 || res.stdout != bare.stdout {
				t.Fatalf("under heaplens: exit %d, output %q, want %q\n%s", res.code, res.stdout, bare.stdout, res.stderr)
			}
			leaks := report(t, capPath, "leaks")
			within(t, "grow_back leaked", leaks.site("grow_back"), rounds, big, r.rate, leaks, "grow_back")
			if v, all := leaks.site("grow_back"), leaks.site("shrink_keep"); v != all {
				t.Errorf("shrink_keep leaks %.0f bytes, of which %.0f outside grow_back: %v", all, all-v, leaks.stacksWith("shrink_keep"))
			}
			if v := leaks.site("shrink_free"); v != 0 {
				t.Errorf("shrink_free frees every block but leaks shows %.0f bytes: %v", v, leaks.stacksWith("shrink_free"))
			}
		})
	}
}

// At --rate 1 the library keeps no set of sampled blocks and sends every
// free: the agent pairs each with the block it knows. A fork child freeing
// and reallocating its parent's blocks (never allocated in its profile)
// must leave them out and count them, and a realloc that fails must leave
// its block live at its size (test/workloads/exactfrees.c).
func TestRate1FreesOfUnseenBlocks(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "exactfrees.c")
	capPath, res := profile(t, dir, []string{"-q", "--rate", "1", "--ring-size", "64MiB"}, bin)
	if res.code != 0 || res.stdout != "ok\n" {
		t.Fatalf("heaplens run: exit %d, stdout %q\n%s", res.code, res.stdout, res.stderr)
	}
	const parentN, parentSz, freedN, failedSz, childSz = 100, 1000, 30, 777, 2000
	leaks := report(t, capPath, "leaks")
	for _, c := range []struct {
		site string
		want float64
	}{
		{"parent_keep", (parentN - freedN) * parentSz},
		{"failed_grow", failedSz},
		{"child_grow", parentN / 2 * childSz},
		{"child_churn", 0},
	} {
		if got := leaks.site(c.site); got != c.want {
			t.Errorf("%s leaked %.0f bytes, want exactly %.0f: %v", c.site, got, c.want, leaks.stacksWith(c.site))
		}
	}
	c := load(t, capPath)
	if len(c.Processes) != 2 {
		t.Fatalf("%d processes, want the parent and its child", len(c.Processes))
	}
	child := c.Processes[1]
	if c.Processes[0].PID == child.PID || child.PPID != c.Processes[0].PID {
		child = c.Processes[0]
	}
	re := regexp.MustCompile(fmt.Sprintf(`^pid %d: (\d+) frees of blocks heaplens never saw allocated were left out`, child.PID))
	var ignored int
	for _, n := range c.Notes {
		if m := re.FindStringSubmatch(n.Text); m != nil {
			ignored, _ = strconv.Atoi(m[1])
		}
	}
	t.Logf("the child's ignored frees: %d", ignored)
	// Its frees of the parent's 50 blocks and its reallocs of the other 50;
	// the C library may free a few blocks of its own start-up too.
	if ignored < parentN || ignored > parentN+20 {
		t.Errorf("the child's frees of blocks it never allocated: %d noted, want %d (+ a few of libc's)", ignored, parentN)
	}
}
