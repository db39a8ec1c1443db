package collect

// Stacks: a sample's raw frames (native pcs and Python positions, sent
// whole or by ref) turned into merged capture stacks and their locations.

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/ring"
	"github.com/heaplens/heaplens/internal/stack"
)

// refSlot is what one slot of the library's stack table named: the stack
// of its latest generation, and of the one before, which an ALLOC reserved
// while another thread replaced the slot may still name.
type refSlot struct {
	gen [2]uint32
	sid [2]uint64 // 0: none
}

func (r *refSlot) stack(gen uint32) uint64 {
	for i := range r.gen {
		if r.gen[i] == gen && r.sid[i] != 0 {
			return r.sid[i]
		}
	}
	return 0
}

// stackRecord notes the stack that later ALLOCs name by rec.Ref.
func (c *Collector) stackRecord(s *stream, rec *ring.Record) error {
	if s.refs == nil {
		s.refs = make([]refSlot, ring.StackRefs)
	}
	r := &s.refs[rec.Ref%ring.StackRefs]
	// What a delta keeps of its base, before rebuild makes it whole.
	isDelta, baseNative, basePy := rec.Delta, rec.BaseNative, rec.BasePy
	d := delta{added: len(rec.Frames), addedPy: len(rec.Py)}
	if s.bases.rebuild(rec) != nil {
		// Not a wrong stack: the ALLOCs naming this ref find none (badRefs).
		s.r.Malformed++
		r.gen[1], r.sid[1] = r.gen[0], r.sid[0]
		r.gen[0], r.sid[0] = rec.Ref/ring.StackRefs, 0
		return nil
	}
	var sid uint64
	var err error
	fast := false
	t := s.bases.byTID[rec.TID] // the thread's latest: a delta's base (rebuild found it)
	if isDelta {
		d.replaced, d.replacedPy = len(t.frames)-baseNative, len(t.py)-basePy
		sid, fast, err = c.deltaMerge(s, rec, t, d)
	}
	if !fast && err == nil {
		// Not through the raw cache: the library sends a STACK record for a
		// stack its table does not hold, so the agent has (almost) never seen
		// its frames (py_torch at --rate 1: 1.38 M STACK records, 1.38 M
		// different; the cache found 3.5 k of them, and cost a fifth of the
		// agent's time hashing and copying the others).
		var known bool
		sid, known, err = c.mergeStack(s, rec, t)
		m := &s.merge
		if m.ok = err == nil && known && !rec.Truncated && s.own == nil; m.ok {
			m.innerOf(s.natives.latest(), activations(s, rec.Py), c.NativePythonInternals)
			m.pythonOf(s.natives.latest(), rec.Py)
			m.locs = s.locBuf
		}
	}
	if err != nil {
		s.bases.forget(rec.TID)
		return err
	}
	s.merge.sid, s.merge.suf = sid, s.sufBuf
	s.bases.note(rec, &s.merge)
	s.locBuf, s.sufBuf = s.merge.locs[:0], s.merge.suf[:0] // note took the buffers they were
	r.gen[1], r.sid[1] = r.gen[0], r.sid[0]
	r.gen[0], r.sid[0] = rec.Ref/ring.StackRefs, sid
	return nil
}

// origin writes the stack a thread recorded for the pool work done under a token.
func (c *Collector) origin(s *stream, rec *ring.Record) error {
	sid, err := c.stack(s, rec)
	if err != nil {
		return err
	}
	return c.w.Origin(&capture.Origin{Stream: s.id, Token: rec.Token, TID: rec.TID, TimeNano: rec.TimeNano, StackID: sid})
}

// stack writes (once) the merged native and Python stack of an ALLOC or
// ORIGIN record and returns its ID.
func (c *Collector) stack(s *stream, rec *ring.Record) (uint64, error) {
	s.rawBuf = rawStack(s.rawBuf[:0], rec)
	sid, h, ok := s.raw.get(s.rawBuf)
	if ok {
		return sid, nil
	}
	sid, known, err := c.mergeStack(s, rec, s.bases.byTID[rec.TID])
	if err != nil || !known {
		return sid, err
	}
	s.raw.put(h, s.rawBuf, sid)
	return sid, nil
}

// maxRawBytes bounds the keys of a stream's raw-stack cache.
const maxRawBytes = 32 << 20

