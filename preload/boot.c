/*
 * Start-up of libheaplens.so: the allocator below us (found with dlsym,
 * which may itself allocate: a static buffer serves it meanwhile), the
 * library's state read from the environment, and a fork child's fresh
 * start. The library as a whole is described in docs/architecture.md; it
 * owns no mutex, and docs/preload-safety.md lists every call a hook can
 * make and what that may lock.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>

#include "allocapi.h"
#include "blockset.h"
#include "boot.h"
#include "core.h"
#include "heapstats.h"
#include "scratch.h"
#include "hooks.h"
#include "limits.h"
#include "modules.h"
#include "pools.h"
#include "python.h"
#include "reserve.h"
#include "ring.h"
#include "sampler.h"
#include "sanitizer.h"
#include "seccomp.h"
#include "stacks.h"

#ifdef HEAPLENS_ATTACH
/* Read on every call. Filled at load by attach.c. */
struct hl_real real __attribute__((aligned(64)));
#else
#define BOOT_DECL(name, ret, params) static ret boot_##name params;
HL_ALLOCATOR(BOOT_DECL)
#undef BOOT_DECL

/* Read on every call: keep it together, in one cache line where possible. */
struct hl_real real __attribute__((aligned(64))) = {
#define BOOT_INIT(name, ret, params) .name = boot_##name,
	HL_ALLOCATOR(BOOT_INIT)
#undef BOOT_INIT
};
#endif

struct hl_global g;

_Thread_local struct tls tls __asm__("heaplens_tls") __attribute__((tls_model(HL_TLS_MODEL), used));

uint32_t hl_tid(void) { return tid(); }

int64_t now_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

struct alloc_search {
	uintptr_t addr, lo, hi;
	const char *name;
};

static int alloc_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct alloc_search *a = arg;
	uintptr_t lo = UINTPTR_MAX, hi = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		uintptr_t b = info->dlpi_addr + ph->p_vaddr;
		lo = b < lo ? b : lo, hi = b + ph->p_memsz > hi ? b + ph->p_memsz : hi;
	}
	if (a->addr - lo >= hi - lo)
		return 0;
	a->lo = lo, a->hi = hi, a->name = info->dlpi_name;
	return 1;
}

/*
 * The module that serves real.malloc, for maps.c (an mmap called from it
 * is the allocator's own, never the program's) and for the ring header,
 * which names it: the reports say which allocator a process had.
 */
void find_allocator(void)
{
	struct alloc_search a = {(uintptr_t)NEXT(malloc), 0, 0, NULL};
	__atomic_fetch_add(&g.unwinding, 1, __ATOMIC_SEQ_CST); /* dl_iterate_phdr's lock, at a fork */
	dl_iterate_phdr(alloc_cb, &a);
	g.alloc_lo = a.lo, g.alloc_hi = a.hi;
	if (a.name)
		strncpy(g.alloc_path, a.name, sizeof g.alloc_path - 1);
	uintptr_t libc = (uintptr_t)dlsym(HL_NEXT, "gnu_get_libc_version");
	if (libc && libc - a.lo < a.hi - a.lo)
		g.alloc_flags |= HL_ALLOCATOR_GLIBC;
	__atomic_fetch_sub(&g.unwinding, 1, __ATOMIC_RELEASE);
}

/* ---- bootstrap: dlsym may allocate before the real functions are known ---- */

static char boot_buf[64 << 10] __attribute__((aligned(16)));

int in_boot(const void *p)
{
	return (const char *)p >= boot_buf && (const char *)p < boot_buf + sizeof boot_buf;
}

/* A bootstrap block's size is in the word below it (boot_alloc). */
size_t boot_size(const void *p) { return ((const size_t *)p)[-1]; }


#ifndef HEAPLENS_ATTACH
static size_t boot_used;

/*
 * Bootstrap blocks are never freed; their size is in the word below them,
 * and their filter counter in the sampled set is pinned, so that free and
 * realloc take the slow path for them (hooks.c).
 */
static void *boot_alloc(size_t n)
{
	size_t need = 16 + ((n + 15) & ~(size_t)15);
	size_t at = __atomic_fetch_add(&boot_used, need, __ATOMIC_RELAXED);
	if (n > sizeof boot_buf || at + need > sizeof boot_buf)
		return NULL;
	size_t *p = (size_t *)(boot_buf + at + 16);
	p[-1] = n;
	blockset_pin(&sampled_blocks, p);
	return p;
}

static int resolving;

