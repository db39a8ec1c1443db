package e2e

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestArenaFreeExplained runs test/workloads/fragment.c, which leaves a
// known number of bytes free between kept blocks in 8 glibc arenas: the
// summary and the timeline attribute the RSS beyond the heap to that free
// memory, within 10 %, and say so in a note.
func TestArenaFreeExplained(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "fragment.c")
	capPath := dir + "/fragment.hlc"
	res := run(t, 2*time.Minute, heaplensBin(t), "run", "-o", capPath, "--rate", "64KiB", "--", bin)
	if res.code != 0 {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	freed, err := strconv.ParseFloat(strings.TrimPrefix(strings.TrimSpace(res.stdout), "freed "), 64)
	if err != nil {
		t.Fatalf("fragment printed %q", res.stdout)
	}
	timeline := run(t, time.Minute, heaplensBin(t), "report", capPath, "--view", "timeline")
	for name, out := range map[string]string{"summary": res.stderr, "timeline": timeline.stdout} {
		m := regexp.MustCompile(`free in glibc's arenas ([0-9.]+) (B|KiB|MiB|GiB)`).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("%s: no account of glibc's free memory:\n%s", name, out)
			continue
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		v *= map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m[2]]
		if math.Abs(v-freed) > 0.1*freed {
			t.Errorf("%s: %.0f bytes free in the arenas, want %.0f ± 10 %%", name, v, freed)
		}
		if !strings.Contains(out, "% of RSS is free memory held in glibc's arenas: consider MALLOC_ARENA_MAX") {
			t.Errorf("%s: no note naming the arenas' free memory:\n%s", name, out)
		}
	}
}
