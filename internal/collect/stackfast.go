package collect

// The fast path of a delta STACK record: most change only a few innermost
// native frames below the innermost Python activation (py_torch at --rate
// 1: 80 % change 1-7 native frames and no Python frame), and their merged
// stack is then the new frames' Locations followed by the rest of their
// base's, without resolving, matching and merging the whole stack again.

import (
	"github.com/heaplens/heaplens/internal/ring"
	"github.com/heaplens/heaplens/internal/stack"
)

// baseMerge is what mergeStack made of a thread base's stack: its merged
// Locations, and where in them the output of each innermost native frame
// begins: inner[i] for frame i (innermost first, the library's own
// included), up to and including the innermost eval frame, or one past
// the outermost frame if there is none. act0Here says the innermost
// activation's act0 Python frames' Locations begin at the last of those:
// that eval frame takes it, or no eval frame takes any (all go to the
// bottom, after the native frames). ok is false when a delta cannot
// build on it: its stack was cut, had Python frames of code not known yet
// (their Locations change when the code comes), or passes through an own
// allocator's check (seeStack wants the frames).
type baseMerge struct {
	ok       bool
	sid      uint64 // the stack of locs, written
	locs     []uint64
	suf      []stackHash // suf[i]: the hash of locs[i:]
	inner    []int32
	act0Here bool
	act0     int32
}

// take makes m what from was, trading their buffers rather than copying:
// from keeps m's, to build the next merge in.
func (m *baseMerge) take(from *baseMerge) {
	if !from.ok {
		m.ok = false
		return
	}
	*m, *from = *from, *m
}

// add appends a native frame outside any eval frame's place.
func (m *baseMerge) add(l nativeLoc, acts int, keepInterp bool) {
	m.inner = append(m.inner, int32(len(m.locs)))
	if l.emitted(acts, keepInterp) {
		m.locs = append(m.locs, l.id)
	}
}

// emitted reports whether stack.MergePython keeps a native frame outside
// any eval frame's place: not the library's own, nor the interpreter's
// left out.
func (l nativeLoc) emitted(acts int, keepInterp bool) bool {
	return l.id != 0 && !stack.Drops(l.class, acts, keepInterp)
}

// innerOf sets m.inner from the native frames of a stack just merged
// whole (ids and classes of each, the library's own with ID 0).
func (m *baseMerge) innerOf(r *run[uint64], acts int, keepInterp bool) {
	m.inner = m.inner[:0]
	n := int32(0)
	for i, id := range r.ids {
		m.inner = append(m.inner, n)
		if r.classes[i]&stack.Eval != 0 {
			return
		}
		if (nativeLoc{id, r.classes[i]}).emitted(acts, keepInterp) {
			n++
		}
	}
	m.inner = append(m.inner, n)
}

// pythonOf sets where the innermost activation of a stack just merged
// whole goes (see stack.MergePython): with evals eval frames and k
// activations, the innermost eval frame takes the innermost activation
// if evals <= k; with none, all go to the bottom.
func (m *baseMerge) pythonOf(r *run[uint64], py []ring.PyFrame) {
	m.act0Here, m.act0 = false, 0
	if len(py) == 0 {
		return
	}
	k, a0 := 0, len(py)
	for i, f := range py {
		if f.ActivationEnd {
			if k == 0 {
				a0 = i + 1
			}
			k++
		}
	}
	if !py[len(py)-1].ActivationEnd {
		k++ // the outermost frames end no activation: MergePython makes them one
	}
	evals := 0
	for _, c := range r.classes {
		if c&stack.Eval != 0 {
			evals++
		}
	}
	m.act0Here, m.act0 = evals <= k, int32(a0)
}

// activations is what stack.Drops needs of a stack's Python frames: 0 if
// mergeStack merges none (none sent, or a process without Python), else
// some.
func activations(s *stream, py []ring.PyFrame) int {
	if s.py == nil {
		return 0
	}
	return len(py)
}

// delta is what a delta STACK record changed of its base: its innermost
// replaced native frames for added new ones, and its innermost replacedPy
// Python frames for addedPy new ones.
type delta struct{ replaced, added, replacedPy, addedPy int }

// deltaMerge merges the stack of a delta STACK record, rebuilt whole in
// rec, from its base t's merge when it can: the native frames it changed
// are below the innermost eval frame and none is an eval frame, and the
// Python frames it changed are inside the innermost activation, or are
// all of it, which that eval frame (or the bottom) holds: all activations
// keep their places. ok false: merge it whole.
func (c *Collector) deltaMerge(s *stream, rec *ring.Record, t *threadBase, d delta) (sid uint64, ok bool, err error) {
	b, m := &t.merged, &s.merge
	if !b.ok || rec.Truncated || s.own != nil || d.replaced >= len(b.inner) {
		return 0, false, nil
	}
	newPy := rec.Py[:d.addedPy]
	if d.replacedPy > 0 || d.addedPy > 0 {
		// The innermost activation keeps its end frame, or is replaced
		// whole by one: the activations stay as many, and its Locations go
		// where its base's went.
		whole := d.replacedPy == int(b.act0)
		if !b.act0Here || s.py == nil || d.replacedPy > int(b.act0) || (whole && d.addedPy == 0) {
			return 0, false, nil
		}
		for i, f := range newPy {
			if f.ActivationEnd != (whole && i == len(newPy)-1) {
				return 0, false, nil
			}
		}
	}
	acts := activations(s, rec.Py)
	m.locs, m.inner = s.locBuf[:0], m.inner[:0]
	for _, pc := range rec.Frames[:d.added] {
		l, err := c.nativeLoc(s, pc)
		if err != nil {
			return 0, false, err
		}
		if l.class&stack.Eval != 0 {
			return 0, false, nil
		}
		m.add(l, acts, c.NativePythonInternals)
	}
	from, at := b.inner[d.replaced], b.inner[len(b.inner)-1]
	if int(at)+d.replacedPy > len(b.locs) { // cannot be, as baseMerge is made; never read past it
		return 0, false, nil
	}
	shift := int32(len(m.locs)) - from
	for _, o := range b.inner[d.replaced:] {
		m.inner = append(m.inner, o+shift)
	}
	m.locs = append(m.locs, b.locs[from:at]...)
	for _, f := range newPy {
		id, known, err := c.pyLocation(s, f)
		if err != nil || !known { // unknown code: its Location is another once the code comes
			return 0, false, err
		}
		m.locs = append(m.locs, id)
	}
	m.locs = append(m.locs, b.locs[int(at)+d.replacedPy:]...)
	m.ok, m.act0Here, m.act0 = true, b.act0Here, b.act0+int32(d.addedPy-d.replacedPy)
	s.locBuf = m.locs
	s.fastStacks++
	sid, err = c.stackID(s, t)
	return sid, err == nil, err
}
