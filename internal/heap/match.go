package heap

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/heaplens/heaplens/internal/capture"
)

// match pairs the events of a replay with the allocations they end: for a
// free, the allocation it releases (the last allocation at its stream and
// address, if still live); for an allocation, the live one at its address
// that it replaces (whose free was lost). ended[k] is 1 + that
// allocation's index in Capture.Allocs, or 0 for none (an unmatched free,
// a fresh allocation).
//
// Matching is the dear part of a replay: one lookup per event in a table of
// every live block, far larger than the caches. The blocks are split by a
// hash of their key between shards that match on their own, at once, on
// a large capture: each reads every event and keeps those of its blocks.
// match returns at once; the replay follows the shards (matching.upTo).
func match(c *capture.Capture, ev *eventList) *matching {
	return startMatch(c, ev, matchShards(ev.len()))
}

// matching is a match under way: every shard fills ended in event order.
type matching struct {
	ended []int32
	mu    sync.Mutex
	moved sync.Cond // a shard's done moved on
	done  []int     // by shard: events matched
}

// upTo waits until ended is complete below event k.
func (m *matching) upTo(k int) {
	m.mu.Lock()
	for slices.Min(m.done) < k {
		m.moved.Wait()
	}
	m.mu.Unlock()
}

// startMatch starts the n shards of match, a power of two.
func startMatch(c *capture.Capture, ev *eventList, n int) *matching {
	m := &matching{ended: make([]int32, ev.len()), done: make([]int, n)}
	m.moved.L = &m.mu
	// As many blocks as are live at the end, at least, are live at once:
	// tables that hold them from the start do not grow and copy.
	atEnd := 0
	for _, r := range ev.rec {
		atEnd += int(r>>31) | 1 // +1 an allocation, -1 a free
	}
	for s := range n {
		go m.shard(c, ev, uint64(s), n, max(atEnd, 0)/n)
	}
	return m
}

// progress tells the waiting replay how far shard s got.
func (m *matching) progress(s uint64, k int) {
	m.mu.Lock()
	m.done[s] = k
	m.mu.Unlock()
	m.moved.Broadcast()
}

// matchShards is the number of shards for a replay of n events: 1 below a
// million events, where starting goroutines would cost more than it saves,
// else one per processor but the replay's own, a power of two, at most 4
// (on 2 processors 1 shard beside the replay is 10 % faster than 2).
func matchShards(n int) int {
	if n < 1<<20 {
		return 1
	}
	s := 1
	for s*2 <= min(runtime.GOMAXPROCS(0)-1, 4) {
		s *= 2
	}
	return s
}

// shard matches the events whose block falls in shard s of n, about live0
// of them live at the end; the shards write disjoint elements of ended,
// and say how far they got every matchProgress events.
//
// The events are taken a batch at a time: the home slots of a batch's
// blocks are read first, all at once, so that their cache misses overlap
// instead of following one another (a table of a million live blocks is
// far larger than the caches); the batch is then matched in order.
func (m *matching) shard(c *capture.Capture, ev *eventList, s uint64, n int, live0 int) {
	ended := m.ended
	live := newLiveSetFor(live0)
	type pending struct {
		k    int
		e    event
		addr uint64
	}
	var batch [matchBatch]pending
	var touched int32
	for k0, told := 0, 0; k0 < ev.len(); {
		if k0-told >= matchProgress {
			m.progress(s, k0) // every event before k0 is matched
			told = k0
		}
		nb := 0
		for ; k0 < ev.len() && nb < matchBatch; k0++ {
			e := ev.at(k0)
			var addr uint64
			if e.rec < 0 {
				addr = c.Frees[^e.rec].Addr
			} else {
				addr = c.Allocs[e.rec].Addr
			}
			if n > 1 && shardOf(e.si, addr, n) != s {
				continue
			}
			batch[nb] = pending{k0, e, addr}
			touched += live.slots[live.home(e.si, addr)].ref
			nb++
		}
		for _, p := range batch[:nb] {
			k, e, addr := p.k, p.e, p.addr
			i, ok := live.lookup(e.si, addr)
			switch {
			case e.rec < 0 && ok:
				ended[k] = live.slots[i].ref
				live.remove(i)
			case e.rec >= 0 && ok:
				ended[k] = live.slots[i].ref
				live.slots[i].ref = e.rec + 1
			case e.rec >= 0:
				live.insert(i, liveSlot{addr: addr, ref: e.rec + 1, si: e.si})
			}
		}
	}
	matchTouched.Add(touched) // keeps the reads of the home slots
	m.progress(s, ev.len())
}

// matchBatch is how many of its events a shard reads ahead; matchProgress
// about how many events it goes through between two reports of its progress.
const (
	matchBatch    = 16
	matchProgress = 1 << 16
)

// matchTouched is where a shard leaves what it read ahead, so that the
// compiler keeps those reads.
var matchTouched atomic.Int32

// shardOf returns the shard of n (a power of two) that holds a block. Its
// bits come from another multiplier than liveSet.home's, so that the
// blocks of one shard still spread over its whole table.
func shardOf(si uint32, addr uint64, n int) uint64 {
	h := (addr ^ uint64(si)<<48) * 0xc2b2ae3d27d4eb4f
	h ^= h >> 29
	return h * 0x94d049bb133111eb >> 32 & uint64(n-1)
}
