package collect

import (
	"slices"
	"testing"
)

// A stack's hash is the same whether its outer Locations' hashes come from
// a parent or are computed, and every stack of up to 5 Locations from an
// alphabet of 4 (0 included: order, repeats and length all matter) has its
// own.
func TestStackHash(t *testing.T) {
	k := newStackSeeds()
	seen := map[stackHash][]uint64{}
	var all [][]uint64
	var gen func(prefix []uint64)
	gen = func(prefix []uint64) {
		all = append(all, append([]uint64(nil), prefix...))
		if len(prefix) == 5 {
			return
		}
		for l := range uint64(4) {
			gen(append(prefix, l))
		}
	}
	gen(nil)
	sufs := make([][]stackHash, len(all))
	for i, locs := range all {
		suf := make([]stackHash, len(locs))
		h := k.suffixes(suf, locs, nil, 0)
		if other, ok := seen[h]; ok {
			t.Fatalf("%v and %v have the same hash", locs, other)
		}
		seen[h] = locs
		sufs[i] = suf
	}
	for i, locs := range all {
		for j, p := range all {
			if len(p) > 3 {
				continue
			}
			n := sharedOuter(locs, p)
			suf := make([]stackHash, len(locs))
			if h := k.suffixes(suf, locs, sufs[j], n); !slices.Equal(suf, sufs[i]) {
				t.Fatalf("%v on parent %v (%d shared): hash %x, suffixes %x, want %x", locs, p, n, h, suf, sufs[i])
			}
		}
	}
	if len(seen) != 1365 {
		t.Errorf("%d stacks, want 1365", len(seen))
	}
}

// stackIndex tells hashes apart by both lanes: two sharing the first keep
// their own IDs.
func TestStackIndex(t *testing.T) {
	x := newStackIndex()
	put := func(h stackHash, id uint64) {
		if _, ok, taken := x.get(h); !ok {
			x.put(h, id, taken)
		}
	}
	a, b, c := stackHash{1, 2}, stackHash{1, 3}, stackHash{4, 2}
	put(a, 10)
	if _, ok, _ := x.get(b); ok {
		t.Fatal("found a hash never put that shares the first lane")
	}
	put(b, 11)
	put(c, 12)
	put(a, 13) // found: keeps its ID
	for h, want := range map[stackHash]uint64{a: 10, b: 11, c: 12} {
		if id, ok, _ := x.get(h); !ok || id != want {
			t.Errorf("get(%x) = %d, %v; want %d", h, id, ok, want)
		}
	}
	if _, ok, _ := x.get(stackHash{1, 4}); ok {
		t.Error("found a hash never put")
	}
}
