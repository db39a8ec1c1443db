package heap

import (
	"cmp"
	"math"
	"slices"

	"github.com/heaplens/heaplens/internal/capture"
)

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
//
// The heap at a time is the heap after the last event stamped with it, so
// Peak is the peak view's moment except when that falls between events of
// one timestamp (an allocation, then a free, in the same nanosecond): the
// peak view counts the state after every event.
type Timeline struct {
	Start, End int64    // CLOCK_MONOTONIC bounds of the data
	Total      []Point  // estimated heap of all covered streams
	TotalRSS   []Point  // sum of the streams' RSS at each sampling round
	Peak       Point    // exact peak of Total (see below)
	PeakRSS    Point    // highest TotalRSS
	Streams    []Series // by stream
	Drops      map[uint32]DropStats
	// Kinds is the estimated heap of each kind of memory (capture.MemKinds
	// order), downsampled as Total.
	Kinds [][]Point
	// MallocInUse and MallocFree are what glibc's malloc said its arenas
	// held in use and free (capture.Malloc), summed over the running
	// covered processes at each reading.
	MallocInUse, MallocFree []Point
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

// timelineBuilder draws the timeline along a replay: observe after each
// step, then timeline.
type timelineBuilder struct {
	c     *capture.Capture
	opt   Options
	r     *replayer
	tl    *Timeline
	total downsampler
	kinds [nKinds]downsampler
	per   []*downsampler // by stream index of the replay
	peaks []Point        // by stream index
}

func newTimelineBuilder(c *capture.Capture, opt Options, r *replayer) *timelineBuilder {
	tl := &Timeline{Start: Start(c), Drops: make(map[uint32]DropStats)}
	end := tl.Start
	if n := r.ev.len(); n > 0 {
		end = max(end, r.ev.at(n-1).time(c))
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
	tb := &timelineBuilder{c: c, opt: opt, tl: tl, r: r, total: downsampler{start: tl.Start, width: width},
		per: make([]*downsampler, len(r.streams)), peaks: make([]Point, len(r.streams))}
	for k := range tb.kinds {
		tb.kinds[k] = downsampler{start: tl.Start, width: width}
	}
	r.onEnd = tb.ended
	return tb
}

// ended draws a stream's heap falling to zero when its process ends.
func (tb *timelineBuilder) ended(t int64, si uint32, total float64) {
	if d := tb.per[si]; d != nil {
		d.add(t, 0)
	}
	tb.total.add(t, max(total, 0))
	if tb.r.mixed {
		for k := range tb.kinds {
			tb.kinds[k].add(t, max(tb.r.byKind[k], 0))
		}
	}
}

// observe records the heap after the event r just applied.
func (tb *timelineBuilder) observe(r *replayer) {
	e := r.ev.at(r.next - 1)
	t := e.time(r.c)
	// Several events at one time: only the state after the last counts.
	var next event
	if r.next < r.ev.len() {
		next = r.ev.at(r.next)
	}
	tied := r.next < r.ev.len() && next.time(r.c) == t // the next event has the same time
	if tied && next.si == e.si {
		return
	}
	v := max(r.perStream[e.si], 0)
	d := tb.per[e.si]
	if d == nil {
		d = &downsampler{start: tb.tl.Start, width: tb.total.width}
		tb.per[e.si] = d
	}
	d.add(t, v)
	if v > tb.peaks[e.si].Bytes {
		tb.peaks[e.si] = Point{t, v}
	}
	if tied {
		return
	}
	total := max(r.total, 0)
	tb.total.add(t, total)
	if r.mixed {
		for k := range tb.kinds {
			tb.kinds[k].add(t, max(r.byKind[k], 0))
		}
	}
	if total > tb.tl.Peak.Bytes {
		tb.tl.Peak = Point{t, total}
	}
}

// timeline returns the timeline of a finished replay, with the RSS samples.
func (tb *timelineBuilder) timeline(r *replayer) *Timeline {
	r.endUntil(math.MaxInt64)
	c, opt, tl := tb.c, tb.opt, tb.tl
	tl.Total = tb.total.out
	for k := range tb.kinds {
		if k == 0 && !r.mixed { // malloc only: the total is its series
			tl.Kinds = append(tl.Kinds, tl.Total)
			continue
		}
		tl.Kinds = append(tl.Kinds, tb.kinds[k].out)
	}
	tl.MallocInUse, tl.MallocFree = mallocSeries(c, opt)
	rss := map[uint32][]Point{}
	for _, x := range rssReadings(c, opt) {
		rss[x.Stream] = append(rss[x.Stream], Point{x.TimeNano, float64(x.Bytes)})
	}
	tl.TotalRSS, tl.PeakRSS = rssRounds(c, opt)
	streams := map[uint32]bool{}
	heaps := map[uint32]*downsampler{}
	peaks := map[uint32]Point{}
	for si, d := range tb.per {
		if d != nil {
			s := r.streams[si]
			streams[s] = true
			heaps[s], peaks[s] = d, tb.peaks[si]
		}
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
		if d := heaps[s]; d != nil {
			h = d.out
		}
		tl.Streams = append(tl.Streams, Series{Stream: s, Heap: h, RSS: rss[s], Peak: peaks[s]})
	}
	slices.SortFunc(tl.Streams, func(a, b Series) int { return cmp.Compare(a.Stream, b.Stream) })
	return tl
}

// rssReadings returns the covered streams' RSS readings in time order.
// The agent's rounds come in file order; a process's own readings (at its
// start and exit) come when the agent drains its ring, later in the file.
func rssReadings(c *capture.Capture, opt Options) []capture.RSS {
	var out []capture.RSS
	for i := range c.RSS {
		if opt.keep(c.RSS[i].Stream) {
			out = append(out, c.RSS[i])
		}
	}
	slices.SortStableFunc(out, func(a, b capture.RSS) int { return cmp.Compare(a.TimeNano, b.TimeNano) })
	return out
}

// rssRounds returns the sum of the covered streams' RSS at each moment a
// reading was taken, in time order, and the highest (the first, on a tie).
// A stream not read at that moment counts with its latest reading until
// its end: a process's own reading stands beside the others'.
func rssRounds(c *capture.Capture, opt Options) (round []Point, peak Point) {
	readings := rssReadings(c, opt)
	latest := map[uint32]uint64{}
	for i := 0; i < len(readings); {
		t := readings[i].TimeNano
		for ; i < len(readings) && readings[i].TimeNano == t; i++ {
			latest[readings[i].Stream] = readings[i].Bytes
		}
		var sum uint64
		for s, b := range latest {
			if e := c.Ends[s]; e != nil && e.TimeNano > 0 && e.TimeNano < t {
				delete(latest, s)
				continue
			}
			sum += b
		}
		round = append(round, Point{t, float64(sum)})
	}
	for _, p := range round {
		if p.Bytes > peak.Bytes {
			peak = p
		}
	}
	return round, peak
}

// mallocSeries sums the covered processes' glibc statistics at each reading.
func mallocSeries(c *capture.Capture, opt Options) (inUse, free []Point) {
	for _, g := range mallocReadings(c, opt) {
		inUse, free = append(inUse, Point{g.T, g.InUse}), append(free, Point{g.T, g.Free})
	}
	return inUse, free
}

// TimelineOf computes the timeline view. Thread and stack filters do not
// apply: the heap of a process is one number.
func TimelineOf(c *capture.Capture, opt Options) *Timeline {
	return NewReplay(c, opt).Timeline()
}
