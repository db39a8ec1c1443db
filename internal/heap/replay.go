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

// LastEvent returns the time of the capture's last allocation or free, its
// Start if it has none: the end of the run, as the live view sees it.
func LastEvent(c *capture.Capture) int64 {
	end := Start(c)
	for i := range c.Allocs {
		end = max(end, c.Allocs[i].TimeNano)
	}
	for i := range c.Frees {
		end = max(end, c.Frees[i].TimeNano)
	}
	return end
}

// event is one Alloc or Free of a covered stream, in replay order. A
// replay holds one per record, tens of millions for a long run, so it
// keeps only what ordering needs and reads the rest from the record.
// Indexes and positions in the replay are int32: 2^31 records would take
// over 64 GiB as capture.Alloc and capture.Free values, and events refuses
// them rather than wrap around.
type event struct {
	time int64
	rec  int32  // index in Capture.Allocs, or ^index in Capture.Frees
	si   uint32 // the stream's index in replayer.streams
}

// events returns the Allocs and Frees of the covered streams in replay
// order: by TimeNano, then stream, with equal times in one stream in file
// order (from Capture.FreeOrder), and the covered streams, in order of
// their first record, that event.si indexes. Without a usable FreeOrder,
// frees go first among equal times: a realloc that frees and reuses an
// address at one timestamp then stays live.
func events(c *capture.Capture, opt Options) ([]event, []uint32, bool) {
	if len(c.Allocs)+len(c.Frees) > capture.MaxEvents { // capture.Load refuses such captures
		panic("heap: a capture of 2^31 or more allocations and frees cannot be replayed")
	}
	order := c.FreeOrder
	if len(order) != len(c.Frees) || !slices.IsSorted(order) ||
		(len(order) > 0 && (order[0] < 0 || order[len(order)-1] > len(c.Allocs))) {
		order = make([]int, len(c.Frees)) // all frees before all allocs
	}
	var streams []uint32
	index := map[uint32]int{} // stream → index in streams, -1 if not covered
	// Records of one stream come in runs: remember the last answer.
	last, lastIndex := uint32(0), -2 // -2: no answer yet
	indexOf := func(stream uint32) int {
		if stream == last && lastIndex != -2 {
			return lastIndex
		}
		i, ok := index[stream]
		if !ok {
			i = -1
			if opt.keep(stream) {
				i = len(streams)
				streams = append(streams, stream)
			}
			index[stream] = i
		}
		last, lastIndex = stream, i
		return i
	}
	ev := make([]event, 0, len(c.Allocs)+len(c.Frees))
	j := 0
	emitFrees := func(upTo int) {
		for ; j < len(c.Frees) && order[j] <= upTo; j++ {
			if si := indexOf(c.Frees[j].Stream); si >= 0 {
				ev = append(ev, event{time: c.Frees[j].TimeNano, rec: ^int32(j), si: uint32(si)})
			}
		}
	}
	mixed := false // allocations of more than one kind of memory
	for i := range c.Allocs {
		emitFrees(i)
		if si := indexOf(c.Allocs[i].Stream); si >= 0 {
			ev = append(ev, event{time: c.Allocs[i].TimeNano, rec: int32(i), si: uint32(si)})
			mixed = mixed || kindIndex(c.Allocs[i].Func) != 0
		}
	}
	emitFrees(len(c.Allocs))
	cmpEv := func(x, y event) int {
		if c := cmp.Compare(x.time, y.time); c != 0 {
			return c
		}
		return cmp.Compare(streams[x.si], streams[y.si])
	}
	// Records are mostly in order already; skip the sort when they are.
	if !slices.IsSortedFunc(ev, cmpEv) {
		slices.SortStableFunc(ev, cmpEv)
	}
	return ev, streams, mixed
}

// replayer replays Allocs and Frees of the covered streams in time order,
// across streams, and keeps the live set and the estimated heap (Σ weight ×
// size of live samples) of each stream and of all of them.
//
// A free of an address that is not live is counted in unmatched and
// ignored. An allocation at an address that is already live replaces the
// older block and counts in lost: the allocator cannot hand out a live
// address, so the older block's free was lost.
type replayer struct {
	c         *capture.Capture
	w         weigher
	ev        []event
	streams   []uint32 // stream of each stream index
	next      int      // index of the next event to apply
	live      liveSet
	total     float64
	perStream []float64 // by stream index
	// byKind is the heap by kind of memory (capture.MemKinds order), and
	// perStreamKind the same per stream index.
	byKind        [nKinds]float64
	perStreamKind [][nKinds]float64
	// mixed is false when every allocation is of the malloc kind: then the
	// per-kind sums are the totals and are not kept apart.
	mixed     bool
	unmatched int
	lost      int

	// A process's blocks stop counting toward the heap when it ends (exit,
	// exec, death): ends lists the covered streams' End times in time
	// order, applied before the first event after them; endedAt[si] is
	// the number of events applied when stream si ended (math.MaxInt32
	// while it runs). The live set keeps the blocks, so that leaks still
	// shows them as live at exit.
	ends    []streamEnd
	nextEnd int
	endedAt []int32
	onEnd   func(time int64, si uint32, total float64) // the timeline's hook, if any

	// life, if not nil, records the lifespan of each allocation (by index
	// in Capture.Allocs), so that the live set after any number of events
	// can be listed after the replay without replaying again.
	life []lifespan
}

