/*
 * What the files of libheaplens.so share: boot.c (start-up, the allocator
 * below us), ring.c, modules.c, sampler.c, hooks.c (the malloc family),
 * python.c (Python frames, code records, PyMem hooks), pools.c and
 * openmp.c (thread-pool origins). Nothing here is exported: the library is
 * built with -fvisibility=hidden; heaplens.h is its public API.
 */
#ifndef HEAPLENS_INTERNAL_H
#define HEAPLENS_INTERNAL_H

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
 * interposed.
 */
#pragma GCC visibility push(hidden)

#define EXPORT __attribute__((visibility("default")))
#define HOT __attribute__((hot))
#define COLD __attribute__((cold, noinline))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/*
 * Words that another thread may write while this one reads them: relaxed
 * atomics, the same plain moves on x86-64, but data-race-free under C11.
 */
#define RELAXED(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define SET_RELAXED(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#define NEXT(f) RELAXED(real.f) /* the allocator below us */

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
 * The countdown of a thread while the library samples nothing. Preloaded
 * that is for good. Attached, a session may start again later: idle threads
 * come back every few kilobytes to see whether one has (sample_slow).
 */
#ifdef HEAPLENS_ATTACH
#define IDLE_GAP ((int64_t)4096)
#else
#define IDLE_GAP (INT64_MAX / 2)
#endif

/*
 * The sanitizer harness (test/sanitize) links these sources into an
 * instrumented program that calls hl_malloc, hl_free, ...: an interposing
 * allocator cannot itself be preloaded beside a sanitizer's.
 */
#ifdef HEAPLENS_HARNESS
#define HOOK(name) hl_##name
#else
#define HOOK(name) name
#endif

/*
 * The allocator functions below us, each once: name, return type,
 * parameters. hooks.c interposes each; boot.c finds the real ones (and
 * serves dlsym before it has them). malloc and free come first: they are
 * read on every call (see real).
 */
#define HL_ALLOCATOR(X)                                   \
	X(malloc, void *, (size_t n))                       \
	X(free, void, (void *p))                            \
	X(calloc, void *, (size_t k, size_t n))             \
	X(realloc, void *, (void *p, size_t n))             \
	X(memalign, void *, (size_t a, size_t n))           \
	X(posix_memalign, int, (void **r, size_t a, size_t n)) \
	X(aligned_alloc, void *, (size_t a, size_t n))      \
	X(valloc, void *, (size_t n))                       \
	X(pvalloc, void *, (size_t n))                      \
	X(malloc_usable_size, size_t, (void *p))

struct hl_real {
#define HL_REAL_FIELD(name, ret, params) ret(*name) params;
	HL_ALLOCATOR(HL_REAL_FIELD)
#undef HL_REAL_FIELD
};
extern struct hl_real real;

struct tls {
	int64_t remaining; /* must stay first: sample_now addresses it by name */
	int64_t owed;      /* bytes of the countdown held back while it is cut short (see sample_slow) */
	uint64_t rng;
	int init;
	int busy; /* inside the hook: allocations here are never sampled */
	uint32_t tid; /* 0 until first needed; reset in a fork child */
	uint32_t nframes, npy;
	uint64_t origin;        /* token of the thread this one works for, 0 = itself (pools.c) */
	uint32_t origin_method; /* HL_ORIGIN_* that set origin */
	uint32_t origin_seq;    /* this thread's last token sequence number */
	uint32_t open_depth;    /* nested origin_begin calls */
	int open_slot;          /* its slot in pools.c's table, -1 if none was free */
	uint64_t open_token;
	uint64_t creator;       /* in a Python process, the token of the thread that created this one (pools.c) */
	uint64_t session;       /* attached: the session this thread's sampler was set up for */
	uint64_t epoch;         /* attached: heaplens_control.epoch when this thread last looked */
	/* This thread's own stack (stacks.c): 0, 0 until its first sample; 0, 1 if it cannot be known. */
	uintptr_t stk_lo, stk_hi;
	struct scratch *scratch; /* NULL until the thread's first sample (scratch.c) */
	int scratch_gone;        /* the thread is ending: its scratch was unmapped */
};
/*
 * What a sample needs beside the countdown, too large for static TLS
 * (scratch.c): a thread's own, mapped on its first sample.
 */
