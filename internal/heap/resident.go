package heap

import (
	"cmp"
	"math"
	"slices"

	"github.com/heaplens/heaplens/internal/capture"
)

// BlockResidency is one large sampled block live at a moment, with how
// much of it was resident at the agent's last reading before then.
type BlockResidency struct {
	Alloc    *capture.Alloc
	Reserved uint64 // the bytes its pages span
	Resident uint64
	ReadAt   int64 // CLOCK_MONOTONIC of the reading
	// Stale: the reading is older than the moment asked for by more than
	// currentWithin, so it says what the block held then, not at the
	// moment (the pages touched since are not in it).
	Stale bool
	// Moment is the time the residency is asked for: the view's, or the
	// process's end for AtExit (0 when unknown).
	Moment int64
}

// currentWithin is how far before the moment a reading still stands for
// it: the agent polls every 20 ms, and the library's reading at exit()
// comes before the agent notices the end.
const currentWithin = 100e6

// AtExit, as Residency's time, asks for the blocks live when each process
// ended (the leaks view).
const AtExit = math.MaxInt64

// Residency returns the large blocks (those the agent read residency for)
// of the covered streams live at time at, largest first. A block freed
// before at, or whose process ended before it, is left out.
func Residency(c *capture.Capture, opt Options, at int64) []BlockResidency {
	type key struct {
		stream uint32
		addr   uint64
	}
	// The first reading up to currentWithin after the moment stands for it
	// best (the agent reads the pages right after RSS reaches a new high,
	// and pages touched by then stay while the block lives); else the last
	// one before it.
	upTo := at
	if at < AtExit-currentWithin {
		upTo = at + currentWithin
	}
	last, after := map[key]capture.Resident{}, map[key]capture.Resident{}
	for _, r := range c.Residents {
		if r.TimeNano > upTo || !opt.keep(r.Stream) {
			continue
		}
		k := key{r.Stream, r.Addr}
		if r.TimeNano > at {
			if prev, ok := after[k]; !ok || r.TimeNano < prev.TimeNano {
				after[k] = r
			}
		} else if prev, ok := last[k]; !ok || r.TimeNano >= prev.TimeNano {
			last[k] = r
		}
	}
	for k, r := range after {
		last[k] = r
	}
	if len(last) == 0 {
		return nil
	}
	// The block each reading is of: the last Alloc at its address before it.
	allocs := map[key]*capture.Alloc{}
	for i := range c.Allocs {
		a := &c.Allocs[i]
		k := key{a.Stream, a.Addr}
		if r, ok := last[k]; ok && a.TimeNano <= r.TimeNano && opt.keepSample(a) {
			if prev := allocs[k]; prev == nil || a.TimeNano >= prev.TimeNano {
				allocs[k] = a
			}
		}
	}
	freed := map[key]bool{}
	for _, f := range c.Frees {
		k := key{f.Stream, f.Addr}
		if a := allocs[k]; a != nil && f.TimeNano >= a.TimeNano && f.TimeNano <= at {
			freed[k] = true
		}
	}
	var out []BlockResidency
	for k, r := range last {
		a := allocs[k]
		if a == nil || freed[k] || a.TimeNano > at {
			continue
		}
		if e := c.Ends[k.stream]; e != nil && e.TimeNano < at && at != AtExit {
			continue
		}
		b := BlockResidency{Alloc: a, Reserved: r.Size, Resident: r.Resident, ReadAt: r.TimeNano, Moment: at}
		if at == AtExit {
			b.Moment = 0
			if e := c.Ends[k.stream]; e != nil {
				b.Moment = e.TimeNano
				if e.Finished > 0 && e.Finished < e.TimeNano {
					b.Moment = e.Finished // a Python program's end: before its shutdown
				}
			}
		}
		b.Stale = b.Moment != 0 && r.TimeNano < b.Moment-currentWithin
		out = append(out, b)
	}
	slices.SortFunc(out, func(x, y BlockResidency) int {
		return cmp.Or(cmp.Compare(y.Reserved, x.Reserved), cmp.Compare(x.Alloc.Addr, y.Alloc.Addr))
	})
	return out
}

// bigEvents keeps, while Summarize streams a capture's events, the
// allocations of large blocks (those whose residency the agent reads) and
// the frees of their addresses: all Residency needs of the events.
type bigEvents struct {
	allocs []capture.Alloc
	frees  []capture.Free
	addrs  map[[2]uint64]bool // stream, address of a large block allocated
	read   map[[2]uint64]bool // stream, address of a reading
}

// residentMin is the least size whose residency the agent reads.
const residentMin = 1 << 20

// newBigEvents keeps the events at the addresses c has readings of: what
// it holds is bounded by the readings, not by the run's allocations.
func newBigEvents(c *capture.Capture) *bigEvents {
	b := &bigEvents{addrs: map[[2]uint64]bool{}, read: map[[2]uint64]bool{}}
	for _, r := range c.Residents {
		b.read[[2]uint64{uint64(r.Stream), r.Addr}] = true
	}
	return b
}

func (b *bigEvents) alloc(a *capture.Alloc) {
	k := [2]uint64{uint64(a.Stream), a.Addr}
	if a.Size >= residentMin && b.read[k] {
		b.allocs = append(b.allocs, *a)
		b.addrs[k] = true
	}
}

func (b *bigEvents) free(f *capture.Free) {
	if b.addrs[[2]uint64{uint64(f.Stream), f.Addr}] {
		b.frees = append(b.frees, *f)
	}
}

// capture is c with these events as its only ones.
func (b *bigEvents) capture(c *capture.Capture) *capture.Capture {
	cc := *c
	cc.Allocs, cc.Frees = b.allocs, b.frees
	return &cc
}
