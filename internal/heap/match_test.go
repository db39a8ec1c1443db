package heap

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/heaplens/heaplens/internal/capture"
)

// TestMatchShards matches a churning capture of two streams, with
// addresses reused, frees of blocks never seen and lost frees, in 1, 2 and
// 4 shards, and checks each against a plain map of what is live, whole
// and as far as upTo waited while the shards go on.
func TestMatchShards(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	c := capture.NewCapture()
	c.Meta.Rate = 1
	c.Processes = []*capture.Process{{Stream: 1, PID: 1}, {Stream: 2, PID: 2}}
	for i := range 200_000 {
		stream := uint32(1 + rng.IntN(2))
		addr := 0x1000 + 16*uint64(rng.IntN(5000)) // few addresses: much reuse
		tm := int64(i)
		if rng.IntN(2) == 0 {
			c.Frees = append(c.Frees, capture.Free{Stream: stream, TimeNano: tm, Addr: addr})
			c.FreeOrder = append(c.FreeOrder, int32(len(c.Allocs)))
		} else {
			c.Allocs = append(c.Allocs, capture.Alloc{Stream: stream, TimeNano: tm, Addr: addr, Size: 16})
		}
	}
	ev, streams, _ := events(c, Options{})
	type key struct {
		si   uint32
		addr uint64
	}
	live := map[key]int32{}
	want := make([]int32, ev.len())
	var unmatched, lost int
	for k := range ev.len() {
		e := ev.at(k)
		if e.rec < 0 {
			kk := key{e.si, c.Frees[^e.rec].Addr}
			want[k] = live[kk]
			delete(live, kk)
			if want[k] == 0 {
				unmatched++
			}
			continue
		}
		kk := key{e.si, c.Allocs[e.rec].Addr}
		want[k] = live[kk]
		if want[k] != 0 {
			lost++
		}
		live[kk] = e.rec + 1
	}
	if len(streams) != 2 || unmatched < 1000 || lost < 1000 {
		t.Fatalf("the capture does not test much: %d streams, %d unmatched frees, %d lost", len(streams), unmatched, lost)
	}
	for _, n := range []int{1, 2, 4} {
		if got := matchIn(c, &ev, n); !slices.Equal(got, want) {
			t.Errorf("%d shards: the matching differs from a map's", n)
		}
		// Followed as a replay follows it: what upTo waited for is final.
		m := startMatch(c, &ev, n)
		for k := 0; k < ev.len(); k += 10_007 {
			m.upTo(k)
			if !slices.Equal(m.ended[:k], want[:k]) {
				t.Fatalf("%d shards: after upTo(%d), the matching below differs from a map's", n, k)
			}
		}
		m.upTo(ev.len())
	}
}

// matchIn is match with n shards, waited for.
func matchIn(c *capture.Capture, ev *eventList, n int) []int32 {
	m := startMatch(c, ev, n)
	m.upTo(ev.len())
	return m.ended
}
