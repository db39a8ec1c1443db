// Package capture holds the heaplens capture: the self-contained record of one
// profiled run (processes, mappings, symbolized locations, stacks, sampled
// allocations and frees), and its file format. The format is written down in
// docs/capture-format.md.
package capture

import "fmt"

// Meta describes the whole run. It is the first record of a capture.
type Meta struct {
	FormatVersion   uint32
	HeaplensVersion string
	Rate            uint64   // mean sampling period in bytes; 1 = every allocation
	StartUnixNano   int64    // wall clock at agent start
	Command         []string // the command heaplens ran; attached, the process's command line
	Host            string
	// AttachedPID is the process heaplens attach profiled, 0 for heaplens
	// run. Its streams begin at the attach and end at the detach.
	AttachedPID int
	// AttachedHostPID is, when the process runs in another PID namespace
	// than heaplens (a container), its pid in heaplens's; AttachedPID and
	// every other pid of the capture are then those of its namespace.
	AttachedHostPID int
}

// Process is one stream: one process image that loaded the library. An exec
// inside the same pid starts a new Process with the same PID and a new Stream.
type Process struct {
	Stream        uint32 // unique within the capture; every other record names it
	PID, PPID     int
	StartMonoNano int64 // CLOCK_MONOTONIC when the library initialised
	StartUnixNano int64
	Cmdline       []string
	Exe           string
	Python        string // the interpreter's version ("3.11.7"), empty if none
	PythonNote    string // why Python frames are missing, when they are
	// Allocator names what served malloc: "glibc", or another allocator
	// with its file ("jemalloc (/usr/lib/…/libjemalloc.so.2)"); empty in
	// captures from before it was recorded.
	Allocator string
}

// Mapping is a loaded ELF module of one stream, as pprof understands mappings:
// [Start, Limit) in the process's address space backed by File at Offset.
// LoadBias is what dl_iterate_phdr reports as dlpi_addr: ELF vaddr = pc - LoadBias.
type Mapping struct {
	ID       uint64 // unique within the capture
	Stream   uint32
	Start    uint64
	Limit    uint64
	Offset   uint64
	LoadBias uint64
	File     string
	BuildID  string // hex, empty if none
	TimeNano int64  // CLOCK_MONOTONIC when the module was seen
}

// Line is one (possibly inlined) function at a location.
type Line struct {
	Function string // demangled
	File     string // source file, may be empty
	Line     int    // 0 when unknown
}

// Location is one program counter of one stream, symbolized while the target's
// files were present. Lines are innermost first (the pprof convention): Lines[0]
// is the inlined callee, the last is the function the pc physically sits in.
// Lines is empty when nothing is known, and the report shows Address.
type Location struct {
	ID        uint64 // unique within the capture, never 0
	MappingID uint64 // 0 when no mapping covers Address
	Address   uint64 // runtime pc (a return address minus one for caller frames)
	Lines     []Line
	Kind      Kind
	// Method is, for a KindPool location, how the pool's work was tied to
	// its origin (Method*).
	Method uint8
}

// Kind says what a Location stands for.
type Kind uint8

const (
	// KindNative is a program counter in a process (Address, MappingID).
	KindNative Kind = iota
	// KindPython is a position in Python code: Lines[0] holds the code
	// object's qualified name, co_filename and the line; no mapping.
	KindPython
	// KindPool is made up when reading: the hand-off from a thread pool's
	// worker to the thread it worked for ("[pool: libgomp (openmp)]"), or to
	// no one ("<unattributed: libgomp worker>"). Method says how.
	KindPool
	// KindMissing is made up when reading, for what is not there: a stack
	// its thread never recorded, a location or stack a damaged capture
	// refers to but does not hold.
	KindMissing

	numKinds
)

// KindNames name the kinds in JSON and dumps.
var KindNames = [numKinds]string{KindNative: "native", KindPython: "python", KindPool: "pool", KindMissing: "unknown"}