// lifespan is when an allocation was live, in event positions: born is
// the position of its Alloc event, died that of the event that ended it (a
// Free, or an Alloc at its address), math.MaxInt32 if none did. It is live
// after the first k events when born < k ≤ died. An allocation of a stream
// not covered has born = math.MaxInt32: it is never live.
type lifespan struct {
	born, died int32
}

// streamEnd is the moment a covered stream's process ended.
type streamEnd struct {
	time int64
	si   uint32
}

func newReplayer(c *capture.Capture, opt Options) *replayer {
	ev, streams, mixed := events(c, opt)
	r := &replayer{c: c, w: newWeigher(c.Meta.Rate), ev: ev, streams: streams,
		live: newLiveSet(), perStream: make([]float64, len(streams)), endedAt: make([]int32, len(streams)),
		mixed: mixed}
	if mixed {
		r.perStreamKind = make([][nKinds]float64, len(streams))
	}
	// A stream ends no earlier than its last record: an End without a time,
	// or a damaged one, cannot take records away from it.
	last := make([]int64, len(streams))
	for _, e := range ev {
		last[e.si] = max(last[e.si], e.time)
	}
	for si, s := range streams {
		r.endedAt[si] = math.MaxInt32
		if e := c.Ends[s]; e != nil {
			r.ends = append(r.ends, streamEnd{max(e.TimeNano, last[si]), uint32(si)})
		}
	}
	slices.SortStableFunc(r.ends, func(a, b streamEnd) int { return cmp.Compare(a.time, b.time) })
	return r
}

// endUntil ends the streams whose End is stamped at or before t.
func (r *replayer) endUntil(t int64) {
	for ; r.nextEnd < len(r.ends) && r.ends[r.nextEnd].time <= t; r.nextEnd++ {
		e := r.ends[r.nextEnd]
		r.total -= r.perStream[e.si]
		r.perStream[e.si] = 0
		if r.mixed {
			for k, v := range r.perStreamKind[e.si] {
				r.byKind[k] -= v
			}
			r.perStreamKind[e.si] = [nKinds]float64{}
		}
		r.endedAt[e.si] = int32(r.next)
		if r.onEnd != nil {
			r.onEnd(e.time, e.si, r.total)
		}
	}
}

// ended returns, by stream, the number of events applied when each stream
// that ended within the first k events did so; nil if none did. A stream
// in it is not live in the state after k events.
func (r *replayer) ended(k int) map[uint32]int32 {
	var m map[uint32]int32
	for si, at := range r.endedAt {
		if int(at) < k {
			if m == nil {
				m = map[uint32]int32{}
			}
			m[r.streams[si]] = at
		}
	}
	return m
}

// recordLifespans makes the replay fill r.life.
func (r *replayer) recordLifespans() {
	r.life = make([]lifespan, len(r.c.Allocs))
	for i := range r.life {
		r.life[i] = lifespan{math.MaxInt32, math.MaxInt32}
	}
}

// nKinds is the number of kinds of memory, capture.MemKinds.
const nKinds = 3

// kindIndex is the index of a hooked function's kind in capture.MemKinds.
func kindIndex(f uint8) int {
	switch capture.MemKind(f) {
	case capture.MemPyMem:
		return 1
	case capture.MemMmap:
		return 2
	}
	return 0
}

// addKind adds b bytes of kind k (kindIndex) to the heap of stream si.
func (r *replayer) addKind(si uint32, k uint8, b float64) {
	if r.mixed {
		r.byKind[k] += b
		r.perStreamKind[si][k] += b
	}
}

