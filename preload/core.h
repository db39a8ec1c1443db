/*
 * What every file of libheaplens.so needs: the attributes, the thread's
 * state (struct tls) and the process's (struct hl_global g). Each unit
 * declares the rest in its own header (ring.h, sampler.h, ...); the
 * library as a whole is described in docs/architecture.md. Nothing here
 * is exported: the library is built with -fvisibility=hidden; heaplens.h
 * is its public API.
 */
#ifndef HEAPLENS_CORE_H
#define HEAPLENS_CORE_H

#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "heaplens_ring.h"

/*
 * Declarations of what another file defines are hidden too, so that the
 * compiler reaches them directly (real.malloc in one RIP-relative jump)
 * rather than through the GOT, as it must for a symbol that could be
 * interposed. Every header of the library does the same.
 */
#pragma GCC visibility push(hidden)

#define EXPORT __attribute__((visibility("default")))
#define HOT __attribute__((hot))
#define COLD __attribute__((cold, noinline))
/* A function that must not become calls to the string functions (gcc turns
 * copy loops into memcpy): a sanitizer's runtime intercepts them and cannot
 * serve them before it is set up (sanitizer.c). */
#define NOLIBC __attribute__((optimize("no-tree-loop-distribute-patterns"), noinline))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define HL_STR_(x) #x
#define HL_STR(x) HL_STR_(x) /* a macro's value as a string, for inline assembly */

/*
 * Words that another thread may write while this one reads them: relaxed
 * atomics, the same plain moves on x86-64, but data-race-free under C11.
 */
#define RELAXED(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define SET_RELAXED(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

/*
 * Where a hook finds the definition it wraps. Preloaded, the next one after
 * us. Loaded late (attach) with RTLD_LOCAL, we are in no global scope, so
 * the first global definition is the one the program's calls reached.
 */
#ifdef HEAPLENS_ATTACH
#define HL_NEXT RTLD_DEFAULT
#else
#define HL_NEXT RTLD_NEXT
#endif

/*
 * A thread's state, one block of static TLS, each part kept by its owner.
 * The countdown and the sample in progress are the sampler's (sampler.c);
 * what a sample needs beside them is too large for static TLS and is
 * mapped on the thread's first sample (struct scratch, scratch.h).
 */
struct tls {
	int64_t remaining; /* must stay first: COUNTDOWN_OR_GOTO addresses it by name */
	int64_t owed;      /* bytes of the countdown held back while it is cut short (see sample_slow) */
	uint64_t rng;
	int init;
	int busy; /* inside the hook: allocations here are never sampled */
	uint32_t tid; /* 0 until first needed; reset in a fork child */
	uint32_t nframes, npy;
	/* pools.c, openmp.c: whom this thread works for, and what it waits on */
	struct {
		uint64_t origin;        /* token of the thread this one works for, 0 = itself */
		uint32_t origin_method; /* HL_ORIGIN_* that set origin */
		uint32_t origin_seq;    /* this thread's last token sequence number */
		uint32_t open_depth;    /* nested origin_begin calls */
		int open_slot;          /* its slot in pools.c's table, -1 if none was free */
		uint64_t open_token;
		uint64_t creator; /* in a Python process, the token of the thread that created this one */
	} pool;
	/* attach.c, sampler.c: attached, the session this thread's sampler was set up for */
	struct {
		uint64_t session;
		uint64_t epoch; /* heaplens_control.epoch when this thread last looked */
	} attach;
	/* stacks.c: this thread's own stack; 0, 0 until its first sample; 0, 1 if it cannot be known */
	struct {
		uintptr_t lo, hi;
	} stack;
	struct scratch *scratch; /* NULL until the thread's first sample (scratch.c) */
	int scratch_gone;        /* the thread is ending: its scratch was unmapped */
};

/*
 * Preloaded, the library's thread-local block sits in the static TLS block
 * (initial-exec: one %fs-relative access), which glibc carves out of every
 * thread's stack: it must stay a few hundred bytes (test: TestSmallStacks).
 * Loaded by dlopen into a running process (heaplens attach), it takes the
 * dynamic model (a TLS descriptor call, the block allocated on a thread's
 * first use), as the static block has little room for late arrivals.
 */
#ifdef HEAPLENS_ATTACH
#define HL_TLS_MODEL "global-dynamic"
#else
#define HL_TLS_MODEL "initial-exec"
#endif
extern _Thread_local struct tls tls __asm__("heaplens_tls") __attribute__((tls_model(HL_TLS_MODEL)));

/* SplitMix64: a seed to a well-mixed 64-bit value, advancing the seed. */
static inline uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A loaded object, in g.mod: its table and records are modules.c's, its unwind table unwind.c's. */
enum { TAB_NEW, TAB_LOADING, TAB_READY, TAB_NONE };
struct module {
	uint64_t bias;
	uint32_t path_off, path_len;
	uint32_t nseg;
	uint64_t seg[HL_MAX_SEGMENTS][4]; /* vaddr, memsz, offset, flags */
	uint64_t text_lo, text_len; /* its first executable segment, as loaded */
	uint8_t id[32]; /* GNU build ID, id_len bytes (0: none, or longer than this) */
	uint32_t id_len;
	int unsent; /* its MODULE record was refused by a full ring (resend_modules) */
	/* Its unwind table (unwind.c): the fields below are set before tab_state becomes ready (release). */
	uint32_t tab_state; /* TAB_* */
	int64_t tab_retry; /* CLOCK_MONOTONIC ns: not looked for again before */
	uint32_t tab_rows, tab_shift;
	const uint32_t *tab_addr, *tab_rule;
	const uint32_t *tab_first; /* the row each 2^tab_shift-byte bucket starts in */
	uint64_t tab_lo; /* bias + the table's base */
};

