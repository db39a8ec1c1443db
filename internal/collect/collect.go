// Package collect drains the rings of a profiling session into a capture:
// one stream per ring, native pcs symbolized while the target's files are
// still present, stacks and locations interned so each is written once, and
// a module's mapping written only once a location in it is.
package collect

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/ring"
	"github.com/heaplens/heaplens/internal/size"
	"github.com/heaplens/heaplens/internal/stack"
	"github.com/heaplens/heaplens/internal/symbolize"
	"github.com/heaplens/heaplens/internal/unwind"
)

// Collector turns ring records into capture records.
type Collector struct {
	dir    string
	self   string // the library's own file: its frames are not the program's
	w      *capture.Writer
	syms   *symbolize.Cache
	unwind *unwind.Publisher // nil: no unwind tables for the library (attach)
	// pyEvalParts caches evalParts by interpreter file: every process of a
	// tree runs the same one.
	pyEvalParts map[string][]unwind.Range
	owns        map[string]*ownAllocator // an executable's own allocator (ownalloc.go), nil entries for none
	pagemap     []byte                   // ReadResidency's buffer
	streams     map[string]*stream
	order       []*stream
	nextID      uint64
	cutID       uint64      // the Location marking a stack cut at the library's frame limit, once written
	stoppedID   uint64      // the Location marking a stack whose walk stopped short, once written
	stackIDs    *stackIndex // each stack written, by the hash of its Locations
	seeds       stackSeeds
	stackRec    capture.Stack // mergeStack's scratch
	lines       map[symKey][]capture.Line
	exits       map[int]syscall.WaitStatus
	awaited     map[int]bool // pids whose end the agent learns by waiting
	marked      map[int]bool // pids that said why they run unprofiled (unprofiledMarker)
	root        int          // the first pid awaited: the command heaplens runs
	maxRSS      uint64       // wait4's ru_maxrss of root, bytes (SetMaxRSS)
	// RingSize is the ring each process asked for (heaplens run); a
	// smaller one was cut to fit an address-space limit, and is noted.
	RingSize uint64
	// unwindCheck: HEAPLENS_UNWIND_CHECK=1, the unwind counts of every process are reported.
	unwindCheck bool
	warnings    []string
	nsNotes     int // pids translated (SetForeign)
	// notes name processes that ran unprofiled or with less than asked for.
	notes []string

	// NativePythonInternals keeps the interpreter's own frames in stacks
	// that have Python frames.
	NativePythonInternals bool

	// foreign, when set, reaches processes in other namespaces (SetForeign).
	foreign     Foreign
	clockOffset int64 // the processes' CLOCK_MONOTONIC less heaplens's (now)

	// Totals for the summary.
	Allocs, Frees uint64
	pyCodes       int
}

// Foreign reaches processes that run in other namespaces than heaplens
// (internal/container).
type Foreign interface {
	// Path is the name under which heaplens opens a file the process names path.
	Path(path string) string
	// HostPID is heaplens's pid of the process's own pid, 0 if it is gone.
	HostPID(pid int) int
	// ClockOffset is the processes' CLOCK_MONOTONIC less heaplens's.
	ClockOffset() time.Duration
}

// SetForeign says that the processes run in other namespaces than heaplens
// (heaplens attach into a container), reached through f: their files, the
// separate debug files among them, and their pids. Call it before the
// first Poll.
func (c *Collector) SetForeign(f Foreign) {
	c.foreign = f
	c.clockOffset = int64(f.ClockOffset())
	roots := symbolize.DebugRoots
	c.syms.DebugRoots = make([]string, len(roots))
	for i, r := range roots {
		c.syms.DebugRoots[i] = f.Path(r)
	}
}

// file is the name under which the agent opens a process's file.
func (c *Collector) file(path string) string {
	if c.foreign == nil {
		return path
	}
	return c.foreign.Path(path)
}

