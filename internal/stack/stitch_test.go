package stack

import (
	"bytes"
	"github.com/heaplens/heaplens/internal/capture"
	"reflect"
	"testing"
)

// A capture with one origin thread (stack 1: main → submit) and a pool
// worker (stack 2: work ← worker_main in libpool ← start_thread in libc).
func poolCapture() *capture.Capture {
	c := capture.NewCapture()
	c.Mappings[1] = &capture.Mapping{ID: 1, File: "/usr/lib/x86_64-linux-gnu/libc.so.6"}
	c.Mappings[2] = &capture.Mapping{ID: 2, File: "/opt/lib/libpool.so.3"}
	c.Mappings[3] = &capture.Mapping{ID: 3, File: "/usr/bin/app"}
	for id, m := range map[uint64]uint64{10: 3, 11: 3, 20: 2, 21: 2, 22: 1, 23: 1} {
		c.Locations[id] = &capture.Location{ID: id, MappingID: m, Address: 0x1000 + id}
	}
	c.Stacks[1] = &capture.Stack{ID: 1, Locations: []uint64{11, 10}}         // submit ← main
	c.Stacks[2] = &capture.Stack{ID: 2, Locations: []uint64{20, 21, 22, 23}} // work ← worker_main ← start_thread ← clone3
	return c
}

func names(c *capture.Capture, stack uint64) []string {
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
		alloc   capture.Alloc
		origins []capture.Origin
		want    []string
		method  uint8
	}{
		{"origin recorded", capture.Alloc{StackID: 2, Origin: token, Method: capture.MethodOpenMP},
			[]capture.Origin{{Token: token, TID: 77, StackID: 1}},
			[]string{"/opt/lib/libpool.so.3", "/opt/lib/libpool.so.3", "[pool: libpool (openmp)]", "/usr/bin/app", "/usr/bin/app"}, capture.MethodOpenMP},
		{"origin of another stream is not used", capture.Alloc{Stream: 1, StackID: 2, Origin: token, Method: capture.MethodAPI},
			[]capture.Origin{{Stream: 2, Token: token, StackID: 1}},
			[]string{"/opt/lib/libpool.so.3", "/opt/lib/libpool.so.3", "[pool: libpool (api)]", "[thread 77: stack not recorded]"}, capture.MethodAPI},
		{"unattributed", capture.Alloc{StackID: 2, Method: capture.MethodUnattributed}, nil,
			[]string{"/opt/lib/libpool.so.3", "/opt/lib/libpool.so.3", "<unattributed: libpool worker>"}, capture.MethodUnattributed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := poolCapture()
			c.Allocs = []capture.Alloc{tt.alloc, {StackID: 1}}
			c.Origins = tt.origins
			Stitch(c)
			Stitch(c) // once only
			a := c.Allocs[0]
			if a.StackID == 2 || c.Stacks[a.StackID] == nil {
				t.Fatalf("not stitched: stack %d", a.StackID)
			}
			if got := names(c, a.StackID); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("stitched stack\n got %q\nwant %q", got, tt.want)
			}
			if m := Method(c, a.StackID); m != tt.method {
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
	c.Origins = []capture.Origin{{Token: 5, StackID: 1}}
	c.Allocs = []capture.Alloc{{StackID: 2, Origin: 5, Method: capture.MethodFallback}, {StackID: 2, Origin: 5, Method: capture.MethodFallback}}
	Stitch(c)
	if c.Allocs[0].StackID != c.Allocs[1].StackID {
		t.Errorf("stacks %d and %d, want one", c.Allocs[0].StackID, c.Allocs[1].StackID)
	}
}

// Pool work read back from a file is stitched by Stitch, not by reading:
// ReadAll leaves the worker's stack on the allocation.
func TestStitchAfterRead(t *testing.T) {
	var buf bytes.Buffer
	w, err := capture.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	c := poolCapture()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []uint64{1, 2, 3} {
		must(w.Mapping(c.Mappings[id]))
	}
	for _, id := range []uint64{10, 11, 20, 21, 22, 23} {
		must(w.Location(c.Locations[id]))
	}
	must(w.Stack(c.Stacks[1]))
	must(w.Stack(c.Stacks[2]))
	must(w.Alloc(&capture.Alloc{TID: 78, Size: 64, StackID: 2, Func: capture.FuncMalloc, Origin: 77<<32 | 1, Method: capture.MethodOpenMP}))
	must(w.Origin(&capture.Origin{Token: 77<<32 | 1, TID: 77, TimeNano: 6, StackID: 1}))
	must(w.Alloc(&capture.Alloc{TID: 77, Size: 8, StackID: 1, Func: capture.FuncMalloc}))
	must(w.Close())
	got, err := capture.ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got.Allocs[0].StackID != 2 || got.Stitched {
		t.Fatalf("ReadAll stitched: stack %d", got.Allocs[0].StackID)
	}
	Stitch(got)
	a := got.Allocs[0]
	if a.StackID == 2 || Method(got, a.StackID) != capture.MethodOpenMP {
		t.Errorf("pool alloc stitched to stack %d, method %d", a.StackID, Method(got, a.StackID))
	}
	if b := got.Allocs[1]; b.StackID != 1 || Method(got, b.StackID) != capture.MethodSelf {
		t.Errorf("own alloc: stack %d, method %d", b.StackID, Method(got, b.StackID))
	}
}
