package capture

import (
	"bytes"
	"reflect"
	"testing"
)

// A capture with one origin thread (stack 1: main → submit) and a pool
// worker (stack 2: work ← worker_main in libpool ← start_thread in libc).
func poolCapture() *Capture {
	c := NewCapture()
	c.Mappings[1] = &Mapping{ID: 1, File: "/usr/lib/x86_64-linux-gnu/libc.so.6"}
	c.Mappings[2] = &Mapping{ID: 2, File: "/opt/lib/libpool.so.3"}
	c.Mappings[3] = &Mapping{ID: 3, File: "/usr/bin/app"}
	for id, m := range map[uint64]uint64{10: 3, 11: 3, 20: 2, 21: 2, 22: 1, 23: 1} {
		c.Locations[id] = &Location{ID: id, MappingID: m, Address: 0x1000 + id}
	}
	c.Stacks[1] = &Stack{ID: 1, Locations: []uint64{11, 10}}         // submit ← main
	c.Stacks[2] = &Stack{ID: 2, Locations: []uint64{20, 21, 22, 23}} // work ← worker_main ← start_thread ← clone3
	return c
}

func names(c *Capture, stack uint64) []string {
	var out []string
	for _, id := range c.Stacks[stack].Locations {
		l := c.Locations[id]
		if len(l.Lines) > 0 {
			out = append(out, l.Lines[0].Function)
		} else {
			out = append(out, c.Mappings[l.MappingID].File)
		}
	}
	return out
}

func TestStitch(t *testing.T) {
	const token = 77<<32 | 3
	tests := []struct {
		name    string
		alloc   Alloc
		origins []Origin
		want    []string
		method  uint8
	}{
		{"origin recorded", Alloc{StackID: 2, Origin: token, Method: MethodOpenMP},
			[]Origin{{Token: token, TID: 77, StackID: 1}},
			[]string{"/opt/lib/libpool.so.3", "/opt/lib/libpool.so.3", "[pool: libpool (openmp)]", "/usr/bin/app", "/usr/bin/app"}, MethodOpenMP},
		{"origin of another stream is not used", Alloc{Stream: 1, StackID: 2, Origin: token, Method: MethodAPI},
			[]Origin{{Stream: 2, Token: token, StackID: 1}},
			[]string{"/opt/lib/libpool.so.3", "/opt/lib/libpool.so.3", "[pool: libpool (api)]", "[thread 77: stack not recorded]"}, MethodAPI},
		{"unattributed", Alloc{StackID: 2, Method: MethodUnattributed}, nil,
			[]string{"/opt/lib/libpool.so.3", "/opt/lib/libpool.so.3", "<unattributed: libpool worker>"}, MethodUnattributed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := poolCapture()
			c.Allocs = []Alloc{tt.alloc, {StackID: 1}}
			c.Origins = tt.origins
			c.Stitch()
			c.Stitch() // once only
			a := c.Allocs[0]
			if a.StackID == 2 || c.Stacks[a.StackID] == nil {
				t.Fatalf("not stitched: stack %d", a.StackID)
			}
			if got := names(c, a.StackID); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("stitched stack\n got %q\nwant %q", got, tt.want)
			}
			if m := c.Stacks[a.StackID].Method; m != tt.method {
				t.Errorf("method %d, want %d", m, tt.method)
			}
			if c.Allocs[1].StackID != 1 {
				t.Errorf("a thread's own allocation was restitched to %d", c.Allocs[1].StackID)
			}
			if len(c.Stacks[2].Locations) != 4 {
				t.Errorf("the worker's own stack changed: %v", c.Stacks[2].Locations)
			}
		})
	}
}

// Two allocations of the same worker stack and origin share one stitched stack.
func TestStitchSharesStacks(t *testing.T) {
	c := poolCapture()
	c.Origins = []Origin{{Token: 5, StackID: 1}}
	c.Allocs = []Alloc{{StackID: 2, Origin: 5, Method: MethodFallback}, {StackID: 2, Origin: 5, Method: MethodFallback}}
	c.Stitch()
	if c.Allocs[0].StackID != c.Allocs[1].StackID {
		t.Errorf("stacks %d and %d, want one", c.Allocs[0].StackID, c.Allocs[1].StackID)
	}
}

// Origin records and the Alloc fields appended for pool work survive a
// write and read; ReadAll stitches.
func TestOriginRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	c := poolCapture()
	for _, id := range []uint64{1, 2, 3} {
		write(t, w, c.Mappings[id])
	}
	for _, id := range []uint64{10, 11, 20, 21, 22, 23} {
		write(t, w, c.Locations[id])
	}
	write(t, w, c.Stacks[1])
	write(t, w, c.Stacks[2])
	in := Alloc{Stream: 0, TID: 78, TimeNano: 5, Addr: 0x10, Size: 64, StackID: 2, Func: FuncMalloc, Origin: 77<<32 | 1, Method: MethodOpenMP}
	write(t, w, &in)
	write(t, w, &Origin{Token: 77<<32 | 1, TID: 77, TimeNano: 6, StackID: 1})
	write(t, w, &Alloc{TID: 77, Size: 8, StackID: 1, Func: FuncMalloc})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Origins) != 1 || got.Origins[0] != (Origin{Token: 77<<32 | 1, TID: 77, TimeNano: 6, StackID: 1}) {
		t.Errorf("Origins = %+v", got.Origins)
	}
	a := got.Allocs[0]
	if a.Origin != in.Origin || a.Method != in.Method || a.StackID == 2 || got.Stacks[a.StackID].Method != MethodOpenMP {
		t.Errorf("pool alloc read back as %+v (stack %+v)", a, got.Stacks[a.StackID])
	}
	if b := got.Allocs[1]; b.Origin != 0 || b.Method != MethodSelf || b.StackID != 1 {
		t.Errorf("own alloc read back as %+v", b)
	}
}