// translate finds the pid by which heaplens reaches the stream's process.
// The pids of the records and reports stay the process's own, which are
// always known: those of its PID namespace, like its paths those of its
// mount namespace; a note gives heaplens's pid beside them.
func (c *Collector) translate(s *stream) {
	if c.foreign == nil {
		return
	}
	// 0 when it ended before its ring was found (a fork storm's children).
	s.host = c.foreign.HostPID(s.hdr.PID)
	if s.host == s.hdr.PID || s.host == 0 {
		return
	}
	if c.nsNotes++; c.nsNotes <= maxNSNotes && c.w != nil {
		c.w.Note(&capture.Note{Stream: s.id, Text: fmt.Sprintf("pid %d of the process's PID namespace is pid %d in heaplens's", s.hdr.PID, s.host)})
	}
}

// maxNSNotes bounds the notes of pids translated (a fork storm makes hundreds).
const maxNSNotes = 16

type symKey struct {
	path  string
	vaddr uint64
}

type stream struct {
	id     uint32
	name   string
	r      *ring.Ring
	hdr    ring.Header
	mods   []*module
	locs   map[uint64]nativeLoc // pc -> its Location
	ended  bool
	locBuf []uint64
	sufBuf []stackHash // the hashes of locBuf's suffixes (stackID)
	// raw maps the stack of an ALLOC or ORIGIN record as the library
	// wrote it whole (pcs, Python frames, the cut flag) to its stack ID:
	// the same few stacks come back many times, and one lookup replaces
	// one per frame. STACK records do not use it (stackRecord). Stacks
	// with a Python frame of unknown code are not kept (the code may come
	// later).
	raw    *rawCache[uint64]
	rawBuf []byte
	// natives are the native parts nativeFrames resolved last, whose
	// outer frames the next one reuses; native is its answer.
	natives recent[uint64]
	native  nativeStack
	// nativeIDs and nativeClasses hold native when frames are left out.
	nativeIDs     []uint64
	nativeClasses []stack.Class
	refs          []refSlot   // by the slot of a STACK record's ref
	bases         threadBases // each thread's latest STACK record, the base of its next delta
	merge         baseMerge   // the latest STACK record's, for bases
	fastStacks    uint64      // STACK records merged from their base's merge (deltaMerge)
	parentStacks  uint64      // stacks written with a parent (stackID)
	badRefs       uint64      // ALLOCs naming a ref no STACK record defined

	host       int          // heaplens's pid of the process (hdr.PID is its own); 0 if it ended before it was found
	exitMark   *uint64      // the status the process passed to exit(), if it did
	highWater  uint64       // the kernel's high-water mark of its RSS: its exit mark, or the agent's last reading
	announced  bool         // its Process record is written
	py         *pyStream    // nil when the process runs no Python
	finalized  bool         // the interpreter started shutting down: the program is done
	finishedAt int64        // when it did
	late       uint64       // records after that, left out
	corrupt    bool         // a record header could not be framed: nothing more is read
	execd      bool         // its process exec'd an image that has no ring (see Execd)
	maps       mappings     // its sampled mappings still mapped
	own        *ownState    // an allocator linked into its executable beside malloc, or nil (ownalloc.go)
	big        bigBlocks    // its live sampled blocks of residentMin bytes or more
	exact      *exactBlocks // exact mode (ring.FlagExactFrees): its live blocks; nil otherwise
	published  uint64       // fingerprint of the big blocks last listed in its ring (publishResident)
}

func newStream(name string, r *ring.Ring, h ring.Header) *stream {
	s := &stream{name: name, r: r, hdr: h, host: h.PID, locs: map[uint64]nativeLoc{},
		raw: newRawCache[uint64](maxRawBytes)}
	if h.ExactFrees {
		s.exact = newExactBlocks()
	}
	return s
}

type module struct {
	mappingID uint64
	// pending is the module's Mapping record until a Location names it.
	// Most loaded libraries (the interpreter's extension modules, libc's
	// helpers) never appear in a sampled stack, and reports only look
	// mappings up through Locations, so unreferenced ones are not written.
	pending *capture.Mapping
	bias    uint64
	segs    []ring.Segment
	path    string
	file    *symbolize.File
	self    bool
}

