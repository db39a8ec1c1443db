package capture

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
)

// Capture is a whole capture in memory, as Load returns it.
type Capture struct {
	Meta      Meta
	Processes []*Process // by order of appearance
	Mappings  map[uint64]*Mapping
	Locations map[uint64]*Location
	Stacks    map[uint64]*Stack
	Allocs    []Alloc         // file order
	Frees     []Free          // file order
	Ends      map[uint32]*End // by stream
	RSS       []RSS           // file order
	Origins   []Origin        // file order; stitched into Allocs' stacks by stack.Stitch
	Notes     []*Note         // file order
	Marks     []Mark          // file order
	Mallocs   []Malloc        // file order
	Residents []Resident      // file order

	// FreeOrder keeps the file order between Allocs and Frees, which the
	// two slices alone lose: Frees[i] came after Allocs[:FreeOrder[i]] and
	// before Allocs[FreeOrder[i]:]. Views that replay events use it to
	// break timestamp ties. It may be nil in captures built by hand. It is
	// int32 as replays index events (MaxEvents): a 10-million-sample
	// capture holds it for every free.
	FreeOrder []int32

	// Stitched is set by stack.Stitch, which gives pool work the stacks of
	// its origins once per capture.
	Stitched bool

	// byStream indexes Processes for Process, built by readAll; read-only
	// after that, as the web UI computes views of one Capture concurrently.
	// A Capture built by hand, or whose Processes changed since, is scanned.
	byStream map[uint32]*Process
	indexed  int // len(Processes) when byStream was built

	// eventStacks and eventStreams are the stacks and streams the Allocs
	// and Frees that LoadEvents handed on named (nil otherwise), for Check
	// and Resolve.
	eventStacks  map[uint64]bool
	eventStreams map[uint32]bool
	eventKnown   *[256]uint64 // stacks known to exist, by ID modulo 256
	eventStream  uint32       // the last stream noted

	// Skipped counts records of unknown type (written by a newer heaplens).
	Skipped int
	// Shortened counts names cut to MaxName bytes.
	Shortened int
	// Duplicates counts records ignored because an earlier record had the
	// same ID (Meta: any second Meta; Process and End: same Stream).
	Duplicates int
	// Problems are the dangling references Resolve found (see Check).
	Problems []string

	// parents are the stacks whose parent Load could not resolve; those
	// before placed have their placeholder (parents.go).
	parents []parentProblem
	placed  int
}

// NewCapture returns an empty Capture with its maps allocated.
func NewCapture() *Capture {
	return &Capture{
		Mappings:  make(map[uint64]*Mapping),
		Locations: make(map[uint64]*Location),
		Stacks:    make(map[uint64]*Stack),
		Ends:      make(map[uint32]*End),
		byStream:  make(map[uint32]*Process),
	}
}

// Load reads the capture file at path. On a damaged file it returns
// everything read before the damage together with a *CorruptError, so
// callers can report what is missing and still use the rest.
func Load(path string) (*Capture, error) { return loadFile(path, nil) }

// loadFile is Load, or LoadEvents with event.
func loadFile(path string, event func(*Record)) (*Capture, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	defer f.Close()
	var hint int64
	if st, err := f.Stat(); err == nil {
		hint = st.Size()
	}
	c, err := readAll(bufio.NewReaderSize(f, 1<<20), hint, true, event)
	if c != nil {
		c.Resolve()
	}
	return c, pathError(path, err)
}

// ReadAll reads a capture stream to its end, like Load. The returned
// Capture is non-nil whenever the header was valid or truncated, and holds
// every Location and Stack its records refer to (see Resolve).
func ReadAll(r io.Reader) (*Capture, error) {
	c, err := readAll(r, 0, false, nil)
	if c != nil {
		c.Resolve()
	}
	return c, err
}

// A file's size gives the Allocs' and Frees' starting capacity, so that
// loading a large capture does not copy them over and over as they grow
// (with twice their size in memory while it does): at most one event per
// bytesPerEvent bytes (real captures compress an Alloc and its Free to
// 5-20 bytes), and at most presizeMax events, so that a file cannot make
// the reader reserve more than about 1.6 GiB before a record is read.
const (
	bytesPerEvent = 8
	presizeMax    = 1 << 24
)

// MaxEvents is the most Allocs plus Frees a capture may hold to be read: the
// heap package indexes its replay with int32 (at ~64 GiB of records in
// memory, far beyond any real capture).
const MaxEvents = math.MaxInt32

