package export

import (
	"fmt"
	"strings"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/size"
)

// arenaShareNote is the share of RSS held free in glibc's arenas above
// which reports name it as the main reason RSS exceeds the heap.
const arenaShareNote = 0.25

// GapLines explain RSS beside the heap at the moment glibc's arenas held
// the most free memory (heap.RSSGap), with a note when that free memory
// dominates; indent prefixes each line. Nil gives nothing.
func GapLines(g *heap.Gap, start int64, indent string) []string {
	if g == nil || g.RSS <= 0 {
		return nil
	}
	var kinds []string
	for _, k := range []string{"malloc", "pymem", "mmap"} {
		if v := g.ByKind[k]; v > 0 {
			kinds = append(kinds, k+" "+size.Human(v))
		}
	}
	rest := g.RSS - g.Heap - g.Free
	lines := []string{fmt.Sprintf("%sRSS at %.3f s: %s = live heap %s (estimated; %s) + free in glibc's arenas %s + the rest %s",
		indent, float64(g.T-start)/1e9, size.Human(g.RSS), size.Human(g.Heap), strings.Join(kinds, ", "),
		size.Human(g.Free), signedHuman(rest))}
	if share := g.FreeShare(); share >= arenaShareNote {
		advice := "consider MALLOC_ARENA_MAX=2 (fewer arenas to fragment), or malloc_trim(0) once the peak is over"
		if g.Trimmable >= g.Free/2 {
			advice = "most of it is at the top of the heap: malloc_trim(0), or a lower M_TRIM_THRESHOLD, returns it"
		}
		lines = append(lines, fmt.Sprintf("%s%.0f %% of RSS is free memory held in glibc's arenas: %s", indent, 100*share, advice))
	}
	lines[0] += negativeRest(rest)
	return lines
}

// AllocatorNotes say, for the processes whose malloc was not glibc's,
// which allocator it was and that RSS beside the heap is not split for
// them (only glibc's statistics are read): one line per allocator. keep
// chooses the processes (nil: all).
func AllocatorNotes(procs []*capture.Process, keep func(stream uint32) bool) []string {
	var order []string
	pids := map[string][]int{}
	for _, p := range procs {
		if p.Allocator == "" || p.Allocator == "glibc" || (keep != nil && !keep(p.Stream)) {
			continue
		}
		if pids[p.Allocator] == nil {
			order = append(order, p.Allocator)
		}
		pids[p.Allocator] = append(pids[p.Allocator], p.PID)
	}
	var out []string
	for _, a := range order {
		who := fmt.Sprintf("pid %d", pids[a][0])
		if n := len(pids[a]) - 1; n > 0 {
			who += fmt.Sprintf(" and %d more process images", n)
		}
		out = append(out, fmt.Sprintf("%s: malloc was %s: what it holds beside the live heap is not split out of RSS", who, a))
	}
	return out
}

func signedHuman(v float64) string {
	if v < 0 {
		return "−" + size.Human(-v)
	}
	return size.Human(v)
}
