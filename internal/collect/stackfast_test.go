package collect

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/ring"
	"github.com/heaplens/heaplens/internal/unwind"
)

// evalStream is a stream running Python whose interpreter is libb.so
// (testModules[2]): its pcs at 0x800-0x8ff are _PyEval_EvalFrameDefault's
// (Eval and Interp), its others the interpreter's own (Interp).
func evalStream() *stream {
	s := newStream("", new(ring.Ring), ring.Header{}) // a ring only to count malformed records in
	s.id = 1
	s.py = &pyStream{codes: map[codeKey]*pyCode{}, locs: map[pyLocKey]uint64{},
		eval: testModules[2].bias + 0x800, partsKnown: true, parts: []unwind.Range{{Begin: 0x800, End: 0x900}}}
	return s
}

// stackNames describes each ALLOC's stack, innermost first: a native
// frame's address, a Python frame's function and line.
func stackNames(c collected) [][]string {
	var all [][]string
	for _, a := range c.capt.Allocs {
		var names []string
		if st := c.capt.Stacks[a.StackID]; st != nil {
			for _, id := range st.Locations {
				loc := c.capt.Locations[id]
				switch {
				case loc.Kind == capture.KindPython:
					names = append(names, fmt.Sprintf("%s:%d", loc.Lines[0].Function, loc.Lines[0].Line))
				case loc.Kind == capture.KindMissing:
					names = append(names, "cut")
				default:
					names = append(names, fmt.Sprintf("%#x", loc.Address))
				}
			}
		}
		all = append(all, names)
	}
	return all
}

// wholeRecords returns recs with each delta STACK record rebuilt whole, as
// the library would send it without deltas; one that cannot be rebuilt
// stays as it is.
func wholeRecords(recs []*ring.Record) []*ring.Record {
	var b threadBases
	var out []*ring.Record
	for _, rec := range recs {
		r := *rec
		if r.Type == ring.RecStack {
			if b.rebuild(&r) == nil {
				r.Frames, r.Py = slices.Clone(r.Frames), slices.Clone(r.Py)
				b.note(&r, &baseMerge{})
			} else {
				r = *rec
			}
		}
		out = append(out, &r)
	}
	return out
}

func clones(recs []*ring.Record) []*ring.Record {
	var out []*ring.Record
	for _, r := range recs {
		c := *r
		out = append(out, &c)
	}
	return out
}

