package collect

import "slices"

// mappings are the start addresses of a process's sampled mappings (mmap,
// mremap, sbrk) still mapped, sorted, so that a munmap of a range finds the
// ones it ends. A mapping whose start the program never unmaps (it unmaps
// its tail only, or the middle) stays whole: a report counts it at its
// size until the process ends. There are as many as live sampled
// mappings: few, as every sampled one stands for rate bytes or more.
type mappings []uint64

func (m *mappings) add(addr uint64) {
	i, found := slices.BinarySearch(*m, addr)
	if !found {
		*m = slices.Insert(*m, i, addr)
	}
}

// take removes and returns the starts in [addr, addr+n).
func (m *mappings) take(addr, n uint64) []uint64 {
	end := addr + n
	if end < addr { // a range past the end of the address space
		end = ^uint64(0)
	}
	lo, _ := slices.BinarySearch(*m, addr)
	hi := lo
	for hi < len(*m) && (*m)[hi] < end {
		hi++
	}
	if hi == lo {
		return nil
	}
	out := slices.Clone((*m)[lo:hi])
	*m = slices.Delete(*m, lo, hi)
	return out
}