// New returns a collector for the rings in dir, writing to w. self is the
// path of the preloaded library.
func New(dir, self string, w *capture.Writer) *Collector {
	return &Collector{
		dir: dir, self: self, w: w,
		syms:     symbolize.NewCache(),
		streams:  map[string]*stream{},
		stackIDs: newStackIndex(),
		seeds:    newStackSeeds(),
		lines:    map[symKey][]capture.Line{},
		exits:    map[int]syscall.WaitStatus{},
		awaited:  map[int]bool{},
		marked:   map[int]bool{},
		// The library's check mode: the target inherits the variable.
		unwindCheck: os.Getenv("HEAPLENS_UNWIND_CHECK") == "1",
	}
}

// BuildUnwindTables has the collector write the unwind table of the
// library and of every module that appears in a stack into the ring
// directory, where the library finds them (docs/unwind-format.md).
func (c *Collector) BuildUnwindTables() {
	c.unwind = unwind.NewPublisher(c.dir)
	c.unwind.Cache = unwind.DefaultCacheDir()
	if c.self != "" {
		c.unwind.Want(c.self)
	}
}

// Streams returns how many process images have been seen.
func (c *Collector) Streams() int { return len(c.order) }

// Live returns the pid of every stream that has not ended, by stream, as
// heaplens reaches it (SetForeign: not the process's own).
func (c *Collector) Live() map[uint32]int {
	live := map[uint32]int{}
	for _, s := range c.order {
		if !s.ended && s.r != nil {
			if s.host > 0 {
				live[s.id] = s.host
			}
		}
	}
	return live
}

// RingBytes returns the bytes of stream's ring in memory, which count in
// its process's resident set though they are heaplens's.
func (c *Collector) RingBytes(stream uint32) uint64 {
	for _, s := range c.order {
		if s.id == stream && s.r != nil && !s.ended {
			return s.r.Resident()
		}
	}
	return 0
}

// Marked returns the pids that said themselves why they run unprofiled.
func (c *Collector) Marked() map[int]bool { return c.marked }

// Images returns, for each process with a running stream, the executable
// of its newest image.
func (c *Collector) Images() map[int]string {
	out := map[int]string{}
	newest := map[int]int64{}
	for _, s := range c.order {
		if s.ended || s.r == nil {
			continue
		}
		if t, ok := newest[s.hdr.PID]; !ok || s.hdr.StartMonoNano > t {
			newest[s.hdr.PID] = s.hdr.StartMonoNano
			out[s.hdr.PID] = s.hdr.Exe
		}
	}
	return out
}

// Execd says that pid now runs an image without a ring: its running
// streams end as replaced by exec.
func (c *Collector) Execd(pid int) {
	for _, s := range c.order {
		if !s.ended && s.hdr.PID == pid {
			s.execd = true
		}
	}
}

// Warn notes a problem met outside the rings, as the collector's own.
func (c *Collector) Warn(msg string) { c.warn("%s", msg) }

// Warnings returns problems met while collecting (each once), then the
// processes that ran unprofiled or with less than asked for.
func (c *Collector) Warnings() []string {
	return append(append([]string(nil), c.warnings...), c.noteWarnings()...)
}

// warn notes a problem once, for the run's output and, as a Note record,
// for every report of the capture.
func (c *Collector) warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	for _, w := range c.warnings {
		if w == msg {
			return
		}
	}
	c.warnings = append(c.warnings, msg)
	if c.w != nil {
		c.w.Note(&capture.Note{Text: msg}) // a write error surfaces with the next record
	}
}

// Await says that the agent waits for pid itself: its last stream stays open
// until SetExit tells how it ended.
func (c *Collector) Await(pid int) {
	c.awaited[pid] = true
	if c.root == 0 {
		c.root = pid
	}
}

// SetExit records how a process that the agent waited for ended.
func (c *Collector) SetExit(pid int, ws syscall.WaitStatus) {
	c.exits[pid] = ws
	delete(c.awaited, pid)
}

