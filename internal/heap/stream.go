package heap

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/heaplens/heaplens/internal/capture"
)

// Summary is what `heaplens run` says when the command ends
// (export.Summary): the allocs, leaks and peak views, the peaks of the
// estimated heap and of RSS, and the RSS gap.
type Summary struct {
	Allocs, Leaks, Peak *Profile
	Start               int64 // Start of the capture
	HeapPeak            Point // the timeline's peak of the estimated heap (Timeline.Peak)
	RSSPeak             Point // the highest RSS (Timeline.PeakRSS)
	HighWater           HighWater
	// PeakBlocks and EndBlocks are the large blocks live at the heap's
	// peak and when their processes ended, with their residency.
	PeakBlocks, EndBlocks []BlockResidency
	Gap                   *Gap // RSSGap; nil without malloc statistics
}

// Summary returns the summary of the replay.
func (rp *Replay) Summary() *Summary {
	s := &Summary{Allocs: Allocs(rp.c, Options{Streams: rp.covered}), Leaks: rp.Leaks(Options{}),
		Peak: rp.Peak(Options{}), Start: rp.start, HeapPeak: rp.tl.Peak, RSSPeak: rp.tl.PeakRSS, Gap: rp.RSSGap(),
		HighWater: rp.HighWater()}
	s.PeakBlocks = Residency(rp.c, Options{Streams: rp.covered}, s.Peak.At)
	s.EndBlocks = Residency(rp.c, Options{Streams: rp.covered}, AtExit)
	return s
}

// A Prescan gathers, from a capture's Alloc and Free records in file order
// (capture.LoadEvents), what Summarize must know before it replays them:
// how many there are, the streams in order of their first event with the
// time of each one's last, and how far the file strays from replay order.
type Prescan struct {
	n        int
	earliest int64             // the earliest event's time
	index    map[uint32]uint32 // stream → index in streams
	streams  []uint32          // in order of their first event
	last     []int64           // by stream index: its last event's time
	top      evKey             // the largest key read so far
	late     uint64            // the most an event's time fell behind top's (unsigned: damaged times may be far apart)
	sorted   bool              // every event's key is at least the one before's
	mixed    bool              // allocations of more than one kind of memory (heapState.mixed)

	prev, prevIndex uint32 // the last stream looked up, and its index
}

// evKey is what orders events in a replay: time, then stream, then file
// order (sortEvents).
type evKey struct {
	t int64
	s uint32
}

func (k evKey) less(o evKey) bool { return k.t < o.t || k.t == o.t && k.s < o.s }

// NewPrescan returns a Prescan of no events.
func NewPrescan() *Prescan {
	return &Prescan{earliest: math.MaxInt64, index: map[uint32]uint32{}, sorted: true}
}

// Events returns the number of events observed.
func (p *Prescan) Events() int { return p.n }

// Held estimates how many events Summarize would hold back at once: as
// many as the events in the longest time an event came late by, if they
// were spread evenly over the capture's time.
func (p *Prescan) Held() int {
	if p.late == 0 {
		return 0
	}
	span := uint64(p.top.t) - uint64(p.earliest)
	if span <= p.late {
		return p.n
	}
	return int(float64(p.n) * float64(p.late) / float64(span))
}

// Observe takes the next Alloc or Free record; other records are ignored.
func (p *Prescan) Observe(rec *capture.Record) {
	k, ok := keyOf(rec)
	if !ok {
		return
	}
	if rec.Type == capture.RecAlloc {
		p.mixed = p.mixed || kindIndex(rec.Alloc.Func) != 0
	}
	i := p.streamIndex(k.s)
	p.last[i] = max(p.last[i], k.t)
	p.earliest = min(p.earliest, k.t)
	if p.n > 0 && k.less(p.top) {
		p.sorted = false
		p.late = max(p.late, uint64(p.top.t)-uint64(k.t))
	} else {
		p.top = k
	}
	p.n++
}

// streamIndex returns a stream's index, adding it at its first event.
func (p *Prescan) streamIndex(s uint32) uint32 {
	i, ok := p.known(s)
	if !ok {
		i = uint32(len(p.streams))
		p.index[s] = i
		p.streams = append(p.streams, s)
		p.last = append(p.last, 0) // as newReplayer: a stream ends no earlier than 0
		p.prev, p.prevIndex = s, i
	}
	return i
}

