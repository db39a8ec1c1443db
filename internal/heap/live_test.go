package heap

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// keysAt returns n distinct addresses of stream index si whose probes all
// start at slot home of an empty table, found by trying addresses in turn.
func keysAt(t *testing.T, si uint32, home, n int) []uint64 {
	t.Helper()
	ls := newLiveSet()
	var out []uint64
	for a := uint64(16); len(out) < n; a += 16 {
		if ls.home(si, a) == home {
			out = append(out, a)
		}
		if a > 1<<24 {
			t.Fatalf("no %d addresses with home %d", n, home)
		}
	}
	return out
}

// put adds or replaces a block the way replayer.step does.
func put(ls *liveSet, si uint32, addr uint64, ref int32) {
	s := liveSlot{addr: addr, ref: ref, si: si}
	if i, ok := ls.lookup(si, addr); ok {
		ls.slots[i] = s
	} else {
		ls.insert(i, s)
	}
}

// del removes a block if present and reports whether it was.
func del(ls *liveSet, si uint32, addr uint64) bool {
	i, ok := ls.lookup(si, addr)
	if ok {
		ls.remove(i)
	}
	return ok
}

// TestLiveSetCollisions fills one probe run that wraps around the end of
// the table (four blocks whose home is the last slot, so they sit in slots
// 7, 0, 1, 2), removes blocks from it, and checks where the others end up
// and that each is still found.
func TestLiveSetCollisions(t *testing.T) {
	last := minLiveSlots - 1
	k := keysAt(t, 0, last, 4)
	other := keysAt(t, 0, 1, 1)[0] // home 1: sits after the run
	tests := []struct {
		name   string
		insert []uint64
		remove []uint64
		want   map[int]uint64 // slot → address; other slots empty
	}{
		{"run wraps", []uint64{k[0], k[1], k[2], k[3]}, nil,
			map[int]uint64{last: k[0], 0: k[1], 1: k[2], 2: k[3]}},
		{"remove head: the run shifts back over the end", []uint64{k[0], k[1], k[2]}, []uint64{k[0]},
			map[int]uint64{last: k[1], 0: k[2]}},
		{"remove middle", []uint64{k[0], k[1], k[2]}, []uint64{k[1]},
			map[int]uint64{last: k[0], 0: k[2]}},
		{"remove tail", []uint64{k[0], k[1], k[2]}, []uint64{k[2]},
			map[int]uint64{last: k[0], 0: k[1]}},
		// other's home is 1, but k[1] and k[2] took slots 0 and 1: it
		// sits at 2. Removing k[0] moves k[1] to 7 and k[2] to 0; other
		// moves to 1, its home, and no further.
		{"a block at its home stops the shift", []uint64{k[0], k[1], k[2], other}, []uint64{k[0]},
			map[int]uint64{last: k[1], 0: k[2], 1: other}},
		{"remove all", []uint64{k[0], k[1]}, []uint64{k[1], k[0]}, map[int]uint64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ls := newLiveSet()
			// Stay at 8 slots (no growth): at most 4 blocks.
			for i, a := range tt.insert {
				put(&ls, 0, a, int32(i+1))
			}
			for _, a := range tt.remove {
				if !del(&ls, 0, a) {
					t.Fatalf("%#x not found", a)
				}
			}
			if len(ls.slots) != minLiveSlots || ls.n != len(tt.want) {
				t.Fatalf("%d slots, %d used; want %d, %d", len(ls.slots), ls.n, minLiveSlots, len(tt.want))
			}
			for i, s := range ls.slots {
				if a, ok := tt.want[i]; ok != (s.ref != 0) || s.addr != a {
					t.Errorf("slot %d = %#x (ref %d), want %#x", i, s.addr, s.ref, a)
				}
			}
			for _, a := range tt.insert {
				_, found := ls.lookup(0, a)
				if want := !slices.Contains(tt.remove, a); found != want {
					t.Errorf("lookup(%#x) = %v, want %v", a, found, want)
				}
			}
		})
	}
}

// TestLiveSetStreams: one address in two streams is two blocks.
func TestLiveSetStreams(t *testing.T) {
	ls := newLiveSet()
	put(&ls, 0, 0x1000, 1)
	put(&ls, 1, 0x1000, 2)
	if ls.n != 2 {
		t.Fatalf("%d blocks, want 2", ls.n)
	}
	if !del(&ls, 1, 0x1000) || del(&ls, 1, 0x1000) {
		t.Error("stream 1's block: want removed once")
	}
	if i, ok := ls.lookup(0, 0x1000); !ok || ls.slots[i].ref != 1 {
		t.Error("stream 0's block lost")
	}
}

// TestLiveSetMatchesMap runs random inserts, replacements and removals over
// a small address space (so that runs collide, grow and shift) against a
// Go map holding the same blocks.
func TestLiveSetMatchesMap(t *testing.T) {
	type key struct {
		si   uint32
		addr uint64
	}
	rng := rand.New(rand.NewPCG(3, 5))
	ls := newLiveSet()
	want := map[key]int32{}
	for op := range 200_000 {
		k := key{uint32(rng.IntN(3)), uint64(rng.IntN(5000)) * 16}
		// Mostly inserts early, mostly removals late: the set grows, then
		// shrinks through every load.
		if rng.IntN(200_000) > op {
			put(&ls, k.si, k.addr, int32(op+1))
			want[k] = int32(op + 1)
		} else {
			_, ok := want[k]
			if got := del(&ls, k.si, k.addr); got != ok {
				t.Fatalf("op %d: remove %v = %v, want %v", op, k, got, ok)
			}
			delete(want, k)
		}
		if op%10_000 == 0 || op == 199_999 {
			if ls.n != len(want) {
				t.Fatalf("op %d: %d blocks, want %d", op, ls.n, len(want))
			}
			for k, ref := range want {
				if i, ok := ls.lookup(k.si, k.addr); !ok || ls.slots[i].ref != ref {
					t.Fatalf("op %d: %v not found with ref %d", op, k, ref)
				}
			}
			refs := ls.appendRefs(nil)
			if len(refs) != len(want) {
				t.Fatalf("op %d: appendRefs gave %d, want %d", op, len(refs), len(want))
			}
		}
	}
	if 2*ls.n > len(ls.slots) {
		t.Errorf("%d blocks in %d slots: more than half full", ls.n, len(ls.slots))
	}
}
