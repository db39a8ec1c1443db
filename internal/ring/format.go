// Package ring reads the shared-memory rings that libheaplens.so writes, one
// per process image. The layout is defined in docs/ring-format.md and
// mirrored by preload/heaplens_ring.h.
package ring

// Constants from docs/ring-format.md.
const (
	Magic      = 0x31304749524c4845
	Version    = 1
	HeaderSize = 4096

	// DefaultRate is the sampling period (mean bytes between samples) the
	// agent and the library use when none is given.
	DefaultRate = 512 << 10

	FlagInitDone       = 1
	FlagForked         = 2
	FlagBackingStopped = 4  // the file system could back only `backed` bytes: records past them were dropped
	FlagNoUnwind       = 8  // forked while another thread was unwinding: no native stacks
	FlagAttached       = 16 // made by heaplens attach: sampling began at the ring's start
	FlagDetached       = 32 // the attach session ended: nothing more is written
	FlagExactFrees     = 64 // exact mode: every free is sent (FuncFreeAny, FuncFreePyMem), the agent pairs them

	// Header allocator_flags.
	AllocatorGlibc = 1 // the allocator is glibc's: MALLINFO records describe it

	RecAlloc    = 1
	RecFree     = 2
	RecModule   = 3
	RecCode     = 4
	RecMark     = 5
	RecOrigin   = 6
	RecMallinfo = 7
	RecStack    = 8  // a stack that later ALLOCs name by its ref (AllocStackRef)
	RecResident = 9  // at exit(): a listed block's bytes spanned (Size) and resident (Value)
	RecVoid     = 10 // a FREE withdrawn (its realloc failed): says nothing
	RecSkip     = 11 // the ring's bytes from here to its end hold no record: a soft lap's end (never delivered)

	MarkPyFinalizing = 1
	MarkExit         = 2
	MarkUser         = 3
	MarkHighWater    = 4 // the value is the process's ru_maxrss at exit(), bytes
	MarkRSS          = 5 // the value is the process's resident bytes less the ring's, at its ring's creation and at exit()

	// FuncMunmap marks a FREE record of a munmap: it carries the length
	// unmapped (Record.Size) after the tid.
	FuncMunmap = 16
	// FuncFreeAny and FuncFreePyMem mark the FREE records of a ring with
	// FlagExactFrees: a free through the malloc family or a PyMem domain of
	// a block the agent may never have seen allocated.
	FuncFreeAny   = 17
	FuncFreePyMem = 18

	AllocTruncated   = 1
	AllocPyMem       = 2
	AllocOrigin      = 4 // word 5 is the origin token
	AllocMethodShift = 8 // flags bits 8..10: the origin method (Origin*)
	AllocStackRef    = 8 // the last word is the ref of a STACK record; no frames follow

	// StackDelta, a STACK record's flag: word 3 is K | J<<16 | base ref<<32,
	// and the record's frames are the inner ones before the outer K native
	// and J Python frames of its thread's previous STACK record.
	StackDelta = 2

	// A STACK ref is a slot below StackRefs and the slot's generation,
	// slot | generation<<14, below MaxStackRef.
	StackRefs   = 16384
	MaxStackRef = StackRefs << 15

	MaxFrames   = 4096 // native frames the library records at most; deeper stacks are cut (Record.Truncated)
	MaxPyFrames = 1024 // Python frames the library records at most (HL_MAX_PYFRAMES)

	// How an allocation's origin was decided (docs/ring-format.md, "Thread pools").
	OriginSelf   = 0
	OriginAPI    = 1
	OriginOpenMP = 2
	// 3 is reserved (per-library adapters were planned; none was needed).
	OriginFallback     = 4
	OriginUnattributed = 5
	OriginCreator      = 6

	PyActivationEnd = 1 << 31 // in a Python frame's position word

	// Python status in the header.
	PyNone         = 0
	PyActive       = 1
	PyUnsupported  = 2
	PyOff          = 3
	PyFreeThreaded = 4
	PyBadOffsets   = 5

	// py_hooked: how Python objects are sampled.
	PyMemNone    = 0 // no hooks (yet)
	PyMemHooked  = 1 // the MEM and OBJ domains run through the hooks
	PyMemMalloc  = 2 // the domains use malloc (PYTHONMALLOC=malloc): sampled by its hook
	PyMemForeign = 3 // hooked over an allocator that is not pymalloc
	PyMemLost    = 4 // objects from pymalloc's arenas are not sampled

	// Byte offsets in the header.
	offMagic        = 0
	offVersion      = 8
	offDataSize     = 16
	offPID          = 24
	offPPID         = 32
	offStartMono    = 40
	offStartReal    = 48
	offRate         = 56
	offFlags        = 64
	offSeq          = 68
	offParentPID    = 72
	offParentSeq    = 80
	offCmdlineLen   = 84
	offExeLen       = 88
	offBackingErrno = 92
	offBacked       = 96
	offDetached     = 104
	offHead         = 128
	offTail         = 192
	offDroppedAlloc = 256
	offDroppedFree  = 264
	offDroppedOther = 272
	offTruncated    = 280
	offPyVersion    = 288
	offPyStatus     = 292
	offPyEval       = 296
	offPyHooked     = 304
	offOMPGuessed   = 312
	offUnwindTables = 320
	offUnwindLibgcc = 328
	offUnwindDiffer = 336
	offAllocMaps    = 344
	offAllocMapB    = 352
	offAllocFlags   = 360
	offAllocLen     = 364
	offAllocator    = 368
	offWalksCut     = 624
	maxAllocator    = 256
	offResidentN    = 632
	offResident     = 640
	// ResidentBlocks is how many blocks the agent lists for the library
	// to count at exit (SetResidentBlocks).
	ResidentBlocks = 24
	offCmdline     = 1024
	offExe         = 3072
	maxCmdline     = 2048
	maxExe         = 1024
)
