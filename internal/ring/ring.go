package ring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrNotReady means the file exists but its creator has not finished
// writing the header yet; try again later.
var ErrNotReady = errors.New("ring: header not written yet")

// Header is the fixed part of a ring, written once by the library.
type Header struct {
	PID, PPID     int
	StartMonoNano int64
	StartUnixNano int64
	Rate          uint64
	Seq           uint32
	Forked        bool
	ParentPID     int
	ParentSeq     uint32
	Cmdline       []string
	Exe           string
	DataSize      uint64
	// NoUnwind: forked while another thread was inside the unwinder, whose
	// locks may stay held in the child: its stacks have no native frames.
	NoUnwind bool
	// Attached: made by heaplens attach in a running process.
	Attached bool
	// ExactFrees: every free is sent, of sampled blocks or not
	// (FuncFreeAny, FuncFreePyMem): the agent keeps the blocks it knows.
	ExactFrees bool
	// Allocator is the path of the module whose malloc the hooks call
	// ("" for the executable), and AllocatorFlags what the library found
	// out about it (Allocator*).
	Allocator      string
	AllocatorFlags uint32
}

// Counters are the ring's running totals.
type Counters struct {
	Head, Tail                 uint64
	DroppedAllocs, DroppedFree uint64
	DroppedOther, Truncated    uint64
	OMPGuessed                 uint64 // OpenMP regions sent to a runtime found outside the caller's scope
	// Native stacks walked with the agent's unwind tables, by libgcc, and
	// (HEAPLENS_UNWIND_CHECK=1) walked both ways with different results.
	UnwindTables, UnwindLibgcc, UnwindDiffered uint64
	// Anonymous mappings the allocator made for itself (not counted as
	// the program's), and their bytes.
	AllocatorMaps, AllocatorMapBytes uint64
	// Stacks whose walk stopped where it could not follow the stack
	// (a coroutine's stale slice above its first frame, a small signal
	// stack): marked cut, as the ones cut at MaxFrames.
	WalksCut uint64
}

// Python is what the library found out about a Python interpreter in the process.
type Python struct {
	Version  uint32 // PY_VERSION_HEX, 0 if none
	Status   uint32 // PyNone, PyActive, PyUnsupported, PyOff, PyFreeThreaded, PyBadOffsets
	EvalAddr uint64 // _PyEval_EvalFrameDefault: its module is the interpreter
	PyMem    uint64 // how Python objects are sampled: PyMemNone…PyMemLost
}

// PyFrame is one Python frame of an ALLOC record, as read from the frame.
type PyFrame struct {
	Code          uint64 // the code object's address
	Identity      uint32 // distinguishes code objects that reused an address
	Pos           int64  // position as the interpreter keeps it (see internal/pyframe)
	ActivationEnd bool   // outermost frame of its _PyEval_EvalFrameDefault activation
}

// Code is a CODE record: one code object, sent once per ring.
type Code struct {
	Addr      uint64
	Identity  uint32
	FirstLine int
	Minor     int // Python 3.Minor
	FileKind  uint8
	File      []byte // PEP 393 data of co_filename
	NameKind  uint8
	Name      []byte // co_qualname (co_name before 3.11)
	Table     []byte // the raw line table
}

// Segment is a PT_LOAD segment of a MODULE record.
type Segment struct {
	Vaddr, Memsz, Offset uint64
	Flags                uint32
}

