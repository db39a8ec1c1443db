package diff

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
)

// run builds a capture of one process whose stack i has the given leaf
// function, called from main at line 10+i, with pcs shifted by shift (ASLR)
// and lines by lineShift (an edit above the functions).
func run(shift uint64, lineShift int, leaves ...string) *capture.Capture {
	c := &capture.Capture{
		Meta:      capture.Meta{Rate: 1024, Command: []string{"prog"}},
		Processes: []*capture.Process{{Stream: 1, PID: 100}},
		Mappings:  map[uint64]*capture.Mapping{1: {ID: 1, Stream: 1, Start: 0x1000 + shift, Limit: 0x9000 + shift, File: "/build/a/prog"}},
		Locations: map[uint64]*capture.Location{},
		Stacks:    map[uint64]*capture.Stack{},
	}
	for i, leaf := range leaves {
		id := uint64(10 * (i + 1))
		if leaf == "" { // an unsymbolized frame in the module
			c.Locations[id] = &capture.Location{ID: id, MappingID: 1, Address: 0x2000 + shift + uint64(i)}
		} else {
			c.Locations[id] = &capture.Location{ID: id, MappingID: 1, Address: 0x2000 + shift + uint64(i),
				Lines: []capture.Line{{Function: leaf, File: "/build/a/src/prog.c", Line: 40 + lineShift}}}
		}
		c.Locations[id+1] = &capture.Location{ID: id + 1, MappingID: 1, Address: 0x3000 + shift + uint64(i),
			Lines: []capture.Line{{Function: "main", File: "/build/a/src/prog.c", Line: 10 + i + lineShift}}}
		c.Stacks[id] = &capture.Stack{ID: id, Locations: []uint64{id, id + 1}}
	}
	return c
}

func prof(view string, samples ...heap.Sample) *heap.Profile {
	p := &heap.Profile{View: view, Rate: 1024, Samples: samples}
	for _, s := range samples {
		p.TotalBytes += s.Bytes
		p.TotalVar += s.Var
	}
	return p
}

func TestKeyIgnoresAddressesLinesAndCheckouts(t *testing.T) {
	a := run(0, 0, "grow", "")
	b := run(0x7f0000000000, 5, "grow", "")
	b.Mappings[1].File = "/other/checkout/prog"
	for _, id := range []uint64{10, 20} {
		if ka, kb := Key(a, id), Key(b, id); ka != kb {
			t.Errorf("stack %d: keys differ across runs:\n%q\n%q", id, ka, kb)
		}
	}
	if Key(a, 10) == Key(a, 20) {
		t.Error("different functions have one key")
	}
	if got, want := Key(a, 20), "prog+0x1001\nmain (src/prog.c)\n"; got != want {
		t.Errorf("unsymbolized frame: key %q, want %q", got, want)
	}
	if got := Key(a, 999); got != "?" {
		t.Errorf("dangling stack: key %q", got)
	}
}

