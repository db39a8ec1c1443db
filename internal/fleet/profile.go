// Package fleet hands the heap profile of a running command to fleet
// profilers: it keeps a continuous profile beside the capture (Profile, a
// capture.Observer), serves it as Go-style pprof endpoints that Grafana
// Alloy, Parca and go tool pprof scrape (Handler), and pushes it to a
// Pyroscope-compatible /ingest endpoint or, as OTLP profiles, to an
// OpenTelemetry Collector (Pusher). docs/fleet.md says which
// conventions it follows. Its memory is bounded by the program's distinct
// stacks and live sampled blocks, not by how long the command runs.
package fleet

import (
	"slices"
	"sync"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/stack"
)

// Bounds on what waits for pool work's origin stacks.
const (
	maxPending = 4096    // pool allocations whose origin stack has not arrived yet
	maxOrigins = 1 << 16 // origin stacks kept for allocations still to come
)

// firstSynthetic is where the IDs of stitched stacks and their made-up
// frames start: far above the collector's own, which count up from 1.
const firstSynthetic = 1 << 62

// Profile is the running heap profile of a command's process tree, fed
// record by record as the capture is written. Per (process, stack, thread, memory kind) it sums
// the weighted samples allocated so far and those still live; a block
// stops being live when freed or when its process ends.
type Profile struct {
	mu      sync.Mutex
	c       *capture.Capture // Meta, Processes, Mappings, Locations, Stacks; no Allocs
	st      *stack.Stitcher
	sites   map[siteKey]*site
	live    map[liveKey]*block
	pending []*block // pool allocations waiting for their origin's stack, oldest first
	origins []originRef
	ended   map[uint32]heap.DropStats // processes that ended, with what their rings lost
}

type siteKey struct {
	stream uint32
	stack  uint64
	tid    uint32 // OTLP's thread.id and pprof's thread_id label
	kind   string // capture.MemKind: a sample has one memory kind
}

// site is one (process, stack, thread, memory kind)'s running totals.
type site struct {
	alloc, inuse heap.Sample
}

type liveKey struct {
	stream uint32
	addr   uint64
}

// block is a live sampled allocation; site is nil while it waits for its
// origin's stack (pending).
type block struct {
	a     capture.Alloc
	w     float64 // heap.Weight of the allocation
	site  *site
	freed bool // freed while pending
}

type originRef struct {
	stream uint32
	token  uint64
}

// New returns an empty Profile.
func New() *Profile {
	c := capture.NewCapture()
	return &Profile{c: c, st: stack.NewStitcher(c, firstSynthetic), sites: map[siteKey]*site{},
		live: map[liveKey]*block{}, ended: map[uint32]heap.DropStats{}}
}

// Observe takes one record of the capture being written (capture.Observer).
func (p *Profile) Observe(r *capture.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch r.Type {
	case capture.RecMeta:
		p.c.Meta = *r.Meta
	case capture.RecProcess:
		p.c.Processes = append(p.c.Processes, r.Process)
	case capture.RecMapping:
		p.c.Mappings[r.Mapping.ID] = r.Mapping
	case capture.RecLocation:
		p.c.Locations[r.Location.ID] = r.Location
	case capture.RecStack:
		p.c.Stacks[r.Stack.ID] = r.Stack
	case capture.RecAlloc:
		p.alloc(r.Alloc)
	case capture.RecFree:
		p.free(liveKey{r.Free.Stream, r.Free.Addr})
	case capture.RecOrigin:
		p.origin(r.Origin)
	case capture.RecEnd:
		p.end(r.End)
	}
}

func (p *Profile) alloc(a capture.Alloc) {
	if _, ended := p.ended[a.Stream]; ended {
		return
	}
	k := liveKey{a.Stream, a.Addr}
	if p.live[k] != nil { // the free in between was lost: the older block is gone
		p.free(k)
	}
	b := &block{a: a, w: heap.Weight(a.Size, p.c.Meta.Rate)}
	p.live[k] = b
	if stack.ForPool(&a) && !p.st.Known(&a) {
		p.pending = append(p.pending, b)
		if len(p.pending) > maxPending { // its origin is late: charge it without
			p.resolve(p.pending[0])
			p.pending = p.pending[1:]
		}
		return
	}
	p.resolve(b)
}