// A delta STACK record that changes only native frames below the innermost
// eval frame, and Python frames inside the innermost activation, which
// that eval frame holds, is merged from its base's merge (deltaMerge);
// every other is merged whole. Either way each ALLOC gets the stack the same records sent
// whole get, and the fast path is taken exactly where it may be.
func TestDeltaMerge(t *testing.T) {
	pc := func(i int, off uint64) uint64 { return testModules[i].bias + off }
	self, interp := pc(3, 0x10), pc(2, 0x20)
	eval1, eval2 := pc(2, 0x810), pc(2, 0x820)
	code := func(addr uint64) *ring.Record {
		return &ring.Record{Type: ring.RecCode, Code: &ring.Code{Addr: addr, Identity: 1, FirstLine: 100, Minor: 8,
			FileKind: 1, File: []byte("app.py"), NameKind: 1, Name: fmt.Appendf(nil, "f%x", addr), Table: []byte{10, 1, 10, 1}}}
	}
	py := func(addr uint64, pos int64, end bool) ring.PyFrame {
		return ring.PyFrame{Code: addr, Identity: 1, Pos: pos, ActivationEnd: end}
	}
	// Innermost first: two C frames under the interpreter's, the inner
	// activation (one Python frame) in eval1, the outer (two) in eval2.
	baseFrames := []uint64{pc(1, 0x10), pc(1, 0x14), interp, eval1, pc(0, 0x30), eval2, pc(0, 0x40)}
	basePy := []ring.PyFrame{py(0xa0, 4, true), py(0xb0, 12, false), py(0xc0, 25, true)}
	codes := []*ring.Record{code(0xa0), code(0xb0), code(0xc0), code(0xd0)}
	base := &ring.Record{Type: ring.RecStack, TID: 7, Ref: 1, Frames: baseFrames, Py: basePy}
	delta := func(ref, baseRef uint32, k, j int, frames []uint64, py []ring.PyFrame) *ring.Record {
		return &ring.Record{Type: ring.RecStack, TID: 7, Ref: ref, Delta: true, BaseRef: baseRef, BaseNative: k, BasePy: j,
			Frames: frames, Py: py}
	}
	n, np := len(baseFrames), len(basePy)
	// Two Python frames in the innermost activation.
	basePy2 := append([]ring.PyFrame{py(0xb0, 4, false)}, basePy...)
	base2 := &ring.Record{Type: ring.RecStack, TID: 7, Ref: 1, Frames: baseFrames, Py: basePy2}
	np2 := len(basePy2)
	tests := []struct {
		name string
		recs []*ring.Record
		fast uint64 // STACK records deltaMerge merged
	}{
		{"leaf frames replaced", []*ring.Record{base, delta(2, 1, n-2, np, []uint64{pc(1, 0x50), self, pc(1, 0x54)}, nil)}, 1},
		{"leaf frames removed", []*ring.Record{base, delta(2, 1, n-1, np, nil, nil)}, 1},
		{"the interpreter's own frame replaced", []*ring.Record{base, delta(2, 1, n-3, np, []uint64{pc(1, 0x60)}, nil)}, 1},
		{"an interpreter's frame added", []*ring.Record{base, delta(2, 1, n-2, np, []uint64{pc(1, 0x60), pc(2, 0x24)}, nil)}, 1},
		{"up to the eval frame replaced", []*ring.Record{base, delta(2, 1, n-3, np, []uint64{self}, nil)}, 1},
		{"deltas on deltas", []*ring.Record{base,
			delta(2, 1, n-2, np, []uint64{pc(1, 0x50), self, pc(1, 0x54)}, nil),
			delta(3, 2, n-1, np, []uint64{pc(1, 0x70), pc(1, 0x74)}, nil),
			delta(4, 3, n-3, np, []uint64{pc(2, 0x28)}, nil),
			delta(5, 4, n-2, np, nil, nil)}, 4},
		{"the innermost Python frame's line changed", []*ring.Record{base2,
			delta(2, 1, n-2, np2-1, []uint64{pc(1, 0x50)}, []ring.PyFrame{py(0xb0, 12, false)})}, 1},
		{"Python frames added in the innermost activation", []*ring.Record{base2,
			delta(2, 1, n, np2, nil, []ring.PyFrame{py(0xa0, 25, false), py(0xc0, 4, false)})}, 1},
		{"Python deltas on deltas", []*ring.Record{base2,
			delta(2, 1, n-1, np2-1, []uint64{pc(1, 0x50), pc(1, 0x54)}, []ring.PyFrame{py(0xa0, 25, false), py(0xc0, 4, false)}),
			delta(3, 2, n-1, np2, []uint64{pc(1, 0x58)}, []ring.PyFrame{py(0xc0, 12, false)}),
			delta(4, 3, n-2, np2-1, nil, nil),
			delta(5, 4, n-2, np2-1, nil, []ring.PyFrame{py(0xb0, 25, false)}),
			delta(6, 5, n-2, np2-2, nil, []ring.PyFrame{py(0xb0, 4, false)})}, 4}, // the last replaces the end frame
		{"the innermost activation replaced whole", []*ring.Record{base2,
			delta(2, 1, n-2, np2-2, []uint64{pc(1, 0x50)}, []ring.PyFrame{py(0xb0, 12, false), py(0xa0, 12, true)})}, 1},
		{"the innermost activation's end frame replaced by one ending none", []*ring.Record{base2,
			delta(2, 1, n-2, np2-2, []uint64{pc(1, 0x50)}, []ring.PyFrame{py(0xa0, 12, false)})}, 0},
		{"the innermost activation's end frame replaced by two activations", []*ring.Record{base2,
			delta(2, 1, n-2, np2-2, []uint64{pc(1, 0x50)}, []ring.PyFrame{py(0xb0, 12, true), py(0xa0, 12, true)})}, 0},
		{"a new activation", []*ring.Record{base2,
			delta(2, 1, n-2, np2, []uint64{pc(1, 0x50)}, []ring.PyFrame{py(0xb0, 12, true)})}, 0},
		{"a new Python frame of unknown code", []*ring.Record{base2,
			delta(2, 1, n-2, np2-1, []uint64{pc(1, 0x50)}, []ring.PyFrame{py(0xd0, 12, false)})}, 0},
		{"more eval frames than activations: the innermost takes none", []*ring.Record{
			{Type: ring.RecStack, TID: 7, Ref: 1, Frames: append([]uint64{pc(1, 0x10), pc(2, 0x830)}, baseFrames...), Py: basePy2},
			delta(2, 1, n+1, np2-1, []uint64{pc(1, 0x50)}, []ring.PyFrame{py(0xb0, 12, false)}),
			delta(3, 2, n+1, np2, []uint64{pc(1, 0x54)}, nil),
			delta(4, 3, n+1, np2-1, []uint64{pc(1, 0x58)}, []ring.PyFrame{py(0xb0, 25, false)})}, 1},
		{"no eval frame: the innermost Python frame changed", []*ring.Record{
			{Type: ring.RecStack, TID: 7, Ref: 1, Frames: []uint64{pc(1, 0x10), interp, pc(0, 0x40)}, Py: basePy2},
			delta(2, 1, 1, np2-1, []uint64{pc(1, 0x50), pc(0, 0x44)}, []ring.PyFrame{py(0xa0, 12, false)}),
			delta(3, 2, 2, np2-1, nil, []ring.PyFrame{py(0xc0, 12, false)})}, 2},
		{"an eval frame replaced", []*ring.Record{base, delta(2, 1, n-4, np, []uint64{pc(1, 0x50)}, nil)}, 0},
		{"an eval frame added", []*ring.Record{base, delta(2, 1, n-2, np, []uint64{pc(1, 0x50), pc(2, 0x830)}, nil)}, 0},
		{"a one-frame activation replaced", []*ring.Record{base, delta(2, 1, n-2, np-1, []uint64{pc(1, 0x50)}, []ring.PyFrame{py(0xa0, 12, true)})}, 1},
		{"an outer activation's Python frame changed", []*ring.Record{base, delta(2, 1, n-2, np-2,
			[]uint64{pc(1, 0x50)}, []ring.PyFrame{py(0xa0, 4, true), py(0xb0, 4, false)})}, 0},
		{"a Python frame removed", []*ring.Record{base, delta(2, 1, n-2, np-1, []uint64{pc(1, 0x50)}, nil)}, 0},
		{"cut", []*ring.Record{base, func() *ring.Record {
			r := delta(2, 1, n-2, np, []uint64{pc(1, 0x50)}, nil)
			r.Truncated = true
			return r
		}()}, 0},
		{"a cut base", []*ring.Record{{Type: ring.RecStack, TID: 7, Ref: 1, Frames: baseFrames, Py: basePy, Truncated: true},
			delta(2, 1, n-2, np, []uint64{pc(1, 0x50)}, nil)}, 0},
		{"no base", []*ring.Record{delta(2, 1, n-2, np, []uint64{pc(1, 0x50)}, nil)}, 0},
		{"another thread's base", []*ring.Record{base, {Type: ring.RecStack, TID: 8, Ref: 3, Frames: baseFrames},
			delta(2, 3, n-2, 0, []uint64{pc(1, 0x50)}, nil)}, 0},
		// The unknown code's frame gets its name once the code comes: the
		// base's merge has the Location for unknown code.
		{"code unknown in the base, known since", []*ring.Record{
			{Type: ring.RecStack, TID: 7, Ref: 1, Frames: baseFrames, Py: []ring.PyFrame{py(0xe0, 4, true), py(0xb0, 12, false), py(0xc0, 25, true)}},
			code(0xe0),
			delta(2, 1, n-2, np, []uint64{pc(1, 0x50)}, nil),
			delta(3, 2, n-1, np, []uint64{pc(1, 0x54)}, nil)}, 1},
		{"no Python frames: the interpreter's kept", []*ring.Record{{Type: ring.RecStack, TID: 7, Ref: 1, Frames: baseFrames},
			delta(2, 1, n-3, 0, []uint64{pc(2, 0x24), pc(1, 0x50)}, nil)}, 1},
		{"no eval frame: Python frames at the bottom", []*ring.Record{
			{Type: ring.RecStack, TID: 7, Ref: 1, Frames: []uint64{pc(1, 0x10), interp, pc(0, 0x40)}, Py: basePy},
			delta(2, 1, 0, np, []uint64{pc(1, 0x50), pc(0, 0x44)}, nil),
			delta(3, 2, 1, np, []uint64{pc(1, 0x58)}, nil)}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs := slices.Clone(codes[:3])
			for i, r := range tt.recs {
				recs = append(recs, r)
				if r.Type == ring.RecStack {
					recs = append(recs, &ring.Record{Type: ring.RecAlloc, TID: 7, TimeNano: int64(100 + i), Addr: 0x9000 + uint64(i)*16,
						Size: 16, Func: capture.FuncMalloc, Ref: r.Ref, HasRef: true})
				}
			}
			whole := wholeRecords(recs)
			s := evalStream()
			got := stackNames(collectStream(t, s, clones(recs))) // the collector rebuilds deltas in place
			if s.fastStacks != tt.fast {
				t.Errorf("%d STACK records merged from their base's, want %d", s.fastStacks, tt.fast)
			}
			sw := evalStream()
			want := stackNames(collectStream(t, sw, whole))
			if sw.fastStacks != 0 {
				t.Errorf("whole records: %d merged from a base's", sw.fastStacks)
			}
			if len(got) != len(want) {
				t.Fatalf("%d allocations, want %d", len(got), len(want))
			}
			for i := range got {
				if !slices.Equal(got[i], want[i]) {
					t.Errorf("allocation %d: stack %v, want %v (the records sent whole)", i, got[i], want[i])
				}
			}
		})
	}
}

