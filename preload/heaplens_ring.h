/*
 * heaplens ring: the layout of the shared-memory ring that libheaplens.so
 * writes and internal/ring (Go) reads. docs/ring-format.md is the one
 * definition; this header and internal/ring/format.go mirror it.
 * Little-endian x86_64; every field is naturally aligned.
 */
#ifndef HEAPLENS_RING_H
#define HEAPLENS_RING_H

#include <stdint.h>

#define HL_RING_MAGIC 0x31304749524c4845ull /* "EHLRIG01" read as bytes */
#define HL_RING_VERSION 1u
#define HL_RING_HEADER_SIZE 4096u
#define HL_DEFAULT_RATE (512u << 10) /* sampling period when none is given (ring.DefaultRate) */

/* Header flags. */
#define HL_FLAG_INIT_DONE 1u /* the initial MODULE records are in the ring */
#define HL_FLAG_FORKED 2u    /* created in a fork child; parent_* name the parent's ring */
#define HL_FLAG_BACKING_STOPPED 4u /* the file system could back only `backed` bytes: records past them are dropped */
#define HL_FLAG_NO_UNWIND 8u /* a fork child of a thread that was unwinding: no native stacks */
#define HL_FLAG_ATTACHED 16u /* made by heaplens attach in a running process: sampling began at start_mono_ns */
#define HL_FLAG_DETACHED 32u /* the attach session ended: nothing more is written */
#define HL_FLAG_EXACT_FREES 64u /* --rate 1, preloaded: every free is sent (HL_FUNC_FREE_ANY/_PYMEM); the agent pairs them */

#define HL_RESIDENT_BLOCKS 24u /* entries of resident_blocks */

/* allocator_flags */
#define HL_ALLOCATOR_GLIBC 1u /* the allocator is glibc's: MALLINFO records describe it */

struct hl_ring_header {
	uint64_t magic;
	uint32_t version;
	uint32_t header_size;
	uint64_t data_size; /* power of two, bytes */
	int64_t pid;
	int64_t ppid;
	int64_t start_mono_ns; /* CLOCK_MONOTONIC */
	int64_t start_real_ns; /* CLOCK_REALTIME */
	uint64_t rate;
	uint32_t flags; /* HL_FLAG_*, set with release stores */
	uint32_t seq;   /* this ring is HEAPLENS_DIR/ring.<pid>.<seq> */
	int64_t parent_pid;
	uint32_t parent_seq;
	uint32_t cmdline_len; /* bytes used in cmdline */
	uint32_t exe_len;
	uint32_t backing_errno; /* BACKING_STOPPED: why no more could be backed */
	uint64_t backed;        /* data bytes backed from offset 0, raised as the ring fills (release) */
	int64_t detached_mono_ns; /* DETACHED: CLOCK_MONOTONIC when the library began to end the session (set before the flag) */
	uint8_t pad0[128 - 112];

	uint64_t head; /* producers: bytes reserved so far (CAS) */
	uint8_t pad1[56];
	uint64_t tail; /* consumer: bytes consumed and zeroed so far */
	uint8_t pad2[56];

