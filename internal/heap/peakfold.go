package heap

// peakFold keeps, as a replay goes, the live samples at the highest heap
// so far, per (stream, stack, hooked function): the peak view without
// replaying again up to the peak once it is known. Only at rate 1, where
// every sample weighs 1 and the sums of sizes are whole numbers, the same
// in any order, so that the view is Replay's exactly. A cell's change
// since the last peak waits in delta until the next peak adds it to peak:
// each change is added once, whatever the number of peaks.
type peakFold struct {
	index   map[cellKey]int32
	keys    []cellKey
	delta   []cellSum // by cell: the change since the last peak
	peak    []cellSum // by cell: the live samples at the last peak
	touched []int32   // cells whose delta is not zero, maybe
	dirty   []bool    // by cell: in touched
}

type cellKey struct {
	stream uint32
	fn     uint8
	stack  uint64
}

type cellSum struct {
	n     int64
	bytes float64
}

func newPeakFold() *peakFold { return &peakFold{index: map[cellKey]int32{}} }

// cell returns the cell of a block.
func (f *peakFold) cell(b *liveBlock) int32 {
	k := cellKey{b.stream, b.fn, b.stack}
	i, ok := f.index[k]
	if !ok {
		i = int32(len(f.keys))
		f.index[k] = i
		f.keys = append(f.keys, k)
		f.delta, f.peak, f.dirty = append(f.delta, cellSum{}), append(f.peak, cellSum{}), append(f.dirty, false)
	}
	return i
}

// add adds a block (sign 1) or takes it away (−1).
func (f *peakFold) add(cell int32, sign int64, size uint64) {
	d := &f.delta[cell]
	d.n += sign
	d.bytes += float64(sign) * float64(size)
	if !f.dirty[cell] {
		f.dirty[cell] = true
		f.touched = append(f.touched, cell)
	}
}

// reached says the heap is at a new peak.
func (f *peakFold) reached() {
	for _, c := range f.touched {
		f.peak[c].n += f.delta[c].n
		f.peak[c].bytes += f.delta[c].bytes
		f.delta[c], f.dirty[c] = cellSum{}, false
	}
	f.touched = f.touched[:0]
}

// addTo adds the samples live at the last peak to b, leaving out the
// streams gone says.
func (f *peakFold) addTo(b *builder, gone func(stream uint32) bool) {
	for c, s := range f.peak {
		k := f.keys[c]
		if s.n <= 0 || gone(k.stream) {
			continue
		}
		sk := key{stream: k.stream, stack: k.stack}
		x := b.sites[sk]
		if x == nil {
			x = &Sample{Stream: k.stream, StackID: k.stack, Func: k.fn}
			b.sites[sk] = x
		} else if x.Func != k.fn {
			x.Func = FuncMixed
		}
		x.Count += int(s.n)
		x.Objects += float64(s.n)
		x.Bytes += s.bytes
	}
}