// known returns the index of a stream observed.
func (p *Prescan) known(s uint32) (uint32, bool) {
	if len(p.streams) > 0 && s == p.prev { // records of one stream come in runs
		return p.prevIndex, true
	}
	i, ok := p.index[s]
	if ok {
		p.prev, p.prevIndex = s, i
	}
	return i, ok
}

func keyOf(rec *capture.Record) (evKey, bool) {
	switch rec.Type {
	case capture.RecAlloc:
		return evKey{rec.Alloc.TimeNano, rec.Alloc.Stream}, true
	case capture.RecFree:
		return evKey{rec.Free.TimeNano, rec.Free.Stream}, true
	}
	return evKey{}, false
}

// maxHeld is the most events Summarize holds back to put a capture's
// events in replay order (~100 MiB). Records leave the agent near time
// order (a slice of each process's ring in turn): captures that stray
// further are refused (ErrReorder).
var maxHeld = 1 << 20

// ErrReorder says a capture's events are too far from time order to be
// replayed as they are read.
var ErrReorder = errors.New("the capture's allocations and frees are too far out of time order to be replayed as they are read")

// Summarize computes the Summary of every stream of a capture whose events
// are not in memory: c is what capture.LoadEvents returned, having handed
// its events to pre.Observe, and scan hands them to fn again, in file
// order, until fn returns false (capture.ScanEvents), with pool work's
// stacks stitched as stack.Stitch would. It gives what NewReplay(c with
// its events).Summary() would, and holds the live blocks, not every
// record: memory in proportion to the live heap's samples and the stacks,
// where a Replay holds every event. It reads the events once at rate 1,
// keeping the samples live at the highest heap so far as it goes
// (peakFold), and twice at other rates, the second time up to the peak,
// whose live set it then takes.
func Summarize(c *capture.Capture, pre *Prescan, scan func(fn func(*capture.Record) bool) error) (*Summary, error) {
	start := startFrom(c, pre.earliest)
	r := newStreamer(c, pre, start)
	r.allocs = newBuilder(c, Options{})
	if len(c.Residents) > 0 {
		r.big = newBigEvents(c)
	}
	if c.Meta.Rate <= 1 {
		r.fold = newPeakFold()
	}
	gap := bestReading(c, Options{})
	if gap != nil {
		r.gapAt, r.wantGap = gap.T, true
	}
	if err := scan(r.read); err != nil {
		return nil, err
	}
	if err := r.finish(); err != nil {
		return nil, err
	}
	if r.wantGap { // every event was at or before the gap's moment
		r.takeGap()
	}
	r.endUntil(math.MaxInt64)
	s := &Summary{Start: start, HeapPeak: r.tlPeak, Allocs: r.allocs.profile("allocs", c, Options{}, start)}
	_, s.RSSPeak = rssRounds(c, Options{})
	s.HighWater = HighWaterOf(c, Options{})
	s.Leaks, _ = r.snapshot("leaks", nil)
	s.Leaks.UnmatchedFrees, s.Leaks.LostFrees = r.unmatched, r.lost
	if gap != nil {
		gap.setLive(r.gap)
		s.Gap = gap
	}

	// The peak's live set, at rate 1 as kept along (peakFold), else by
	// replaying again up to the peak. Streams that had ended by then are
	// left out, as Replay.Peak does.
	pk, endedAt, fold := r.pk, r.endedAt, r.fold
	gone := func(si uint32) bool { return int(endedAt[si]) < pk.k }
	if fold != nil {
		b := newBuilder(c, Options{})
		fold.addTo(b, func(stream uint32) bool { return gone(pre.index[stream]) })
		s.Peak = b.profile("peak", c, Options{}, start)
	} else {
		var err error
		if s.Peak, err = replayTo(c, pre, start, pk.k, gone, scan); err != nil {
			return nil, err
		}
	}
	pk.stamp(s.Peak)
	if r.big != nil {
		bc := r.big.capture(c)
		s.PeakBlocks, s.EndBlocks = Residency(bc, Options{}, s.Peak.At), Residency(bc, Options{}, AtExit)
	}
	return s, nil
}

