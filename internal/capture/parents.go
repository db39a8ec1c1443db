package capture

import "fmt"

// Stacks named by a parent (docs/capture-format.md, "Stack"): Load makes
// them whole as it reads them, so that a Capture's stacks are what they
// were before parents existed.

// MaxStackLocations bounds a stack that a parent makes longer: its own
// Locations and those it inherits. The agent's stacks hold at most a
// location per native and Python frame the library records
// (internal/ring's MaxFrames and MaxPyFrames) and one for a cut.
const MaxStackLocations = 1 << 16

// What the Locations that stacks inherit from their parents may add up to:
// inheritFloor, then inheritPerWord for every Location and ID the Stack
// records hold (each takes a byte of the file at least). A delta-merged
// stack of py_torch at --rate 1 inherits ~40 Locations for ~6; a file
// cannot make the reader hold more than about 64 times what it holds.
const inheritPerWord = 64

var inheritFloor = 1 << 26 // a variable for tests

// parentProblem is a stack whose parent could not be resolved: the
// placeholder Location Resolve appends to it says why.
type parentProblem struct {
	stack, parent uint64
	what          string // the problem, as Check lists it
	label         string // the placeholder's
}

// stack keeps the first Stack record of an ID, whole.
func (a *assembler) stack(rec *Record) {
	s := rec.Stack
	if _, dup := a.c.Stacks[s.ID]; dup {
		a.c.Duplicates++
		return
	}
	a.words += 1 + len(s.Locations)
	if s.Parent != 0 {
		a.inherit(s)
	}
	a.c.Stacks[s.ID] = s
}

// inherit appends to s, a stack just read, its parent's Locations from
// Skip on. The parent must be a stack read before: a stack cannot be its
// own ancestor.
func (a *assembler) inherit(s *Stack) {
	p := a.c.Stacks[s.Parent]
	problem := func(what, label string) {
		a.c.parents = append(a.c.parents, parentProblem{s.ID, s.Parent, what, label})
		s.Skip = 0 // Parent stays until placeParents: its children are damaged too
	}
	switch {
	case p == nil:
		problem("stacks name an unknown parent stack", fmt.Sprintf("<unknown stack %d>", s.Parent))
		return
	case p.Parent != 0:
		problem("stacks name a damaged parent stack", fmt.Sprintf("<damaged stack %d>", s.Parent))
		return
	case int64(s.Skip) > int64(len(p.Locations)):
		problem("stacks skip more locations than their parent has",
			fmt.Sprintf("<stack %d has no location %d>", s.Parent, s.Skip))
		return
	}
	n := len(p.Locations) - int(s.Skip)
	switch {
	case len(s.Locations)+n > MaxStackLocations:
		problem(fmt.Sprintf("stacks are longer than %d locations", MaxStackLocations),
			fmt.Sprintf("<outer locations of stack %d cut>", s.Parent))
		return
	case a.inherited+n > inheritFloor+inheritPerWord*a.words:
		problem("stacks inherit more locations from their parents than the capture can hold",
			fmt.Sprintf("<outer locations of stack %d cut>", s.Parent))
		return
	}
	a.inherited += n
	whole := make([]uint64, len(s.Locations)+n)
	copy(whole[copy(whole, s.Locations):], p.Locations[s.Skip:])
	s.Locations, s.Parent, s.Skip = whole, 0, 0
}

// placeParents appends to each stack whose parent could not be resolved
// a missing Location saying why, with an ID from next; once.
func (c *Capture) placeParents(next func() uint64) {
	for _, p := range c.parents[c.placed:] {
		id := next()
		c.Locations[id] = missing(id, p.label)
		s := c.Stacks[p.stack]
		s.Locations, s.Parent = append(s.Locations, id), 0
	}
	c.placed = len(c.parents)
}

// checkParents notes, for Check, the stacks whose parent could not be
// resolved.
func (c *Capture) checkParents(note func(what, example string)) {
	for _, p := range c.parents {
		note(p.what, fmt.Sprintf("stack %d, parent %d", p.stack, p.parent))
	}
}