// Record is one decoded ring record. Frames and Segments alias buffers that
// the next Drain callback reuses.
type Record struct {
	Type     uint8
	Func     uint8
	TimeNano int64
	Addr     uint64
	Size     uint64 // ALLOC: bytes asked for; FREE of a munmap: the length unmapped
	TID      uint32
	// Truncated is set on an ALLOC or ORIGIN whose native stack the library
	// cut at its frame limit: the outermost frames are missing.
	Truncated bool
	Frames    []uint64
	Py        []PyFrame
	Bias      uint64
	Segments  []Segment
	Path      string
	Code      *Code
	Mark      uint64 // MARK: what happened at TimeNano
	Token     uint64 // ALLOC: origin token (0 = none); ORIGIN: the token whose stack this is
	// Ref: on a STACK record, the ref later ALLOCs name it by; on an ALLOC
	// with HasRef, the STACK record that holds its stack (no Frames, no Py).
	Ref    uint32
	HasRef bool
	// Base: on a STACK record with StackDelta, the outer frames that follow
	// Frames and Py are the outermost BaseNative and BasePy frames of the
	// previous STACK record of the thread TID, whose ref is BaseRef
	// (docs/ring-format.md, "Stacks by reference"); collect rebuilds them.
	Delta      bool
	BaseNative int
	BasePy     int
	BaseRef    uint32
	Method     uint8    // ALLOC: how the origin was decided (Origin*)
	Value      uint64   // MARK: its value (the exit status for MarkExit)
	Malloc     Mallinfo // MALLINFO: what glibc's malloc holds
}

// Mallinfo is glibc's mallinfo2 as a MALLINFO record carries it.
type Mallinfo struct {
	Arena   uint64 // bytes in the arenas (sbrk'd and mapped heaps)
	Mmapped uint64 // bytes in blocks malloc mapped on their own (hblkhd)
	InUse   uint64 // bytes of the arenas in blocks in use (uordblks)
	Free    uint64 // bytes of the arenas in free blocks (fordblks)
	Keep    uint64 // of which at the top, releasable by malloc_trim (keepcost)
}

// Ring is one mapped ring file.
type Ring struct {
	Path  string
	mem   []byte
	data  []byte
	vec   []byte   // Resident's buffer
	dw    []uint64 // data as words
	mask  uint64
	words []uint64
	py    []PyFrame
	segs  []Segment

	// Malformed counts well-framed records whose contents did not decode;
	// Drain skips them. A ring is written by the profiled process, so its
	// bytes are untrusted: a bad record must cost that record, no more.
	Malformed uint64
}

// Open maps the ring at path for reading and consuming.
func Open(path string) (*Ring, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("ring: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("ring: %w", err)
	}
	if st.Size() < HeaderSize {
		return nil, ErrNotReady
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("ring: mmap %s: %w", path, err)
	}
	r := &Ring{Path: path, mem: mem}
	if atomic.LoadUint64(r.u64(offMagic)) != Magic {
		r.Close()
		return nil, ErrNotReady
	}
	if v := binary.LittleEndian.Uint32(mem[offVersion:]); v != Version {
		r.Close()
		return nil, fmt.Errorf("ring: %s: version %d, want %d", path, v, Version)
	}
	size := binary.LittleEndian.Uint64(mem[offDataSize:])
	if size == 0 || size&(size-1) != 0 || uint64(len(mem)) < HeaderSize+size {
		r.Close()
		return nil, fmt.Errorf("ring: %s: bad data size %d", path, size)
	}
	r.data = mem[HeaderSize : HeaderSize+size]
	r.dw = unsafe.Slice((*uint64)(unsafe.Pointer(&r.data[0])), size/8)
	r.mask = size - 1
	return r, nil
}

func (r *Ring) u64(off uint64) *uint64 { return (*uint64)(unsafe.Pointer(&r.mem[off])) }
func (r *Ring) u32(off uint64) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }

// Close unmaps the ring. The file stays.
func (r *Ring) Close() error {
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	return err
}