// step applies the next event. It returns the allocation index a free
// released (freed ≥ 0), or -1.
func (r *replayer) step() (freed int) {
	k := r.next
	e := r.ev[k]
	r.endUntil(e.time - 1) // a stream's last records share its End's time
	r.next++
	if e.rec < 0 {
		i, ok := r.live.lookup(e.si, r.c.Frees[^e.rec].Addr)
		if !ok {
			r.unmatched++
			return -1
		}
		s := r.live.slots[i]
		r.live.remove(i)
		r.total -= s.bytes
		r.perStream[e.si] -= s.bytes
		r.addKind(e.si, s.kind, -s.bytes)
		if r.life != nil {
			r.life[s.ref-1].died = int32(k)
		}
		return int(s.ref - 1)
	}
	a := &r.c.Allocs[e.rec]
	// Computed once per allocation: the slot keeps it for the free.
	b := r.w.weight(a.Size) * float64(a.Size)
	s := liveSlot{addr: a.Addr, bytes: b, ref: e.rec + 1, si: e.si, kind: uint8(kindIndex(a.Func))}
	if i, ok := r.live.lookup(e.si, a.Addr); ok {
		old := &r.live.slots[i]
		r.lost++
		r.total -= old.bytes
		r.perStream[e.si] -= old.bytes
		r.addKind(e.si, old.kind, -old.bytes)
		if r.life != nil {
			r.life[old.ref-1].died = int32(k)
		}
		*old = s
	} else {
		r.live.insert(i, s)
	}
	r.total += b
	r.perStream[e.si] += b
	r.addKind(e.si, s.kind, b)
	if r.life != nil {
		r.life[e.rec].born = int32(k)
	}
	return -1
}

// snapshot builds a profile of the allocations idx (indexes in
// c.Allocs, ascending so that float sums are deterministic).
func snapshot(c *capture.Capture, view string, opt Options, idx []int) *Profile {
	b := newBuilder(c, opt)
	for _, i := range idx {
		b.add(&c.Allocs[i])
	}
	return b.profile(view, c, opt)
}

// Live is the "live" view: the sampled allocations live at time at
// (CLOCK_MONOTONIC), after every event stamped at or before it.
func Live(c *capture.Capture, opt Options, at int64) *Profile {
	r := newReplayer(c, opt)
	for r.next < len(r.ev) && r.ev[r.next].time <= at {
		r.step()
	}
	r.endUntil(at)
	idx := r.live.appendRefs(make([]int, 0, r.live.n))
	if gone := r.ended(r.next + 1); gone != nil {
		idx = slices.DeleteFunc(idx, func(i int) bool { _, ok := gone[c.Allocs[i].Stream]; return ok })
	}
	slices.Sort(idx)
	p := snapshot(c, "live", opt, idx)
	p.At, p.HeapAt = at, max(r.total, 0)
	p.UnmatchedFrees, p.LostFrees = r.unmatched, r.lost
	return p
}

// peak follows a replay's highest estimated heap, after every event.
type peak struct {
	bytes           float64
	at              int64 // time of the event that reached it
	k               int   // events applied at the peak; 0 if the heap never rose above 0
	unmatched, lost int   // the replay's counts at the peak
}

func (pk *peak) observe(r *replayer) {
	if r.total > pk.bytes {
		*pk = peak{bytes: r.total, at: r.ev[r.next-1].time, k: r.next, unmatched: r.unmatched, lost: r.lost}
	}
}

// profile returns the peak view of a replay that recorded lifespans.
func (pk *peak) profile(r *replayer, opt Options) *Profile {
	k := int32(pk.k)
	gone := r.ended(pk.k)
	var idx []int
	for i, l := range r.life {
		if l.born < k && k <= l.died {
			if _, ok := gone[r.c.Allocs[i].Stream]; !ok {
				idx = append(idx, i)
			}
		}
	}
	p := snapshot(r.c, "peak", opt, idx)
	p.At, p.HeapAt = pk.at, pk.bytes
	if pk.k == 0 {
		p.At = p.Start
	}
	p.UnmatchedFrees, p.LostFrees = pk.unmatched, pk.lost
	return p
}

// Peak is the "peak" view: the live set at the moment the estimated heap of
// the covered streams was highest. Over several streams this is the peak of
// their sum over time, not the sum of each one's peak. The earliest moment
// wins a tie. Profile.At is that moment, Profile.HeapAt the peak.
func Peak(c *capture.Capture, opt Options) *Profile {
	r := newReplayer(c, opt)
	r.recordLifespans()
	var pk peak
	for r.next < len(r.ev) {
		r.step()
		pk.observe(r)
	}
	return pk.profile(r, opt)
}

// PeakAndTimeline returns Peak(c, opt) and TimelineOf(c, opt) from one
// replay instead of two: the peak view needs the whole replay to know
// where the peak is, and the timeline is drawn along the way.
func PeakAndTimeline(c *capture.Capture, opt Options) (*Profile, *Timeline) {
	r := newReplayer(c, opt)
	r.recordLifespans()
	tb := newTimelineBuilder(c, opt, r)
	var pk peak
	for r.next < len(r.ev) {
		r.step()
		pk.observe(r)
		tb.observe(r)
	}
	return pk.profile(r, opt), tb.timeline(r)
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