// Poll discovers new rings and drains every ring. With final set, it drains
// rings whose process has not finished start-up too, and ends every stream.
func (c *Collector) Poll(final bool) error {
	// A stream ends when its process was dead before this poll looked for
	// rings: an exec'd image always creates its ring before it can die, so
	// a process that exec'd and whose new image already exited is then
	// seen as replaced, not as dead without an explanation. A stream found
	// by this poll is ended by the next one at the earliest.
	wasAlive := make(map[*stream]bool, len(c.order))
	for _, s := range c.order {
		if !s.ended {
			wasAlive[s] = c.awaited[s.hdr.PID] || s.alive()
		}
	}
	if err := c.discover(); err != nil {
		return err
	}
	// An exec gives a pid a newer ring: the older images of that pid are over.
	newest := map[int]int64{}
	for _, s := range c.order {
		newest[s.hdr.PID] = max(newest[s.hdr.PID], s.hdr.StartMonoNano)
	}
	type draining struct {
		s            *stream
		alive, known bool
		more         bool // its last slice was full
	}
	var todo []*draining
	for _, s := range c.order {
		if s.ended {
			continue
		}
		alive, known := wasAlive[s]
		if !known {
			alive = c.awaited[s.hdr.PID] || s.alive()
		}
		if !final && alive && !s.r.InitDone() {
			continue // wait for the module list, so early samples symbolize
		}
		todo = append(todo, &draining{s: s, alive: alive, known: known, more: true})
	}
	// A slice of each ring in turn, not each ring whole: the records of
	// processes at work at once then reach the capture close to time order,
	// which a reader that replays them as it reads needs (heap.Summarize).
	// Rounds are bounded, so that a process writing faster than the agent
	// reads cannot hold the poll.
	for round := 0; round < drainRounds; round++ {
		more := false
		for _, d := range todo {
			if !d.more {
				continue
			}
			n, err := c.drain(d.s, drainSlice)
			if err != nil {
				c.warn("%v", err)
			}
			d.more = err == nil && n == drainSlice
			more = more || d.more
		}
		if !more {
			break
		}
	}
	c.publishResident()
	for _, d := range todo {
		s := d.s
		replaced := s.hdr.StartMonoNano < newest[s.hdr.PID] || s.execd
		if final || (d.known && !d.alive) || replaced {
			if _, err := c.drain(s, 0); err != nil { // all it wrote
				c.warn("%v", err)
			}
			if err := c.end(s, replaced); err != nil {
				return err
			}
		}
	}
	return nil
}

// A poll drains each ring drainSlice records at a time, in turn, for at
// most drainRounds rounds (4 M records a ring: as many 32-byte FREEs as
// --rate 1's 128 MiB ring holds).
const (
	drainSlice  = 1024
	drainRounds = 4096
)

// Close releases the rings and symbol files.
func (c *Collector) Close() {
	if c.unwind != nil {
		c.unwind.Close()
	}
	for _, s := range c.order {
		s.r.Close()
	}
	c.syms.Close()
}

func (c *Collector) discover() error {
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		return fmt.Errorf("collect: %w", err)
	}
	var fresh []*stream
	for _, e := range ents {
		if c.unprofiledMarker(e.Name()) || !strings.HasPrefix(e.Name(), "ring.") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // gone already
		}
		// A name can come back once its file is unlinked (an exec restarts the
		// numbering); the inode cannot while the old ring is mapped.
		name := fmt.Sprintf("%s@%d", e.Name(), info.Sys().(*syscall.Stat_t).Ino)
		if c.streams[name] != nil {
			continue
		}
		path := filepath.Join(c.dir, e.Name())
		r, err := ring.Open(path)
		if errors.Is(err, ring.ErrNotReady) {
			continue
		}
		if err != nil {
			c.warn("%v", err)
			c.streams[name] = &stream{name: name, ended: true}
			continue
		}
		// Mapped now: unlinked, the memory goes away with the last process
		// that maps it, even if heaplens itself is killed.
		os.Remove(path)
		h := r.Header()
		c.ringNotes(h)
		fresh = append(fresh, newStream(name, r, h))
	}
	// Parents before children, earlier images before later ones.
	sort.Slice(fresh, func(i, j int) bool {
		a, b := fresh[i].hdr, fresh[j].hdr
		if a.StartMonoNano != b.StartMonoNano {
			return a.StartMonoNano < b.StartMonoNano
		}
		return a.Seq < b.Seq
	})
	for _, s := range fresh {
		s.id = uint32(len(c.order) + 1)
		c.translate(s)
		c.streams[s.name] = s
		c.order = append(c.order, s)
	}
	return nil
}

