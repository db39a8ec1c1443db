package collect

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/ring"
)

type testModule struct {
	path string
	bias uint64
}

// Modules of the test process: each has one executable segment of 0x1000
// bytes at its bias. The paths do not exist, so nothing is symbolized.
var testModules = []testModule{
	{"/test/prog", 0x10000},
	{"/test/liba.so", 0x20000},
	{"/test/libb.so", 0x30000},
	{"/test/libheaplens.so", 0x40000}, // the collector's own library
	{"/test/libunused.so", 0x50000},
}

const testSelf = "/test/libheaplens.so"

// collected is what a test capture holds.
type collected struct {
	capt        *capture.Capture
	mappingFile []string // files of the Mapping records, in record order
	early       []uint64 // Locations read before the Mapping they name
	badRefs     uint64   // ALLOCs that named a stack never sent
}

// collectStacks runs the modules and one ALLOC per stack of frames through
// a Collector and reads the capture back.
func collectStacks(t *testing.T, stacks [][]uint64) collected {
	t.Helper()
	var recs []*ring.Record
	for i, frames := range stacks {
		recs = append(recs, &ring.Record{Type: ring.RecAlloc, TID: 7, TimeNano: int64(100 + i), Addr: 0x9000 + uint64(i)*16,
			Size: 16, Func: capture.FuncMalloc, Frames: frames})
	}
	return collectRecords(t, recs)
}

// collectRecords runs the modules and recs (ALLOC and STACK records)
// through a Collector and reads the capture back.
func collectRecords(t *testing.T, recs []*ring.Record) collected {
	t.Helper()
	s := newStream("", nil, ring.Header{})
	s.id = 1
	return collectStream(t, s, recs)
}