// Header returns the ring's fixed header.
func (r *Ring) Header() Header {
	le := binary.LittleEndian
	m := r.mem
	flags := atomic.LoadUint32(r.u32(offFlags))
	h := Header{
		PID:           int(int64(le.Uint64(m[offPID:]))),
		PPID:          int(int64(le.Uint64(m[offPPID:]))),
		StartMonoNano: int64(le.Uint64(m[offStartMono:])),
		StartUnixNano: int64(le.Uint64(m[offStartReal:])),
		Rate:          le.Uint64(m[offRate:]),
		Seq:           le.Uint32(m[offSeq:]),
		Forked:        flags&FlagForked != 0,
		DataSize:      uint64(len(r.data)),
		NoUnwind:      flags&FlagNoUnwind != 0,
		Attached:      flags&FlagAttached != 0,
		ExactFrees:    flags&FlagExactFrees != 0,
		ParentPID:     int(int64(le.Uint64(m[offParentPID:]))),
		ParentSeq:     le.Uint32(m[offParentSeq:]),
	}
	cl := min(int(le.Uint32(m[offCmdlineLen:])), maxCmdline)
	args := strings.Split(strings.TrimRight(string(m[offCmdline:offCmdline+cl]), "\x00"), "\x00")
	if len(args) > 0 && args[0] != "" {
		h.Cmdline = args
	}
	el := min(int(le.Uint32(m[offExeLen:])), maxExe)
	h.Exe = string(bytes.TrimRight(m[offExe:offExe+el], "\x00"))
	al := min(int(le.Uint32(m[offAllocLen:])), maxAllocator)
	h.Allocator = string(bytes.TrimRight(m[offAllocator:offAllocator+al], "\x00"))
	h.AllocatorFlags = le.Uint32(m[offAllocFlags:])
	return h
}

// Python returns the interpreter facts; they are set during start-up.
func (r *Ring) Python() Python {
	le := binary.LittleEndian
	return Python{
		Version:  atomic.LoadUint32(r.u32(offPyVersion)),
		Status:   atomic.LoadUint32(r.u32(offPyStatus)),
		EvalAddr: le.Uint64(r.mem[offPyEval:]),
		PyMem:    atomic.LoadUint64(r.u64(offPyHooked)),
	}
}

// Backing says how far the library got backing the ring, which it does as
// the ring fills: stopped reports that the file system refused more (errno
// says why), and records past backed bytes were then dropped.
func (r *Ring) Backing() (stopped bool, backed uint64, errno unix.Errno) {
	if atomic.LoadUint32(r.u32(offFlags))&FlagBackingStopped == 0 {
		return false, 0, 0
	}
	return true, min(atomic.LoadUint64(r.u64(offBacked)), uint64(len(r.data))), unix.Errno(atomic.LoadUint32(r.u32(offBackingErrno)))
}

// Backed returns the bytes of the ring the library has backed so far, its
// header included: in the process that writes it they are resident.
func (r *Ring) Backed() uint64 {
	return HeaderSize + min(atomic.LoadUint64(r.u64(offBacked)), uint64(len(r.data)))
}

// Resident returns the bytes of the ring's file in memory, which the
// process that writes it has mapped: Backed, and what it is backing at this
// moment (a whole ring backed as a seccomp filter goes in is resident
// before backed says so). Backed when the kernel does not say.
func (r *Ring) Resident() uint64 {
	page := uint64(os.Getpagesize())
	if cap(r.vec) < len(r.mem)/int(page) {
		r.vec = make([]byte, len(r.mem)/int(page))
	}
	vec := r.vec[:len(r.mem)/int(page)]
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&r.mem[0])), uintptr(len(r.mem)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return r.Backed()
	}
	var n uint64
	for _, v := range vec {
		n += uint64(v & 1)
	}
	return n * page
}

// SetResidentBlocks lists, for the library to count at exit(), the blocks
// {address, size} whose residency the agent wants (at most ResidentBlocks):
// the count is cleared first and set last, so a reader at exit sees at
// worst an entry torn between two lists, which the agent's check of the
// RESIDENT record rejects.
func (r *Ring) SetResidentBlocks(blocks [][2]uint64) {
	n := min(len(blocks), ResidentBlocks)
	atomic.StoreUint32(r.u32(offResidentN), 0)
	for i, b := range blocks[:n] {
		atomic.StoreUint64(r.u64(offResident+uint64(16*i)), b[0])
		atomic.StoreUint64(r.u64(offResident+uint64(16*i+8)), b[1])
	}
	atomic.StoreUint32(r.u32(offResidentN), uint32(n))
}