#define FOREIGN_STACKS 8
struct scratch {
	uintptr_t rule_pc[256]; /* the rules this thread's walks looked up last, by address (unwind.c) */
	uint32_t rule_of[256];
	uintptr_t frames[HL_MAX_FRAMES];
	uint64_t py[2 * HL_MAX_PYFRAMES]; /* code pointer, position word: see heaplens_ring.h */
	char buf[4096];                   /* a path, or lines of /proc/self/maps: not on the caller's stack */
	uintptr_t foreign_lo[FOREIGN_STACKS], foreign_hi[FOREIGN_STACKS]; /* stacks not the thread's own (stacks.c) */
	uint32_t foreign_next;            /* the entry a new one replaces */
	unsigned char vec[256];           /* mincore's answer over one of them */
	uint64_t stat_bytes;              /* sampled bytes not yet added to heapstats.c's count */
};
struct scratch *scratch_get(void); /* NULL: none can be had, the sample is dropped */

/* stacks.c: the stack a walk is on; it reads only within [lo, hi). */
struct stack_region {
	uintptr_t lo, hi;
	int own; /* the thread's own stack, not a signal's, a coroutine's or a ucontext's */
};
void stacks_init(void);
int stack_elsewhere(uintptr_t sp, struct stack_region *r);

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

/* The stack that holds sp, into *r; 0 if it cannot be known. Needs tls.scratch. */
static inline int stack_of(uintptr_t sp, struct stack_region *r)
{
	if (likely(sp - tls.stk_lo < tls.stk_hi - tls.stk_lo)) {
		r->lo = tls.stk_lo, r->hi = tls.stk_hi, r->own = 1;
		return 1;
	}
	return stack_elsewhere(sp, r);
}


/* SplitMix64: a seed to a well-mixed 64-bit value, advancing the seed. */
static inline uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

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
#define FIRST_CHUNK (64u << 10) /* data bytes backed at creation; the rest as the ring fills */
#define GROW_STEP (1u << 20)    /* backed at most at once: a sampled call waits ~0.5 ms for it */
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
	int (*find_object)(void *pc, struct dl_find_object *); /* glibc 2.35+, lock-free; else NULL */
	/* The module whose malloc the hooks call (find_allocator): its own mmaps are not the program's. */
	uintptr_t alloc_lo, alloc_hi;
	uint32_t alloc_flags; /* HL_ALLOCATOR_* */
	char alloc_path[256];
	int sanitized; /* a sanitizer runtime owns the allocator, and the restart without us failed: inert */
	int sandboxed; /* a seccomp filter may be in force: no new system calls (seccomp.c) */
};
extern struct hl_global g;

/* 0 for a thread that first asks under a seccomp filter: no new system call then (seccomp.c). */
static inline uint32_t tid(void)
{
	if (unlikely(!tls.tid) && !RELAXED(g.sandboxed))
		tls.tid = (uint32_t)syscall(SYS_gettid);
	return tls.tid;
}

int sample_slow(size_t n);
void heapstats_init(void);
void heapstats_maybe(int64_t now, size_t n); /* the time and size of the ALLOC just recorded */
void heapstats_atfork_child(void);

/*
 * The unsampled fast path: remaining -= n, and a jump to `label` unless it
 * stays above zero. Written as one subtract from thread-local memory and a
 * signed branch on its flags; C would add a load, a store and a test.
 * jle after sub is exactly "old remaining <= n" in signed arithmetic. At the
 * label the caller must call sample_slow(n) to decide.
 */
#ifdef HEAPLENS_ATTACH
/* Attached, a new epoch (a session starts or ends) sends every thread's next call to the slow path. */
extern struct hl_control hl_ctl; /* attach.c; exported as heaplens_control */
#define COUNTDOWN_OR_GOTO(n, label)                                                         \
	do {                                                                                \
		struct tls *t_ = &tls;                                                      \
		int64_t old_ = t_->remaining;                                               \
		t_->remaining = old_ - (int64_t)(n);                                        \
		if (old_ <= (int64_t)(n) || t_->epoch != RELAXED(hl_ctl.epoch))         \
			goto label;                                                         \
	} while (0)
#else
#define COUNTDOWN_OR_GOTO(n, label)                                              \
	__asm__ goto("movq heaplens_tls@gottpoff(%%rip), %%rax\n\t"                \
		     "subq %0, %%fs:(%%rax)\n\t"                                   \
		     "jle %l[" #label "]"                                           \
		     :                                                              \
		     : "r"(n)                                                       \
		     : "rax", "cc", "memory"                                        \
		     : label)
#endif

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