// rawStack appends the stack of rec as the library wrote it to b.
func rawStack(b []byte, rec *ring.Record) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(rec.Frames)))
	if rec.Truncated {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	for _, pc := range rec.Frames {
		b = binary.LittleEndian.AppendUint64(b, pc)
	}
	for _, f := range rec.Py {
		b = binary.LittleEndian.AppendUint64(b, f.Code)
		b = binary.LittleEndian.AppendUint32(b, f.Identity)
		b = binary.LittleEndian.AppendUint64(b, uint64(f.Pos))
		if f.ActivationEnd {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	return b
}

// mergeStack writes (once) the stack of rec: its native frames' Locations,
// interleaved with its Python frames', cut at the root if the library did;
// and notes whether it passes through the program's own allocator.
// known says whether the code of every Python frame was known: if not, the
// same frames name another stack once it is. A new stack is written with
// the thread's latest (t, if not nil) as its parent (stackID).
func (c *Collector) mergeStack(s *stream, rec *ring.Record, t *threadBase) (sid uint64, known bool, err error) {
	native, err := c.nativeFrames(s, rec.Frames)
	if err != nil {
		return 0, false, err
	}
	known = len(rec.Py) == 0
	if len(rec.Py) > 0 && s.py != nil {
		if s.locBuf, known, err = c.mergePython(s, s.locBuf[:0], native, rec.Py); err != nil {
			return 0, false, err
		}
	} else {
		s.locBuf = append(s.locBuf[:0], native.ids...)
	}
	if rec.Truncated {
		id, err := c.cutLocation(len(rec.Frames) < ring.MaxFrames)
		if err != nil {
			return 0, false, err
		}
		s.locBuf = append(s.locBuf, id)
	}
	if sid, err = c.stackID(s, t); err != nil {
		return 0, false, err
	}
	if s.own != nil {
		s.seeStack(sid, rec.Frames)
	}
	return sid, known, nil
}

// stackID returns the ID of the stack whose Locations s.locBuf holds,
// writing it the first time, and leaves the hashes of its suffixes in
// s.sufBuf (stackhash.go). A thread's stacks mostly share their outer
// Locations with its latest (t, if not nil): those are not hashed again,
// and the stack is written as its own inner Locations and that one's ID
// (docs/capture-format.md, "Parents"), which was written before it was a
// base.
func (c *Collector) stackID(s *stream, t *threadBase) (uint64, error) {
	locs, n := s.locBuf, 0
	var p *baseMerge
	var psuf []stackHash
	if t != nil && t.merged.ok {
		p, psuf = &t.merged, t.merged.suf
		n = sharedOuter(locs, p.locs)
	}
	s.sufBuf = grow(s.sufBuf, len(locs))
	h := c.seeds.suffixes(s.sufBuf, locs, psuf, n)
	sid, ok, taken := c.stackIDs.get(h)
	if !ok {
		c.nextID++
		sid = c.nextID
		c.stackIDs.put(h, sid, taken)
		c.stackRec = capture.Stack{ID: sid, Locations: locs} // the writer keeps none of it
		if n >= minInherited {
			c.stackRec.Parent, c.stackRec.Skip, c.stackRec.Inherited = p.sid, uint32(len(p.locs)-n), int32(n)
			s.parentStacks++
		}
		if err := c.w.Stack(&c.stackRec); err != nil {
			return 0, err
		}
	}
	return sid, nil
}

// minInherited is the fewest outer Locations a stack takes from its parent:
// naming the parent costs about as many bytes as one Location.
const minInherited = 2

// sharedOuter returns how many Locations a and b share at their ends.
func sharedOuter(a, b []uint64) int {
	n := min(len(a), len(b))
	a, b = a[len(a)-n:], b[len(b)-n:]
	for i := n - 1; i >= 0; i-- {
		if a[i] != b[i] {
			return n - 1 - i
		}
	}
	return n
}

// nativeStack is the native part of a stack: the Locations of its frames,
// the library's own left out, and what each is to the interpreter.
type nativeStack struct {
	ids     []uint64
	classes []stack.Class
}

// nativeFrames returns the native part of a stack of frames, valid until
// the next call. It mostly shares its outer frames with one of the
// stream's latest (the same thread, deeper or shallower in the same calls;
// at --rate 1 a Python program sends the same native part with many Python
// parts, each bytecode position another stack): those are taken from the
// one that shares most, and only the frames inside them are looked up. A
// pc's Location never changes in a stream (s.locs), so either way gives the
// same answer. A cache of whole native parts cost more, hashing and copying
// 1-2 KB per stack, than it saved (py_sklearn at --rate 1: 117 native frames
// a stack).
func (c *Collector) nativeFrames(s *stream, frames []uint64) (*nativeStack, error) {
	prev, same := s.natives.mostShared(frames, false)
	run := &s.natives.spare
	n, m := len(frames), len(prev.frames)
	run.frames = append(run.frames[:0], frames...)
	run.ids = grow(run.ids, n)
	run.classes = grow(run.classes, n)
	copy(run.ids[n-same:], prev.ids[m-same:]) // the shared outer frames
	copy(run.classes[n-same:], prev.classes[m-same:])
	for i, pc := range frames[:n-same] {
		l, err := c.nativeLoc(s, pc)
		if err != nil {
			return nil, err
		}
		run.ids[i], run.classes[i] = l.id, l.class
	}
	// The library's own frames left out; mostly there are none, and the
	// run itself is the answer (it lives in s.natives until recentRuns calls on).
	ns := &s.native
	ns.ids, ns.classes = run.ids, run.classes
	if slices.Contains(run.ids, 0) {
		ns.ids, ns.classes = s.nativeIDs[:0], s.nativeClasses[:0]
		for i, id := range run.ids {
			if id != 0 {
				ns.ids = append(ns.ids, id)
				ns.classes = append(ns.classes, run.classes[i])
			}
		}
		s.nativeIDs, s.nativeClasses = ns.ids, ns.classes
	}
	s.natives.push() // prev was read already
	return ns, nil
}

// nativeLoc returns the Location of a return address, writing it the
// first time.
func (c *Collector) nativeLoc(s *stream, pc uint64) (nativeLoc, error) {
	l, ok := s.locs[pc]
	if !ok {
		var err error
		if l, err = c.location(s, pc); err != nil {
			return nativeLoc{}, err
		}
		s.locs[pc] = l
	}
	return l, nil
}

// grow returns b with length n, reusing its memory.
func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n, 2*n)
	}
	return b[:n]
}

