package export

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/stack"
)

// poolCapture: main's stack asked for work that a libgomp worker did; the
// reader stitches the worker's allocation under "[pool: libgomp (openmp)]".
func poolCapture() *capture.Capture {
	c := testCapture()
	c.Mappings[3] = &capture.Mapping{ID: 3, Stream: 1, File: "/usr/lib/libgomp.so.1"}
	c.Locations[20] = &capture.Location{ID: 20, MappingID: 3, Address: 0x7f1000, Lines: []capture.Line{{Function: "gomp_thread_start"}}}
	c.Stacks[4] = &capture.Stack{ID: 4, Locations: []uint64{20}}
	c.Allocs = append(c.Allocs, capture.Alloc{Stream: 1, TID: 9, TimeNano: 4, Addr: 0x50, Size: 5000, StackID: 4,
		Origin: 100<<32 | 1, Method: capture.MethodOpenMP})
	c.Origins = []capture.Origin{{Stream: 1, Token: 100<<32 | 1, TID: 100, StackID: 1}}
	stack.Stitch(c)
	return c
}

func TestPoolAttributionInOutputs(t *testing.T) {
	c := poolCapture()
	p := heap.Allocs(c, heap.Options{})
	var text bytes.Buffer
	if err := Text(&text, c, p, TextOptions{Top: -1}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pools:     pool workers: 4.9 KiB from OpenMP regions (openmp)", "      [pool: libgomp (openmp)]\n      make_node (tree.c:42)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := JSON(&js, c, p, DocOptions{}); err != nil {
		t.Fatal(err)
	}
	var d Doc
	if err := json.Unmarshal(js.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	found := false
	for i, a := range d.Samples.Attribution {
		if a != "openmp" {
			continue
		}
		found = true
		var kinds []string
		for _, f := range d.Stacks[d.Samples.Stack[i]] {
			kinds = append(kinds, d.Frames[f].Kind)
		}
		if got := strings.Join(kinds, ","); got != "native,pool,native,native,native,native" || d.Samples.Bytes[i] != 5000 {
			t.Errorf("openmp row: %d bytes, frame kinds %s", d.Samples.Bytes[i], got)
		}
	}
	if !found || len(d.Samples.Attribution) != len(d.Samples.Bytes) {
		t.Errorf("attribution column %v", d.Samples.Attribution)
	}
	var pb bytes.Buffer
	if err := PProf(&pb, c, p, heap.Leaks(c, heap.Options{})); err != nil {
		t.Fatal(err)
	}
	prof, err := profile.Parse(&pb)
	if err != nil {
		t.Fatal(err)
	}
	labelled := 0
	for _, s := range prof.Sample {
		if a := s.Label["attribution"]; len(a) > 0 {
			labelled++
			if a[0] != "openmp" {
				t.Errorf("attribution label %v", a)
			}
		}
	}
	if labelled != 1 {
		t.Errorf("%d samples labelled with attribution, want 1", labelled)
	}
}
