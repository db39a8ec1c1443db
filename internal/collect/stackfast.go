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
// the outermost frame if there is none. ok is false when a delta cannot
// build on it: its stack was cut, had Python frames of code not known yet
// (their Locations change when the code comes), or passes through an own
// allocator's check (seeStack wants the frames).
type baseMerge struct {
	ok    bool
	locs  []uint64
	inner []int32
}

// set makes m a copy of from.
func (m *baseMerge) set(from *baseMerge) {
	m.ok = from.ok
	m.locs, m.inner = m.locs[:0], m.inner[:0]
	if from.ok {
		m.locs = append(m.locs, from.locs...)
		m.inner = append(m.inner, from.inner...)
	}
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

// activations is what stack.Drops needs of a stack's Python frames: 0 if
// mergeStack merges none (none sent, or a process without Python), else
// some.
func activations(s *stream, py []ring.PyFrame) int {
	if s.py == nil {
		return 0
	}
	return len(py)
}

// deltaMerge merges the stack of a delta STACK record, rebuilt whole in
// rec, from its base t's merge when it can: the delta kept all of t's
// Python frames, its added new native frames replace t's replaced
// innermost ones, and none of either is an eval frame (the activations
// keep their places). ok false: merge it whole.
func (c *Collector) deltaMerge(s *stream, rec *ring.Record, t *threadBase, replaced, added int) (sid uint64, ok bool, err error) {
	b, m := &t.merged, &s.merge
	if !b.ok || rec.Truncated || s.own != nil || replaced >= len(b.inner) {
		return 0, false, nil
	}
	acts := activations(s, rec.Py)
	m.locs, m.inner = s.locBuf[:0], m.inner[:0]
	for _, pc := range rec.Frames[:added] {
		l, err := c.nativeLoc(s, pc)
		if err != nil {
			return 0, false, err
		}
		if l.class&stack.Eval != 0 {
			return 0, false, nil
		}
		m.add(l, acts, c.NativePythonInternals)
	}
	from := b.inner[replaced]
	shift := int32(len(m.locs)) - from
	for _, o := range b.inner[replaced:] {
		m.inner = append(m.inner, o+shift)
	}
	m.locs = append(m.locs, b.locs[from:]...)
	m.ok, s.locBuf = true, m.locs
	s.fastStacks++
	sid, err = c.stackID(s)
	return sid, err == nil, err
}
