package capture

import (
	"reflect"
	"testing"
)

func TestWindow(t *testing.T) {
	c := NewCapture()
	// File order: a0 f0 a1 a2 f1 a3 f2 (times in the names' order, 10 apart).
	c.Allocs = []Alloc{{TimeNano: 0, Addr: 1}, {TimeNano: 20, Addr: 2}, {TimeNano: 30, Addr: 3}, {TimeNano: 50, Addr: 4}}
	c.Frees = []Free{{TimeNano: 10, Addr: 1}, {TimeNano: 40, Addr: 2}, {TimeNano: 60, Addr: 4}}
	c.FreeOrder = []int32{1, 3, 4}
	c.RSS = []RSS{{TimeNano: 5}, {TimeNano: 25}}
	c.Ends[1] = &End{Stream: 1, TimeNano: 35}
	c.Ends[2] = &End{Stream: 2, TimeNano: 70}
	tests := []struct {
		from, until int64
		allocs      []uint64 // addresses
		frees       []uint64
		order       []int32
		rss         int
		ends        int
	}{
		{0, 100, []uint64{1, 2, 3, 4}, []uint64{1, 2, 4}, []int32{1, 3, 4}, 2, 2},
		{15, 45, []uint64{2, 3}, []uint64{2}, []int32{2}, 1, 1},
		{45, 65, []uint64{4}, []uint64{4}, []int32{1}, 0, 1},
		{11, 19, nil, nil, nil, 0, 0},
	}
	for _, tt := range tests {
		w := c.Window(tt.from, tt.until)
		var allocs, frees []uint64
		for _, a := range w.Allocs {
			allocs = append(allocs, a.Addr)
		}
		for _, f := range w.Frees {
			frees = append(frees, f.Addr)
		}
		if !reflect.DeepEqual(allocs, tt.allocs) || !reflect.DeepEqual(frees, tt.frees) ||
			!reflect.DeepEqual(w.FreeOrder, tt.order) || len(w.RSS) != tt.rss || len(w.Ends) != tt.ends {
			t.Errorf("Window(%d, %d): allocs %v frees %v order %v, %d RSS, %d ends; want %v %v %v, %d, %d",
				tt.from, tt.until, allocs, frees, w.FreeOrder, len(w.RSS), len(w.Ends), tt.allocs, tt.frees, tt.order, tt.rss, tt.ends)
		}
	}
	if len(c.Allocs) != 4 || len(c.Frees) != 3 {
		t.Error("Window changed the capture")
	}
}