// resolve charges a block to its stitched stack's site.
func (p *Profile) resolve(b *block) {
	id := b.a.StackID
	if stack.ForPool(&b.a) {
		id = p.st.Stack(&b.a)
	}
	k := siteKey{b.a.Stream, id, b.a.TID, capture.MemKind(b.a.Func)}
	s := p.sites[k]
	if s == nil {
		s = &site{}
		s.alloc.Stream, s.alloc.StackID, s.alloc.TID = k.stream, k.stack, k.tid
		s.inuse.Stream, s.inuse.StackID, s.inuse.TID = k.stream, k.stack, k.tid
		p.sites[k] = s
	}
	// Func stands for the site's memory kind (malloc and realloc are both
	// malloc), not for the one function its samples went through.
	s.alloc.Add(&b.a, b.w, 1)
	s.alloc.Func = b.a.Func
	if b.freed {
		return
	}
	b.site = s
	s.inuse.Add(&b.a, b.w, 1)
	s.inuse.Func = b.a.Func
}

func (p *Profile) free(k liveKey) {
	b := p.live[k]
	if b == nil {
		return // a block allocated before profiling, or whose record was dropped
	}
	delete(p.live, k)
	if b.site == nil {
		b.freed = true
		return
	}
	b.site.inuse.Add(&b.a, b.w, -1)
}

func (p *Profile) origin(o capture.Origin) {
	p.st.Origin(&o)
	p.origins = append(p.origins, originRef{o.Stream, o.Token})
	if len(p.origins) > maxOrigins {
		old := p.origins[0]
		p.st.Forget(old.stream, old.token)
		p.origins = p.origins[1:]
	}
	kept := p.pending[:0]
	for _, b := range p.pending {
		if b.a.Stream == o.Stream && b.a.Origin == o.Token {
			p.resolve(b)
		} else {
			kept = append(kept, b)
		}
	}
	clear(p.pending[len(kept):])
	p.pending = kept
}

// end drops a finished process's live blocks: they count no more.
func (p *Profile) end(e *capture.End) {
	stream := e.Stream
	p.ended[stream] = heap.DropStats{DroppedAllocs: e.DroppedAllocs, DroppedFrees: e.DroppedFrees, LostBytes: e.LostBytes}
	for k := range p.live {
		if k.stream == stream {
			p.free(k)
		}
	}
	kept := p.pending[:0]
	for _, b := range p.pending {
		if b.a.Stream != stream {
			kept = append(kept, b)
		}
	}
	clear(p.pending[len(kept):])
	p.pending = kept
}

// Snapshot is the profile at one moment: what the export package needs to
// write it, detached from the running Profile.
type Snapshot struct {
	Capture *capture.Capture // shares the records, never their maps with the running Profile
	Alloc   *heap.Profile    // allocated since the start, per (process, stack)
	Inuse   *heap.Profile    // live now
	Taken   time.Time
}

// Snapshot returns the profile now; pid, when not 0, keeps that process's
// samples only (every image of the pid).
func (p *Profile) Snapshot(pid int) *Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := capture.NewCapture()
	c.Meta = p.c.Meta
	c.Processes = append(c.Processes, p.c.Processes...)
	for id, m := range p.c.Mappings {
		c.Mappings[id] = m
	}
	for id, l := range p.c.Locations {
		c.Locations[id] = l
	}
	for id, s := range p.c.Stacks {
		c.Stacks[id] = s
	}
	keep := func(stream uint32) bool { return true }
	if pid != 0 {
		streams := c.StreamsOf(pid)
		keep = func(stream uint32) bool { return slices.Contains(streams, stream) }
	}
	drops := map[uint32]heap.DropStats{}
	for stream, d := range p.ended {
		if keep(stream) {
			drops[stream] = d
		}
	}
	snap := &Snapshot{Capture: c, Taken: time.Now().Round(0), // wall clock only: windows of deltas add up
		Alloc: &heap.Profile{View: "allocs", Rate: c.Meta.Rate, Drops: drops},
		Inuse: &heap.Profile{View: "live", Rate: c.Meta.Rate, Drops: drops}}
	for k, s := range p.sites {
		if !keep(k.stream) {
			continue
		}
		appendSample(snap.Alloc, s.alloc)
		if s.inuse.Count > 0 {
			appendSample(snap.Inuse, s.inuse)
		}
	}
	return snap
}

func appendSample(p *heap.Profile, s heap.Sample) {
	p.Samples = append(p.Samples, s)
	p.TotalBytes += s.Bytes
	p.TotalObjects += s.Objects
	p.TotalVar += s.Var
}

// Pending returns how many pool allocations wait for their origin's stack.
func (p *Profile) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending)
}
