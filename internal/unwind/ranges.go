package unwind

import (
	"debug/elf"
	"slices"
)

// FDE is the code range [Begin, End) one FDE of a file describes. Without
// symbols these are still the extents of the code: compilers give each
// function, and each part of one they move out of line (GCC's .cold parts),
// an FDE of its own.
type FDE struct {
	Begin, End uint64
	f          fde
}

// FDEs returns the FDEs of f that cover code, in address order.
func FDEs(f *elf.File) ([]FDE, error) {
	x, err := ehFrameOf(f)
	if err != nil {
		return nil, err
	}
	var out []FDE
	for _, d := range x.fdes() {
		if d.end > d.begin {
			out = append(out, FDE{d.begin, d.end, d})
		}
	}
	slices.SortFunc(out, func(a, b FDE) int {
		switch {
		case a.Begin < b.Begin:
			return -1
		case a.Begin > b.Begin:
			return 1
		}
		return 0
	})
	return out, nil
}

// AtEntry reports whether the frame at addr, in d's range, is as at a
// function's entry: the CFA is rsp + 8 and nothing was pushed. A tail call
// jumps only from there (the frame torn down), and only to there. x86-64
// code only.
func (d *FDE) AtEntry(addr uint64) bool {
	entry := Rule{Kind: KindRSP, CFAOffset: 8}.Encode()
	at := unknown
	runFDE(&archAMD64, &d.f, func(a uint64, r uint32) {
		if a <= addr {
			at = r
		}
	})
	return at == entry
}

// Range is an address range [Begin, End).
type Range struct{ Begin, End uint64 }
