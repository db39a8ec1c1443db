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
	var s *Stitcher
	for i := range c.Allocs {
		if a := &c.Allocs[i]; ForPool(a) {
			if s == nil {
				s = ForCapture(c)
			}
			a.StackID = s.stitch(a)
		}
	}
}

// ForCapture returns the Stitcher Stitch uses for c, for a caller that
// reads c's allocations one at a time instead (Alloc), in file order, and
// marks c stitched. Allocations must not be added to c meanwhile.
func ForCapture(c *capture.Capture) *Stitcher {
	c.Stitched = true
	s := NewStitcher(c, c.MaxID()+1)
	for i := range c.Origins {
		s.Origin(&c.Origins[i])
	}
	return s
}

// Alloc gives an allocation made for another thread its stitched stack,
// as Stitch does.
func (s *Stitcher) Alloc(a *capture.Alloc) {
	if ForPool(a) {
		a.StackID = s.stitch(a)
	}
}

// ForPool reports whether an allocation was made for another thread, and
// so needs stitching.
func ForPool(a *capture.Alloc) bool { return a.Method != capture.MethodSelf || a.Origin != 0 }

type originKey struct {
	stream uint32
	token  uint64
}

type frameKey struct {
	name   string
	method uint8
}

// A Stitcher stitches pool work one allocation at a time, as records
// arrive (a continuous profile, internal/fleet), into the Locations and
// Stacks of c, with IDs from first upwards that the caller keeps free.
type Stitcher struct {
	c       *capture.Capture
	next    uint64              // the next free ID for synthetic Locations and Stacks
	names   map[frameKey]uint64 // synthetic frame → Location ID
	stacks  map[string]uint64   // encoded location list → Stack ID
	origins map[originKey]*capture.Origin
	key     []byte
}

// NewStitcher returns a Stitcher adding to c.
func NewStitcher(c *capture.Capture, first uint64) *Stitcher {
	return &Stitcher{c: c, next: first, names: map[frameKey]uint64{}, stacks: map[string]uint64{}, origins: map[originKey]*capture.Origin{}}
}

// Origin makes an origin's stack known; the first for a token counts.
func (s *Stitcher) Origin(o *capture.Origin) {
	k := originKey{o.Stream, o.Token}
	if _, dup := s.origins[k]; !dup {
		s.origins[k] = o
	}
}

// Forget drops an origin no allocation will name again, to bound memory.
func (s *Stitcher) Forget(stream uint32, token uint64) { delete(s.origins, originKey{stream, token}) }

// Known reports whether an allocation's origin stack is known (or it needs
// none), so that Stack would not say "stack not recorded".
func (s *Stitcher) Known(a *capture.Alloc) bool {
	if a.Origin == 0 {
		return true
	}
	_, ok := s.origins[originKey{a.Stream, a.Origin}]
	return ok
}

// Stack returns the stitched stack of a pool worker's allocation (see
// Stitch), adding it to the capture when new.
func (s *Stitcher) Stack(a *capture.Alloc) uint64 { return s.stitch(a) }

func (s *Stitcher) stitch(a *capture.Alloc) uint64 {
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
func (s *Stitcher) frame(name string, kind capture.Kind, method uint8) uint64 {
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

func (s *Stitcher) file(loc uint64) string {
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
func (s *Stitcher) trimThreadEntry(locs []uint64) []uint64 {
	n := len(locs)
	for n > 1 && isLibc(s.file(locs[n-1])) {
		n--
	}
	return locs[:n]
}

// library names the pool a worker runs in: its outermost module outside
// libc, without directory or version ("libgomp" for libgomp.so.1).
func (s *Stitcher) library(worker []uint64) string {
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
