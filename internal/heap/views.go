package heap

import (
	"math/bits"
	"sort"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
)

// A Replay is one replay of a capture's allocations and frees of the
// covered streams, from start to end, kept so that every view and the
// timeline are read from it instead of each replaying again: a replay
// looks every event's address up in a live set far larger than the
// caches, the dearest step of a report. It keeps which allocation each
// event ended, the peak, the timeline, and where frees went unmatched or
// were lost, which is all the views need.
//
// A Replay is read-only once built; views of it may be computed
// concurrently.
type Replay struct {
	c       *capture.Capture
	covered []uint32 // Options.Streams
	start   int64    // Start(c)
	ev      eventList
	streams []uint32 // stream of each stream index (event.si)
	ended   []int32  // by event: 1 + the index in c.Allocs of the allocation it ends, 0 if none (match)
	ends    []streamEnd
	endedAt []int32 // heapState.endedAt at the end
	pk      peak
	tl      *Timeline

	// unmatchedAt and lostAt are the positions, in ev, of the frees that
	// matched no live block and of the allocations that replaced a live
	// one (counted in Profile.UnmatchedFrees and LostFrees), ascending.
	unmatchedAt, lostAt []int32
}

// NewReplay replays the streams opt covers (only opt.Streams matters: the
// other options choose samples of a view, not the heap replayed).
func NewReplay(c *capture.Capture, opt Options) *Replay {
	opt = Options{Streams: opt.Streams}
	r := newReplayer(c, opt)
	tb := newTimelineBuilder(c, opt, r)
	rp := &Replay{c: c, covered: opt.Streams, start: tb.tl.Start, ev: r.ev, streams: r.streams, ends: r.ends}
	for r.next < r.ev.len() {
		unmatched, lost := r.unmatched, r.lost
		r.step()
		if r.unmatched != unmatched {
			rp.unmatchedAt = append(rp.unmatchedAt, int32(r.next-1))
		}
		if r.lost != lost {
			rp.lostAt = append(rp.lostAt, int32(r.next-1))
		}
		rp.pk.observe(r)
		tb.observe(r)
	}
	rp.tl = tb.timeline(r)
	rp.ended, rp.endedAt = r.ended, r.endedAt
	return rp
}

// Start is Start of the replay's capture, found once.
func (rp *Replay) Start() int64 { return rp.start }

// Timeline returns the timeline view. Thread and stack filters do not
// apply to it: the heap of a process is one number.
func (rp *Replay) Timeline() *Timeline { return rp.tl }

// options returns opt restricted to the replay's streams.
func (rp *Replay) options(opt Options) Options {
	opt.Streams = rp.covered
	return opt
}

// liveAt lists, in ascending order, the allocations live after the first
// k events, leaving out those of streams in gone: those the events
// allocated and did not end, marked in a bitmap (a bit per allocation, small
// enough for the caches) while they are read in order.
func (rp *Replay) liveAt(k int, gone map[uint32]bool) []int {
	live := make([]uint64, (len(rp.c.Allocs)+63)/64)
	n := 0
	for j := range k {
		e := rp.ev.at(j)
		if ref := rp.ended[j]; ref != 0 {
			live[(ref-1)/64] &^= 1 << ((ref - 1) % 64)
			n--
		}
		if e.rec >= 0 {
			live[e.rec/64] |= 1 << (e.rec % 64)
			n++
		}
	}
	idx := make([]int, 0, n)
	for w, word := range live {
		for word != 0 {
			i := w*64 + bits.TrailingZeros64(word)
			word &= word - 1
			if gone == nil || !gone[rp.c.Allocs[i].Stream] {
				idx = append(idx, i)
			}
		}
	}
	return idx
}

// endedBy returns the streams whose process had ended by time t (their
// End, or their last record if later), nil if none had.
func (rp *Replay) endedBy(t int64) map[uint32]bool {
	var gone map[uint32]bool
	for _, e := range rp.ends { // in time order
		if e.time > t {
			break
		}
		if gone == nil {
			gone = map[uint32]bool{}
		}
		gone[rp.streams[e.si]] = true
	}
	return gone
}

// countBefore returns how many of the ascending positions pos are below k.
func countBefore(pos []int32, k int) int {
	return sort.Search(len(pos), func(i int) bool { return int(pos[i]) >= k })
}