	uint64_t dropped_alloc; /* sampled allocations not recorded (ring full) */
	uint64_t dropped_free;  /* frees of sampled blocks not recorded */
	uint64_t dropped_other; /* MODULE records not recorded */
	uint64_t truncated_stacks; /* stacks cut at HL_MAX_FRAMES */
	uint32_t py_version; /* PY_VERSION_HEX of the interpreter in this process, 0 if none */
	uint32_t py_status;  /* HL_PY_* */
	uint64_t py_eval;    /* address of _PyEval_EvalFrameDefault: its module is the interpreter */
	uint64_t py_hooked;  /* HL_PYMEM_*: how Python objects are sampled */
	uint64_t omp_guessed; /* OpenMP regions sent to a runtime found outside the caller's scope */
	uint64_t unwind_tables;   /* native stacks walked with the agent's unwind tables */
	uint64_t unwind_libgcc;   /* native stacks walked by libgcc */
	uint64_t unwind_differed; /* HEAPLENS_UNWIND_CHECK=1: stacks on which the two walks differed */
	uint64_t allocator_maps;      /* mmaps the allocator made for itself, not counted as the program's */
	uint64_t allocator_map_bytes; /* their bytes */
	uint32_t allocator_flags;     /* HL_ALLOCATOR_* */
	uint32_t allocator_len;       /* bytes used in allocator */
	char allocator[256];          /* path of the module whose malloc the hooks call ("" the executable) */
	uint64_t walks_cut;           /* stacks whose walk stopped short of the outermost frame (unwind-format.md, "Stacks") */
	/* Written by the agent: the largest live sampled blocks, whose pages
	 * the library counts at exit() (RESIDENT records). Entries may be torn
	 * while the agent rewrites them; the agent checks what comes back. */
	uint32_t resident_count; /* valid entries, at most HL_RESIDENT_BLOCKS */
	uint32_t resident_pad;
	uint64_t resident_blocks[HL_RESIDENT_BLOCKS][2]; /* {address, size} */
	/* the header's first KiB ends here */

	char cmdline[2048]; /* /proc/self/cmdline: NUL-separated, possibly cut */
	char exe[1024];     /* readlink(/proc/self/exe) */
};

/*
 * Records start 8-byte aligned and are a multiple of 8 bytes long; they may
 * wrap around the end of the data area word by word. Word 0 is the header,
 * written last with a release store: until then it reads 0.
 *   bits  0..31 length in bytes, including the header word
 *   bits 32..39 record type (HL_REC_*)
 *   bits 40..47 function (HL_FUNC_*) for ALLOC; for FREE, 0, HL_FUNC_MUNMAP or HL_FUNC_FREE_ANY/_PYMEM
 *   bits 48..63 count: frames for ALLOC, segments for MODULE
 */
#define HL_REC_ALLOC 1u  /* time, addr, size, tid|flags<<32, frames[count] (leaf first) */
#define HL_REC_FREE 2u   /* time, addr, tid; with HL_FUNC_MUNMAP also the length unmapped */
#define HL_REC_MODULE 3u /* time, load bias, path length, segments[count] {vaddr, memsz, offset, flags}, path */
#define HL_REC_RESIDENT 9u /* time, address, bytes spanned, bytes resident (mincore at exit()) */
#define HL_REC_CODE 4u   /* code, identity|firstlineno<<32, filename kind|len<<8, qualname kind|len<<8, table len, bytes */
#define HL_REC_MARK 5u   /* time, kind (HL_MARK_*), value */
#define HL_REC_ORIGIN 6u /* time, token, tid|flags<<32|npy<<48, frames[count], python frames: an origin's stack */
#define HL_REC_MALLINFO 7u /* time, arena, hblkhd, uordblks, fordblks, keepcost: glibc's mallinfo2 */
#define HL_REC_VOID 10u  /* time, addr, tid: a FREE withdrawn (its realloc failed); says nothing */
#define HL_REC_SKIP 11u  /* nothing: the ring's bytes from here to its end hold no record (a soft lap's end) */
#define HL_REC_STACK 8u  /* ref, tid|flags<<32|npy<<48, [K|J<<16|base<<32,] frames[count], python frames: the stack later ALLOCs name by ref */

#define HL_MARK_PY_FINALIZING 1u /* the interpreter started shutting down: the program itself is done */
#define HL_MARK_EXIT 2u          /* exit() was called; the status follows in the next word */
#define HL_MARK_USER 3u          /* heaplens_mark(value): a point in time the program names (a test's end) */
#define HL_MARK_HIGH_WATER 4u    /* at exit(): the kernel's high-water mark of resident memory, bytes (ru_maxrss) */
#define HL_MARK_RSS 5u           /* at the ring's creation and at exit(): resident bytes less the ring's */

