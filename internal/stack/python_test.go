package stack

import (
	"reflect"
	"testing"
)

// Native Location IDs 1–9 are ordinary code, 50–59 eval frames
// (_PyEval_EvalFrameDefault), 60–69 other interpreter frames; Python
// frames are 100 and up, innermost first within an activation.
func class(id uint64) Class {
	switch {
	case id >= 50 && id < 60:
		return Eval | Interp
	case id >= 60 && id < 70:
		return Interp
	}
	return 0
}

func TestMergePython(t *testing.T) {
	tests := []struct {
		name       string
		native     []uint64
		acts       [][]uint64
		keepInterp bool
		want       []uint64
	}{
		{"no Python", []uint64{1, 2, 3}, nil, false, []uint64{1, 2, 3}},
		{"no Python keeps the interpreter's frames", []uint64{1, 60, 50, 2}, nil, false, []uint64{1, 60, 50, 2}},
		{"one activation, one eval frame",
			[]uint64{1, 60, 50, 61, 2}, [][]uint64{{100, 101}}, false,
			[]uint64{1, 100, 101, 2}},
		{"interpreter frames kept on request",
			[]uint64{1, 60, 50, 61, 2}, [][]uint64{{100, 101}}, true,
			[]uint64{1, 60, 100, 101, 61, 2}},
		{"two activations through C: paired in order",
			[]uint64{1, 50, 3, 51, 2}, [][]uint64{{100}, {110, 111}}, false,
			[]uint64{1, 100, 3, 110, 111, 2}},
		{"more eval frames than activations: paired from the outermost",
			[]uint64{1, 50, 3, 51, 2}, [][]uint64{{110}}, false,
			[]uint64{1, 3, 110, 2}},
		{"fewer eval frames: paired from the innermost, the rest at the bottom",
			[]uint64{1, 50, 2}, [][]uint64{{100}, {110}, {120}}, false,
			[]uint64{1, 100, 2, 110, 120}},
		{"no eval frame at all: Python at the bottom",
			[]uint64{1, 2}, [][]uint64{{100, 101}}, false,
			[]uint64{1, 2, 100, 101}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			classes := make([]Class, len(tt.native))
			for i, id := range tt.native {
				classes[i] = class(id)
			}
			prefix := []uint64{999} // appended to, not overwritten
			got := MergePython(prefix, tt.native, classes, tt.acts, tt.keepInterp)
			if got[0] != 999 {
				t.Fatalf("dst's contents were overwritten: %v", got)
			}
			got = got[1:]
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
