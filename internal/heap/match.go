package heap

import (
	"runtime"
	"sync"

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
func match(c *capture.Capture, ev *eventList) []int32 {
	return matchIn(c, ev, matchShards(ev.len()))
}

// matchIn is match with n shards, a power of two.
func matchIn(c *capture.Capture, ev *eventList, n int) []int32 {
	ended := make([]int32, ev.len())
	var wg sync.WaitGroup
	for s := range n {
		wg.Go(func() { matchShard(c, ev, ended, uint64(s), n) })
	}
	wg.Wait()
	return ended
}

// matchShards is the number of shards for a replay of n events: 1 below a
// million events, where starting goroutines would cost more than it saves,
// else one per processor, a power of two, at most 4.
func matchShards(n int) int {
	if n < 1<<20 {
		return 1
	}
	s := 1
	for s*2 <= min(runtime.GOMAXPROCS(0), 4) {
		s *= 2
	}
	return s
}

// matchShard matches the events whose block falls in shard s of n; the
// shards write disjoint elements of ended.
func matchShard(c *capture.Capture, ev *eventList, ended []int32, s uint64, n int) {
	live := newLiveSet()
	for k := range ev.len() {
		e := ev.at(k)
		var addr uint64
		if e.rec < 0 {
			addr = c.Frees[^e.rec].Addr
		} else {
			addr = c.Allocs[e.rec].Addr
		}
		if n > 1 && shardOf(e.si, addr, n) != s {
			continue
		}
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

// shardOf returns the shard of n (a power of two) that holds a block. Its
// bits come from another multiplier than liveSet.home's, so that the
// blocks of one shard still spread over its whole table.
func shardOf(si uint32, addr uint64, n int) uint64 {
	h := (addr ^ uint64(si)<<48) * 0xc2b2ae3d27d4eb4f
	h ^= h >> 29
	return h * 0x94d049bb133111eb >> 32 & uint64(n-1)
}