static inline __attribute__((always_inline)) int sample_now(size_t n)
{
	COUNTDOWN_OR_GOTO(n, slow);
	return 0;
slow:
	return sample_slow(n);
}

void record_alloc(void *p, size_t n, int func);
void record_free(void *p);
void record_unmap(void *p, size_t n);
void record_origin(uint64_t token, int walked);
void stacks_atfork_child(void); /* sampler.c: the stacks sent by ref, forgotten */
uint32_t hl_tid(void);
int hl_active(void);
uint64_t hl_rate(void); /* mean bytes between samples */
int module_range(uintptr_t pc, uintptr_t *lo, uintptr_t *hi);
int emit_mark(uint64_t kind, uint64_t value);
int64_t now_ns(clockid_t c);

/* boot.c */
int in_boot(const void *p); /* a block of the static buffer that serves dlsym */
size_t boot_size(const void *p); /* the size asked for such a block */
void init_global(void);
void hl_atfork_child(void); /* a fork child's own ring */
void find_allocator(void); /* where real.malloc lives; at start-up only (dlsym, dl_iterate_phdr) */

/*
 * sanitizer.c: with a sanitizer runtime loaded, restarts the process
 * without us (returns only if that failed: the kind of runtime) or
 * returns 0. The marker unprofiled.<pid>.<HL_UNPROFILED_SANITIZER + kind>
 * tells the agent (internal/collect/notes.go).
 */
#define HL_UNPROFILED_SANITIZER 4096
int sanitizer_restart(void);

/*
 * limits.c: the address-space limit. HL_UNPROFILED_ASLIMIT in a marker:
 * the limit (its bytes field) leaves no room for the smallest ring.
 */
#define HL_UNPROFILED_ASLIMIT 4200
void limits_restore(uint64_t agent); /* HEAPLENS_RLIMIT_AS, in the agent's child */
uint64_t limits_ring(uint64_t want); /* the ring size the limit allows, 0 for none */

/* seccomp.c: prctl and syscall wrapped; a filter inherited across exec */
int seccomp_read(void);      /* at start: the mode (0 none), noted for seccomp_inherited */
int seccomp_inherited(void); /* started under a filter of the program's */
void seccomp_leave_preload(void); /* heaplens's LD_PRELOAD entry blanked, for what it execs */

/* ring.c */
char *put_name(char *q, const char *name); /* g.dir + "/" + name */
void ring_create(uint32_t flags, int64_t parent_pid, uint32_t parent_seq);
void count_drop(uint64_t *field);
void ring_remove(const struct hl_ring_header *h);
void ring_back_all(void); /* the whole ring, now: no madvise once a seccomp filter is in */
void on_exit_mark(int status, void *arg);
void resident_report(void);
void rss_mark(void);
long read_small_file(const char *path, char *buf, size_t cap);
int py_final_sent(void);

/* modules.c */
int emit_module(struct module *m);
void resend_modules(void);
void scan_modules(void);
int covered(uintptr_t pc, uint32_t *hint);
int new_module(uintptr_t pc);

/* unwind.c */
/*
 * Where a walk starts: the frame of the library's entry point that called
 * it (record_alloc, record_origin), read from its frame pointer, so that
 * the walk does not step through the frames in between, which are always
 * the library's own (~3 of a C++ program's ~10 frames a sample).
 */
struct walk_start {
	uintptr_t pc, sp, bp; /* its return address, its CFA, its caller's rbp */
};
#define WALK_START() \
	({ \
		const uintptr_t *fp_ = __builtin_frame_address(0); \
		(struct walk_start){fp_[1], (uintptr_t)(fp_ + 2), fp_[0]}; \
	})
/* How a table walk ended: at the outermost frame, at a frame no table covers yet (libgcc may go on), or cut. */
enum { WALK_DONE, WALK_LIBGCC, WALK_CUT, WALK_UNSCANNED /* done, through a library loaded since the last scan */ };
int table_walk(const struct walk_start *from, struct stack_region *r);
int table_rule(uintptr_t look, uint32_t *rule); /* the rule of the row holding look, from the tables; 0 if none */
int sigreturn_at(uintptr_t pc); /* pc is the kernel's signal return trampoline (__restore_rt) */
#define NO_FDE (-2)
int fde_rule(uintptr_t look, uint32_t *rule); /* cfi.c: the rule from the module's .eh_frame, for code no table covers */

