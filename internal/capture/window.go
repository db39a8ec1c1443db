package capture

// Window returns the capture as the time window [from, until]
// (CLOCK_MONOTONIC) sees it: only the Allocs made in it, the Frees made in
// it, the RSS readings taken in it, and the Ends that came by until. What
// was allocated before from does not exist in the window, so that its
// views say what the window itself allocated, held and kept (a test's
// allocations, peak and leaks). The records of the other tables are
// shared with c, not copied.
func (c *Capture) Window(from, until int64) *Capture {
	w := *c
	w.Allocs, w.Frees, w.RSS, w.FreeOrder = nil, nil, nil, nil
	in := func(t int64) bool { return from <= t && t <= until }
	order := c.FreeOrder
	if len(order) != len(c.Frees) {
		order = nil // no usable order: the replay puts frees first at equal times
	}
	kept := 0 // Allocs of c kept so far, while walking in file order
	nextAlloc := 0
	for j := range c.Frees {
		if order != nil {
			for ; nextAlloc < int(order[j]) && nextAlloc < len(c.Allocs); nextAlloc++ {
				if in(c.Allocs[nextAlloc].TimeNano) {
					kept++
				}
			}
		}
		if in(c.Frees[j].TimeNano) {
			w.Frees = append(w.Frees, c.Frees[j])
			w.FreeOrder = append(w.FreeOrder, int32(kept))
		}
	}
	for i := range c.Allocs {
		if in(c.Allocs[i].TimeNano) {
			w.Allocs = append(w.Allocs, c.Allocs[i])
		}
	}
	if order == nil {
		w.FreeOrder = nil
	}
	for i := range c.RSS {
		if in(c.RSS[i].TimeNano) {
			w.RSS = append(w.RSS, c.RSS[i])
		}
	}
	w.Ends = make(map[uint32]*End, len(c.Ends))
	for s, e := range c.Ends {
		if e.TimeNano <= until {
			w.Ends[s] = e
		}
	}
	return &w
}
