package heap

import (
	"testing"

	"github.com/heaplens/heaplens/internal/capture"
)

// The timeline keeps each kind of memory apart: at rate 1, the last point
// of each kind's series is what that kind holds at the end, and the kinds
// add up to the total; a malloc-only capture's malloc series is the total.
func TestTimelineKinds(t *testing.T) {
	mapped := alloc(1, 3, 0x7000, 4096, 2)
	mapped.Func = capture.FuncMmap
	object := alloc(2, 4, 0x30, 48, 3)
	object.Func = capture.FuncPyMemMalloc
	c := synth(1, []capture.Alloc{alloc(1, 1, 0x10, 100, 1), alloc(1, 2, 0x20, 200, 1), mapped, object},
		[]capture.Free{free(1, 5, 0x20), free(1, 6, 0x7000)}, []int32{4, 4})
	tl := TimelineOf(c, Options{})
	last := func(ps []Point) float64 { return ps[len(ps)-1].Bytes }
	peak := func(ps []Point) float64 {
		m := 0.0
		for _, p := range ps {
			m = max(m, p.Bytes)
		}
		return m
	}
	if len(tl.Kinds) != 3 {
		t.Fatalf("%d kind series", len(tl.Kinds))
	}
	if m, p, o := last(tl.Kinds[0]), last(tl.Kinds[1]), last(tl.Kinds[2]); m != 100 || p != 48 || o != 0 || m+p+o != last(tl.Total) {
		t.Errorf("at the end: malloc %v, pymem %v, mmap %v, total %v; want 100, 48, 0, 148", m, p, o, last(tl.Total))
	}
	if got := peak(tl.Kinds[2]); got != 4096 {
		t.Errorf("mmap series peaks at %v, want 4096", got)
	}
	only := synth(1, []capture.Alloc{alloc(1, 1, 0x10, 100, 1)}, nil, nil)
	if tl := TimelineOf(only, Options{}); len(tl.Kinds[0]) != len(tl.Total) || last(tl.Kinds[0]) != 100 || len(tl.Kinds[2]) != 0 {
		t.Errorf("malloc only: kinds %v, total %v", tl.Kinds, tl.Total)
	}
}