// readAll reads a capture; size, when known, is the file's size in bytes.
// ahead reads chunks on another goroutine (Reader.ReadAhead): for files,
// whose reads end, not for streams whose next read may wait. event, if not
// nil, gets the Alloc and Free records instead of the Capture (LoadEvents).
func readAll(r io.Reader, size int64, ahead bool, event func(*Record)) (*Capture, error) {
	rd, err := NewReader(r)
	if err != nil {
		var ce *CorruptError
		if errors.As(err, &ce) {
			return NewCapture(), err
		}
		return nil, err
	}
	if ahead {
		rd.ReadAhead()
		defer rd.Close()
	}
	a := newAssembler(event)
	c := a.c
	if n := min(size/bytesPerEvent, presizeMax); n > 0 && event == nil {
		c.Allocs = make([]Alloc, 0, n)
		c.Frees = make([]Free, 0, n)
		c.FreeOrder = make([]int32, 0, n)
	}
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err == nil {
			err = a.add(rec)
		}
		if err != nil {
			c.Skipped, c.Shortened = rd.Skipped(), rd.Shortened()
			return c, err
		}
	}
	c.Skipped, c.Shortened = rd.Skipped(), rd.Shortened()
	return c, nil
}

// assembler puts a capture's records together into a Capture, in file
// order: what readAll does with each record it reads, and a Skeleton with
// each record written.
type assembler struct {
	c         *Capture
	event     func(*Record) // if not nil, gets the Allocs and Frees instead of c (LoadEvents)
	haveMeta  bool
	streams   map[uint32]bool // with a Process record
	events    int             // Allocs and Frees
	words     int             // IDs and Locations of the Stack records (parents.go)
	inherited int             // Locations stacks inherited from their parents
}

func newAssembler(event func(*Record)) *assembler {
	a := &assembler{c: NewCapture(), event: event, streams: map[uint32]bool{}}
	if event != nil {
		a.c.eventStacks, a.c.eventStreams, a.c.eventKnown = map[uint64]bool{}, map[uint32]bool{}, new([256]uint64)
	}
	return a
}

// putOnce puts v in m at k unless an earlier record had k, which it
// counts in Duplicates: the first record of an ID counts.
func putOnce[K comparable, V any](c *Capture, m map[K]V, k K, v V) {
	if _, dup := m[k]; dup {
		c.Duplicates++
		return
	}
	m[k] = v
}

// add adds one record; an error means the capture can take no more.
func (a *assembler) add(rec *Record) error {
	c := a.c
	if rec.Type == RecAlloc || rec.Type == RecFree {
		if a.events >= MaxEvents {
			return fmt.Errorf("capture holds more than %d allocations and frees, more than heaplens can replay; record it with a larger --rate", MaxEvents)
		}
		a.events++
		if a.event != nil {
			c.eventNamed(rec)
			a.event(rec)
			return nil
		}
	}
	if rec.Type.known() {
		recordTypes[rec.Type].keep(a, rec)
	}
	return nil
}

// meta keeps the first Meta record.
func (a *assembler) meta(rec *Record) {
	if a.haveMeta {
		a.c.Duplicates++
		return
	}
	a.haveMeta = true
	a.c.Meta = *rec.Meta
}

// process keeps the first Process record of each stream.
func (a *assembler) process(rec *Record) {
	c := a.c
	if a.streams[rec.Process.Stream] {
		c.Duplicates++
		return
	}
	a.streams[rec.Process.Stream] = true
	c.Processes = append(c.Processes, rec.Process)
	c.byStream[rec.Process.Stream] = rec.Process
	c.indexed++
}

// Process returns the process of a stream, or nil.
func (c *Capture) Process(stream uint32) *Process {
	if c.byStream != nil && c.indexed == len(c.Processes) {
		return c.byStream[stream]
	}
	for _, p := range c.Processes {
		if p.Stream == stream {
			return p
		}
	}
	return nil
}

// Resolve makes a capture whole for reports, once, when it is read: every
// location a stack names and every stack an allocation or origin names
// exists afterwards. Those a damaged capture lacks become KindMissing
// placeholders, "<unknown location N>" and "<unknown stack N>", so that no
// report meets a dangling reference and all name them alike. What was
// wrong is kept in Problems (see Check).
func (c *Capture) Resolve() {
	c.Problems = c.Check()
	if len(c.Problems) == 0 {
		return
	}
	for _, sid := range slices.Sorted(maps.Keys(c.Stacks)) {
		for _, id := range c.Stacks[sid].Locations {
			if c.Locations[id] == nil {
				c.Locations[id] = missing(id, fmt.Sprintf("<unknown location %d>", id))
			}
		}
	}
	var next uint64 // the next free ID for a placeholder location
	nextID := func() uint64 {
		if next == 0 {
			next = c.MaxID() + 1
		}
		next++
		return next - 1
	}
	c.placeParents(nextID)
	stack := func(id uint64) {
		if id == 0 || c.Stacks[id] != nil {
			return
		}
		loc := nextID()
		c.Locations[loc] = missing(loc, fmt.Sprintf("<unknown stack %d>", id))
		c.Stacks[id] = &Stack{ID: id, Locations: []uint64{loc}}
	}
	for i := range c.Allocs {
		stack(c.Allocs[i].StackID)
	}
	for _, id := range slices.Sorted(maps.Keys(c.eventStacks)) {
		stack(id)
	}
	for i := range c.Origins {
		stack(c.Origins[i].StackID)
	}
}