// InitDone reports whether the library has written its initial modules.
func (r *Ring) InitDone() bool { return atomic.LoadUint32(r.u32(offFlags))&FlagInitDone != 0 }

// Detached reports whether the attach session that made the ring ended
// (the library writes nothing more into it), and when (CLOCK_MONOTONIC).
func (r *Ring) Detached() (bool, int64) {
	if atomic.LoadUint32(r.u32(offFlags))&FlagDetached == 0 {
		return false, 0
	}
	return true, int64(atomic.LoadUint64(r.u64(offDetached)))
}

// Counters returns the ring's totals now.
func (r *Ring) Counters() Counters {
	return Counters{
		Head:              atomic.LoadUint64(r.u64(offHead)),
		Tail:              atomic.LoadUint64(r.u64(offTail)),
		DroppedAllocs:     atomic.LoadUint64(r.u64(offDroppedAlloc)),
		DroppedFree:       atomic.LoadUint64(r.u64(offDroppedFree)),
		DroppedOther:      atomic.LoadUint64(r.u64(offDroppedOther)),
		Truncated:         atomic.LoadUint64(r.u64(offTruncated)),
		OMPGuessed:        atomic.LoadUint64(r.u64(offOMPGuessed)),
		UnwindTables:      atomic.LoadUint64(r.u64(offUnwindTables)),
		UnwindLibgcc:      atomic.LoadUint64(r.u64(offUnwindLibgcc)),
		UnwindDiffered:    atomic.LoadUint64(r.u64(offUnwindDiffer)),
		AllocatorMaps:     atomic.LoadUint64(r.u64(offAllocMaps)),
		AllocatorMapBytes: atomic.LoadUint64(r.u64(offAllocMapB)),
		WalksCut:          atomic.LoadUint64(r.u64(offWalksCut)),
	}
}

func (r *Ring) word(pos uint64) *uint64 {
	return (*uint64)(unsafe.Pointer(&r.data[pos&r.mask]))
}

// tailEvery is how many records DrainN consumes between two stores of the tail.
const tailEvery = 256

// Drain consumes every committed record, calling fn for each, and returns how
// many it consumed. It stops at the first record still being written. A
// record whose length is sound but whose contents are not is skipped and
// counted in Malformed. A record header whose length cannot be trusted ends
// the drain with an error: nothing after it can be framed, so the ring is not
// consumed past it.
func (r *Ring) Drain(fn func(*Record)) (int, error) { return r.DrainN(0, fn) }

// DrainN is Drain stopping after max records (0: no limit), malformed
// ones included, so that several rings can be drained a slice each in turn.
//
// The space read is handed back to the writers (the tail stored) every
// tailEvery records, not after each: every writer reads the tail to reserve,
// and a store per record kept that cache line moving between the cores
// (60 % of the drain's time at --rate 1). The records are zeroed with plain
// stores before the tail's atomic store publishes them, which orders them
// (a writer finds a zero header until a new record is committed there).
func (r *Ring) DrainN(max int, fn func(*Record)) (int, error) {
	tail := atomic.LoadUint64(r.u64(offTail))
	head := atomic.LoadUint64(r.u64(offHead))
	defer func() { atomic.StoreUint64(r.u64(offTail), tail) }()
	n, seen := 0, 0
	var rec Record
	for tail < head && (max == 0 || seen < max) {
		seen++
		if seen%tailEvery == 0 {
			atomic.StoreUint64(r.u64(offTail), tail)
		}
		hdr := atomic.LoadUint64(r.word(tail))
		if hdr == 0 {
			break
		}
		length := hdr & 0xffffffff
		if length < 8 || length%8 != 0 || length > uint64(len(r.data)) || tail+length > head {
			return n, fmt.Errorf("ring: %s: bad record header %#x at %d", r.Path, hdr, tail)
		}
		if uint8(hdr>>32) == RecSkip {
			// Only its header was written: the bytes it spans were zeroed
			// on the lap before (docs/ring-format.md, "Protocol").
			if (tail+length)&r.mask != 0 {
				return n, fmt.Errorf("ring: %s: a skip of %d bytes at %d does not end at the ring's end", r.Path, length, tail)
			}
			*r.word(tail) = 0
			tail += length
			continue
		}
		nw := int(length/8) - 1
		if cap(r.words) < nw {
			r.words = make([]uint64, nw)
		}
		w := r.words[:nw]
		// The body in at most two pieces (it may wrap), copied and zeroed
		// whole: word by word it was a tenth of the agent's time at --rate 1.
		at := int((tail + 8) & r.mask / 8)
		first := min(nw, len(r.dw)-at)
		copy(w, r.dw[at:at+first])
		clear(r.dw[at : at+first])
		copy(w[first:], r.dw[:nw-first])
		clear(r.dw[:nw-first])
		err := r.decode(&rec, hdr, w)
		*r.word(tail) = 0
		tail += length
		if err != nil {
			r.Malformed++
			continue
		}
		fn(&rec)
		n++
	}
	return n, nil
}

