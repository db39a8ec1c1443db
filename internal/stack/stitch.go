package stack

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/heaplens/heaplens/internal/capture"
)

// Stitch gives every allocation made for another thread (pool work) the
// stack it is charged to, root first: the origin thread's stack as that
// thread recorded it (an Origin record), then "[pool: LIB (METHOD)]" (a
// KindPool location carrying the method), then the worker's own frames
// without the C library's thread entry. A pool worker's allocation with no
// origin gets the root "<unattributed: LIB worker>" instead. LIB is the
// library the worker thread runs in (its outermost frame outside libc).
// Stitched stacks are new Stacks; the workers' own stacks stay. Every report
// stitches a capture once, after loading it; later calls do nothing.
func Stitch(c *capture.Capture) {
	if c.Stitched {
		return
	}
	c.Stitched = true
	s := stitcher{c: c, names: map[frameKey]uint64{}, stacks: map[string]uint64{}, origins: map[originKey]*capture.Origin{}}
	for i := range c.Allocs {
		a := &c.Allocs[i]
		if a.Method == capture.MethodSelf && a.Origin == 0 {
			continue
		}
		if s.next == 0 {
			s.init()
		}
		a.StackID = s.stitch(a)
	}
}

type originKey struct {
	stream uint32
	token  uint64
}

type frameKey struct {
	name   string
	method uint8
}

type stitcher struct {
	c       *capture.Capture
	next    uint64              // the next free ID for synthetic Locations and Stacks
	names   map[frameKey]uint64 // synthetic frame → Location ID
	stacks  map[string]uint64   // encoded location list → Stack ID
	origins map[originKey]*capture.Origin
	key     []byte
}

func (s *stitcher) init() {
	var top uint64
	for id := range s.c.Locations {
		top = max(top, id)
	}
	for id := range s.c.Stacks {
		top = max(top, id)
	}
	for id := range s.c.Mappings {
		top = max(top, id)
	}
	s.next = top + 1
	for i := range s.c.Origins {
		o := &s.c.Origins[i]
		k := originKey{o.Stream, o.Token}
		if _, dup := s.origins[k]; !dup {
			s.origins[k] = o
		}
	}
}

func (s *stitcher) stitch(a *capture.Alloc) uint64 {
	var worker []uint64
	if st := s.c.Stacks[a.StackID]; st != nil {
		worker = s.trimThreadEntry(st.Locations)
	}
	lib := s.library(worker)
	locs := append([]uint64(nil), worker...)
	switch {
	case a.Origin == 0:
		locs = append(locs, s.frame(fmt.Sprintf("<unattributed: %s worker>", lib), capture.KindPool, a.Method))
	default:
		locs = append(locs, s.frame(fmt.Sprintf("[pool: %s (%s)]", lib, capture.MethodNames[a.Method]), capture.KindPool, a.Method))
		if o := s.origins[originKey{a.Stream, a.Origin}]; o != nil && s.c.Stacks[o.StackID] != nil {
			locs = append(locs, s.c.Stacks[o.StackID].Locations...)
		} else {
			locs = append(locs, s.frame(fmt.Sprintf("[thread %d: stack not recorded]", a.Origin>>32), capture.KindMissing, 0))
		}
	}
	s.key = s.key[:0]
	for _, id := range locs {
		s.key = binary.AppendUvarint(s.key, id)
	}
	if id, ok := s.stacks[string(s.key)]; ok {
		return id
	}
	id := s.next
	s.next++
	s.c.Stacks[id] = &capture.Stack{ID: id, Locations: locs}
	s.stacks[string(s.key)] = id
	return id
}

// frame returns the ID of a synthetic Location with one function name.
func (s *stitcher) frame(name string, kind capture.Kind, method uint8) uint64 {
	k := frameKey{name, method}
	if id, ok := s.names[k]; ok {
		return id
	}
	id := s.next
	s.next++
	s.c.Locations[id] = &capture.Location{ID: id, Lines: []capture.Line{{Function: name}}, Kind: kind, Method: method}
	s.names[k] = id
	return id
}

func (s *stitcher) file(loc uint64) string {
	if l := s.c.Locations[loc]; l != nil {
		if m := s.c.Mappings[l.MappingID]; m != nil {
			return filepath.Base(m.File)
		}
	}
	return ""
}

func isLibc(file string) bool {
	return strings.HasPrefix(file, "libc.so") || strings.HasPrefix(file, "libc-") || strings.HasPrefix(file, "libpthread")
}

// trimThreadEntry drops the root frames in libc (clone3, start_thread): the
// origin's stack takes their place.
func (s *stitcher) trimThreadEntry(locs []uint64) []uint64 {
	n := len(locs)
	for n > 1 && isLibc(s.file(locs[n-1])) {
		n--
	}
	return locs[:n]
}

// library names the pool a worker runs in: its outermost module outside
// libc, without directory or version ("libgomp" for libgomp.so.1).
func (s *stitcher) library(worker []uint64) string {
	for i := len(worker) - 1; i >= 0; i-- {
		f := s.file(worker[i])
		if f == "" || isLibc(f) {
			continue
		}
		if j := strings.Index(f, ".so"); j > 0 {
			f = f[:j]
		}
		return f
	}
	return "native"
}

// Method returns how the bytes of a stack were tied to the code that asked
// for them: the method of its pool frame (see Stitch), or MethodSelf for a
// thread's own allocations.
func Method(c *capture.Capture, stackID uint64) uint8 {
	if st := c.Stacks[stackID]; st != nil {
		for _, id := range st.Locations {
			if l := c.Locations[id]; l != nil && l.Kind == capture.KindPool {
				return l.Method
			}
		}
	}
	return capture.MethodSelf
}
