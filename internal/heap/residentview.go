package heap

import (
	"cmp"
	"slices"
)

// Resident is the resident view: the live set at the moment of the
// highest RSS reading (the heap's peak when RSS was never read), with each
// large block counted at the bytes of it that were resident at the last
// reading of its pages instead of at its size. A reservation the program
// barely touched (a 256 MiB mapping, OpenBLAS's buffers) then ranks by what
// it takes, as the kernel and cgroups count it; smaller blocks count at
// their size. Stale readings are counted too: the text report says which.
func (rp *Replay) Resident(opt Options) *Profile {
	at := rp.tl.PeakRSS.T
	if rp.tl.PeakRSS.Bytes <= 0 {
		at = rp.pk.at
	}
	p := rp.Live(opt, at)
	p.View = "resident"
	opt = rp.options(opt)
	type key struct {
		stream uint32
		stack  uint64
		tid    uint32
	}
	idx := map[key]int{}
	for i, s := range p.Samples {
		idx[key{s.Stream, s.StackID, s.TID}] = i
	}
	for _, b := range Residency(rp.c, opt, at) {
		a := b.Alloc
		tid := uint32(0)
		if opt.ByThread {
			tid = a.TID
		}
		i, ok := idx[key{a.Stream, a.StackID, tid}]
		if !ok {
			continue // left out by a filter
		}
		untouched := float64(a.Size) - float64(min(b.Resident, a.Size))
		cut := Weight(a.Size, rp.c.Meta.Rate) * untouched
		x := &p.Samples[i]
		// The variance shrinks with the estimate it is of: the block's
		// share of the sample is scaled, not its sampling.
		if x.Bytes > 0 {
			f := max(x.Bytes-cut, 0) / x.Bytes
			p.TotalVar -= x.Var * (1 - f*f)
			x.Var *= f * f
		}
		x.Bytes -= cut
		p.TotalBytes -= cut
	}
	slices.SortStableFunc(p.Samples, func(x, y Sample) int {
		return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.StackID, y.StackID), cmp.Compare(x.Stream, y.Stream))
	})
	return p
}