#define HL_ALLOC_TRUNCATED 1u /* flags: the stack was cut at HL_MAX_FRAMES */
#define HL_ALLOC_PYMEM 2u     /* flags: allocated through a PyMem domain (a Python object) */
#define HL_ALLOC_ORIGIN 4u    /* flags: word 5 is the origin token (the frames start one word later) */
#define HL_ALLOC_STACKREF 8u  /* flags: the stack is the STACK record whose ref is the last word (no frames follow) */
#define HL_STACK_DELTA 2u     /* STACK flags: only the inner frames; the outer ones are the thread's last STACK record's */
#define HL_STACK_REFS 16384u  /* a ref is slot | generation << 14: slot below this, generation below 2^15 */
#define HL_ALLOC_METHOD_SHIFT 8 /* flags bits 8..10: how the origin was decided (HL_ORIGIN_*) */

/* Origins: who a thread works for (docs/ring-format.md, "Thread pools"). A token is
 * origin tid << 32 | a sequence number of that thread, never 0. */
enum hl_origin {
	HL_ORIGIN_SELF,         /* the thread allocates for itself */
	HL_ORIGIN_API,          /* declared through heaplens_pool_enter (docs/pool-api.md) */
	HL_ORIGIN_OPENMP,       /* an OpenMP region: GOMP_parallel* or OMPT */
	HL_ORIGIN_RESERVED,     /* 3: reserved (per-library adapters were planned; none was needed) */
	HL_ORIGIN_FALLBACK,     /* the one Python thread blocked in native code */
	HL_ORIGIN_UNATTRIBUTED, /* a non-Python thread of a Python process, no origin found */
	HL_ORIGIN_CREATOR,      /* no Python thread waits: the thread that created this one (pthread_create) */
};
/* An ALLOC's word 4 is tid | flags << 32 | python frame count << 48; the
 * python frames follow the native ones, two words each: the code object's
 * address, and identity << 32 | activation_end << 31 | (position + 1). */
#define HL_PY_ACTIVATION_END (1ull << 31)
#define HL_MAX_PYFRAMES 1024

/* py_status */
#define HL_PY_NONE 0u        /* no Python interpreter in the process */
#define HL_PY_ACTIVE 1u      /* Python frames are recorded */
#define HL_PY_UNSUPPORTED 2u /* an interpreter whose layout heaplens does not know */
#define HL_PY_OFF 3u         /* turned off (HEAPLENS_PYTHON=0) */
#define HL_PY_FREE_THREADED 4u /* a free-threaded (no-GIL) build: not read */
#define HL_PY_BAD_OFFSETS 5u   /* 3.13+ whose _Py_DebugOffsets are missing or do not fit what heaplens knows */

/* py_hooked */
#define HL_PYMEM_NONE 0u    /* no hooks (yet) */
#define HL_PYMEM_HOOKED 1u  /* the MEM and OBJ domains run through the hooks */
#define HL_PYMEM_MALLOC 2u  /* the domains use malloc (PYTHONMALLOC=malloc): sampled by its hook */
#define HL_PYMEM_FOREIGN 3u /* hooked over an allocator that is not pymalloc: larger objects are seen only if it takes them from malloc */
#define HL_PYMEM_LOST 4u    /* objects from pymalloc's arenas are not sampled: the hooks could not be (re)installed */

#define HL_MAX_FRAMES 4096
#define HL_MAX_SEGMENTS 16

