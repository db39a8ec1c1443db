package heap

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
)

// DefaultLifetime is the default bound of the temporary view: blocks freed
// within 10 ms of their allocation. See docs/views.md for why.
const DefaultLifetime = 10 * time.Millisecond

// Start returns the capture's time origin on CLOCK_MONOTONIC: the earliest
// process start, allocation, free or RSS sample. Times shown to people
// ("+1.2s", --at) are relative to it. It is 0 for an empty capture.
func Start(c *capture.Capture) int64 {
	start := int64(math.MaxInt64)
	for _, p := range c.Processes {
		if p.StartMonoNano > 0 {
			start = min(start, p.StartMonoNano)
		}
	}
	for i := range c.Allocs {
		start = min(start, c.Allocs[i].TimeNano)
	}
	for i := range c.Frees {
		start = min(start, c.Frees[i].TimeNano)
	}
	for i := range c.RSS {
		start = min(start, c.RSS[i].TimeNano)
	}
	if start == math.MaxInt64 {
		return 0
	}
	return start
}

// liveKey names a live block across streams.
type liveKey struct {
	stream uint32
	addr   uint64
}

// replayer replays Allocs and Frees of the covered streams in time order,
// across streams, and keeps the live set and the estimated heap (Σ weight ×
// size of live samples) of each stream and of all of them.
type replayer struct {
	c         *capture.Capture
	ev        []event
	next      int // index of the next event to apply
	live      map[liveKey]int
	total     float64
	perStream map[uint32]float64
	unmatched int
	lost      int
}

func newReplayer(c *capture.Capture, opt Options) *replayer {
	ev := events(c, opt)
	// events orders by stream, then time, ties in file order; a stable
	// sort by time alone keeps each stream's tie order.
	slices.SortStableFunc(ev, func(x, y event) int { return cmp.Compare(x.time, y.time) })
	return &replayer{c: c, ev: ev, live: make(map[liveKey]int), perStream: make(map[uint32]float64)}
}

// bytes returns the estimated bytes an allocation stands for.
func (r *replayer) bytes(i int) float64 {
	a := &r.c.Allocs[i]
	return Weight(a.Size, r.c.Meta.Rate) * float64(a.Size)
}

// step applies the next event. It returns the allocation index a free
// released (freed ≥ 0), or -1.
func (r *replayer) step() (freed int) {
	e := r.ev[r.next]
	r.next++
	k := liveKey{e.stream, e.addr}
	if e.alloc < 0 {
		i, ok := r.live[k]
		if !ok {
			r.unmatched++
			return -1
		}
		delete(r.live, k)
		b := r.bytes(i)
		r.total -= b
		r.perStream[e.stream] -= b
		return i
	}
	if old, ok := r.live[k]; ok {
		r.lost++
		b := r.bytes(old)
		r.total -= b
		r.perStream[e.stream] -= b
	}
	r.live[k] = e.alloc
	b := r.bytes(e.alloc)
	r.total += b
	r.perStream[e.stream] += b
	return -1
}

// snapshot builds a profile of the current live set.
func (r *replayer) snapshot(view string, opt Options, at int64) *Profile {
	b := newBuilder(r.c, opt)
	idx := make([]int, 0, len(r.live))
	for _, i := range r.live {
		idx = append(idx, i)
	}
	slices.Sort(idx) // deterministic float sums
	for _, i := range idx {
		b.add(&r.c.Allocs[i])
	}
	p := b.profile(view, r.c, opt)
	p.At, p.HeapAt = at, max(r.total, 0)
	p.UnmatchedFrees, p.LostFrees = r.unmatched, r.lost
	return p
}

// Live is the "live" view: the sampled allocations live at time at
// (CLOCK_MONOTONIC), after every event stamped at or before it.
func Live(c *capture.Capture, opt Options, at int64) *Profile {
	r := newReplayer(c, opt)
	for r.next < len(r.ev) && r.ev[r.next].time <= at {
		r.step()
	}
	return r.snapshot("live", opt, at)
}

// Peak is the "peak" view: the live set at the moment the estimated heap of
// the covered streams was highest. Over several streams this is the peak of
// their sum over time, not the sum of each one's peak. The earliest moment
// wins a tie. Profile.At is that moment, Profile.HeapAt the peak.
func Peak(c *capture.Capture, opt Options) *Profile {
	r := newReplayer(c, opt)
	best, bestAt, bestK := 0.0, int64(0), -1
	for r.next < len(r.ev) {
		r.step()
		if r.total > best {
			best, bestAt, bestK = r.total, r.ev[r.next-1].time, r.next
		}
	}
	r = newReplayer(c, opt)
	for r.next < bestK {
		r.step()
	}
	if bestK < 0 {
		bestAt = Start(c)
	}
	return r.snapshot("peak", opt, bestAt)
}

// Temporary is the "temporary" view: sampled allocations freed within
// lifetime of being allocated (lifetime ≤ 0 means DefaultLifetime): the
// churn that costs allocator time without holding memory.
func Temporary(c *capture.Capture, opt Options, lifetime time.Duration) *Profile {
	if lifetime <= 0 {
		lifetime = DefaultLifetime
	}
	r := newReplayer(c, opt)
	b := newBuilder(c, opt)
	for r.next < len(r.ev) {
		if i := r.step(); i >= 0 && r.ev[r.next-1].time-c.Allocs[i].TimeNano <= int64(lifetime) {
			b.add(&c.Allocs[i])
		}
	}
	p := b.profile("temporary", c, opt)
	p.UnmatchedFrees, p.LostFrees, p.Lifetime = r.unmatched, r.lost, lifetime
	return p
}