// collectStream is collectRecords on a given stream, which may run Python:
// CODE records go to it too.
func collectStream(t *testing.T, s *stream, recs []*ring.Record) collected {
	t.Helper()
	var buf bytes.Buffer
	w, err := capture.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	c := New(t.TempDir(), testSelf, w)
	defer c.syms.Close()
	if err := w.Process(&capture.Process{Stream: 1, PID: 42}); err != nil {
		t.Fatal(err)
	}
	for i, m := range testModules {
		rec := &ring.Record{Type: ring.RecModule, TimeNano: int64(i + 1), Path: m.path, Bias: m.bias,
			Segments: []ring.Segment{{Vaddr: 0, Memsz: 0x1000, Flags: 1}}}
		if err := c.module(s, rec); err != nil {
			t.Fatal(err)
		}
	}
	for _, rec := range recs {
		var err error
		switch rec.Type {
		case ring.RecStack:
			err = c.stackRecord(s, rec)
		case ring.RecCode:
			c.code(s, rec.Code)
		default:
			err = c.alloc(s, rec)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	got := collected{badRefs: s.badRefs}
	r, err := capture.NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	read := map[uint64]bool{}
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch rec.Type {
		case capture.RecMapping:
			read[rec.Mapping.ID] = true
			got.mappingFile = append(got.mappingFile, rec.Mapping.File)
		case capture.RecLocation:
			if id := rec.Location.MappingID; id != 0 && !read[id] {
				got.early = append(got.early, rec.Location.ID)
			}
		}
	}
	if got.capt, err = capture.ReadAll(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestMappingsOnlyWhenReferenced checks that a module's Mapping is written
// once, before the first Location in it, and never for modules that no
// written Location names (unsampled ones and the library's own).
func TestMappingsOnlyWhenReferenced(t *testing.T) {
	// pc returns a return address inside module i.
	pc := func(i int, off uint64) uint64 { return testModules[i].bias + off }
	tests := []struct {
		name      string
		stacks    [][]uint64
		mappings  []string // Mapping files in record order
		locations int
	}{
		{"no samples", nil, nil, 0},
		{"one module", [][]uint64{{pc(0, 0x100), pc(0, 0x200)}}, []string{"/test/prog"}, 2},
		{"first use order, each once",
			[][]uint64{{pc(2, 0x10), pc(0, 0x20)}, {pc(1, 0x30), pc(0, 0x20)}, {pc(2, 0x40)}},
			[]string{"/test/libb.so", "/test/prog", "/test/liba.so"}, 4},
		{"own library left out", [][]uint64{{pc(3, 0x10), pc(3, 0x20), pc(1, 0x30)}}, []string{"/test/liba.so"}, 1},
		{"pc outside every module", [][]uint64{{0x7000_0000, pc(0, 0x10)}}, []string{"/test/prog"}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := collectStacks(t, tc.stacks)
			if !slices.Equal(got.mappingFile, tc.mappings) {
				t.Errorf("Mapping records %q, want %q", got.mappingFile, tc.mappings)
			}
			if len(got.early) > 0 {
				t.Errorf("locations %v come before their Mapping", got.early)
			}
			if n := len(got.capt.Locations); n != tc.locations {
				t.Errorf("%d locations, want %d", n, tc.locations)
			}
			if probs := got.capt.Check(); len(probs) > 0 {
				t.Errorf("capture problems: %q", probs)
			}
			// The IDs and times are those given when the module was seen.
			for _, m := range got.capt.Mappings {
				i := slices.IndexFunc(testModules, func(tm testModule) bool { return tm.path == m.File })
				if m.TimeNano != int64(i+1) || m.LoadBias != testModules[i].bias || m.Start != testModules[i].bias {
					t.Errorf("mapping %q: time %d, bias %#x, start %#x; want %d, %#x, %#x",
						m.File, m.TimeNano, m.LoadBias, m.Start, i+1, testModules[i].bias, testModules[i].bias)
				}
			}
		})
	}
}

// ALLOCs that name a STACK record by its ref get that record's stack: the
// same stack, with the same ID, as an ALLOC that carries those frames
// itself; one that names a ref never sent is left out and counted.
func TestStackRefs(t *testing.T) {
	pc := func(i int, off uint64) uint64 { return testModules[i].bias + off }
	frames := []uint64{pc(1, 0x30), pc(0, 0x20)}
	alloc := func(i int) *ring.Record {
		return &ring.Record{Type: ring.RecAlloc, TID: 7, TimeNano: int64(100 + i), Addr: 0x9000 + uint64(i)*16, Size: 16, Func: capture.FuncMalloc}
	}
	recs := []*ring.Record{{Type: ring.RecStack, Ref: 5, Frames: frames}}
	for i := range 3 {
		a := alloc(i)
		a.Ref, a.HasRef = 5, true
		recs = append(recs, a)
	}
	inline := alloc(3)
	inline.Frames = frames
	unknown := alloc(4)
	unknown.Ref, unknown.HasRef = 6, true
	recs = append(recs, inline, unknown)

	// Before any STACK record, too.
	first := alloc(5)
	first.Ref, first.HasRef = 5, true
	recs = append([]*ring.Record{first}, recs...)

	// The slot's next generation holds another stack; an ALLOC reserved
	// before it names the generation before, one after the new one, one of
	// two generations ago nothing.
	other := []uint64{pc(2, 0x40)}
	recs = append(recs, &ring.Record{Type: ring.RecStack, Ref: 5 | 1<<14, Frames: other})
	late, next := alloc(6), alloc(7)
	late.Ref, late.HasRef = 5, true
	next.Ref, next.HasRef = 5|1<<14, true
	recs = append(recs, late, next, &ring.Record{Type: ring.RecStack, Ref: 5 | 2<<14, Frames: frames})
	stale := alloc(8)
	stale.Ref, stale.HasRef = 5, true
	recs = append(recs, stale)

	got := collectRecords(t, recs)
	if n := len(got.capt.Allocs); n != 6 || got.badRefs != 3 {
		t.Fatalf("%d allocations, %d naming an unknown stack; want 6 and 3", n, got.badRefs)
	}
	if len(got.capt.Stacks) != 2 || len(got.capt.Locations) != 3 {
		t.Errorf("%d stacks and %d locations, want 2 stacks of 3 locations", len(got.capt.Stacks), len(got.capt.Locations))
	}
	want := got.capt.Allocs[0].StackID
	for _, a := range got.capt.Allocs {
		if a.Addr == next.Addr { // the slot's second stack: one frame
			if st := got.capt.Stacks[a.StackID]; a.StackID == want || st == nil || len(st.Locations) != 1 {
				t.Errorf("allocation naming the second generation has stack %d (%v), want the one-frame stack", a.StackID, st)
			}
		} else if a.StackID != want || want == 0 {
			t.Errorf("allocation at %#x has stack %d, want %d", a.Addr, a.StackID, want)
		}
	}
}

// Python frames get their function and line from their code object's CODE
// record: a frame seen before it is named "<unknown Python code>" and, once
// the code is known, the same position gets its name and line. Stacks that
// share their native frames and differ in Python positions are each merged
// with their own lines.
func TestPythonFramesByPosition(t *testing.T) {
	pc := func(i int, off uint64) uint64 { return testModules[i].bias + off }
	native := []uint64{pc(1, 0x30), pc(0, 0x20)}
	alloc := func(i int, frames []uint64, pos int64) *ring.Record {
		return &ring.Record{Type: ring.RecAlloc, TID: 7, TimeNano: int64(100 + i), Addr: 0x9000 + uint64(i)*16, Size: 16,
			Func: capture.FuncMalloc, Frames: frames, Py: []ring.PyFrame{{Code: 0xc0de, Identity: 9, Pos: pos, ActivationEnd: true}}}
	}
	// Python 3.8: byte offsets 0-9 are line 100, 10-19 line 101, 20 on line 102.
	code := &ring.Record{Type: ring.RecCode, Code: &ring.Code{Addr: 0xc0de, Identity: 9, FirstLine: 100, Minor: 8,
		FileKind: 1, File: []byte("app.py"), NameKind: 1, Name: []byte("work"), Table: []byte{10, 1, 10, 1}}}
	recs := []*ring.Record{alloc(0, native, 4), code, alloc(1, native, 4), alloc(2, native, 12), alloc(3, native, 25),
		alloc(4, native, 6), alloc(5, []uint64{pc(2, 0x40), pc(0, 0x20)}, 14)}
	s := newStream("", nil, ring.Header{})
	s.id = 1
	s.py = &pyStream{codes: map[codeKey]*pyCode{}, locs: map[pyLocKey]uint64{}}
	got := collectStream(t, s, recs)
	if len(got.capt.Allocs) != len(recs)-1 {
		t.Fatalf("%d allocations, want %d", len(got.capt.Allocs), len(recs)-1)
	}
	want := []struct {
		frames int    // native frames before the Python one (no eval frame: Python goes to the bottom)
		py     string // the Python frame
	}{{2, "<unknown Python code>:0"}, {2, "work:100"}, {2, "work:101"}, {2, "work:102"}, {2, "work:100"}, {2, "work:101"}}
	for i, a := range got.capt.Allocs {
		st := got.capt.Stacks[a.StackID]
		if st == nil || len(st.Locations) != want[i].frames+1 {
			t.Errorf("allocation %d: stack %v, want %d native frames and a Python one", i, st, want[i].frames)
			continue
		}
		loc := got.capt.Locations[st.Locations[len(st.Locations)-1]]
		if loc == nil || len(loc.Lines) != 1 {
			t.Errorf("allocation %d: Python location %v", i, loc)
			continue
		}
		if py := fmt.Sprintf("%s:%d", loc.Lines[0].Function, loc.Lines[0].Line); py != want[i].py {
			t.Errorf("allocation %d: Python frame %s, want %s", i, py, want[i].py)
		}
	}
	if a := got.capt.Allocs; a[1].StackID != a[4].StackID || a[0].StackID == a[1].StackID {
		t.Errorf("stacks %d, %d, %d: want positions 4 and 6 (line 100) in one stack, apart from the unknown code's",
			a[0].StackID, a[1].StackID, a[4].StackID)
	}
}

// A native part not seen before takes the outer frames it shares with the
// previous one from it: every ALLOC still gets exactly its own frames'
// addresses, innermost first, the library's own left out, whether its stack
// is deeper, shallower, shares nothing or is the same as the one before.
func TestNativeFramesReuseOuter(t *testing.T) {
	pc := func(i int, off uint64) uint64 { return testModules[i].bias + off }
	self := pc(3, 0x10)
	outer := []uint64{pc(1, 0x30), pc(0, 0x20), pc(0, 0x10)}
	stacks := [][]uint64{
		append([]uint64{self, pc(2, 0x40)}, outer...),
		append([]uint64{self, pc(2, 0x44), pc(2, 0x48)}, outer...), // deeper, shares outer
		outer[1:],           // shallower: a suffix
		{self, pc(1, 0x50)}, // shares nothing
		append([]uint64{pc(2, 0x40), self, pc(2, 0x40)}, outer...),                      // the self frame in the middle
		append([]uint64{self, pc(2, 0x44), pc(2, 0x48)}, outer...),                      // cached
		append([]uint64{pc(1, 0x60)}, append([]uint64{self, pc(2, 0x40)}, outer...)...), // the first, one deeper
	}
	got := collectStacks(t, stacks)
	if len(got.capt.Allocs) != len(stacks) {
		t.Fatalf("%d allocs, want %d", len(got.capt.Allocs), len(stacks))
	}
	for i, a := range got.capt.Allocs {
		var want, have []uint64
		for _, f := range stacks[i] {
			if f != self {
				want = append(want, f-1)
			}
		}
		for _, id := range got.capt.Stacks[a.StackID].Locations {
			have = append(have, got.capt.Locations[id].Address)
		}
		if !slices.Equal(have, want) {
			t.Errorf("stack %d: addresses %#x, want %#x", i, have, want)
		}
	}
}

// Threads interleave their STACK records (which do not say their thread):
// each takes its outer native and Python frames from whichever of the
// stream's latest stacks shares most, and every ALLOC still gets exactly
// its own frames, whatever the order. Three threads' stacks grow and
// shrink at random, interleaved, each sent as a STACK record; some Python
// frames are of code whose CODE record comes later.
func TestStacksInterleavedThreads(t *testing.T) {
	pc := func(i int, off uint64) uint64 { return testModules[i].bias + off }
	self := pc(3, 0x10)
	codes := []uint64{0xc0de, 0xc1de, 0xc2de, 0xc3de}
	lines := map[int64]int{4: 100, 12: 101, 25: 102} // positions and their lines (Python 3.8 table below)
	codeRec := func(addr uint64) *ring.Record {
		return &ring.Record{Type: ring.RecCode, Code: &ring.Code{Addr: addr, Identity: 1, FirstLine: 100, Minor: 8,
			FileKind: 1, File: []byte("app.py"), NameKind: 1, Name: fmt.Appendf(nil, "f%x", addr), Table: []byte{10, 1, 10, 1}}}
	}
	var recs []*ring.Record
	for _, a := range codes[:3] { // the last code's record comes late
		recs = append(recs, codeRec(a))
	}
	type thread struct {
		native []uint64 // outermost first
		py     []ring.PyFrame
	}
	threads := []*thread{
		{native: []uint64{pc(0, 0x10), pc(0, 0x20)}},
		{native: []uint64{pc(0, 0x10), pc(1, 0x20)}},
		{native: []uint64{pc(0, 0x14), pc(1, 0x24)}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	positions := []int64{4, 12, 25}
	type sent struct {
		native []uint64
		py     []ring.PyFrame
	}
	var want []sent
	for i := range 400 {
		if i == 300 {
			recs = append(recs, codeRec(codes[3]))
		}
		th := threads[rng.IntN(len(threads))]
		for range rng.IntN(3) { // pop some frames
			if len(th.native) > 2 {
				th.native = th.native[:len(th.native)-1]
			}
			if len(th.py) > 0 {
				th.py = th.py[:len(th.py)-1]
			}
		}
		for range rng.IntN(4) { // push some
			f := pc(rng.IntN(3), uint64(rng.IntN(8))*4+0x100)
			if rng.IntN(5) == 0 {
				f = self
			}
			th.native = append(th.native, f)
			th.py = append(th.py, ring.PyFrame{Code: codes[rng.IntN(len(codes))], Identity: 1, Pos: positions[rng.IntN(3)], ActivationEnd: rng.IntN(2) == 0})
		}
		native, py := slices.Clone(th.native), slices.Clone(th.py)
		slices.Reverse(native) // innermost first, as the library sends them
		slices.Reverse(py)
		want = append(want, sent{native, py})
		recs = append(recs, &ring.Record{Type: ring.RecStack, Ref: uint32(i % 7), Frames: native, Py: py},
			&ring.Record{Type: ring.RecAlloc, TID: 7, TimeNano: int64(100 + i), Addr: 0x9000 + uint64(i)*16, Size: 16,
				Func: capture.FuncMalloc, Ref: uint32(i % 7), HasRef: true})
	}
	s := newStream("", nil, ring.Header{})
	s.id = 1
	s.py = &pyStream{codes: map[codeKey]*pyCode{}, locs: map[pyLocKey]uint64{}}
	got := collectStream(t, s, recs)
	if len(got.capt.Allocs) != len(want) {
		t.Fatalf("%d allocations, want %d", len(got.capt.Allocs), len(want))
	}
	for i, a := range got.capt.Allocs {
		var exp, have []string
		for _, f := range want[i].native {
			if f != self {
				exp = append(exp, fmt.Sprintf("%#x", f-1))
			}
		}
		for _, f := range want[i].py { // no eval frame: the Python frames go to the bottom
			if f.Code == codes[3] && i < 300 {
				exp = append(exp, "<unknown Python code>:0")
			} else {
				exp = append(exp, fmt.Sprintf("f%x:%d", f.Code, lines[f.Pos]))
			}
		}
		for _, id := range got.capt.Stacks[a.StackID].Locations {
			loc := got.capt.Locations[id]
			if loc.Kind == capture.KindPython {
				have = append(have, fmt.Sprintf("%s:%d", loc.Lines[0].Function, loc.Lines[0].Line))
			} else {
				have = append(have, fmt.Sprintf("%#x", loc.Address))
			}
		}
		if !slices.Equal(have, exp) {
			t.Errorf("allocation %d: stack %v, want %v", i, have, exp)
		}
	}
}