// replayTo replays the first k events again and returns the view of the
// blocks then live, leaving out the streams gone says.
func replayTo(c *capture.Capture, pre *Prescan, start int64, k int, gone func(si uint32) bool, scan func(fn func(*capture.Record) bool) error) (*Profile, error) {
	r := newStreamer(c, pre, start)
	r.stop = k
	if k > 0 {
		if err := scan(r.read); err != nil {
			return nil, err
		}
		if err := r.finish(); err != nil {
			return nil, err
		}
		if r.next != k {
			return nil, fmt.Errorf("the capture's events changed between two reads (%d, then %d to the peak)", k, r.next)
		}
	}
	p, _ := r.snapshot("peak", gone)
	return p, nil
}

// streamer replays events as they are read into a heapState, as replayer
// does with events in memory: same order, same matching (its own live set
// instead of match), so the same sums in the same order.
type streamer struct {
	heapState
	c     *capture.Capture
	pre   *Prescan
	start int64
	stop  int // apply no more than this many events; 0: all

	live   liveSet     // ref: 1 + index in blocks
	blocks []liveBlock // the live blocks, and holes listed in spare
	spare  []int32
	nread  int   // events read so far
	allocN int32 // allocations read so far: the next one's index in file order
	err    error // why read stopped early

	// Events held back until none read later can come before them
	// (Prescan.late), and the latest time read.
	held    held
	readTop int64

	// What the first replay observes.
	allocs *builder
	big    *bigEvents // the large blocks' allocations and frees, for Residency
	pk     peak
	fold   *peakFold // at rate 1
	tlPeak Point
	pend   struct {
		t     int64
		total float64
		ok    bool
	} // the timeline's last unobserved state
	wantGap bool
	gapAt   int64
	gap     *Profile
}

// liveBlock is what a snapshot needs of a live allocation.
type liveBlock struct {
	seq    int32 // index among the capture's allocations, in file order
	stream uint32
	tid    uint32
	fn     uint8
	size   uint64
	stack  uint64
	cell   int32 // in peakFold
}

// sevent is an event read and not yet applied.
type sevent struct {
	key  evKey
	read int // position among the events read
	free bool
	si   uint32
	b    liveBlock // for a free: stream and tid
	addr uint64
}

func newStreamer(c *capture.Capture, pre *Prescan, start int64) *streamer {
	return &streamer{heapState: newHeapState(c, pre.streams, pre.last, pre.mixed), c: c, pre: pre, start: start,
		live: newLiveSet(), readTop: math.MinInt64}
}

// more reports whether the replay applies more events (stop).
func (r *streamer) more() bool { return r.stop == 0 || r.next < r.stop }

// read takes the next event read from the capture; false: enough read.
func (r *streamer) read(rec *capture.Record) bool {
	e := sevent{read: r.nread}
	r.nread++
	switch rec.Type {
	case capture.RecAlloc:
		a := &rec.Alloc
		e.key, e.addr = evKey{a.TimeNano, a.Stream}, a.Addr
		e.b = liveBlock{seq: r.allocN, stream: a.Stream, tid: a.TID, fn: a.Func, size: a.Size, stack: a.StackID}
		r.allocN++
		if r.allocs != nil {
			r.allocs.add(a)
		}
		if r.big != nil {
			r.big.alloc(a)
		}
	case capture.RecFree:
		f := &rec.Free
		e.key, e.addr, e.free = evKey{f.TimeNano, f.Stream}, f.Addr, true
		e.b = liveBlock{stream: f.Stream, tid: f.TID}
		if r.big != nil {
			r.big.free(f)
		}
	default:
		return true
	}
	si, ok := r.pre.known(e.key.s)
	if !ok {
		r.err = fmt.Errorf("the capture's events changed between two reads (stream %d is new)", e.key.s)
		return false
	}
	e.si = si
	if r.pre.sorted {
		r.apply(&e)
		return r.more()
	}
	// Nothing read later lies more than late behind an event read before
	// it: what lies further behind the latest event read is safe to apply.
	r.held.push(&e)
	if r.held.n > maxHeld {
		return false // finish reports it
	}
	r.readTop = max(r.readTop, e.key.t)
	for r.held.n > 0 && uint64(r.readTop)-uint64(r.held.min().key.t) > r.pre.late && r.more() {
		r.apply(r.held.pop())
	}
	return r.more()
}

// finish applies the events held back.
func (r *streamer) finish() error {
	if r.err != nil {
		return r.err
	}
	if r.held.n > maxHeld {
		return ErrReorder
	}
	for r.held.n > 0 && r.more() {
		r.apply(r.held.pop())
	}
	if r.pend.ok {
		r.observeTotal()
	}
	return nil
}