// The fast path's answer, spelled out for one delta: the new frames (the
// library's own left out), then the base's merged stack from the eval frame
// on, its activations in place, the interpreter's own frames left out.
func TestDeltaMergeStack(t *testing.T) {
	pc := func(i int, off uint64) uint64 { return testModules[i].bias + off }
	recs := []*ring.Record{
		{Type: ring.RecCode, Code: &ring.Code{Addr: 0xa0, Identity: 1, FirstLine: 100, Minor: 8,
			FileKind: 1, File: []byte("app.py"), NameKind: 1, Name: []byte("work"), Table: []byte{10, 1, 10, 1}}},
		{Type: ring.RecStack, TID: 7, Ref: 1, Frames: []uint64{pc(1, 0x10), pc(2, 0x20), pc(2, 0x810), pc(0, 0x40)},
			Py: []ring.PyFrame{{Code: 0xa0, Identity: 1, Pos: 12, ActivationEnd: true}}},
		{Type: ring.RecStack, TID: 7, Ref: 2, Delta: true, BaseRef: 1, BaseNative: 3, BasePy: 1,
			Frames: []uint64{pc(1, 0x50), pc(3, 0x10), pc(2, 0x24), pc(1, 0x54)}},
		{Type: ring.RecAlloc, TID: 7, TimeNano: 100, Addr: 0x9000, Size: 16, Func: capture.FuncMalloc, Ref: 2, HasRef: true},
	}
	s := evalStream()
	got := stackNames(collectStream(t, s, recs))
	want := []string{fmt.Sprintf("%#x", pc(1, 0x4f)), fmt.Sprintf("%#x", pc(1, 0x53)), "work:101", fmt.Sprintf("%#x", pc(0, 0x3f))}
	if s.fastStacks != 1 || len(got) != 1 || !slices.Equal(got[0], want) {
		t.Errorf("stacks %v (%d merged from a base's), want [%v] (1)", got, s.fastStacks, want)
	}
}