/* The ring, for records python.c writes. */
struct hl_ring_header *ring_now(void);
int ring_reserve(uint64_t len, uint64_t *pos);
void ring_put(uint64_t pos, uint64_t w);
void ring_put_bytes(uint64_t pos, const void *src, uint64_t n);
void ring_commit(uint64_t pos, uint64_t hdr);

/*
 * blockset.c: a set of sampled blocks kept beside them, not in them: a
 * lock-free open-addressed table in levels, with a filter of saturating
 * counters in front, so that a free of an unsampled block costs a
 * multiply, a shift and one byte load.
 */
#define BLOCKSET_FILTER_BITS 14
#define BLOCKSET_LEVELS 6
struct blockset {
	uint8_t filter[1u << BLOCKSET_FILTER_BITS];
	uint64_t *table[BLOCKSET_LEVELS];
	uint32_t bits[BLOCKSET_LEVELS];
	uint32_t levels; /* published with release once table[levels - 1] is there */
	int growing;
};
/* A multiplicative hash of the address's low 32 bits: blocks near each other spread over the filter. */
static inline uint32_t blockset_filter_at(const void *p)
{
	return ((uint32_t)(uintptr_t)p * 0x9e3779b1u) >> (32 - BLOCKSET_FILTER_BITS);
}
static inline int blockset_maybe(const struct blockset *s, const void *p)
{
	return __atomic_load_n(&s->filter[blockset_filter_at(p)], __ATOMIC_RELAXED) != 0;
}
/*
 * blockset_maybe as a jump to label, for free's fast path: the compare
 * reads the filter byte itself (C's relaxed load adds a zero-extend and a
 * test). The hash is blockset_filter_at's.
 */
#define BLOCKSET_MAYBE_GOTO(s, p, label)                                         \
	__asm__ goto("imull $0x9e3779b1, %k0, %%eax\n\t"                        \
		     "shrl $(32 - " HL_STR(BLOCKSET_FILTER_BITS) "), %%eax\n\t"  \
		     "cmpb $0, (%1,%%rax)\n\t"                                   \
		     "jne %l[" #label "]"                                       \
		     :                                                          \
		     : "r"(p), "r"((s)->filter)                                 \
		     : "rax", "cc"                                              \
		     : label)
#define HL_STR_(x) #x
#define HL_STR(x) HL_STR_(x)
int blockset_init(struct blockset *s);
int64_t blockset_take(struct blockset *s, void *p); /* its size (at most 0xffff), or -1 if not there */
void blockset_keep(struct blockset *s, void *p, size_t n, int func); /* puts and records, or counts a drop */
void blockset_pin(struct blockset *s, const void *p); /* every free of p takes the slow path */
extern struct blockset sampled_blocks; /* hooks.c: the malloc family's sampled blocks */

/*
 * Attached, the loader's own allocations may come through the hooks (see
 * attach.c); preloaded, they never reach a sampled path.
 */
#ifdef HEAPLENS_ATTACH
extern uintptr_t loader_lo, loader_len;
#define FROM_LOADER() ((uintptr_t)__builtin_return_address(0) - loader_lo < loader_len)
#else
#define FROM_LOADER() 0
#endif

/* attach.c (the attach build): a session starting or ending, seen from a hook's slow path. */
int attach_poll(uint64_t *session); /* 0 while another thread switches; else the session now running (0 none) */

/* python.c */
void pymem_install(void);       /* pymem.c: from py_detect, in the constructor */
void pymem_check(void);         /* the hooks still in place (a sampled slow path) */
void pymem_atfork_child(void);
int py_gil_checkable(void);
int py_gil_held(void);          /* this thread holds the GIL (lock-free reads only) */
extern int py_pending; /* a supported interpreter is loaded; its PyMem hooks are not installed yet */
void py_detect(void);
void py_try_install(void);
void py_walk(void);
int py_emit_codes(void); /* 1: every code object of tls.scratch->py is in the ring (sent now or before) */
void py_check_final(void);
void py_new_ring(void);      /* a new ring (fork child, attach session): state and code records again */
int py_running(void);       /* 1: an initialised interpreter, not finalizing */
int py_thread(void);        /* 1: this thread has a Python thread state */
int py_foreign_thread(void); /* 1: a running interpreter, and this thread is not one of its threads */
int py_waiter(uintptr_t ra); /* a Python thread waiting, called from ra outside the interpreter */

/* pools.c */
int pool_origin(uint64_t *token);
uint64_t origin_begin(void);
void origin_end(void);
void pools_init(void);
void resolve_cond(void);
void pools_atfork_child(void);

#pragma GCC visibility pop

#endif