// announce writes the stream's Process record once its start-up is done,
// when what the library found out about Python is known.
func (c *Collector) announce(s *stream) error {
	if s.announced {
		return nil
	}
	s.announced = true
	if s.hdr.Attached {
		// An attach session's window opens when its library's start-up is
		// done, which it writes into the header then (docs/ring-format.md).
		h := s.r.Header()
		s.hdr.StartMonoNano, s.hdr.StartUnixNano = h.StartMonoNano, h.StartUnixNano
	}
	h := s.hdr
	p := s.r.Python()
	version, note := pythonInfo(p)
	if p.Status == ring.PyActive {
		s.py = &pyStream{eval: p.EvalAddr,
			codes: map[codeKey]*pyCode{}, locs: map[pyLocKey]uint64{}}
	}
	if definesMalloc(c.file(h.Exe)) {
		c.warn("pid %d (%s): the executable defines its own malloc, which comes before heaplens's: its heap allocations are not seen, "+
			"only its mappings (docs/allocators.md)", h.PID, command(h))
	} else {
		s.own = c.ownAllocatorOf(h)
	}
	if err := c.w.Process(&capture.Process{
		Stream: s.id, PID: h.PID, PPID: h.PPID,
		StartMonoNano: h.StartMonoNano, StartUnixNano: h.StartUnixNano,
		Cmdline: h.Cmdline, Exe: h.Exe, Python: version, PythonNote: note,
		Allocator: allocatorName(h),
	}); err != nil {
		return fmt.Errorf("collect: %w", err)
	}
	return nil
}

// alive reports whether the stream's process runs.
func (s *stream) alive() bool { return s.host > 0 && processAlive(s.host) }

