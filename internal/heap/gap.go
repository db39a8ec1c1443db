package heap

import (
	"cmp"
	"slices"

	"github.com/heaplens/heaplens/internal/capture"
)

// Gap explains the RSS of the covered processes at one moment: the live
// heap the samples estimate, by kind of memory, beside what glibc's malloc
// said it held (capture.Malloc). The moment is when glibc's arenas held the
// most free memory, summed over the processes: where that free memory, not
// a leak, is why RSS exceeds the heap.
type Gap struct {
	T         int64              // CLOCK_MONOTONIC
	RSS       float64            // the processes' RSS at T (their last samples before it)
	Heap      float64            // estimated live heap at T, all kinds
	ByKind    map[string]float64 // estimated live heap at T by capture.MemKinds
	InUse     float64            // glibc: bytes in use in its arenas
	Free      float64            // glibc: bytes free in its arenas
	Trimmable float64            // glibc: of Free, at the top of the main arena (malloc_trim releases it)
	Mmapped   float64            // glibc: its own mappings for large blocks
	// Allocator is what the readings come from: "glibc", another
	// allocator's name as capture.Process.Allocator has it, or "" when
	// the processes had different ones.
	Allocator string
}

// mallocReadings sums the covered processes' glibc statistics (capture.Malloc)
// at each reading, in time order: each running process's last reading by
// then. Only the glibc fields of the Gaps are set.
func mallocReadings(c *capture.Capture, opt Options) []Gap {
	ms := slices.Clone(c.Mallocs)
	slices.SortStableFunc(ms, func(a, b capture.Malloc) int { return cmp.Compare(a.TimeNano, b.TimeNano) })
	last := map[uint32]capture.Malloc{}
	var out []Gap
	for _, m := range ms {
		if !opt.keep(m.Stream) {
			continue
		}
		last[m.Stream] = m
		g := Gap{T: m.TimeNano}
		for s, x := range last {
			if e := c.Ends[s]; e != nil && e.TimeNano < m.TimeNano {
				continue // that process is gone
			}
			g.InUse += float64(x.InUse)
			g.Free += float64(x.Free)
			g.Trimmable += float64(x.Keep)
			g.Mmapped += float64(x.Mmapped)
		}
		out = append(out, g)
	}
	return out
}

// FreeShare is the share of RSS that glibc's free arena memory is, 0 when
// RSS is unknown.
func (g *Gap) FreeShare() float64 {
	if g.RSS <= 0 {
		return 0
	}
	return g.Free / g.RSS
}

// RSSGap returns the Gap at the moment glibc's arenas held the most free
// memory, or nil when the capture has no malloc statistics (no glibc, or a
// capture from before they were recorded).
func RSSGap(c *capture.Capture, opt Options) *Gap { return rssGap(c, opt, nil) }

// RSSGap is RSSGap of the replay's capture and streams.
func (rp *Replay) RSSGap() *Gap { return rssGap(rp.c, Options{Streams: rp.covered}, rp) }

// rssGap is RSSGap; rp, if not nil, is the replay of c's streams opt
// covers.
func rssGap(c *capture.Capture, opt Options, rp *Replay) *Gap {
	best := bestReading(c, opt)
	if best == nil {
		return nil
	}
	if rp == nil {
		rp = NewReplay(c, opt)
	}
	best.setLive(rp.Live(Options{}, best.T))
	return best
}

// bestReading returns the Gap's moment, its RSS and glibc's figures then,
// without the heap (setLive); nil without malloc statistics.
func bestReading(c *capture.Capture, opt Options) *Gap {
	var best *Gap
	for _, g := range mallocReadings(c, opt) {
		if best == nil || g.Free > best.Free {
			best = &g
		}
	}
	if best == nil {
		return nil
	}
	best.Allocator = readingsAllocator(c, opt)
	rss := map[uint32]uint64{}
	for _, r := range rssReadings(c, opt) {
		if r.TimeNano <= best.T {
			rss[r.Stream] = r.Bytes
		}
	}
	for s, b := range rss {
		if e := c.Ends[s]; e == nil || e.TimeNano >= best.T {
			best.RSS += float64(b)
		}
	}
	return best
}

// readingsAllocator is the allocator of the covered processes that sent
// readings, "" when they differ. Captures from before allocators were
// named had glibc's readings only.
func readingsAllocator(c *capture.Capture, opt Options) string {
	sent := MallocReaders(c)
	name := ""
	for _, p := range c.Processes {
		if !sent[p.Stream] || !opt.keep(p.Stream) {
			continue
		}
		a := p.Allocator
		if a == "" {
			a = "glibc"
		}
		if name != "" && a != name {
			return ""
		}
		name = a
	}
	return name
}

// MallocReaders returns the streams whose allocator said what it held
// (capture.Malloc readings).
func MallocReaders(c *capture.Capture) map[uint32]bool {
	sent := map[uint32]bool{}
	for _, m := range c.Mallocs {
		sent[m.Stream] = true
	}
	return sent
}

// setLive sets the heap from the live view at the Gap's moment.
func (g *Gap) setLive(live *Profile) {
	g.Heap = live.HeapAt
	g.ByKind = map[string]float64{}
	for _, s := range live.Samples {
		g.ByKind[capture.MemKind(s.Func)] += s.Bytes
	}
}
