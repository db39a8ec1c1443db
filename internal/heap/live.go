package heap

import "unsafe"

// liveSet is the set of live sampled blocks while a replay's events are
// matched (see match), keyed by (stream, address). A replay does one
// lookup per event on a set of up to millions of blocks, so it is an
// open-addressed table with linear probing instead of a Go map: one probe
// usually reads one cache line (a slot is 16 bytes), and deletion shifts
// later slots back instead of leaving tombstones, which the churn of a
// long replay (every block allocated and freed once) would otherwise pile
// up.
type liveSet struct {
	slots []liveSlot // len is a power of two; at most half full
	shift uint       // 64 − log2(len(slots)): hash bits to drop
	n     int        // slots in use
}

// liveSlot is one live block.
type liveSlot struct {
	addr uint64
	ref  int32  // 1 + index in Capture.Allocs; 0 marks an empty slot
	si   uint32 // the stream's index in replayer.streams
}

// minLiveSlots is the size of an empty table. It is small so that tests of
// a few blocks still wrap around the end of the table and shift slots back.
const minLiveSlots = 8

func newLiveSet() liveSet { return newLiveSetFor(0) }

// newLiveSetFor returns an empty table with room for n blocks before it
// grows.
func newLiveSetFor(n int) liveSet {
	size, shift := minLiveSlots, uint(64-3) // 3 = log2(minLiveSlots)
	for size < 2*n {
		size, shift = 2*size, shift-1
	}
	return liveSet{slots: liveSlots(size), shift: shift}
}

// liveSlots makes a table, written to once every page: a fresh page that
// is first read maps the zero page, and then faults again when written,
// with a flush of every core's TLB (6 % of a large report's time).
func liveSlots(n int) []liveSlot {
	s := make([]liveSlot, n)
	const perPage = 4096 / int(unsafe.Sizeof(liveSlot{}))
	for i := 0; i < n; i += perPage {
		s[i].ref = 0
	}
	return s
}

// home returns the slot where a probe for (si, addr) starts. Allocators
// return addresses in strides (16 bytes, a size class, 4 KiB pages) that
// defeat a single multiplication (Fibonacci hashing clusters on 4 KiB
// strides), so the key is multiplied, its high half folded into the low,
// and multiplied again before the top bits are kept. The stream goes in
// high bits that user-space addresses leave zero.
func (t *liveSet) home(si uint32, addr uint64) int {
	h := (addr ^ uint64(si)<<48) * 0xff51afd7ed558ccd
	h ^= h >> 32
	return int(h * 0x9e3779b97f4a7c15 >> t.shift)
}

// lookup returns the slot holding (si, addr) and true, or the empty slot
// where it would go and false.
func (t *liveSet) lookup(si uint32, addr uint64) (int, bool) {
	mask := len(t.slots) - 1
	for i := t.home(si, addr); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.ref == 0 {
			return i, false
		}
		if s.addr == addr && s.si == si {
			return i, true
		}
	}
}

// insert adds a block that lookup did not find; i is the slot lookup
// returned, and is stale if the table grows, so insert looks again then.
func (t *liveSet) insert(i int, s liveSlot) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
		i, _ = t.lookup(s.si, s.addr)
	}
	t.slots[i] = s
	t.n++
}

// grow doubles the table.
func (t *liveSet) grow() {
	old := t.slots
	t.slots = liveSlots(2 * len(old))
	t.shift--
	for _, s := range old {
		if s.ref != 0 {
			i, _ := t.lookup(s.si, s.addr)
			t.slots[i] = s
		}
	}
}

// remove empties slot i. Linear probing needs every block to be reachable
// from its home slot without crossing an empty slot, so each later block of
// the run that the hole would cut off from its home moves into the hole,
// which moves the hole on (Knuth's algorithm R).
func (t *liveSet) remove(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].ref != 0; j = (j + 1) & mask {
		s := &t.slots[j]
		// The block at j may fill the hole at i when i lies on its probe
		// path, [home, j): when i is at least as far back from j as home.
		if (j-t.home(s.si, s.addr))&mask >= (j-i)&mask {
			t.slots[i] = *s
			i = j
		}
	}
	t.slots[i] = liveSlot{}
	t.n--
}

// appendRefs appends the Capture.Allocs index of every live block to dst,
// in table order.
func (t *liveSet) appendRefs(dst []int) []int {
	for i := range t.slots {
		if r := t.slots[i].ref; r != 0 {
			dst = append(dst, int(r-1))
		}
	}
	return dst
}