// apply applies one event, keeping its live set beside the heap, and
// observes the state after it as NewReplay does (the peak, the timeline's
// peak).
func (r *streamer) apply(e *sevent) {
	t := e.key.t
	if r.pend.ok && t != r.pend.t { // several events at one time: only the state after the last counts
		r.observeTotal()
	}
	r.pend.ok = false
	if r.wantGap && t > r.gapAt {
		r.takeGap()
	}
	i, ok := r.live.lookup(e.si, e.addr)
	var old *endedAlloc
	var ref int32
	if ok { // a free, or an allocation at the address of a live block whose free was lost
		ref = r.live.slots[i].ref - 1
		b := &r.blocks[ref]
		old = &endedAlloc{b.size, b.fn}
		if r.fold != nil {
			r.fold.add(b.cell, -1, b.size)
		}
	}
	r.heapState.apply(t, e.si, e.free, old, endedAlloc{e.b.size, e.b.fn})
	switch {
	case e.free && ok:
		r.live.remove(i)
		r.spare = append(r.spare, ref)
	case e.free:
	case ok:
		r.blocks[ref] = e.b
		r.folded(ref)
	default:
		ref = int32(len(r.blocks))
		if n := len(r.spare); n > 0 {
			ref, r.spare = r.spare[n-1], r.spare[:n-1]
			r.blocks[ref] = e.b
		} else {
			r.blocks = append(r.blocks, e.b)
		}
		r.live.insert(i, liveSlot{addr: e.addr, ref: ref + 1, si: e.si})
		r.folded(ref)
	}
	r.observe(t)
}

// folded adds a new live block to the peakFold, at rate 1.
func (r *streamer) folded(ref int32) {
	if r.fold != nil {
		b := &r.blocks[ref]
		b.cell = r.fold.cell(b)
		r.fold.add(b.cell, 1, b.size)
	}
}

// observe follows the peak after an event at time t (peak.observe), and
// keeps the state for the timeline until the next event's time is known.
func (r *streamer) observe(t int64) {
	if r.total > r.pk.bytes {
		r.pk = peak{bytes: r.total, at: t, k: r.next, unmatched: r.unmatched, lost: r.lost}
		if r.fold != nil {
			r.fold.reached()
		}
	}
	r.pend.t, r.pend.total, r.pend.ok = t, max(r.total, 0), true
}

// observeTotal is timelineBuilder.observe's peak of the total heap.
func (r *streamer) observeTotal() {
	if r.pend.total > r.tlPeak.Bytes {
		r.tlPeak = Point{r.pend.t, r.pend.total}
	}
}

// takeGap takes the live view at the gap's moment (Replay.Live), when every
// event up to it has been applied.
func (r *streamer) takeGap() {
	r.wantGap = false
	ended := map[uint32]bool{} // stream indexes ended by then (Replay.endedBy)
	for _, e := range r.ends {
		if e.time > r.gapAt {
			break
		}
		ended[e.si] = true
	}
	p, heapAt := r.snapshot("live", func(si uint32) bool { return ended[si] })
	p.At, p.HeapAt = r.gapAt, heapAt
	p.UnmatchedFrees, p.LostFrees = r.unmatched, r.lost
	r.gap = p
}

// snapshot builds a view of the live blocks, leaving out the streams gone
// says (by index; nil: none), added in file order so that float sums are
// Replay's, and returns the heap they make.
func (r *streamer) snapshot(view string, gone func(si uint32) bool) (*Profile, float64) {
	idx := make([]uint64, 0, r.live.n) // seq<<32 | index in blocks: sorted by seq
	for _, s := range r.live.slots {
		if s.ref != 0 && (gone == nil || !gone(s.si)) {
			idx = append(idx, uint64(r.blocks[s.ref-1].seq)<<32|uint64(s.ref-1))
		}
	}
	slices.Sort(idx)
	b := newBuilder(r.c, Options{})
	var heapAt float64
	for _, i := range idx {
		x := &r.blocks[uint32(i)]
		b.add(&capture.Alloc{Stream: x.stream, TID: x.tid, Size: x.size, StackID: x.stack, Func: x.fn})
	}
	for _, i := range idx { // a second loop, as Replay.Live sums the heap
		x := &r.blocks[uint32(i)]
		heapAt += r.w.weight(x.size) * float64(x.size)
	}
	return b.profile(view, r.c, Options{}, r.start), heapAt
}