enum hl_func {
	HL_FUNC_MALLOC = 1,
	HL_FUNC_CALLOC,
	HL_FUNC_REALLOC,
	HL_FUNC_REALLOCARRAY,
	HL_FUNC_POSIX_MEMALIGN,
	HL_FUNC_ALIGNED_ALLOC,
	HL_FUNC_MEMALIGN,
	HL_FUNC_VALLOC,
	HL_FUNC_PVALLOC,
	HL_FUNC_PYMEM_MALLOC,
	HL_FUNC_PYMEM_CALLOC,
	HL_FUNC_PYMEM_REALLOC,
	HL_FUNC_MMAP,   /* an anonymous mapping the program made itself */
	HL_FUNC_MREMAP, /* a mapping moved or resized with mremap */
	HL_FUNC_SBRK,   /* the program grew the break itself */
	HL_FUNC_MUNMAP, /* FREE only: a range unmapped */
	HL_FUNC_FREE_ANY,   /* FREE only, HL_FLAG_EXACT_FREES: a free of the malloc family, of a block the agent may not know */
	HL_FUNC_FREE_PYMEM, /* FREE only, HL_FLAG_EXACT_FREES: the same through a PyMem domain */
};

/*
 * heaplens attach: the block through which the agent steers
 * libheaplens-attach.so in a running process (docs/attach.md). It is the
 * library's exported symbol heaplens_control; the agent reads and writes it
 * through /proc/PID/mem. The library fills it at load (magic last); the
 * agent writes a session's settings, then start; the library answers in
 * session. Names are the symbols whose GOT entries the agent points at
 * hook[i] while real[i] is what they held (0: not resolved in this process).
 * An executable's GOT entry may hold the function while other modules'
 * hold the executable's PLT entry for it (a "canonical" PLT entry: the
 * executable takes the function's address): routing the executable's
 * entry routes both.
 */
#define HL_CONTROL_MAGIC 0x31304c5443484c45ull /* "EHLCTL01" read as bytes */
#define HL_CONTROL_VERSION 1u
#define HL_CONTROL_HOOKS 48
#define HL_CONTROL_NAME 64
#define HL_CONTROL_DIR 3072

#define HL_CTL_NO_PYTHON 1u /* no Python frames or PyMem hooks in this session */
#define HL_CTL_NO_FOLLOW 2u /* fork children of the process are not profiled */
#define HL_CTL_HEARTBEAT 4u /* the agent is not in the process's PID namespace: alive_ns, not kill(agent_pid), says it lives */
#define HL_CTL_SANDBOXED 8u /* the process runs under a seccomp filter the agent checked (docs/attach.md) */

struct hl_control {
	uint64_t magic;
	uint32_t version;
	uint32_t nhooks;
	uint64_t start;     /* agent: the session to start (written last) */
	uint64_t stop;      /* agent: the session to end */
	uint64_t session;   /* library: the session running, 0 if none */
	uint64_t ended;     /* library: the last session it ended */
	int64_t agent_pid;  /* agent: the process draining the ring; its death ends the session */
	uint64_t rate;      /* agent: bytes between samples on average */
	uint64_t seed;      /* agent: 0 draws one */
	uint64_t ring_size; /* agent: data bytes, a power of two */
	uint64_t flags;     /* agent: HL_CTL_* */
	uint64_t epoch;     /* agent: raised after each write of start or stop: every hook's next call notices */
	uint64_t alive_ns;  /* agent, with HL_CTL_HEARTBEAT: its CLOCK_MONOTONIC time, rewritten while it drains */
	uint8_t pad[32];
	char dir[HL_CONTROL_DIR];        /* agent: the session directory, NUL-terminated */
	uint64_t hook[HL_CONTROL_HOOKS]; /* library: our definitions */
	uint64_t real[HL_CONTROL_HOOKS]; /* library: the definitions they call, 0 unknown */
	char name[HL_CONTROL_HOOKS][HL_CONTROL_NAME];
};

static inline uint64_t hl_rec_header(uint32_t len, uint32_t type, uint32_t func, uint32_t count)
{
	return (uint64_t)len | (uint64_t)type << 32 | (uint64_t)func << 40 | (uint64_t)count << 48;
}

#endif