// Leaks is the leaks view of the replay (see the function Leaks).
func (rp *Replay) Leaks(opt Options) *Profile {
	opt = rp.options(opt)
	c := rp.c
	var cutoff map[uint32]int64 // by stream, with MinAge
	if opt.MinAge > 0 {
		cutoff = map[uint32]int64{}
		for k := range rp.ev.len() { // in time order: the last event of a stream wins
			e := rp.ev.at(k)
			cutoff[rp.streams[e.si]] = e.time(c)
		}
		for s, end := range cutoff {
			if e := c.Ends[s]; e != nil && e.TimeNano > end {
				end = e.TimeNano
			}
			cutoff[s] = end - int64(opt.MinAge)
		}
	}
	b := newBuilder(c, opt)
	// Live at the end (ended streams included), added in allocation order
	// so that float sums are deterministic.
	for _, i := range rp.liveAt(rp.ev.len(), nil) {
		if a := &c.Allocs[i]; cutoff == nil || a.TimeNano <= cutoff[a.Stream] {
			b.add(a)
		}
	}
	p := b.profile("leaks", c, opt, rp.start)
	p.UnmatchedFrees, p.LostFrees = len(rp.unmatchedAt), len(rp.lostAt)
	return p
}

// Live is the live view of the replay at time at (see the function Live).
func (rp *Replay) Live(opt Options, at int64) *Profile {
	opt = rp.options(opt)
	k := sort.Search(rp.ev.len(), func(i int) bool { return rp.ev.at(i).time(rp.c) > at })
	idx := rp.liveAt(k, rp.endedBy(at))
	p := rp.snapshot("live", opt, idx)
	p.At = at
	w := newWeigher(rp.c.Meta.Rate)
	for _, i := range idx { // the heap then, before the sample filters
		a := &rp.c.Allocs[i]
		p.HeapAt += w.weight(a.Size) * float64(a.Size)
	}
	p.UnmatchedFrees, p.LostFrees = countBefore(rp.unmatchedAt, k), countBefore(rp.lostAt, k)
	return p
}

// Peak is the peak view of the replay (see the function Peak).
func (rp *Replay) Peak(opt Options) *Profile {
	opt = rp.options(opt)
	pk := rp.pk
	var gone map[uint32]bool // streams that ended before the peak
	for si, at := range rp.endedAt {
		if int(at) < pk.k {
			if gone == nil {
				gone = map[uint32]bool{}
			}
			gone[rp.streams[si]] = true
		}
	}
	p := rp.snapshot("peak", opt, rp.liveAt(pk.k, gone))
	pk.stamp(p)
	return p
}

// stamp gives a peak view its moment, heap and the replay's counts then.
func (pk peak) stamp(p *Profile) {
	p.At, p.HeapAt = pk.at, pk.bytes
	if pk.k == 0 {
		p.At = p.Start
	}
	p.UnmatchedFrees, p.LostFrees = pk.unmatched, pk.lost
}

// Temporary is the temporary view of the replay (see the function
// Temporary).
func (rp *Replay) Temporary(opt Options, lifetime time.Duration) *Profile {
	opt = rp.options(opt)
	if lifetime <= 0 {
		lifetime = DefaultLifetime
	}
	c := rp.c
	b := newBuilder(c, opt)
	for j := range rp.ev.len() {
		e := rp.ev.at(j)
		// Ended by a free (not by a later allocation at its address, a lost
		// free) within lifetime; added in the order of the frees.
		if ref := rp.ended[j]; e.rec < 0 && ref != 0 {
			if a := &c.Allocs[ref-1]; e.time(c)-a.TimeNano <= int64(lifetime) {
				b.add(a)
			}
		}
	}
	p := b.profile("temporary", c, opt, rp.start)
	p.UnmatchedFrees, p.LostFrees, p.Lifetime = len(rp.unmatchedAt), len(rp.lostAt), lifetime
	return p
}

// snapshot builds a profile of the allocations idx (indexes in c.Allocs,
// ascending so that float sums are deterministic).
func (rp *Replay) snapshot(view string, opt Options, idx []int) *Profile {
	b := newBuilder(rp.c, opt)
	for _, i := range idx {
		b.add(&rp.c.Allocs[i])
	}
	return b.profile(view, rp.c, opt, rp.start)
}