// cutLocation returns the Location that stands, at the root of a stack,
// for the frames the library cut, writing it the first time: at its limit,
// or (stopped) where its walk could not go on (a return address into no
// code, a frame outside the stack: a coroutine's stale slice of the stack,
// a small signal stack on which libgcc must not run).
func (c *Collector) cutLocation(stopped bool) (uint64, error) {
	id := &c.cutID
	what := fmt.Sprintf("[outer frames cut: the stack had more than %d]", ring.MaxFrames)
	if stopped {
		id, what = &c.stoppedID, "[outer frames cut: the walk could not follow the stack further]"
	}
	if *id != 0 {
		return *id, nil
	}
	c.nextID++
	loc := &capture.Location{ID: c.nextID, Kind: capture.KindMissing, Lines: []capture.Line{{Function: what}}}
	if err := c.w.Location(loc); err != nil {
		return 0, err
	}
	*id = loc.ID
	return *id, nil
}

// nativeLoc is the Location of a return address (ID 0: the library's own
// frame, left out) and what it is to the interpreter.
type nativeLoc struct {
	id    uint64
	class stack.Class
}

// location writes the Location of a return address.
func (c *Collector) location(s *stream, pc uint64) (nativeLoc, error) {
	addr := pc - 1 // a return address: the call is the instruction before it
	loc := &capture.Location{Address: addr}
	m := s.lookup(pc)
	if m != nil {
		if m.self {
			return nativeLoc{}, nil
		}
		if m.pending != nil {
			if err := c.w.Mapping(m.pending); err != nil {
				return nativeLoc{}, err
			}
			m.pending = nil
			if c.unwind != nil {
				c.unwind.Want(m.path)
			}
		}
		loc.MappingID = m.mappingID
		if m.file != nil {
			key := symKey{m.path, addr - m.bias}
			lines, ok := c.lines[key]
			if !ok {
				lines = m.file.Lookup(key.vaddr)
				c.lines[key] = lines
			}
			loc.Lines = lines
		}
	}
	c.nextID++
	loc.ID = c.nextID
	return nativeLoc{loc.ID, c.classify(s, m, loc)}, c.w.Location(loc)
}
