package export

import (
	"maps"
	"regexp"

	"github.com/heaplens/heaplens/internal/capture"
)

// FocusStacks returns a stack filter for heap.Options.KeepStack that keeps
// the stacks with at least one frame whose label (as in StackFrames)
// matches re, like pprof's -focus. The process label is not a frame.
func FocusStacks(c *capture.Capture, re *regexp.Regexp) func(uint64) bool {
	memo := map[uint64]bool{}
	return func(id uint64) bool {
		if v, ok := memo[id]; ok {
			return v
		}
		v := false
		for _, f := range StackFrames(c, id) {
			if re.MatchString(f) {
				v = true
				break
			}
		}
		memo[id] = v
		return v
	}
}

// HideFrames returns a copy of c whose stacks leave out the frames whose
// label matches re, like pprof's -hide: samples are kept and charged to the
// remaining frames. An inlined function is hidden on its own; a location
// whose every line is hidden leaves the stack. c is not modified; the copy
// shares everything but the Locations and Stacks maps.
func HideFrames(c *capture.Capture, re *regexp.Regexp) *capture.Capture {
	out := *c
	out.Locations = make(map[uint64]*capture.Location, len(c.Locations))
	gone := map[uint64]bool{}
	for id, loc := range c.Locations {
		m := c.Mappings[loc.MappingID]
		if len(loc.Lines) == 0 {
			if re.MatchString(FrameLabel(loc, nil, m)) {
				gone[id] = true
			} else {
				out.Locations[id] = loc
			}
			continue
		}
		var keep []capture.Line
		for i := range loc.Lines {
			if !re.MatchString(FrameLabel(loc, &loc.Lines[i], m)) {
				keep = append(keep, loc.Lines[i])
			}
		}
		switch {
		case len(keep) == 0:
			gone[id] = true
		case len(keep) == len(loc.Lines):
			out.Locations[id] = loc
		default:
			cp := *loc
			cp.Lines = keep
			out.Locations[id] = &cp
		}
	}
	out.Stacks = make(map[uint64]*capture.Stack, len(c.Stacks))
	for id, st := range c.Stacks {
		locs := make([]uint64, 0, len(st.Locations))
		for _, l := range st.Locations {
			if !gone[l] {
				locs = append(locs, l)
			}
		}
		out.Stacks[id] = &capture.Stack{ID: id, Locations: locs}
	}
	out.Ends = maps.Clone(c.Ends)
	return &out
}