func missing(id uint64, label string) *Location {
	return &Location{ID: id, Kind: KindMissing, Lines: []Line{{Function: label}}}
}

// StreamsOf returns the streams of every image of process pid, in order
// of appearance; none when the capture has no such process.
func (c *Capture) StreamsOf(pid int) []uint32 {
	var out []uint32
	for _, p := range c.Processes {
		if p.PID == pid {
			out = append(out, p.Stream)
		}
	}
	return out
}

// MaxID returns the largest Mapping, Location or Stack ID: those made up
// after reading take the IDs above it.
func (c *Capture) MaxID() uint64 {
	return max(maxKey(c.Locations), maxKey(c.Stacks), maxKey(c.Mappings))
}

func maxKey[V any](m map[uint64]V) uint64 {
	var top uint64
	for k := range m {
		top = max(top, k)
	}
	return top
}

// Check lists dangling references: records that name a stream, mapping,
// location or stack the capture does not contain. The agent never writes
// them, but a damaged or truncated capture can hold them; reports then show
// placeholders instead of failing. Each kind of problem is one line with a
// count and an example.
func (c *Capture) Check() []string {
	streams := make(map[uint32]bool, len(c.Processes))
	for _, p := range c.Processes {
		streams[p.Stream] = true
	}
	type problem struct {
		n       int
		example string
	}
	probs := make(map[string]*problem)
	note := func(what, example string) {
		p := probs[what]
		if p == nil {
			p = &problem{example: example}
			probs[what] = p
		}
		p.n++
	}
	for _, id := range slices.Sorted(maps.Keys(c.Mappings)) {
		m := c.Mappings[id]
		if !streams[m.Stream] {
			note("mappings name an unknown stream", fmt.Sprintf("mapping %d, stream %d", m.ID, m.Stream))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.Locations)) {
		l := c.Locations[id]
		if l.MappingID != 0 && c.Mappings[l.MappingID] == nil {
			note("locations name an unknown mapping", fmt.Sprintf("location %d, mapping %d", l.ID, l.MappingID))
		}
	}
	for _, sid := range slices.Sorted(maps.Keys(c.Stacks)) {
		s := c.Stacks[sid]
		for _, id := range s.Locations {
			if c.Locations[id] == nil {
				note("stacks name an unknown location", fmt.Sprintf("stack %d, location %d", s.ID, id))
			}
		}
	}
	c.checkParents(note)
	// Events come in runs of one stream and often one stack: the last known
	// ones are not looked up again (maps, by the million).
	var knownStack uint64
	knownStream := ^uint64(0)
	for i := range c.Allocs {
		a := &c.Allocs[i]
		if a.StackID != 0 && a.StackID != knownStack {
			if c.Stacks[a.StackID] == nil {
				note("allocs name an unknown stack", fmt.Sprintf("alloc %d, stack %d", i, a.StackID))
			} else {
				knownStack = a.StackID
			}
		}
		if uint64(a.Stream) != knownStream {
			if !streams[a.Stream] {
				note("allocs name an unknown stream", fmt.Sprintf("alloc %d, stream %d", i, a.Stream))
			} else {
				knownStream = uint64(a.Stream)
			}
		}
	}
	// Events LoadEvents handed on count once per stack or stream they name.
	for _, id := range slices.Sorted(maps.Keys(c.eventStacks)) {
		if c.Stacks[id] == nil {
			note("allocs name an unknown stack", fmt.Sprintf("stack %d", id))
		}
	}
	for _, s := range slices.Sorted(maps.Keys(c.eventStreams)) {
		if !streams[s] {
			note("allocs or frees name an unknown stream", fmt.Sprintf("stream %d", s))
		}
	}
	for i := range c.Origins {
		if o := &c.Origins[i]; o.StackID != 0 && c.Stacks[o.StackID] == nil {
			note("origins name an unknown stack", fmt.Sprintf("origin %d, stack %d", i, o.StackID))
		}
	}
	for i := range c.Frees {
		if s := c.Frees[i].Stream; uint64(s) != knownStream {
			if !streams[s] {
				note("frees name an unknown stream", fmt.Sprintf("free %d, stream %d", i, s))
			} else {
				knownStream = uint64(s)
			}
		}
	}
	for _, s := range slices.Sorted(maps.Keys(c.Ends)) {
		if !streams[s] {
			note("end records name an unknown stream", fmt.Sprintf("stream %d", s))
		}
	}
	out := make([]string, 0, len(probs))
	for what, p := range probs {
		out = append(out, fmt.Sprintf("%d %s (e.g. %s)", p.n, what, p.example))
	}
	sort.Strings(out)
	return out
}