#define MAX_MODULES 2048
#define MIN_RING (64u << 10)
#define DEFAULT_RING (16u << 20)
#define MAX_RING (1u << 30)
#define MAX_RATE (1ull << 48)
#define MAX_DIR 3000 /* room under it for our names in a 4096-byte path */
#define PATH_POOL (512u << 10)

/* The library's state, one per process (boot.c defines it). */
struct hl_global {
	int state; /* 0 new, 1 initialising, 2 ready */
	int active;
	int follow; /* profile fork and exec children too */
	int no_python; /* attached with --no-python: no Python frames this session */
	uint64_t rate;
	int exact; /* preloaded at --rate 1: no set of sampled blocks, every free is sent (EXACT) */
	double inv_log_keep; /* 1 / -log(1 - 1/rate): geometric gap scale */
	uint64_t seed;
	int seeded;
	uint64_t ring_size; /* this ring's data size */
	uint64_t grow_at;   /* a reservation past this backs more first (grow) */
	int growing;        /* a thread is backing more of the ring */
	int stopped;        /* backing failed: the ring never grows again */
	uint64_t want_size; /* HEAPLENS_RING_SIZE */
	const char *dir;
	struct hl_ring_header *ring;
	uint8_t *data;
	uint64_t mask;
	uint32_t seq;
	uint32_t threads;
	uintptr_t self_lo, self_hi; /* our own code, skipped in stacks */
	int scanning;               /* a module rescan (or resend) is under way */
	int unsent;                 /* a module's MODULE record waits to be sent again */
	unsigned long long adds;    /* dlpi_adds at the last scan */
	char exe[1024];
	uint32_t nmod;              /* published with release */
	struct module mod[MAX_MODULES];
	uint32_t pool_used;
	char pool[PATH_POOL];
	uint64_t early_drops; /* samples before the ring existed */
	/*
	 * Threads inside the unwinder or dl_iterate_phdr, whose locks (libgcc's
	 * object_mutex, the loader's dl_load_write_lock, which glibc 2.36's fork
	 * does not reset) they may hold. Nonzero at a fork: the child never
	 * unwinds (no_unwind), as those locks may stay held there for good.
	 */
	int unwinding;
	int no_unwind;
	int unwind_check; /* HEAPLENS_UNWIND_CHECK=1: every stack walked both ways (unwind.c) */
	int walk_splice;  /* walks splice onto the thread's last (unwind.c): in a Python process */
	int (*find_object)(void *pc, struct dl_find_object *); /* glibc 2.35+, lock-free; else NULL */
	/* The module whose malloc the hooks call (find_allocator): its own mmaps are not the program's. */
	uintptr_t alloc_lo, alloc_hi;
	uint32_t alloc_flags; /* HL_ALLOCATOR_* */
	char alloc_path[256];
	int sanitized; /* a sanitizer runtime owns the allocator, and the restart without us failed: inert */
	int sandboxed; /* a seccomp filter may be in force: no new system calls (seccomp.c) */
};
extern struct hl_global g;

/*
 * Under a seccomp filter the preloaded library makes no new system call
 * (seccomp.c). The attached library may make those the agent checked the
 * filter allows (internal/seccomp's Needed, docs/attach.md): there
 * g.sandboxed stops only the calls not on that list (getrusage at exit,
 * the unwind tables' mapping), and these gates are the preloaded one's.
 */
#ifdef HEAPLENS_ATTACH
#define NO_NEW_CALLS() 0
#else
#define NO_NEW_CALLS() RELAXED(g.sandboxed)
#endif

/* 0 for a thread that first asks under a seccomp filter: no new system call then (seccomp.c). */
static inline uint32_t tid(void)
{
	if (unlikely(!tls.tid) && !NO_NEW_CALLS())
		tls.tid = (uint32_t)syscall(SYS_gettid);
	return tls.tid;
}

/*
 * Brackets the library's own allocations and unwinding: nothing in between
 * is sampled (busy), and the countdown comes back as it was, since those
 * bytes were not the program's.
 */
struct countdown {
	int64_t remaining, owed;
};
static inline struct countdown pause_sampling(void)
{
	tls.busy++;
	return (struct countdown){tls.remaining, tls.owed};
}
static inline void resume_sampling(struct countdown c)
{
	tls.busy--;
	tls.remaining = c.remaining, tls.owed = c.owed;
}

/*
 * Exact mode (preloaded, --rate 1): every block is sampled, so the library
 * keeps no set of them (blockset.c) and sends every free; the agent pairs
 * each with the block it knows (docs/ring-format.md, "Exact mode").
 * Attached, sessions may change the rate: the set is always kept.
 */
#ifdef HEAPLENS_ATTACH
#define EXACT() 0
#else
#define EXACT() RELAXED(g.exact)
#endif

uint32_t hl_tid(void);  /* boot.c */
int64_t now_ns(clockid_t c); /* boot.c */
int hl_active(void);    /* modules.c: this process is being profiled */
uint64_t hl_rate(void); /* modules.c: mean bytes between samples */

#pragma GCC visibility pop

#endif