// Point is one value of a time series; T is CLOCK_MONOTONIC nanoseconds.
type Point struct {
	T     int64
	Bytes float64
}

// Series is the timeline of one stream.
type Series struct {
	Stream uint32
	Heap   []Point // estimated heap, downsampled (see Timeline)
	RSS    []Point // resident set size as sampled by the agent
	Peak   Point   // exact peak of the estimated heap
}

// Timeline is the "timeline" view: estimated heap over time, per stream
// and for all covered streams together, beside the RSS the agent sampled.
type Timeline struct {
	Start, End int64    // CLOCK_MONOTONIC bounds of the data
	Total      []Point  // estimated heap of all covered streams
	TotalRSS   []Point  // sum of the streams' RSS at each sampling round
	Peak       Point    // exact peak of Total (the peak view's moment)
	PeakRSS    Point    // highest TotalRSS
	Streams    []Series // by stream
	Drops      map[uint32]DropStats
}

// timelinePoints bounds the points of each downsampled heap series.
const timelinePoints = 1000

// downsampler keeps, for each of timelinePoints equal time buckets, the
// highest value seen in it, so that spikes survive downsampling.
type downsampler struct {
	start, width int64
	bucket       int64
	out          []Point
}

func (d *downsampler) add(t int64, v float64) {
	bk := (t - d.start) / d.width
	if len(d.out) > 0 && bk == d.bucket {
		if last := &d.out[len(d.out)-1]; v > last.Bytes {
			*last = Point{t, v}
		}
		return
	}
	d.bucket = bk
	d.out = append(d.out, Point{t, v})
}

// TimelineOf computes the timeline view. Thread and stack filters do not
// apply: the heap of a process is one number.
func TimelineOf(c *capture.Capture, opt Options) *Timeline {
	r := newReplayer(c, opt)
	tl := &Timeline{Start: Start(c), Drops: make(map[uint32]DropStats)}
	end := tl.Start
	if n := len(r.ev); n > 0 {
		end = max(end, r.ev[n-1].time)
	}
	for i := range c.RSS {
		if opt.keep(c.RSS[i].Stream) {
			end = max(end, c.RSS[i].TimeNano)
		}
	}
	for s, e := range c.Ends {
		if opt.keep(s) {
			end = max(end, e.TimeNano)
			tl.Drops[s] = DropStats{DroppedAllocs: e.DroppedAllocs, DroppedFrees: e.DroppedFrees, LostBytes: e.LostBytes}
		}
	}
	tl.End = end
	width := max((end-tl.Start+timelinePoints-1)/timelinePoints, 1)
	total := &downsampler{start: tl.Start, width: width}
	per := map[uint32]*downsampler{}
	peaks := map[uint32]Point{}
	for r.next < len(r.ev) {
		r.step()
		e := r.ev[r.next-1]
		// Several events at one time: only the state after the last counts.
		if r.next < len(r.ev) && r.ev[r.next].time == e.time && r.ev[r.next].stream == e.stream {
			continue
		}
		v := max(r.perStream[e.stream], 0)
		d := per[e.stream]
		if d == nil {
			d = &downsampler{start: tl.Start, width: width}
			per[e.stream] = d
		}
		d.add(e.time, v)
		if v > peaks[e.stream].Bytes {
			peaks[e.stream] = Point{e.time, v}
		}
		if r.next < len(r.ev) && r.ev[r.next].time == e.time {
			continue
		}
		t := max(r.total, 0)
		total.add(e.time, t)
		if t > tl.Peak.Bytes {
			tl.Peak = Point{e.time, t}
		}
	}
	tl.Total = total.out
	rss := map[uint32][]Point{}
	var round []Point // (time, sum) per sampling round, in time order
	for i := range c.RSS {
		x := &c.RSS[i]
		if !opt.keep(x.Stream) {
			continue
		}
		rss[x.Stream] = append(rss[x.Stream], Point{x.TimeNano, float64(x.Bytes)})
		if n := len(round); n > 0 && round[n-1].T == x.TimeNano {
			round[n-1].Bytes += float64(x.Bytes)
		} else {
			round = append(round, Point{x.TimeNano, float64(x.Bytes)})
		}
	}
	slices.SortStableFunc(round, func(a, b Point) int { return cmp.Compare(a.T, b.T) })
	tl.TotalRSS = round
	for _, p := range round {
		if p.Bytes > tl.PeakRSS.Bytes {
			tl.PeakRSS = p
		}
	}
	streams := map[uint32]bool{}
	for s := range per {
		streams[s] = true
	}
	for s := range rss {
		streams[s] = true
	}
	for _, p := range c.Processes {
		if opt.keep(p.Stream) {
			streams[p.Stream] = true
		}
	}
	for s := range streams {
		var h []Point
		if d := per[s]; d != nil {
			h = d.out
		}
		tl.Streams = append(tl.Streams, Series{Stream: s, Heap: h, RSS: rss[s], Peak: peaks[s]})
	}
	slices.SortFunc(tl.Streams, func(a, b Series) int { return cmp.Compare(a.Stream, b.Stream) })
	return tl
}
