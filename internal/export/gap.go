package export

import (
	"fmt"
	"strings"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/size"
)

// arenaShareNote is the share of RSS held free by the allocator above
// which reports name it as the main reason RSS exceeds the heap.
const arenaShareNote = 0.25

// holder names where an allocator keeps its free memory, and what gives
// it back, by the start of capture.Process.Allocator.
var holders = []struct{ prefix, where, advice, trim string }{
	{"glibc", "glibc's arenas",
		"consider MALLOC_ARENA_MAX=2 (fewer arenas to fragment), or malloc_trim(0) once the peak is over",
		"most of it is at the top of the heap: malloc_trim(0), or a lower M_TRIM_THRESHOLD, returns it"},
	{"jemalloc", "jemalloc",
		"consider MALLOC_CONF=narenas:2 (fewer arenas to fragment)",
		"most of it is dirty pages jemalloc keeps: a shorter dirty_decay_ms (MALLOC_CONF=dirty_decay_ms:1000) or background_thread:true returns them sooner"},
	{"tcmalloc", "tcmalloc",
		"its thread and central caches hold it: a lower TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES keeps less",
		"most of it is in its page heap: MallocExtension::ReleaseFreeMemory(), or a higher TCMALLOC_RELEASE_RATE, returns it"},
}

// GapLines explain RSS beside the heap at the moment the allocator held
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
	where, advice, trim := "the allocators", "", ""
	for _, h := range holders {
		if strings.HasPrefix(g.Allocator, h.prefix) {
			where, advice, trim = h.where, h.advice, h.trim
		}
	}
	rest := g.RSS - g.Heap - g.Free
	lines := []string{fmt.Sprintf("%sRSS at %.3f s: %s = live heap %s (estimated; %s) + free in %s %s + the rest %s",
		indent, float64(g.T-start)/1e9, size.Human(g.RSS), size.Human(g.Heap), strings.Join(kinds, ", "),
		where, size.Human(g.Free), signedHuman(rest))}
	if share := g.FreeShare(); share >= arenaShareNote && advice != "" {
		if g.Trimmable >= g.Free/2 {
			advice = trim
		}
		lines = append(lines, fmt.Sprintf("%s%.0f %% of RSS is free memory held in %s: %s", indent, 100*share, where, advice))
	}
	lines[0] += negativeRest(rest)
	return lines
}

// AllocatorNotes name, for the processes whose malloc was not glibc's,
// which allocator it was, and for those that did not say what they hold
// (no readings: heapstats.c asks glibc, jemalloc and tcmalloc only) that
// RSS beside the heap is not split for them: one line per allocator. keep
// chooses the processes (nil: all).
func AllocatorNotes(c *capture.Capture, keep func(stream uint32) bool) []string {
	sent := heap.MallocReaders(c)
	type group struct {
		allocator string
		asked     bool
	}
	var order []group
	pids := map[group][]int{}
	for _, p := range c.Processes {
		if p.Allocator == "" || p.Allocator == "glibc" || (keep != nil && !keep(p.Stream)) {
			continue
		}
		g := group{p.Allocator, sent[p.Stream]}
		if pids[g] == nil {
			order = append(order, g)
		}
		pids[g] = append(pids[g], p.PID)
	}
	var out []string
	for _, g := range order {
		line := fmt.Sprintf("pid %d", pids[g][0])
		if n := len(pids[g]) - 1; n > 0 {
			line += fmt.Sprintf(" and %d more process images", n)
		}
		line += ": malloc was " + g.allocator
		if !g.asked {
			line += ", which heaplens does not ask what it holds: RSS beside the live heap is not split"
		}
		out = append(out, line)
	}
	return out
}

func signedHuman(v float64) string {
	if v < 0 {
		return "−" + size.Human(-v)
	}
	return size.Human(v)
}