func TestCompare(t *testing.T) {
	bc := run(0, 0, "steady", "grows", "gone")
	nc := run(0x1000000, 3, "steady", "grows", "fresh")
	// Two processes of the new run share the "grows" site: it sums them.
	nc.Processes = append(nc.Processes, &capture.Process{Stream: 2, PID: 101})
	base := prof("leaks",
		heap.Sample{Stream: 1, StackID: 10, Bytes: 1000, Var: 100, Count: 5},
		heap.Sample{Stream: 1, StackID: 20, Bytes: 1000, Var: 100, Count: 5},
		heap.Sample{Stream: 1, StackID: 30, Bytes: 5000, Var: 400, Count: 9},
	)
	next := prof("leaks",
		heap.Sample{Stream: 1, StackID: 10, Bytes: 1010, Var: 100, Count: 5},
		heap.Sample{Stream: 1, StackID: 20, Bytes: 1500, Var: 100, Count: 6},
		heap.Sample{Stream: 2, StackID: 20, Bytes: 1500, Var: 100, Count: 6},
		heap.Sample{Stream: 1, StackID: 30, Bytes: 3, Var: 1, Count: 1}, // "fresh": tiny and noisy
	)
	r := Compare(bc, base, nc, next)
	if len(r.Sites) != 4 {
		t.Fatalf("%d sites, want steady, grows, gone, fresh", len(r.Sites))
	}
	if r.Z != Z(4) {
		t.Errorf("Z = %v, want Z(4) = %v", r.Z, Z(4))
	}
	byLeaf := map[string]*Site{}
	for _, s := range r.Sites {
		byLeaf[strings.Fields(s.Frames[0])[0]] = s
	}
	tests := []struct {
		leaf         string
		delta        float64
		variance     float64 // of the difference: 2·max of the sides
		grown, shrnk bool
	}{
		{"steady", 10, 200, false, false},
		{"grows", 2000, 400, true, false},
		{"gone", -5000, 800, false, true},
		{"fresh", 3, 2, false, false},
	}
	for _, tc := range tests {
		s := byLeaf[tc.leaf]
		if s == nil {
			t.Errorf("no site %s", tc.leaf)
			continue
		}
		if s.Delta() != tc.delta {
			t.Errorf("%s: delta %v, want %v", tc.leaf, s.Delta(), tc.delta)
		}
		if m, want := s.Margin(r.Z), r.Z*math.Sqrt(tc.variance); math.Abs(m-want) > 1e-9 {
			t.Errorf("%s: margin %v, want %v", tc.leaf, m, want)
		}
		if got := contains(r.Grown(0), s); got != tc.grown {
			t.Errorf("%s: grown = %v, want %v", tc.leaf, got, tc.grown)
		}
		if got := contains(r.Shrunk(), s); got != tc.shrnk {
			t.Errorf("%s: shrunk = %v, want %v", tc.leaf, got, tc.shrnk)
		}
	}
	if g := byLeaf["grows"]; g.New.Count != 12 || !strings.Contains(g.Frames[1], ":14)") {
		t.Errorf("grows: %d new samples, frames %v; want 12 from both processes, labelled from the new run", g.New.Count, g.Frames)
	}
	if r.Sites[0] != byLeaf["grows"] || r.Sites[3] != byLeaf["gone"] {
		t.Error("sites are not ordered by growth")
	}
	// --fail-over: growth of 2000 ± ~49 exceeds 1000 beyond its interval, not 1990.
	if len(r.Grown(1000)) != 1 || len(r.Grown(1990)) != 0 {
		t.Errorf("Grown(1000) = %d sites, Grown(1990) = %d; want 1 and 0", len(r.Grown(1000)), len(r.Grown(1990)))
	}
}

func contains(list []*Site, s *Site) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestZ(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want float64
	}{{0, 1.960}, {1, 1.960}, {4, 2.498}, {100, 3.481}, {10000, 4.565}} {
		if got := Z(tc.n); math.Abs(got-tc.want) > 0.001 {
			t.Errorf("Z(%d) = %.4f, want %.3f", tc.n, got, tc.want)
		}
	}
}

func TestWriters(t *testing.T) {
	bc, nc := run(0, 0, "grows"), run(0, 0, "grows")
	r := Compare(bc, prof("allocs", heap.Sample{Stream: 1, StackID: 10, Bytes: 1 << 20, Var: 1 << 20, Count: 50}),
		nc, prof("allocs", heap.Sample{Stream: 1, StackID: 10, Bytes: 3 << 20, Var: 3 << 20, Count: 150}))
	b, n := Run{Path: "a.hlc", Command: []string{"prog"}}, Run{Path: "b.hlc"}
	var txt bytes.Buffer
	if err := Text(&txt, b, n, []*Result{r}, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"base: a.hlc  (prog)", "new:  b.hlc  (unknown command)", "== allocs ==", "grown: 1 site", "+2.0 MiB", "1.0 MiB → 3.0 MiB  (50 → 150 samples)", "      grows (prog.c:40)", "shrunk: none"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, txt.String())
		}
	}
	var js bytes.Buffer
	if err := JSON(&js, b, n, []*Result{r}); err != nil {
		t.Fatal(err)
	}
	var doc jsonDoc
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	s := doc.Views[0].Sites[0]
	if s.Change != "grown" || s.Delta != 2<<20 || s.New.Samples != 150 || s.Frames[0] != "grows (prog.c:40)" {
		t.Errorf("JSON site: %+v", s)
	}
}
