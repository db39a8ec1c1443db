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
func Start(c *capture.Capture) int64 { return startFrom(c, math.MaxInt64) }

// startFrom is Start of a capture whose events, or some of them, are not in
// memory: the earliest of those is at earliest.
func startFrom(c *capture.Capture, earliest int64) int64 {
	start := earliest
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
// keeps only what ordering needs and reads the rest, even the time, from
// the record. Indexes and positions in the replay are int32: 2^31 records
// would take over 64 GiB as capture.Alloc and capture.Free values, and
// events refuses them rather than wrap around.
type event struct {
	rec int32  // index in Capture.Allocs, or ^index in Capture.Frees
	si  uint32 // the stream's index in replayer.streams
}

// eventList holds a replay's events as columns: rec, and si only when
// more than one stream is covered (else every si is 0), so that the
// events of a single process take 4 bytes each.
type eventList struct {
	rec []int32
	si  []uint32 // nil: all 0
}

func (v *eventList) len() int { return len(v.rec) }

func (v *eventList) at(k int) event {
	if v.si == nil {
		return event{rec: v.rec[k]}
	}
	return event{rec: v.rec[k], si: v.si[k]}
}

func (v *eventList) set(k int, e event) {
	v.rec[k] = e.rec
	if v.si != nil {
		v.si[k] = e.si
	}
}

// time returns the event's TimeNano.
func (e event) time(c *capture.Capture) int64 {
	if e.rec < 0 {
		return c.Frees[^e.rec].TimeNano
	}
	return c.Allocs[e.rec].TimeNano
}

// events returns the Allocs and Frees of the covered streams in replay
// order: by TimeNano, then stream, with equal times in one stream in file
// order (from Capture.FreeOrder), and the covered streams, in order of
// their first record, that event.si indexes. Without a usable FreeOrder,
// frees go first among equal times: a realloc that frees and reuses an
// address at one timestamp then stays live.
func events(c *capture.Capture, opt Options) (eventList, []uint32, bool) {
	if len(c.Allocs)+len(c.Frees) > capture.MaxEvents { // capture.Load refuses such captures
		panic("heap: a capture of 2^31 or more allocations and frees cannot be replayed")
	}
	order := c.FreeOrder
	if len(order) != len(c.Frees) || !slices.IsSorted(order) ||
		(len(order) > 0 && (order[0] < 0 || int(order[len(order)-1]) > len(c.Allocs))) {
		order = make([]int32, len(c.Frees)) // all frees before all allocs
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
	n := len(c.Allocs) + len(c.Frees)
	ev := eventList{rec: make([]int32, 0, n)}
	add := func(rec int32, si int) {
		if si != 0 && ev.si == nil { // a second stream: from now on si is kept
			ev.si = make([]uint32, len(ev.rec), n)
		}
		ev.rec = append(ev.rec, rec)
		if ev.si != nil {
			ev.si = append(ev.si, uint32(si))
		}
	}
	j := 0
	emitFrees := func(upTo int) {
		for ; j < len(c.Frees) && int(order[j]) <= upTo; j++ {
			if si := indexOf(c.Frees[j].Stream); si >= 0 {
				add(^int32(j), si)
			}
		}
	}
	mixed := false // allocations of more than one kind of memory
	for i := range c.Allocs {
		emitFrees(i)
		if si := indexOf(c.Allocs[i].Stream); si >= 0 {
			add(int32(i), si)
			mixed = mixed || kindIndex(c.Allocs[i].Func) != 0
		}
	}
	emitFrees(len(c.Allocs))
	sortEvents(c, &ev, streams)
	return ev, streams, mixed
}

// sortEvents sorts events in file order into replay order. Records are
// mostly in order already (the agent writes them as they come): it only
// checks them then.
func sortEvents(c *capture.Capture, ev *eventList, streams []uint32) {
	sorted := true
	for k := 1; k < ev.len() && sorted; k++ {
		e0, e1 := ev.at(k-1), ev.at(k)
		t0, t1 := e0.time(c), e1.time(c)
		sorted = t0 < t1 || t0 == t1 && streams[e0.si] <= streams[e1.si]
	}
	if sorted {
		return
	}
	// Sorting by the records' times would read them at random: the times
	// go beside the events for the sort.
	type timed struct {
		time int64
		e    event
	}
	tev := make([]timed, ev.len())
	for k := range tev {
		e := ev.at(k)
		tev[k] = timed{e.time(c), e}
	}
	slices.SortStableFunc(tev, func(x, y timed) int {
		return cmp.Or(cmp.Compare(x.time, y.time), cmp.Compare(streams[x.e.si], streams[y.e.si]))
	})
	for k := range tev {
		ev.set(k, tev[k].e)
	}
}

// heapState is the estimated heap along a replay (Σ weight × size of the
// live samples: in all, per stream and per kind of memory) and the ends of
// the streams' processes, fed one event at a time in replay order: by a
// replayer from the events in memory, by a streamer from the events as they
// are read, so that the two give the same sums in the same order.
//
// A free of an address that is not live is counted in unmatched and
// ignored. An allocation at an address that is already live replaces the
// older block and counts in lost: the allocator cannot hand out a live
// address, so the older block's free was lost.
type heapState struct {
	w         weigher
	next      int // events applied
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
}

// newHeapState returns the state before the first event of the streams
// (by stream index, last: the time of each one's last event).
func newHeapState(c *capture.Capture, streams []uint32, last []int64, mixed bool) heapState {
	h := heapState{w: newWeigher(c.Meta.Rate), perStream: make([]float64, len(streams)),
		endedAt: make([]int32, len(streams)), mixed: mixed}
	if mixed {
		h.perStreamKind = make([][nKinds]float64, len(streams))
	}
	h.ends = streamEnds(c, streams, last, h.endedAt)
	return h
}

// apply applies the next event, at time t, of stream si: a free, or the
// allocation a. old is the live block the event ends, nil if none.
func (h *heapState) apply(t int64, si uint32, free bool, old *endedAlloc, a endedAlloc) {
	h.endUntil(t - 1) // a stream's last records share its End's time
	h.next++
	if old == nil && free {
		h.unmatched++
		return
	}
	if old != nil {
		// A free, or an allocation at the address of a live block whose
		// free was lost. Its bytes are computed as when it was added, so
		// the sums cancel exactly.
		h.add(si, *old, -1)
		if free {
			return
		}
		h.lost++
	}
	h.add(si, a, 1)
}

// add adds sign × the estimated bytes of a block to the sums.
func (h *heapState) add(si uint32, a endedAlloc, sign float64) {
	b := sign * h.w.weight(a.size) * float64(a.size)
	h.total += b
	h.perStream[si] += b
	if h.mixed {
		k := kindIndex(a.fn)
		h.byKind[k] += b
		h.perStreamKind[si][k] += b
	}
}

// endUntil ends the streams whose End is stamped at or before t.
func (h *heapState) endUntil(t int64) {
	for ; h.nextEnd < len(h.ends) && h.ends[h.nextEnd].time <= t; h.nextEnd++ {
		e := h.ends[h.nextEnd]
		h.total -= h.perStream[e.si]
		h.perStream[e.si] = 0
		if h.mixed {
			for k, v := range h.perStreamKind[e.si] {
				h.byKind[k] -= v
			}
			h.perStreamKind[e.si] = [nKinds]float64{}
		}
		h.endedAt[e.si] = int32(h.next)
		if h.onEnd != nil {
			h.onEnd(e.time, e.si, h.total)
		}
	}
}

// replayer replays Allocs and Frees of the covered streams in time order,
// across streams, into a heapState. Which allocation each event ends is
// known beforehand (match).
type replayer struct {
	heapState
	c       *capture.Capture
	ev      eventList
	streams []uint32 // stream of each stream index
	match   *matching
	ended   []int32 // by event: 1 + the Capture.Allocs index of the allocation it ends, 0 if none (match); complete up to where gather waited
	// gathered holds, for the events from gatheredAt on, the size and
	// function of the allocation each ends (gather).
	gathered   []endedAlloc
	gatheredAt int
}

// streamEnd is the moment a covered stream's process ended.
type streamEnd struct {
	time int64
	si   uint32
}

func newReplayer(c *capture.Capture, opt Options) *replayer {
	ev, streams, mixed := events(c, opt)
	m := match(c, &ev)
	last := make([]int64, len(streams))
	for k := range ev.len() {
		e := ev.at(k)
		last[e.si] = max(last[e.si], e.time(c))
	}
	return &replayer{heapState: newHeapState(c, streams, last, mixed), c: c, ev: ev, streams: streams, match: m, ended: m.ended}
}

// streamEnds returns the Ends of the streams (by stream index, last: the
// time of each one's last event) in time order, and sets every endedAt to
// math.MaxInt32: none has ended yet. A stream ends no earlier than its last
// record: an End without a time, or a damaged one, cannot take records
// away from it.
func streamEnds(c *capture.Capture, streams []uint32, last []int64, endedAt []int32) []streamEnd {
	var ends []streamEnd
	for si, s := range streams {
		endedAt[si] = math.MaxInt32
		if e := c.Ends[s]; e != nil {
			ends = append(ends, streamEnd{max(e.TimeNano, last[si]), uint32(si)})
		}
	}
	slices.SortStableFunc(ends, func(a, b streamEnd) int { return cmp.Compare(a.time, b.time) })
	return ends
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

// endedAlloc is what the replay reads of an allocation.
type endedAlloc struct {
	size uint64
	fn   uint8
}

// gatherBatch is the number of events gather reads ahead.
const gatherBatch = 1 << 14

// gather reads the size and function of the allocations the next
// gatherBatch events end. They lie anywhere in Capture.Allocs, one cache
// miss each: in a loop that does nothing else many misses are in flight
// at once, where step, doing much more per event, would wait for each.
func (r *replayer) gather() {
	if r.gathered == nil {
		r.gathered = make([]endedAlloc, gatherBatch)
	}
	r.gatheredAt = r.next
	n := min(gatherBatch, r.ev.len()-r.next)
	r.match.upTo(r.next + n)
	for j, ref := range r.ended[r.next : r.next+n] {
		if ref != 0 {
			a := &r.c.Allocs[ref-1]
			r.gathered[j] = endedAlloc{a.Size, a.Func}
		}
	}
}

// step applies the next event.
func (r *replayer) step() {
	k := r.next
	if r.gathered == nil || k-r.gatheredAt == gatherBatch {
		r.gather()
	}
	e := r.ev.at(k)
	var old *endedAlloc
	if r.ended[k] != 0 {
		old = &r.gathered[k-r.gatheredAt]
	}
	var a endedAlloc
	if e.rec >= 0 {
		a = endedAlloc{r.c.Allocs[e.rec].Size, r.c.Allocs[e.rec].Func}
	}
	r.apply(e.time(r.c), e.si, e.rec < 0, old, a)
}

// Live is the "live" view: the sampled allocations live at time at
// (CLOCK_MONOTONIC), after every event stamped at or before it.
func Live(c *capture.Capture, opt Options, at int64) *Profile {
	return NewReplay(c, opt).Live(opt, at)
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
		*pk = peak{bytes: r.total, at: r.ev.at(r.next - 1).time(r.c), k: r.next, unmatched: r.unmatched, lost: r.lost}
	}
}

// Peak is the "peak" view: the live set at the moment the estimated heap of
// the covered streams was highest. Over several streams this is the peak of
// their sum over time, not the sum of each one's peak. The earliest moment
// wins a tie. Profile.At is that moment, Profile.HeapAt the peak.
func Peak(c *capture.Capture, opt Options) *Profile {
	return NewReplay(c, opt).Peak(opt)
}

// Temporary is the "temporary" view: sampled allocations freed within
// lifetime of being allocated (lifetime ≤ 0 means DefaultLifetime): the
// churn that costs allocator time without holding memory.
func Temporary(c *capture.Capture, opt Options, lifetime time.Duration) *Profile {
	return NewReplay(c, opt).Temporary(opt, lifetime)
}
