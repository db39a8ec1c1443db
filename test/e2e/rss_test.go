package e2e

import (
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestArenaFreeExplained runs test/workloads/fragment.c, which leaves a
// known number of bytes free between kept blocks in 8 glibc arenas; under
// jemalloc and tcmalloc (preloaded), it prints what the allocator says it
// holds free at its end. The summary and the timeline attribute the RSS
// beyond the heap to the allocator's free memory, within 10 % of that, and
// say so in a note that names the allocator. In "glibc-slow-reading" the
// first mallinfo2 call sleeps 20 ms (test/workloads/slowinfo.c), as one
// preempted on a loaded machine does: the readings after it still come.
func TestArenaFreeExplained(t *testing.T) {
	for _, a := range []struct {
		name, lib, where string
		slow             bool
	}{
		{"glibc", "", "glibc's arenas", false},
		{"glibc-slow-reading", "", "glibc's arenas", true},
		{"jemalloc", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "jemalloc", false},
		{"tcmalloc", "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "tcmalloc", false},
	} {
		t.Run(a.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := build(t, dir, "fragment.c")
			var env []string
			if a.lib != "" {
				if _, err := os.Stat(a.lib); err != nil {
					t.Fatalf("!!! %s is not installed (scripts/deps.sh installs it): %v", a.lib, err)
				}
				env = []string{"LD_PRELOAD=" + a.lib}
			}
			if a.slow {
				env = []string{"LD_PRELOAD=" + build(t, dir, "slowinfo.c", "-shared", "-fPIC")}
			}
			capPath := dir + "/fragment.hlc"
			res := runEnv(t, 2*time.Minute, env, heaplensBin(t), "run", "-o", capPath, "--rate", "64KiB", "--", bin)
			if res.code != 0 {
				t.Fatalf("exit %d\n%s", res.code, res.stderr)
			}
			m := regexp.MustCompile(`freed (\d+)\n(?:allocator_free (\d+)\n)?$`).FindStringSubmatch(res.stdout)
			if m == nil || (a.lib != "") != (m[2] != "") {
				t.Fatalf("fragment printed %q", res.stdout)
			}
			freed, _ := strconv.ParseFloat(m[1], 64)
			if a.lib != "" {
				freed, _ = strconv.ParseFloat(m[2], 64)
			}
			timeline := run(t, time.Minute, heaplensBin(t), "report", capPath, "--view", "timeline")
			for name, out := range map[string]string{"summary": res.stderr, "timeline": timeline.stdout} {
				m := regexp.MustCompile(`free in ` + regexp.QuoteMeta(a.where) + ` ([0-9.]+) (B|KiB|MiB|GiB)`).FindStringSubmatch(out)
				if m == nil {
					t.Errorf("%s: no account of %s's free memory:\n%s", name, a.name, out)
					continue
				}
				v, _ := strconv.ParseFloat(m[1], 64)
				v *= map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m[2]]
				if math.Abs(v-freed) > 0.1*freed {
					t.Errorf("%s: %.0f bytes free in %s, want %.0f ± 10 %%", name, v, a.where, freed)
				}
				if !strings.Contains(out, "% of RSS is free memory held in "+a.where+": ") {
					t.Errorf("%s: no note naming %s's free memory:\n%s", name, a.where, out)
				}
			}
		})
	}
}
