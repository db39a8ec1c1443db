package unwind

import (
	"debug/elf"
	"slices"
)

// Range is the address range [Begin, End) of one FDE.
type Range struct{ Begin, End uint64 }

// FunctionRanges returns the ranges of f's FDEs, in address order, leaving
// out empty ones. Without symbols they are still the extents of the code:
// compilers give each function, and each part of one they move out of line
// (GCC's .cold parts), an FDE of its own.
func FunctionRanges(f *elf.File) ([]Range, error) {
	x, err := ehFrameOf(f)
	if err != nil {
		return nil, err
	}
	var out []Range
	for _, d := range x.fdes() {
		if d.end > d.begin {
			out = append(out, Range{d.begin, d.end})
		}
	}
	slices.SortFunc(out, func(a, b Range) int {
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