func (r *Ring) decode(rec *Record, hdr uint64, w []uint64) error {
	*rec = Record{Type: uint8(hdr >> 32), Func: uint8(hdr >> 40)}
	count := int(hdr >> 48)
	switch rec.Type {
	case RecAlloc, RecOrigin, RecStack:
		if len(w) < 4 && rec.Type != RecStack || len(w) < 2 {
			return fmt.Errorf("record type %d with %d words", rec.Type, len(w))
		}
		var npy int
		var flags uint32
		head := 4 // words before the frames
		switch rec.Type {
		case RecStack:
			if w[0] >= MaxStackRef {
				return fmt.Errorf("STACK with ref %d", w[0])
			}
			rec.Ref = uint32(w[0])
			npy, flags = int(w[1]>>48), uint32(w[1]>>32)&0xffff
			rec.TID = uint32(w[1])
			head = 2
			if flags&StackDelta != 0 {
				if len(w) < 3 || rec.TID == 0 {
					return fmt.Errorf("STACK delta in %d words, thread %d", len(w), rec.TID)
				}
				k, j, base := int(w[2]&0xffff), int(w[2]>>16&0xffff), w[2]>>32
				if k+count > MaxFrames || j+npy > MaxPyFrames || base >= MaxStackRef {
					return fmt.Errorf("STACK delta of %d+%d frames, %d+%d Python frames, base %d", count, k, npy, j, base)
				}
				rec.Delta, rec.BaseNative, rec.BasePy, rec.BaseRef = true, k, j, uint32(base)
				head = 3
			}
		case RecOrigin:
			npy = int(w[2] >> 48)
			flags = uint32(w[2]>>32) & 0xffff
			rec.TimeNano, rec.Token = int64(w[0]), w[1]
			head = 3
			rec.TID = uint32(w[2])
		default:
			npy = int(w[3] >> 48)
			flags = uint32(w[3]>>32) & 0xffff
			rec.TimeNano, rec.Addr, rec.Size = int64(w[0]), w[1], w[2]
			rec.TID = uint32(w[3])
			rec.Method = uint8(flags >> AllocMethodShift & 7)
			if flags&AllocOrigin != 0 {
				if len(w) < 5 {
					return fmt.Errorf("ALLOC with an origin in %d words", len(w))
				}
				rec.Token = w[4]
				head = 5
			}
			if flags&AllocStackRef != 0 {
				if len(w) != head+1 || count != 0 || npy != 0 || w[head] >= MaxStackRef {
					return fmt.Errorf("ALLOC naming a stack in %d words, %d frames, ref %d", len(w), count, w[len(w)-1])
				}
				rec.Ref, rec.HasRef = uint32(w[head]), true
				r.py = r.py[:0]
				rec.Frames, rec.Py = w[:0], r.py
				return nil
			}
		}
		// AllocPyMem is not decoded: Func names the PyMem function.
		rec.Truncated = flags&AllocTruncated != 0
		if len(w) != head+count+2*npy {
			return fmt.Errorf("record type %d with %d words for %d frames and %d Python frames", rec.Type, len(w), count, npy)
		}
		rec.Frames = w[head : head+count : head+count]
		r.py = r.py[:0]
		for i := head + count; i < len(w); i += 2 {
			pw := w[i+1]
			r.py = append(r.py, PyFrame{Code: w[i], Identity: uint32(pw >> 32),
				Pos: int64(pw&0x7fffffff) - 1, ActivationEnd: pw&PyActivationEnd != 0})
		}
		rec.Py = r.py
	case RecCode:
		if len(w) < 5 {
			return fmt.Errorf("CODE with %d words", len(w))
		}
		c := &Code{Addr: w[0], Identity: uint32(w[1]), FirstLine: int(int32(w[1] >> 32)), Minor: int(rec.Func),
			FileKind: uint8(w[2]), NameKind: uint8(w[3])}
		fb, qb, tb := w[2]>>8, w[3]>>8, w[4]
		pad := func(n uint64) uint64 { return (n + 7) &^ 7 }
		room := uint64(8 * (len(w) - 5))
		// Each length is checked alone first: their padded sum could wrap.
		if fb > room || qb > room || tb > room || pad(fb)+pad(qb)+pad(tb) != room {
			return fmt.Errorf("CODE with %d words for %d+%d+%d bytes", len(w), fb, qb, tb)
		}
		b := make([]byte, 8*(len(w)-5))
		for i, x := range w[5:] {
			binary.LittleEndian.PutUint64(b[8*i:], x)
		}
		c.File = b[:fb]
		c.Name = b[pad(fb) : pad(fb)+qb]
		c.Table = b[pad(fb)+pad(qb) : pad(fb)+pad(qb)+tb]
		rec.Code = c
	case RecFree:
		want := 3
		if rec.Func == FuncMunmap {
			want = 4
		} else if rec.Func != 0 && rec.Func != FuncFreeAny && rec.Func != FuncFreePyMem {
			return fmt.Errorf("FREE of function %d", rec.Func)
		}
		if len(w) != want {
			return fmt.Errorf("FREE with %d words", len(w))
		}
		rec.TimeNano, rec.Addr, rec.TID = int64(w[0]), w[1], uint32(w[2])
		if want == 4 {
			rec.Size = w[3]
		}
	case RecModule:
		if len(w) < 3+4*count {
			return fmt.Errorf("MODULE with %d words for %d segments", len(w), count)
		}
		rec.TimeNano, rec.Bias = int64(w[0]), w[1]
		plen := w[2]
		rest := w[3+4*count:]
		if plen > uint64(8*len(rest)) {
			return fmt.Errorf("MODULE path of %d bytes in %d words", plen, len(rest))
		}
		r.segs = r.segs[:0]
		for i := 0; i < count; i++ {
			s := w[3+4*i:]
			r.segs = append(r.segs, Segment{Vaddr: s[0], Memsz: s[1], Offset: s[2], Flags: uint32(s[3])})
		}
		rec.Segments = r.segs
		b := make([]byte, 8*len(rest))
		for i, x := range rest {
			binary.LittleEndian.PutUint64(b[8*i:], x)
		}
		rec.Path = string(b[:plen])
	case RecMark:
		if len(w) != 3 {
			return fmt.Errorf("MARK with %d words", len(w))
		}
		rec.TimeNano, rec.Mark, rec.Value = int64(w[0]), w[1], w[2]
	case RecResident:
		if len(w) != 4 {
			return fmt.Errorf("RESIDENT with %d words", len(w))
		}
		rec.TimeNano, rec.Addr, rec.Size, rec.Value = int64(w[0]), w[1], w[2], w[3]
	case RecMallinfo:
		if len(w) != 6 {
			return fmt.Errorf("MALLINFO with %d words", len(w))
		}
		rec.TimeNano = int64(w[0])
		rec.Malloc = Mallinfo{Arena: w[1], Mmapped: w[2], InUse: w[3], Free: w[4], Keep: w[5]}
	default:
		// Unknown types are skipped: a newer library may add records.
	}
	return nil
}