func processAlive(pid int) bool {
	if pid <= 0 {
		return false // kill(0, 0) would ask about heaplens's process group
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// drain writes up to max of a stream's records (0: all there are) and
// returns how many it read.
func (c *Collector) drain(s *stream, max int) (int, error) {
	if err := c.announce(s); err != nil {
		return 0, err
	}
	if s.corrupt {
		return 0, nil
	}
	var werr error
	flush := false // a program's mark: whoever waits for it reads the file now
	n, err := s.r.DrainN(max, func(rec *ring.Record) {
		if werr != nil {
			return
		}
		if s.finalized && (rec.Type == ring.RecAlloc || rec.Type == ring.RecFree) {
			s.late++
			return
		}
		switch rec.Type {
		case ring.RecAlloc:
			werr = c.alloc(s, rec)
		case ring.RecOrigin:
			werr = c.origin(s, rec)
		case ring.RecFree:
			if rec.Func == ring.FuncMunmap {
				werr = c.unmap(s, rec)
				break
			}
			if rec.Func != 0 && s.exact != nil && !s.exact.free(rec.Addr, rec.Func) {
				break // a block it never saw allocated, or a PyMem free whose malloc free follows
			}
			c.Frees++
			delete(s.big, rec.Addr)
			werr = c.w.Free(&capture.Free{Stream: s.id, TID: rec.TID, TimeNano: rec.TimeNano, Addr: rec.Addr})
		case ring.RecResident:
			werr = c.residentAtExit(s, rec)
		case ring.RecModule:
			werr = c.module(s, rec)
		case ring.RecStack:
			werr = c.stackRecord(s, rec)
		case ring.RecCode:
			c.code(s, rec.Code)
		case ring.RecMallinfo:
			m := rec.Malloc
			werr = c.w.Malloc(&capture.Malloc{Stream: s.id, TimeNano: rec.TimeNano, Arena: m.Arena, Mmapped: m.Mmapped, InUse: m.InUse, Free: m.Free, Keep: m.Keep})
		case ring.RecMark:
			switch rec.Mark {
			case ring.MarkPyFinalizing:
				s.finalized, s.finishedAt = true, rec.TimeNano
			case ring.MarkExit:
				v := rec.Value
				s.exitMark = &v
			case ring.MarkHighWater:
				if rec.Value > s.highWater {
					s.highWater = rec.Value
				}
			case ring.MarkRSS:
				werr = c.w.RSS(&capture.RSS{Stream: s.id, TimeNano: rec.TimeNano, Bytes: rec.Value})
			case ring.MarkUser:
				werr = c.w.Mark(&capture.Mark{Stream: s.id, TimeNano: rec.TimeNano, Value: rec.Value})
				flush = true
			}
		}
	})
	if werr == nil && flush {
		werr = c.w.Flush()
	}
	if werr != nil {
		return n, fmt.Errorf("collect: %w", werr)
	}
	if err != nil {
		// The target is never stopped for this: its later records are dropped
		// and counted by the library once the ring is full.
		s.corrupt = true
		return n, fmt.Errorf("collect: pid %d: %w; the rest of its ring is not read", s.hdr.PID, err)
	}
	return n, nil
}

// module notes a loaded module. Its Mapping record is written before the
// first Location in it (see module.pending).
func (c *Collector) module(s *stream, rec *ring.Record) error {
	m := &module{bias: rec.Bias, segs: append([]ring.Segment(nil), rec.Segments...), path: rec.Path}
	m.self = c.self != "" && sameFile(rec.Path, c.self)
	c.nextID++
	m.mappingID = c.nextID
	mp := &capture.Mapping{ID: m.mappingID, Stream: s.id, LoadBias: rec.Bias, File: rec.Path, TimeNano: rec.TimeNano}
	// pprof wants one range per mapping: take the executable segment.
	for i, sg := range m.segs {
		if sg.Flags&1 != 0 || i == len(m.segs)-1 {
			mp.Start, mp.Limit, mp.Offset = rec.Bias+sg.Vaddr, rec.Bias+sg.Vaddr+sg.Memsz, sg.Offset
			break
		}
	}
	if f, err := c.syms.File(c.file(rec.Path)); err == nil {
		m.file = f
		mp.BuildID = f.BuildID()
	}
	m.pending = mp
	s.mods = append(s.mods, m)
	return nil
}

func sameFile(a, b string) bool {
	if a == b {
		return true
	}
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// lookup finds the module holding pc; the latest one wins (an address range
// can be reused after dlclose).
func (s *stream) lookup(pc uint64) *module {
	for i := len(s.mods) - 1; i >= 0; i-- {
		m := s.mods[i]
		for _, sg := range m.segs {
			if pc-m.bias-sg.Vaddr < sg.Memsz {
				return m
			}
		}
	}
	return nil
}

func (c *Collector) alloc(s *stream, rec *ring.Record) error {
	var sid uint64
	if rec.HasRef {
		if s.refs != nil {
			sid = s.refs[rec.Ref%ring.StackRefs].stack(rec.Ref / ring.StackRefs)
		}
		if sid == 0 {
			s.badRefs++ // its STACK record is always before it: a damaged ring
			return nil
		}
	} else {
		var err error
		if sid, err = c.stack(s, rec); err != nil {
			return err
		}
	}
	c.Allocs++
	if s.own != nil {
		s.seeAlloc(rec, sid)
	}
	switch kind := capture.MemKind(rec.Func); {
	case kind == capture.MemMmap:
		s.maps.add(rec.Addr)
	case s.exact != nil:
		s.exact.alloc(rec.Addr, kind == capture.MemPyMem)
	}
	if rec.Size >= residentMin {
		if s.big == nil {
			s.big = bigBlocks{}
		}
		s.big[rec.Addr] = rec.Size
	} else if s.big != nil {
		delete(s.big, rec.Addr) // a new block at the address of one whose free was lost
	}
	return c.w.Alloc(&capture.Alloc{
		Stream: s.id, TID: rec.TID, TimeNano: rec.TimeNano,
		Addr: rec.Addr, Size: rec.Size, StackID: sid, Func: rec.Func,
		Origin: rec.Token, Method: rec.Method,
	})
}

// unmap frees the sampled mappings that start in a munmap's range. The
// library records every munmap: only the agent knows which were sampled.
func (c *Collector) unmap(s *stream, rec *ring.Record) error {
	for _, addr := range s.maps.take(rec.Addr, rec.Size) {
		delete(s.big, addr)
		c.Frees++
		if err := c.w.Free(&capture.Free{Stream: s.id, TID: rec.TID, TimeNano: rec.TimeNano, Addr: addr}); err != nil {
			return err
		}
	}
	return nil
}

func (c *Collector) end(s *stream, replaced bool) error {
	if err := c.announce(s); err != nil {
		return err
	}
	s.ended = true
	cnt := s.r.Counters()
	e := &capture.End{Stream: s.id, DroppedAllocs: cnt.DroppedAllocs, DroppedFrees: cnt.DroppedFree}
	if cnt.Head > cnt.Tail {
		e.LostBytes = cnt.Head - cnt.Tail
	}
	c.backingNote(s, cnt)
	if s.own != nil {
		c.ownNote(s)
	}
	if cnt.Truncated > 0 {
		c.warn("%d stacks of pid %d were cut at 4096 native frames", cnt.Truncated, s.hdr.PID)
	}
	if cnt.UnwindDiffered > 0 || c.unwindCheck {
		c.warn("pid %d: unwind check: %d native stacks walked with unwind tables, %d by libgcc; %d of them differed from libgcc's",
			s.hdr.PID, cnt.UnwindTables, cnt.UnwindLibgcc, cnt.UnwindDiffered)
	}
	if cnt.WalksCut > 0 && c.w != nil { // for reports, not a warning: greenlet programs have them by design
		c.w.Note(&capture.Note{Stream: s.id, Text: fmt.Sprintf(
			"pid %d: %d sampled stacks end where the native walk could not follow the stack further (a coroutine's, above its first frame; a small signal stack), marked \"[outer frames cut: …]\" at their root",
			s.hdr.PID, cnt.WalksCut)})
	}
	if cnt.AllocatorMaps > 0 && c.w != nil { // for reports, not a warning
		c.w.Note(&capture.Note{Stream: s.id, Text: fmt.Sprintf(
			"pid %d: %s took %s in %d mappings for itself: the blocks in them are counted, the mappings are not",
			s.hdr.PID, allocatorName(s.hdr), size.FormatSize(cnt.AllocatorMapBytes), cnt.AllocatorMaps)})
	}
	if cnt.OMPGuessed > 0 {
		c.warn("%d OpenMP regions of pid %d called a runtime that heaplens found outside the calling library's scope, "+
			"which may not be the one it would have used (docs/pool-attribution.md)", cnt.OMPGuessed, s.hdr.PID)
	}
	if s.exact != nil {
		c.exactNote(s)
	}
	if s.badRefs > 0 {
		c.warn("%d sampled allocations of pid %d named a stack that was never sent, and were skipped", s.badRefs, s.hdr.PID)
	}
	if s.r.Malformed > 0 {
		c.warn("%d malformed ring records of pid %d were skipped", s.r.Malformed, s.hdr.PID)
	}
	if note := pymemNote(s.r.Python()); note != "" {
		c.warn("pid %d: %s", s.hdr.PID, note)
	}
	if replaced {
		e.Exec = true
	} else if ws, ok := c.exits[s.hdr.PID]; ok {
		e.Known = true
		if ws.Signaled() {
			e.Signaled, e.Signal = true, int(ws.Signal())
		} else {
			e.ExitCode = ws.ExitStatus()
		}
	} else if s.exitMark != nil {
		e.Known, e.ExitCode = true, int(*s.exitMark&0xff)
	}
	e.HighWater, e.Finished, e.Ring = s.highWater, s.finishedAt, s.r.Backed()
	if s.hdr.PID == c.root && !replaced {
		e.MaxRSS = c.maxRSS
	}
	e.TimeNano = c.now()
	if detached, at := s.r.Detached(); s.hdr.Attached && !e.Known && !e.Exec && (detached || s.alive()) {
		e.Detached = true
		if detached && at > s.hdr.StartMonoNano && at < e.TimeNano {
			e.TimeNano = at // when the session ended, not when the agent wrote it down
		}
	}
	return c.w.End(e)
}
