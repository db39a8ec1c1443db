package collect

import (
	"fmt"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/ring"
)

// exactBlocks are the live blocks of a stream in exact mode
// (ring.FlagExactFrees: preloaded at --rate 1), where the library keeps no
// set of sampled blocks and sends every free: the agent keeps the blocks it
// saw allocated, and writes a free to the capture only when it ends one.
// A free of any other block (allocated before the library started, by the
// library itself, by the parent of a fork child, or whose ALLOC was
// dropped) is counted and left out. docs/ring-format.md, "Exact mode".
//
// An open-addressed table of addresses, linear probing, deletion by
// backward shift (no tombstones): one or two cache lines an event, where a
// Go map costs several (py_churn writes 10 M events a minute).
type exactBlocks struct {
	slots   []uint64 // address | pymemBit; 0 empty
	n       int
	shift   uint   // 64 - log2(len(slots))
	ignored uint64 // frees of blocks never seen allocated
	// full: the table reached maxExactSlots. From then on every free goes
	// to the capture, whose replay pairs frees with allocations too and
	// ignores the rest (heap.match); only the count of ignored frees is
	// lost.
	full bool
	max  int // maxExactSlots, but in tests
}

// pymemBit marks a block allocated through a PyMem domain. Addresses are
// user-space ones, below 2^57.
const pymemBit = 1 << 63

// maxExactSlots bounds the table (8 bytes a slot, half of them used at
// most: 16 M live blocks), as a ring may hold anything.
const maxExactSlots = 1 << 25

func newExactBlocks() *exactBlocks {
	const bits = 12
	return &exactBlocks{slots: make([]uint64, 1<<bits), shift: 64 - bits, max: maxExactSlots}
}

// home keeps neighbours together: the 64 16-byte granules of a KiB of
// address space take 64 consecutive slots (8 cache lines), at a place
// hashed from the KiB's address. An allocator hands out neighbouring
// blocks one after another (pymalloc's pools, a heap's top), and a block
// freed is reused soon: their events then touch lines already cached,
// where a hash of the whole address missed the cache at every one (16 %
// of py_churn's tree CPU at --rate 1, as much as the target's set).
func (b *exactBlocks) home(addr uint64) int {
	return int((addr>>10*0x9e3779b97f4a7c15)>>b.shift&^63 | addr>>4&63)
}

// find returns addr's slot, or the empty slot where it would go.
func (b *exactBlocks) find(addr uint64) (int, bool) {
	mask := len(b.slots) - 1
	for i := b.home(addr); ; i = (i + 1) & mask {
		switch e := b.slots[i]; {
		case e == 0:
			return i, false
		case e&^pymemBit == addr:
			return i, true
		}
	}
}

// alloc notes a block allocated at addr; one already there is replaced
// (its free was lost: dropped, or never sent).
func (b *exactBlocks) alloc(addr uint64, pymem bool) {
	if addr == 0 || addr&pymemBit != 0 || b.full {
		return
	}
	e := addr
	if pymem {
		e |= pymemBit
	}
	i, ok := b.find(addr)
	b.slots[i] = e
	if ok {
		return
	}
	if b.n++; 2*b.n > len(b.slots) {
		b.grow()
	}
}

func (b *exactBlocks) grow() {
	if 2*len(b.slots) > b.max {
		b.full, b.slots, b.n = true, nil, 0
		return
	}
	old := b.slots
	b.slots, b.shift = make([]uint64, 2*len(old)), b.shift-1
	for _, e := range old {
		if e != 0 {
			i, _ := b.find(e &^ pymemBit)
			b.slots[i] = e
		}
	}
}

// free says whether a FREE record (FuncFreeAny, FuncFreePyMem) ends a block
// the agent knows, and forgets that block. A free through a PyMem domain
// of a block the malloc family allocated (pymalloc hands requests over 512
// bytes to malloc) ends nothing: the free of the malloc family that
// pymalloc calls next does.
func (b *exactBlocks) free(addr uint64, fn uint8) bool {
	if b.full {
		return true
	}
	i, ok := b.find(addr)
	if !ok {
		b.ignored++
		return false
	}
	if fn == ring.FuncFreePyMem && b.slots[i]&pymemBit == 0 {
		return false
	}
	b.remove(i)
	return true
}

// remove empties slot i and moves back the entries after it that a probe
// would no longer reach.
func (b *exactBlocks) remove(i int) {
	mask := len(b.slots) - 1
	for j := (i + 1) & mask; b.slots[j] != 0; j = (j + 1) & mask {
		// j's entry may fill the hole at i if its home is not in (i, j].
		if h := b.home(b.slots[j] &^ pymemBit); (j-h)&mask >= (j-i)&mask {
			b.slots[i], i = b.slots[j], j
		}
	}
	b.slots[i] = 0
	b.n--
}

// exactNote says, at a stream's end, how many frees it left out.
func (c *Collector) exactNote(s *stream) {
	if x := s.exact; x.ignored > 0 && c.w != nil { // for reports, not a warning: every process has some
		c.w.Note(&capture.Note{Stream: s.id, Text: fmt.Sprintf(
			"pid %d: %d frees of blocks heaplens never saw allocated were left out "+
				"(allocated before it started, by the parent before a fork, or not recorded: the ring was full)",
			s.hdr.PID, x.ignored)})
	}
	if s.exact.full {
		c.warn("pid %d: over %d blocks were live at once: from then on its frees were paired by the reports, not the agent, "+
			"and frees of blocks never seen allocated were not counted", s.hdr.PID, maxExactSlots/2)
	}
}