func (k Kind) String() string {
	if k < numKinds {
		return KindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Stack is a call stack, leaf first, as location IDs.
//
// A record may name the stack by an earlier one, its parent: its own
// Locations, then the parent's from index Skip on (docs/capture-format.md,
// "Stack"). A Capture's stacks are whole: Load resolves the parents and
// leaves Parent 0. Read from a Reader, Locations are the record's own;
// given to a Writer, they are whole, and the record leaves out the last
// Inherited of them, which must be the parent's from Skip on.
type Stack struct {
	ID        uint64 // unique within the capture, never 0
	Locations []uint64
	Parent    uint64 // 0: none
	Skip      uint32
	Inherited int32 // writing: how many Locations at the end are the parent's
}

// Alloc is one sampled allocation. Its estimated weight is derived from Size
// and Meta.Rate (see internal/heap), never stored.
type Alloc struct {
	Stream   uint32
	TID      uint32
	TimeNano int64 // CLOCK_MONOTONIC
	Addr     uint64
	Size     uint64 // requested bytes
	StackID  uint64
	// Origin is the token of the thread this allocation was made for (0 =
	// none), and Method how that was decided (Method*). Allocations made on
	// a thread pool's worker carry the token of the thread that submitted
	// the work; the reader stitches that thread's stack (an Origin record)
	// above the worker's frames.
	Origin uint64
	Method uint8
	Func   uint8 // which hooked function (FuncMalloc…); beside Method, so that an Alloc takes 56 bytes, not 64
}

// Origin is the stack of a thread that had work done by a thread pool,
// recorded by that thread itself under the token its workers' allocations
// carry.
type Origin struct {
	Stream   uint32
	Token    uint64
	TID      uint32
	TimeNano int64
	StackID  uint64
}

// Resident is how much of a large sampled block was resident when the
// agent last looked (/proc/PID/pagemap), at most once a second: a mapping
// or a large malloc'd block reserves its size, but only the pages the
// program touched take memory.
type Resident struct {
	Stream   uint32
	TimeNano int64
	Addr     uint64 // the block's address, as its Alloc has it
	Size     uint64 // bytes looked at (the block's pages)
	Resident uint64 // bytes of them resident (or swapped out)
}

// Malloc is what glibc's malloc held in one process at one time (its
// mallinfo2, taken by the library once per 64 MiB allocated): the heap's free
// memory that no sampled block explains.
type Malloc struct {
	Stream   uint32
	TimeNano int64
	Arena    uint64 // bytes in the arenas (sbrk'd and mapped heaps)
	Mmapped  uint64 // bytes in blocks malloc mapped on their own
	InUse    uint64 // bytes of the arenas in blocks in use
	Free     uint64 // bytes of the arenas in free blocks
	Keep     uint64 // of which at the top of the main arena, releasable by malloc_trim
}

// Mark is a point in time a profiled program named with heaplens_mark
// (preload/heaplens.h): the pytest plugin marks each test's end. Everything
// the program's process recorded before the mark comes before it in the
// file.
type Mark struct {
	Stream   uint32
	TimeNano int64
	Value    uint64
}

// How an allocation's origin was decided (docs/ring-format.md, "Thread pools").
const (
	MethodSelf         uint8 = iota // the thread allocated for itself
	MethodAPI                       // the pool declared it (docs/pool-api.md)
	MethodOpenMP                    // an OpenMP region (GOMP_parallel* or OMPT)
	_                               // 3: reserved (per-library adapters were planned; none was needed)
	MethodFallback                  // the one Python thread blocked in native code
	MethodUnattributed              // a worker of a Python process with no origin found
	MethodCreator                   // no Python thread waits: the thread that created the worker
)

// MethodNames names the methods for reports, labels and JSON.
var MethodNames = map[uint8]string{
	MethodSelf: "self", MethodAPI: "api", MethodOpenMP: "openmp",
	MethodFallback: "fallback", MethodUnattributed: "unattributed", MethodCreator: "creator",
}

// Free is the release of a sampled allocation (free, realloc, or the old
// block of a realloc that moved).
type Free struct {
	Stream   uint32
	TID      uint32
	TimeNano int64
	Addr     uint64
}

// End says how a stream finished and what it lost.
type End struct {
	Stream        uint32
	TimeNano      int64
	ExitCode      int  // valid when !Signaled and Known
	Signal        int  // valid when Signaled
	Signaled      bool // killed by a signal
	Known         bool // the exit status is known (the agent waited for it)
	Exec          bool // the image was replaced by exec; the pid lives on
	Detached      bool // heaplens attach detached: the process runs on
	DroppedAllocs uint64
	DroppedFrees  uint64
	LostBytes     uint64 // ring bytes reserved but never committed (a writer died mid-record)
	// HighWater is the kernel's high-water mark of the image's resident
	// memory (VmHWM, or ru_maxrss from its exit path), bytes; 0 unknown.
	HighWater uint64
	// MaxRSS is wait4's ru_maxrss for the command heaplens ran itself: the
	// most any of its images or reaped descendants held resident, what
	// /usr/bin/time prints as %M; 0 on every other End.
	MaxRSS uint64
	// Finished is when the program was done, if before the process ended:
	// the moment a Python interpreter began finalizing (CLOCK_MONOTONIC);
	// 0 otherwise.
	Finished int64
	// Ring is the bytes of the process's heaplens ring resident at its end
	// (header and backed data): heaplens's part of its RSS and high-water
	// marks, at most; 0 unknown.
	Ring uint64
}

// RSS is the resident set size of a stream's process, sampled by the agent
// from /proc while the target runs (about every 100 ms), to draw beside the
// estimated heap.
type RSS struct {
	Stream   uint32
	TimeNano int64  // CLOCK_MONOTONIC, like every other time
	Bytes    uint64 // resident bytes
	// HighWater is the kernel's high-water mark (VmHWM) at the reading:
	// exact, unlike the series of Bytes; 0 unknown.
	HighWater uint64
}

// Note is something the agent met while collecting that a reader should
// be told (a process that ran unprofiled, malformed ring records, …).
type Note struct {
	Stream uint32 // the stream it concerns; 0 = the run as a whole
	Text   string
}

// Hooked function identifiers, as in preload/heaplens_ring.h.
const (
	FuncMalloc uint8 = iota + 1
	FuncCalloc
	FuncRealloc
	FuncReallocarray
	FuncPosixMemalign
	FuncAlignedAlloc
	FuncMemalign
	FuncValloc
	FuncPvalloc
	FuncPyMemMalloc // PyMem_Malloc/PyObject_Malloc: an object from pymalloc's arenas
	FuncPyMemCalloc
	FuncPyMemRealloc
	FuncMmap   // an anonymous mapping the program made itself (mmap, mmap64)
	FuncMremap // a mapping moved or resized with mremap
	FuncSbrk   // the program grew the break itself
)

// FuncNames names the hooked functions for reports.
var FuncNames = map[uint8]string{
	FuncMalloc: "malloc", FuncCalloc: "calloc", FuncRealloc: "realloc",
	FuncReallocarray: "reallocarray", FuncPosixMemalign: "posix_memalign",
	FuncAlignedAlloc: "aligned_alloc", FuncMemalign: "memalign",
	FuncValloc: "valloc", FuncPvalloc: "pvalloc",
	FuncPyMemMalloc: "PyMem_Malloc", FuncPyMemCalloc: "PyMem_Calloc", FuncPyMemRealloc: "PyMem_Realloc",
	FuncMmap: "mmap", FuncMremap: "mremap", FuncSbrk: "sbrk",
}

// Kinds of memory, from the function that got it: what --kind selects.
const (
	MemMalloc = "malloc" // the malloc family
	MemPyMem  = "pymem"  // Python objects from pymalloc's arenas
	MemMmap   = "mmap"   // mappings (and break growth) the program made itself
)

// MemKinds lists the kinds of memory, in the order help shows them.
var MemKinds = []string{MemMalloc, MemPyMem, MemMmap}

// MemKind says which kind of memory a hooked function hands out.
func MemKind(f uint8) string {
	switch {
	case f >= FuncPyMemMalloc && f <= FuncPyMemRealloc:
		return MemPyMem
	case f >= FuncMmap && f <= FuncSbrk:
		return MemMmap
	}
	return MemMalloc
}
