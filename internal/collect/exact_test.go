package collect

import (
	"math/rand"
	"testing"

	"github.com/heaplens/heaplens/internal/ring"
)

func TestExactBlocks(t *testing.T) {
	const any, py = ring.FuncFreeAny, ring.FuncFreePyMem
	type op struct {
		alloc bool
		addr  uint64
		fn    uint8 // free: its function; alloc: py for a PyMem block
		ends  bool  // free: whether it ends a known block
	}
	for _, tc := range []struct {
		name    string
		ops     []op
		live    int
		ignored uint64
	}{
		{"alloc then free", []op{{true, 0x1000, any, false}, {false, 0x1000, any, true}}, 0, 0},
		{"free of a block never seen", []op{{false, 0x1000, any, false}}, 0, 1},
		{"freed twice", []op{{true, 0x1000, any, false}, {false, 0x1000, any, true}, {false, 0x1000, any, false}}, 0, 1},
		{"a PyMem free of a PyMem block", []op{{true, 0x1000, py, false}, {false, 0x1000, py, true}}, 0, 0},
		// pymalloc hands large requests to malloc: the malloc family's free follows the PyMem one.
		{"a PyMem free of a malloc block", []op{{true, 0x1000, any, false}, {false, 0x1000, py, false}, {false, 0x1000, any, true}}, 0, 0},
		{"a malloc free of a PyMem block", []op{{true, 0x1000, py, false}, {false, 0x1000, any, true}}, 0, 0},
		// A FREE dropped: the next block at the address replaces the stale one, whose later free is not counted twice.
		{"alloc over a live block", []op{{true, 0x1000, any, false}, {true, 0x1000, py, false}, {false, 0x1000, py, true}, {false, 0x1000, any, false}}, 0, 1},
		{"address 0 is never kept", []op{{true, 0, any, false}, {false, 0, any, false}}, 0, 1},
		{"two blocks", []op{{true, 0x1000, any, false}, {true, 0x2000, any, false}, {false, 0x1000, any, true}}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newExactBlocks()
			for i, o := range tc.ops {
				if o.alloc {
					b.alloc(o.addr, o.fn == py)
				} else if got := b.free(o.addr, o.fn); got != o.ends {
					t.Errorf("op %d: free(%#x, %d) = %v, want %v", i, o.addr, o.fn, got, o.ends)
				}
			}
			if b.n != tc.live || b.ignored != tc.ignored {
				t.Errorf("%d live, %d ignored; want %d, %d", b.n, b.ignored, tc.live, tc.ignored)
			}
		})
	}
}

// Many blocks at once, allocated and freed in random order at addresses
// that crowd a few home slots, against a map.
func TestExactBlocksAgainstMap(t *testing.T) {
	b := newExactBlocks()
	model := map[uint64]bool{}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 400000; i++ {
		addr := uint64(rng.Intn(50000)+1) << 4
		if i%3 == 0 {
			addr = uint64(rng.Intn(64)+1) << 20 // the same low bits
		}
		if rng.Intn(2) == 0 {
			b.alloc(addr, false)
			model[addr] = true
			continue
		}
		if got, want := b.free(addr, ring.FuncFreeAny), model[addr]; got != want {
			t.Fatalf("event %d: free(%#x) = %v, want %v", i, addr, got, want)
		}
		delete(model, addr)
	}
	if b.n != len(model) {
		t.Fatalf("%d live, want %d", b.n, len(model))
	}
	for addr := range model {
		if _, ok := b.find(addr); !ok {
			t.Fatalf("%#x lost", addr)
		}
	}
}

// A table that would outgrow its bound stops pairing: every free passes,
// for the reports to pair.
func TestExactBlocksFull(t *testing.T) {
	b := newExactBlocks()
	b.max = 1 << 13
	for a := uint64(1); a <= 1<<12+1; a++ {
		b.alloc(a<<4, false)
	}
	if !b.full {
		t.Fatalf("not full with %d blocks in %d slots at most", b.n, b.max)
	}
	if !b.free(0x10, ring.FuncFreeAny) || !b.free(1<<40, ring.FuncFreeAny) || b.ignored != 0 {
		t.Errorf("a full table must let every free through uncounted (ignored %d)", b.ignored)
	}
}
