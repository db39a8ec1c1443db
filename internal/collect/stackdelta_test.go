package collect

import (
	"slices"
	"testing"

	"github.com/heaplens/heaplens/internal/ring"
)

func pyFrames(codes ...uint64) []ring.PyFrame {
	var f []ring.PyFrame
	for _, c := range codes {
		f = append(f, ring.PyFrame{Code: c, Identity: uint32(c), Pos: int64(c % 7)})
	}
	return f
}

// Each case: STACK records of one ring in order; the last is checked.
func TestRebuildDelta(t *testing.T) {
	whole := ring.Record{TID: 7, Ref: 100, Frames: []uint64{0x11, 0x12, 0x13, 0x14}, Py: pyFrames(1, 2, 3)}
	delta := func(tid, baseRef uint32, k, j int, frames []uint64, py []ring.PyFrame) ring.Record {
		return ring.Record{TID: tid, Ref: 200, Delta: true, BaseRef: baseRef, BaseNative: k, BasePy: j, Frames: frames, Py: py}
	}
	tests := []struct {
		name       string
		recs       []ring.Record
		wantFrames []uint64
		wantPy     []ring.PyFrame
		wantErr    bool
	}{
		{"whole", []ring.Record{whole}, whole.Frames, whole.Py, false},
		{"inner frames replaced", []ring.Record{whole, delta(7, 100, 2, 2, []uint64{0x21}, pyFrames(9))},
			[]uint64{0x21, 0x13, 0x14}, pyFrames(9, 2, 3), false},
		{"all outer frames kept", []ring.Record{whole, delta(7, 100, 4, 3, nil, nil)}, whole.Frames, whole.Py, false},
		{"native only", []ring.Record{whole, delta(7, 100, 1, 0, []uint64{0x31, 0x32}, nil)},
			[]uint64{0x31, 0x32, 0x14}, nil, false},
		{"a delta's base is the delta rebuilt", []ring.Record{whole, delta(7, 100, 3, 3, []uint64{0x41}, nil),
			{TID: 7, Ref: 300, Delta: true, BaseRef: 200, BaseNative: 4, BasePy: 1, Frames: []uint64{0x51}}},
			[]uint64{0x51, 0x41, 0x12, 0x13, 0x14}, pyFrames(3), false},
		{"another thread's base", []ring.Record{whole, {TID: 8, Ref: 101, Frames: []uint64{0x99}},
			delta(7, 100, 1, 1, nil, nil)}, []uint64{0x14}, pyFrames(3), false},
		{"no base", []ring.Record{delta(7, 100, 1, 0, nil, nil)}, nil, nil, true},
		{"unknown thread", []ring.Record{whole, delta(9, 100, 1, 0, nil, nil)}, nil, nil, true},
		{"base not the thread's latest", []ring.Record{whole, {TID: 7, Ref: 101, Frames: []uint64{0x99}},
			delta(7, 100, 1, 0, nil, nil)}, nil, nil, true},
		{"more native frames than the base", []ring.Record{whole, delta(7, 100, 5, 0, nil, nil)}, nil, nil, true},
		{"more Python frames than the base", []ring.Record{whole, delta(7, 100, 0, 4, nil, nil)}, nil, nil, true},
		{"past MaxFrames", []ring.Record{whole, delta(7, 100, 2, 0, make([]uint64, ring.MaxFrames-1), nil)}, nil, nil, true},
		{"an older library's (no tid) is no base", []ring.Record{{Ref: 100, Frames: []uint64{1}}, delta(0, 100, 1, 0, nil, nil)},
			nil, nil, true},
		{"after a failed delta, the thread has no base", []ring.Record{whole, delta(7, 999, 1, 0, nil, nil),
			delta(7, 100, 1, 0, nil, nil)}, nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b threadBases
			var err error
			for i := range tt.recs {
				rec := tt.recs[i]
				if err = b.rebuild(&rec); err == nil {
					b.note(&rec, &baseMerge{})
				}
				if i == len(tt.recs)-1 {
					if (err != nil) != tt.wantErr {
						t.Fatalf("rebuild: %v, want error %v", err, tt.wantErr)
					}
					if err == nil && (!slices.Equal(rec.Frames, tt.wantFrames) || !slices.Equal(rec.Py, tt.wantPy) || rec.Delta) {
						t.Errorf("rebuilt %#x %v (delta %v), want %#x %v", rec.Frames, rec.Py, rec.Delta, tt.wantFrames, tt.wantPy)
					}
				}
			}
		})
	}
}

// A ring that invents thread ids cannot make the agent keep more than its
// bounds; a thread forgotten has no base (its delta is refused, not misread).
func TestThreadBasesBounded(t *testing.T) {
	var b threadBases
	frames := make([]uint64, 1000)
	inner := make([]int32, 100)
	for tid := uint32(1); tid <= 3*maxBaseThreads; tid++ {
		rec := ring.Record{TID: tid, Ref: tid % ring.MaxStackRef, Frames: frames[:tid%1000]}
		b.note(&rec, &baseMerge{ok: true, locs: frames[:tid%300], inner: inner[:tid%100]}) // its merge counts too
		if len(b.byTID) > maxBaseThreads || b.words > maxBaseWords {
			t.Fatalf("after %d threads: %d kept, %d words", tid, len(b.byTID), b.words)
		}
	}
	words := 0
	for _, tb := range b.byTID {
		words += tb.words()
	}
	if words != b.words {
		t.Errorf("%d words counted, %d kept", b.words, words)
	}
	forgotten := 0
	for tid := uint32(1); tid <= 3*maxBaseThreads; tid++ {
		rec := ring.Record{TID: tid, Ref: 1, Delta: true, BaseRef: tid % ring.MaxStackRef}
		if b.byTID[tid] == nil {
			forgotten++
			if b.rebuild(&rec) == nil {
				t.Fatalf("thread %d forgotten, its delta rebuilt", tid)
			}
		}
	}
	if forgotten == 0 {
		t.Error("nothing forgotten")
	}
}