// Threads whose stacks grow and shrink at random (native frames of which
// some are eval frames, the interpreter's or the library's own; Python
// frames in activations), each STACK record sent as a delta on the
// thread's previous one: every ALLOC gets the stack the same records sent
// whole get, and many deltas (a third with this seed) take the fast path.
func TestDeltaMergeRandom(t *testing.T) {
	pc := func(i int, off uint64) uint64 { return testModules[i].bias + off }
	codes := []uint64{0xa0, 0xb0, 0xc0}
	var recs []*ring.Record
	for _, a := range codes {
		recs = append(recs, &ring.Record{Type: ring.RecCode, Code: &ring.Code{Addr: a, Identity: 1, FirstLine: 100, Minor: 8,
			FileKind: 1, File: []byte("app.py"), NameKind: 1, Name: fmt.Appendf(nil, "f%x", a), Table: []byte{10, 1, 10, 1}}})
	}
	type thread struct {
		tid    uint32
		native []uint64 // outermost first
		py     []ring.PyFrame
		ref    uint32
		sent   bool
		frames []uint64 // its last STACK record, innermost first
		pyLast []ring.PyFrame
	}
	threads := []*thread{{tid: 7}, {tid: 8}, {tid: 9}}
	for _, th := range threads {
		th.native = []uint64{pc(0, 0x10), pc(2, 0x820)}
		th.py = []ring.PyFrame{{Code: 0xa0, Identity: 1, Pos: 4, ActivationEnd: true}}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	frame := func() uint64 {
		switch rng.IntN(10) {
		case 0:
			return pc(2, 0x800+uint64(rng.IntN(4))*4) // an eval frame
		case 1:
			return pc(2, uint64(rng.IntN(4))*4+0x40) // the interpreter's
		case 2:
			return pc(3, 0x10) // the library's own
		}
		return pc(rng.IntN(2), uint64(rng.IntN(16))*4+0x100)
	}
	// shared returns how many outermost elements a and b (innermost first) share.
	shared := func(n, m int, eq func(i, j int) bool) int {
		k := 0
		for k < n && k < m && eq(n-1-k, m-1-k) {
			k++
		}
		return k
	}
	ref := uint32(0)
	for i := range 3000 {
		th := threads[rng.IntN(len(threads))]
		for range rng.IntN(3) {
			if len(th.native) > 2 {
				th.native = th.native[:len(th.native)-1]
			}
		}
		for range rng.IntN(4) {
			th.native = append(th.native, frame())
		}
		switch rng.IntN(4) {
		case 0: // a frame off the innermost activation
			if len(th.py) > 1 {
				th.py = th.py[:len(th.py)-1]
			}
		case 1: // one more, in it or a new one
			th.py = append(th.py, ring.PyFrame{Code: codes[rng.IntN(len(codes))], Identity: 1, Pos: []int64{4, 12, 25}[rng.IntN(3)],
				ActivationEnd: rng.IntN(3) == 0})
		case 2: // another line
			th.py[len(th.py)-1].Pos = []int64{4, 12, 25}[rng.IntN(3)]
		}
		native, py := slices.Clone(th.native), slices.Clone(th.py)
		slices.Reverse(native)
		slices.Reverse(py)
		ref++
		rec := &ring.Record{Type: ring.RecStack, TID: th.tid, Ref: ref, Frames: native, Py: py}
		if th.sent && rng.IntN(10) != 0 {
			k := shared(len(native), len(th.frames), func(i, j int) bool { return native[i] == th.frames[j] })
			j := shared(len(py), len(th.pyLast), func(i, j int) bool { return py[i] == th.pyLast[j] })
			rec.Delta, rec.BaseRef, rec.BaseNative, rec.BasePy = true, th.ref, k, j
			rec.Frames, rec.Py = native[:len(native)-k], py[:len(py)-j]
		}
		th.sent, th.ref, th.frames, th.pyLast = true, ref, native, py
		recs = append(recs, rec, &ring.Record{Type: ring.RecAlloc, TID: th.tid, TimeNano: int64(100 + i),
			Addr: 0x9000 + uint64(i)*16, Size: 16, Func: capture.FuncMalloc, Ref: ref, HasRef: true})
	}
	whole := wholeRecords(recs)
	s, sw := evalStream(), evalStream()
	fast, slow := collectStream(t, s, clones(recs)), collectStream(t, sw, whole)
	got, want := stackNames(fast), stackNames(slow)
	for i := range got {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("allocation %d: stack %v, want %v (the records sent whole)", i, got[i], want[i])
		}
	}
	if len(got) != 3000 || s.fastStacks < 600 {
		t.Errorf("%d allocations, %d STACK records merged from their base's: want 3000, and 600 or more", len(got), s.fastStacks)
	}
	t.Logf("%d of 3000 STACK records merged from their base's", s.fastStacks)
	// Each stack has one ID, written with its thread's latest as its
	// parent or whole: as many as when every stack is merged whole.
	for _, c := range []collected{fast, slow} {
		distinctStacks(t, c.capt)
	}
	if len(fast.capt.Stacks) != len(slow.capt.Stacks) || s.parentStacks < uint64(len(fast.capt.Stacks))/2 {
		t.Errorf("%d stacks, %d with a parent; %d merged whole: want as many, half of them or more with a parent",
			len(fast.capt.Stacks), s.parentStacks, len(slow.capt.Stacks))
	}
	t.Logf("%d stacks, %d written with a parent", len(fast.capt.Stacks), s.parentStacks)
}

// distinctStacks fails if two stacks of c have the same Locations.
func distinctStacks(t *testing.T, c *capture.Capture) {
	t.Helper()
	seen := map[string]uint64{}
	for id, st := range c.Stacks {
		k := fmt.Sprint(st.Locations)
		if other, ok := seen[k]; ok {
			t.Errorf("stacks %d and %d are both %v", other, id, st.Locations)
		}
		seen[k] = id
	}
}