static void resolve_real(void)
{
	if (__atomic_exchange_n(&resolving, 1, __ATOMIC_ACQ_REL))
		return;
#ifndef HEAPLENS_HARNESS
	g.sanitized = sanitizer_restart() != 0;
	seccomp_read(); /* the mode this process started with (seccomp.c) */
#endif
	struct hl_real found;
#define FIND(name, ret, params)                                    \
	*(void **)&found.name = dlsym(RTLD_NEXT, #name);            \
	if (!found.name)                                            \
		abort(); /* no allocator below us: nothing sane is possible */
	HL_ALLOCATOR(FIND)
#undef FIND
	/*
	 * Every other function first, malloc last with release: once malloc is
	 * real, its blocks must never reach a bootstrap free or realloc.
	 */
#define PUBLISH(name, ret, params)                                            \
	if (offsetof(struct hl_real, name) != offsetof(struct hl_real, malloc)) \
		SET_RELAXED(real.name, found.name);
	HL_ALLOCATOR(PUBLISH)
#undef PUBLISH
	__atomic_store_n(&real.malloc, found.malloc, __ATOMIC_RELEASE);
	resolve_cond(); /* now, not at a thread's first wait: dlsym takes the loader lock */
}

/* While resolving (dlsym re-entered us) serve from the static buffer. */
#define BOOT_READY() (resolve_real(), __atomic_load_n(&real.malloc, __ATOMIC_ACQUIRE) != boot_malloc)
static void *boot_malloc(size_t n) { return BOOT_READY() ? NEXT(malloc)(n) : boot_alloc(n); }
static void *boot_calloc(size_t k, size_t n)
{
	if (BOOT_READY())
		return NEXT(calloc)(k, n);
	size_t t;
	return __builtin_mul_overflow(k, n, &t) ? NULL : boot_alloc(t); /* static memory is zero */
}
static void boot_free(void *p)
{
	if (BOOT_READY() && !in_boot(p))
		NEXT(free)(p);
}
static void *boot_realloc(void *p, size_t n) { return BOOT_READY() ? NEXT(realloc)(p, n) : NULL; }
static void *boot_memalign(size_t a, size_t n) { return BOOT_READY() ? NEXT(memalign)(a, n) : NULL; }
static int boot_posix_memalign(void **r, size_t a, size_t n) { return BOOT_READY() ? NEXT(posix_memalign)(r, a, n) : ENOMEM; }
static void *boot_aligned_alloc(size_t a, size_t n) { return BOOT_READY() ? NEXT(aligned_alloc)(a, n) : NULL; }
static void *boot_valloc(size_t n) { return BOOT_READY() ? NEXT(valloc)(n) : NULL; }
static void *boot_pvalloc(size_t n) { return BOOT_READY() ? NEXT(pvalloc)(n) : NULL; }
static size_t boot_malloc_usable_size(void *p) { return BOOT_READY() ? NEXT(malloc_usable_size)(p) : 0; }

/* ---- initialisation ---- */

/*
 * The environment is the program's and may hold anything: a value that is
 * not a decimal number fitting in 64 bits within [lo, hi] gives dflt, so no
 * value can make the program fail.
 */
static int parse_num(const char *s, uint64_t *v)
{
	if (!s || !*s)
		return 0;
	for (*v = 0; *s >= '0' && *s <= '9'; s++)
		if (__builtin_mul_overflow(*v, 10, v) || __builtin_add_overflow(*v, (uint64_t)(*s - '0'), v))
			return 0;
	return !*s;
}

static uint64_t env_u64(const char *name, uint64_t lo, uint64_t hi, uint64_t dflt)
{
	uint64_t v;
	return parse_num(getenv(name), &v) && v >= lo && v <= hi ? v : dflt;
}

/*
 * A copy of HEAPLENS_DIR if it is an absolute path short enough for our
 * names under it, else NULL: the library stays inert. A copy, because a
 * program may write over its environment block (setproctitle, as nginx
 * and sshd do) while the ring and unwind-table paths are still to come.
 */
static const char *env_dir(void)
{
	static char dir[MAX_DIR + 1];
	const char *d = getenv("HEAPLENS_DIR");
	size_t n = d ? strnlen(d, MAX_DIR + 1) : 0;
	if (!d || d[0] != '/' || n > MAX_DIR)
		return NULL;
	memcpy(dir, d, n + 1);
	return dir;
}

void init_global(void)
{
	int expect = 0;
	if (!__atomic_compare_exchange_n(&g.state, &expect, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return;
	int saved = errno; /* a hook that succeeds leaves errno alone */
	if (__atomic_load_n(&real.malloc, __ATOMIC_ACQUIRE) == boot_malloc)
		resolve_real();
	g.dir = env_dir();
	g.rate = env_u64("HEAPLENS_RATE", 1, MAX_RATE, HL_DEFAULT_RATE);
	g.inv_log_keep = g.rate > 1 ? -1.0 / log1p(-1.0 / (double)g.rate) : 0;
	g.exact = g.rate == 1;
	g.seeded = parse_num(getenv("HEAPLENS_SEED"), &g.seed);
	g.want_size = env_u64("HEAPLENS_RING_SIZE", MIN_RING, MAX_RING, DEFAULT_RING);
	if (g.want_size & (g.want_size - 1))
		g.want_size = DEFAULT_RING;
	/* --no-follow: only the agent's own child (before and after an exec) is profiled. */
	g.follow = (int)env_u64("HEAPLENS_FOLLOW", 0, 1, 1); /* 0 or 1 */
	uint64_t agent = env_u64("HEAPLENS_AGENT_PID", 1, INT32_MAX, 0);
	limits_restore(agent);
	g.unwind_check = (int)env_u64("HEAPLENS_UNWIND_CHECK", 0, 1, 0);
#ifndef HEAPLENS_HARNESS
	if (seccomp_inherited()) { /* no new system calls: no ring (seccomp.c) */
		SET_RELAXED(g.sandboxed, 1);
		seccomp_leave_preload();
	}
#endif
	/* The system call itself: a sanitizer's getrandom may not be set up yet; none under a filter. */
	if (!g.seeded && (RELAXED(g.sandboxed) ||
			  syscall(SYS_getrandom, &g.seed, sizeof g.seed, GRND_NONBLOCK) != (long)sizeof g.seed))
		g.seed = (uint64_t)now_ns(CLOCK_MONOTONIC) ^ (uint64_t)getpid();
	g.find_object = (int (*)(void *, struct dl_find_object *))dlsym(RTLD_DEFAULT, "_dl_find_object");
	find_allocator();
	heapstats_init();
	scratch_init();
	if (!RELAXED(g.sandboxed)) /* getrlimit, and libgcc's first lookup: new system calls under a filter */
		stacks_init();
	if (g.dir && !g.sanitized && !RELAXED(g.sandboxed) && (g.follow || (uint64_t)getppid() == agent)) {
		ring_create(0, 0, 0);
		SET_RELAXED(g.active, g.ring != NULL);
	}
	if (g.active) /* before the program maps anything more: see reserve.c */
		reserve_init();
	if (g.active && !blockset_init(&sampled_blocks))
		SET_RELAXED(g.active, 0); /* nowhere to keep sampled blocks: nothing is sampled */
	if (g.active) {
		pthread_atfork(NULL, NULL, hl_atfork_child);
		on_exit(on_exit_mark, NULL);
	}
	errno = saved;
	__atomic_store_n(&g.state, 2, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void heaplens_init(void)
{
	tls.busy++;
	init_global();
	pools_init();
	if (g.active) {
		allocapi_resolve();
		scan_modules();
		allocapi_started();
		py_detect();
		__atomic_fetch_or(&g.ring->flags, HL_FLAG_INIT_DONE, __ATOMIC_RELEASE);
	}
	tls.busy--;
}
#endif /* !HEAPLENS_ATTACH */

/*
 * A fork child gets a fresh ring of its own: it must never write into the
 * parent's, which the parent still shares. It is the only thread now, and
 * runs nothing that another thread of the parent may have left locked: the
 * module table is inherited (no loader lock), the ring is made with syscalls,
 * and if any thread was unwinding at the fork this process never unwinds.
 * docs/preload-safety.md lists what every hook may lock.
 */
void hl_atfork_child(void)
{
	if (__atomic_exchange_n(&g.unwinding, 0, __ATOMIC_RELAXED))
		g.no_unwind = 1; /* for good, and in its own children */
	tls.tid = 0;
	stacks_atfork_child();
	pools_atfork_child();
	heapstats_atfork_child();
	struct hl_ring_header *parent = g.ring;
	if (!parent)
		return;
	if (NO_NEW_CALLS()) { /* under a seccomp filter: no ring, not even munmap (seccomp.c) */
		g.ring = NULL;
		g.active = 0;
		tls.remaining = IDLE_GAP, tls.owed = 0;
		return;
	}
	int64_t ppid = parent->pid;
	uint32_t attached = parent->flags & HL_FLAG_ATTACHED;
	uint32_t pseq = g.seq;
	g.ring = NULL;
	g.scanning = 0;
	munmap(parent, HL_RING_HEADER_SIZE + g.ring_size);
	/* Attached, g.active is 0 outside a session's window, and in a child forked as one began or ended. */
	if (!g.follow || !RELAXED(g.active)) {
		g.active = 0;
		tls.remaining = IDLE_GAP, tls.owed = 0;
		return;
	}
	ring_create(HL_FLAG_FORKED | attached | (g.no_unwind ? HL_FLAG_NO_UNWIND : 0), ppid, pseq);
	if (!g.ring) {
		g.active = 0;
		tls.remaining = IDLE_GAP, tls.owed = 0;
		return;
	}
	for (uint32_t i = 0; i < g.nmod; i++) {
		emit_module(&g.mod[i]);
		if (g.mod[i].tab_state == TAB_LOADING) /* another thread of the parent was mapping the table */
			g.mod[i].tab_state = TAB_NEW;
	}
	py_new_ring();
	__atomic_fetch_or(&g.ring->flags, HL_FLAG_INIT_DONE, __ATOMIC_RELEASE);
	if (!g.seeded)
		g.seed ^= (uint64_t)getpid() * (uint64_t)0x9e3779b97f4a7c15ull;
	tls.rng = splitmix(&g.seed);
}
