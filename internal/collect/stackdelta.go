package collect

// Stacks sent as deltas: a STACK record that carries only its inner frames
// and names its thread's previous STACK record for the outer ones
// (docs/ring-format.md, "Stacks by reference").

import (
	"fmt"

	"github.com/heaplens/heaplens/internal/ring"
)

// What a ring can make the agent keep: a hostile one can invent thread
// ids. A thread forgotten makes its next delta unreadable (malformed, its
// ALLOCs skipped), never a wrong stack.
const (
	maxBaseThreads = 16384
	maxBaseWords   = 4 << 20 // a native frame is a word, a Python frame 4
)

// threadBase is a thread's latest STACK record: its ref and whole stack,
// and what the agent made of it for the next delta (stackfast.go).
type threadBase struct {
	ref    uint32
	frames []uint64
	py     []ring.PyFrame
	merged baseMerge
}

func (t *threadBase) words() int {
	return len(t.frames) + 4*len(t.py) + len(t.merged.locs) + len(t.merged.inner) + 2*len(t.merged.suf)
}

// threadBases holds each thread's latest STACK record of one ring, and the
// buffers a delta is rebuilt in.
type threadBases struct {
	byTID  map[uint32]*threadBase
	words  int
	frames []uint64
	py     []ring.PyFrame
}

// rebuild makes a delta STACK record whole: its own inner frames, then the
// outer ones of its thread's latest STACK record, which must be its base.
// rec's frames then alias b's buffers until the next rebuild.
func (b *threadBases) rebuild(rec *ring.Record) error {
	if !rec.Delta {
		return nil
	}
	t := b.byTID[rec.TID]
	if t == nil || t.ref != rec.BaseRef || rec.BaseNative > len(t.frames) || rec.BasePy > len(t.py) ||
		len(rec.Frames)+rec.BaseNative > ring.MaxFrames || len(rec.Py)+rec.BasePy > ring.MaxPyFrames {
		b.forget(rec.TID) // the thread's next delta names this record, which is lost
		return fmt.Errorf("STACK %d of thread %d on base %d (%d+%d frames, %d+%d Python frames): no such base",
			rec.Ref, rec.TID, rec.BaseRef, len(rec.Frames), rec.BaseNative, len(rec.Py), rec.BasePy)
	}
	b.frames = append(append(b.frames[:0], rec.Frames...), t.frames[len(t.frames)-rec.BaseNative:]...)
	b.py = append(append(b.py[:0], rec.Py...), t.py[len(t.py)-rec.BasePy:]...)
	rec.Frames, rec.Py, rec.Delta = b.frames, b.py, false
	return nil
}

// note keeps the (whole) stack of a STACK record as its thread's base,
// with what the agent made of it (m.ok false: nothing a delta can use),
// which it takes: m is left with buffers to reuse.
func (b *threadBases) note(rec *ring.Record, m *baseMerge) {
	if rec.TID == 0 { // an older library's, or a thread without a tid: never a base
		return
	}
	t := b.byTID[rec.TID]
	if t == nil {
		if b.byTID == nil {
			b.byTID = make(map[uint32]*threadBase)
		}
		t = &threadBase{}
		b.byTID[rec.TID] = t
	}
	b.words -= t.words()
	t.ref = rec.Ref
	t.frames = append(t.frames[:0], rec.Frames...)
	t.py = append(t.py[:0], rec.Py...)
	t.merged.take(m)
	b.words += t.words()
	for tid := range b.byTID { // any other: map order
		if len(b.byTID) <= maxBaseThreads && b.words <= maxBaseWords {
			break
		}
		if tid != rec.TID {
			b.forget(tid)
		}
	}
}

func (b *threadBases) forget(tid uint32) {
	if t := b.byTID[tid]; t != nil {
		b.words -= t.words()
		delete(b.byTID, tid)
	}
}
