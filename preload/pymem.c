/*
 * The PyMem hooks: objects from pymalloc's arenas never reach malloc, so
 * the MEM and OBJ domains run through these hooks, which sample them where
 * the allocator puts them, and pymalloc's arena allocator runs with the
 * sampler paused (its mappings hold those objects). python.c finds the
 * interpreter and calls pymem_install from the library's constructor.
 * See docs/python.md.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>

#include "blockset.h"
#include "core.h"
#include "python.h"
#include "ring.h"
#include "sampler.h"

/* PyMemAllocatorEx and the domains, as in CPython's public headers. */
typedef struct {
	void *ctx;
	void *(*malloc)(void *ctx, size_t size);
	void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
	void *(*realloc)(void *ctx, void *ptr, size_t new_size);
	void (*free)(void *ctx, void *ptr);
} pymem_allocator;

/* PyObjectArenaAllocator: where pymalloc gets its arenas (mmap, by default). */
typedef struct {
	void *ctx;
	void *(*alloc)(void *ctx, size_t size);
	void (*free)(void *ctx, void *ptr, size_t size);
} arena_allocator;
enum { PYMEM_DOMAIN_RAW, PYMEM_DOMAIN_MEM, PYMEM_DOMAIN_OBJ };
#define PYMALLOC_MAX 512 /* SMALL_REQUEST_THRESHOLD: larger requests go on to malloc, which samples them */

int py_pending;

/* CPython's allocator functions, found by pymem_install. */
static struct {
	void (*get_allocator)(int, pymem_allocator *);
	void (*set_allocator)(int, pymem_allocator *);
	void (*get_arena)(arena_allocator *);
	void (*set_arena)(arena_allocator *);
} pyfn;


/*
 * A sampled object is allocated by the previous allocator exactly as an
 * unsampled one (same request, same address, same layout: anything else
 * changes how long the interpreter keeps it, e.g. in the type attribute
 * cache, which keys on a name's address). Its address goes into a set of
 * untagged blocks (blockset.c). Requests over PYMALLOC_MAX pass through
 * uncounted: pymalloc takes them from malloc, whose hook samples them (and
 * so the blocks that grow past it by realloc).
 */
static struct blockset objects;

/*
 * The hooks run for every Python object. Their fast paths only count down
 * (or look at one filter byte) and jump on to the previous allocator;
 * everything else sits in COLD functions, so that they need no stack frame.
 * A sampled object is allocated outside any busy section, as an unsampled
 * one is: what pymalloc asks of malloc meanwhile is sampled there as usual.
 */
static COLD void *pm_malloc_slow(pymem_allocator *prev, size_t n)
{
	int sampled = sample_slow(n); /* first: what the allocator asks of malloc is counted after */
	void *p = prev->malloc(prev->ctx, n);
	if (p && sampled)
		KEEP_FROM_CALLER(&objects, p, n, HL_FUNC_PYMEM_MALLOC);
	return p;
}

static inline __attribute__((always_inline)) void *malloc_body(pymem_allocator *prev, size_t n)
{
	if (likely(n - 1 < PYMALLOC_MAX)) /* larger requests go on to malloc, whose hook counts them */
		COUNTDOWN_OR_GOTO(n, slow);
	return prev->malloc(prev->ctx, n);
slow:
	return pm_malloc_slow(prev, n);
}

static COLD void *pm_calloc_slow(pymem_allocator *prev, size_t k, size_t n)
{
	int sampled = sample_slow(k * n);
	void *p = prev->calloc(prev->ctx, k, n);
	if (p && sampled)
		KEEP_FROM_CALLER(&objects, p, k * n, HL_FUNC_PYMEM_CALLOC);
	return p;
}

static inline __attribute__((always_inline)) void *calloc_body(pymem_allocator *prev, size_t k, size_t n)
{
	size_t t;
	if (likely(!__builtin_mul_overflow(k, n, &t) && t - 1 < PYMALLOC_MAX))
		COUNTDOWN_OR_GOTO(t, slow);
	return prev->calloc(prev->ctx, k, n);
slow:
	return pm_calloc_slow(prev, k, n);
}

/*
 * Both filters' counters of p are set (free_body reads the second when the
 * first is, as another object's may be by chance: 1 in 250–700 of
 * py_churn's frees): p may be sampled. Its FREE goes out before the block
 * is released.
 */
static COLD void pm_free_slow(pymem_allocator *prev, void *p)
{
	if (EXACT())
		record_free_any(p, 1);
	else if (p && blockset_take(&objects, p) >= 0)
		record_free(p);
	prev->free(prev->ctx, p);
}

static inline __attribute__((always_inline)) void free_body(pymem_allocator *prev, void *p)
{
	/* The second filter's byte in the cold part, before any call: a byte set by chance costs ~10 instructions. */
	if (unlikely(blockset_maybe(&objects, p)) && blockset_maybe2(&objects, p)) {
		pm_free_slow(prev, p);
		return;
	}
	prev->free(prev->ctx, p);
}

/*
 * p may be sampled (counted = 0: n not counted down yet), or the countdown
 * ran out on n (counted = 1: sample_slow decides). A realloc of a sampled
 * block is a FREE of it, then an ALLOC if the new block is sampled.
 */
static COLD void *pm_realloc_slow(pymem_allocator *prev, void *p, size_t n, int counted)
{
	if (EXACT()) { /* the FREE held over the call: withdrawn if the old block lives on */
		int new = counted ? sample_slow(n) : n - 1 < PYMALLOC_MAX && sample_now(n);
		int64_t held = free_hold(p);
		void *q = prev->realloc(prev->ctx, p, n);
		free_settle(held, 1, q != NULL);
		if (q && new)
			KEEP_FROM_CALLER(&objects, q, n, HL_FUNC_PYMEM_REALLOC);
		return q;
	}
	int64_t old = p ? blockset_take(&objects, p) : -1;
	int new = counted ? sample_slow(n) : n - 1 < PYMALLOC_MAX && sample_now(n);
	if (old >= 0)
		record_free(p);
	void *q = prev->realloc(prev->ctx, p, n);
	if (!q) {
		if (old >= 0) /* the old block lives on */
			blockset_keep(&objects, p, (size_t)old, HL_FUNC_PYMEM_REALLOC, NULL);
		return NULL;
	}
	if (new)
		KEEP_FROM_CALLER(&objects, q, n, HL_FUNC_PYMEM_REALLOC);
	return q;
}

static inline __attribute__((always_inline)) void *realloc_body(pymem_allocator *prev, void *p, size_t n)
{
	if (unlikely(blockset_maybe(&objects, p)))
		return pm_realloc_slow(prev, p, n, 0);
	if (likely(n - 1 < PYMALLOC_MAX))
		COUNTDOWN_OR_GOTO(n, slow);
	return prev->realloc(prev->ctx, p, n);
slow:
	return pm_realloc_slow(prev, p, n, 1);
}

/* The hooks in general: ctx is the allocator they wrap. */
static void *pm_malloc(void *ctx, size_t n) { return malloc_body(ctx, n); }
static void *pm_calloc(void *ctx, size_t k, size_t n) { return calloc_body(ctx, k, n); }
static void pm_free(void *ctx, void *p) { free_body(ctx, p); }
static void *pm_realloc(void *ctx, void *p, size_t n) { return realloc_body(ctx, p, n); }

/*
 * The hooks over the allocator both domains held when they were first
 * hooked (pymalloc with its NULL context, in a release build): read from
 * a static copy, the jump on costs two instructions, not four through ctx
 * (py_churn 30 on python3.11: 4.7 M fewer instructions, of 43 M added).
 * first is set once, before any of these is installed.
 */
static pymem_allocator first;
static void *pmf_malloc(void *ctx, size_t n) { (void)ctx; return malloc_body(&first, n); }
static void *pmf_calloc(void *ctx, size_t k, size_t n) { (void)ctx; return calloc_body(&first, k, n); }
static void pmf_free(void *ctx, void *p) { (void)ctx; free_body(&first, p); }
static void *pmf_realloc(void *ctx, void *p, size_t n) { (void)ctx; return realloc_body(&first, p, n); }

/* Our allocator over prev: the words to put in a domain's slot. */
static void ours_over(pymem_allocator *prev, uintptr_t ours[5])
{
	int f = !memcmp(prev, &first, sizeof first);
	ours[0] = (uintptr_t)prev;
	ours[1] = f ? (uintptr_t)pmf_malloc : (uintptr_t)pm_malloc;
	ours[2] = f ? (uintptr_t)pmf_calloc : (uintptr_t)pm_calloc;
	ours[3] = f ? (uintptr_t)pmf_realloc : (uintptr_t)pm_realloc;
	ours[4] = f ? (uintptr_t)pmf_free : (uintptr_t)pm_free;
}

static int is_ours(uintptr_t malloc_fn) { return malloc_fn == (uintptr_t)pm_malloc || malloc_fn == (uintptr_t)pmf_malloc; }

/*
 * Installing. PyMem_SetAllocator is called once (attached: from a hook
 * with the GIL held, see pymem_hook), from the library's
 * constructor: before main, single-threaded, outside every hook, when the
 * MEM and OBJ domains still hold pymalloc's static defaults (an allocator
 * may be set before Py_Initialize). The constructor then finds the two
 * domain slots (the PyMemAllocatorEx structs in the interpreter's writable
 * data that now hold our functions). Pre-initialisation replaces every
 * domain when an allocator is asked for (-X dev, PYTHONDEVMODE,
 * PYTHONMALLOC): that is seen later, from a hook's slow path on a thread
 * that holds the GIL (every MEM and OBJ call needs it, so nothing reads the
 * slots meanwhile), and the new allocator is wrapped by writing the slot.
 *
 * What the hooks call in CPython, all lock-free and allocation-free:
 * Py_IsInitialized (reads a flag), PyGILState_GetThisThreadState (a TSS
 * get: pthread_getspecific), _PyThreadState_UncheckedGet (≤ 3.11: an atomic
 * load), _PyThreadState_GetCurrent / PyThreadState_GetUnchecked (3.12+: a
 * thread-local read). Everything else is a raw load or store.
 */
#define NCTX 4 /* wraps per domain; a context once published is never changed */
enum { LINK_OTHER, LINK_OURS, LINK_PYMALLOC, LINK_MALLOC };

static struct {
	uintptr_t *slot[2];         /* MEM, OBJ: 5 words each, in the interpreter's data */
	uintptr_t rw[4][2];         /* the interpreter's writable segments */
	int nrw;
	pymem_allocator pymalloc, raw; /* the defaults, as found at start-up */
	pymem_allocator ctx[2][NCTX]; /* the allocators we wrap */
	int nctx[2];
	uint64_t state;             /* HL_PYMEM_* published */
} pm;

static int rw_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	uintptr_t at = (uintptr_t)arg;
	int found = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && at - (info->dlpi_addr + ph->p_vaddr) < ph->p_memsz)
			found = 1;
	}
	if (!found)
		return 0;
	for (int i = 0; i < info->dlpi_phnum && pm.nrw < 4; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W)) {
			uintptr_t lo = (info->dlpi_addr + ph->p_vaddr) & ~(uintptr_t)7;
			pm.rw[pm.nrw][0] = lo, pm.rw[pm.nrw++][1] = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
		}
	}
	return 1;
}

static int in_rw(uintptr_t a, size_t n)
{
	for (int i = 0; i < pm.nrw; i++)
		if (a >= pm.rw[i][0] && a + n <= pm.rw[i][1] && !(a & 7))
			return 1;
	return 0;
}

static uintptr_t word(const uintptr_t *w) { return __atomic_load_n(w, __ATOMIC_RELAXED); }

/*
 * What an allocator (5 words at a) ends in: ours, pymalloc's, or malloc
 * (PYTHONMALLOC=malloc). Wrappers that CPython installs keep the wrapped
 * allocator in its data: tracemalloc at ctx, the debug hooks at ctx + 8.
 */
static int link_of(const uintptr_t *a, int depth)
{
	uintptr_t m = word(&a[1]);
	if (is_ours(m))
		return LINK_OURS;
	if (m == (uintptr_t)pm.pymalloc.malloc)
		return LINK_PYMALLOC;
	if (m == (uintptr_t)pm.raw.malloc)
		return LINK_MALLOC;
	for (uintptr_t off = 0; depth > 0 && off <= 8; off += 8) {
		uintptr_t c = word(&a[0]) + off;
		int r = in_rw(c, 5 * sizeof(uintptr_t)) ? link_of((const uintptr_t *)c, depth - 1) : LINK_OTHER;
		if (r != LINK_OTHER)
			return r;
	}
	return LINK_OTHER;
}

static void publish(uint64_t state)
{
	struct hl_ring_header *h = ring_now();
	__atomic_store_n(&pm.state, state, __ATOMIC_RELAXED);
	if (h)
		__atomic_store_n(&h->py_hooked, state, __ATOMIC_RELEASE);
}


/*
 * Makes sure both domains run through our hooks, wrapping what replaced
 * them. Only with the GIL held, on a running interpreter; the flag only
 * matters where two threads hold GILs at once (3.12+'s subinterpreters
 * with their own): the second one skips, it never waits.
 */
static void settle(void)
{
	static int settling;
	if (__atomic_exchange_n(&settling, 1, __ATOMIC_ACQUIRE))
		return;
	uint64_t state = HL_PYMEM_HOOKED;
	for (int i = 0; i < 2; i++) {
		uintptr_t *s = pm.slot[i];
		int link = link_of(s, 3);
		if (link == LINK_OURS)
			continue;
		if (link == LINK_MALLOC) { /* every object reaches malloc, whose hook samples it */
			state = state > HL_PYMEM_MALLOC ? state : HL_PYMEM_MALLOC;
			continue;
		}
		if (pm.nctx[i] >= NCTX) {
			state = HL_PYMEM_LOST;
			continue;
		}
		pymem_allocator *prev = &pm.ctx[i][pm.nctx[i]++];
		memcpy(prev, s, sizeof *prev); /* under the GIL: nobody writes it now */
		uintptr_t ours[5];
		ours_over(prev, ours);
		for (int k = 4; k >= 0; k--)
			__atomic_store_n(&s[k], ours[k], __ATOMIC_RELAXED);
		if (link == LINK_OTHER && state < HL_PYMEM_FOREIGN)
			state = HL_PYMEM_FOREIGN;
	}
	if (state != __atomic_load_n(&pm.state, __ATOMIC_RELAXED))
		publish(state);
	__atomic_store_n(&settling, 0, __ATOMIC_RELEASE);
}

/*
 * pymalloc's arenas hold the objects the PyMem hooks sample one by one:
 * their mmaps must not be sampled again as mappings (maps.c). The arena
 * allocator runs with the sampler paused. Wrapped once, from the
 * constructor: a later wrapper may call ours, and wrapping it in turn would
 * loop.
 */
static arena_allocator arena_prev;

static void *arena_alloc(void *ctx, size_t n)
{
	(void)ctx;
	tls.busy++;
	void *p = arena_prev.alloc(arena_prev.ctx, n);
	tls.busy--;
	return p;
}

static void arena_free(void *ctx, void *p, size_t n)
{
	(void)ctx;
	tls.busy++;
	arena_prev.free(arena_prev.ctx, p, n);
	tls.busy--;
}

static void arena_wrap(void)
{
	if (!pyfn.get_arena || !pyfn.set_arena)
		return;
	pyfn.get_arena(&arena_prev);
	if (!arena_prev.alloc || !arena_prev.free)
		return;
	arena_allocator ours = {NULL, arena_alloc, arena_free};
	pyfn.set_arena(&ours);
}

/* CPython's allocator functions and the interpreter's writable data; 0 if the hooks cannot go in. */
static int pymem_find(void)
{
	pyfn.get_allocator = (void (*)(int, pymem_allocator *))dlsym(RTLD_DEFAULT, "PyMem_GetAllocator");
	pyfn.set_allocator = (void (*)(int, pymem_allocator *))dlsym(RTLD_DEFAULT, "PyMem_SetAllocator");
	pyfn.get_arena = (void (*)(arena_allocator *))dlsym(RTLD_DEFAULT, "PyObject_GetArenaAllocator");
	pyfn.set_arena = (void (*)(arena_allocator *))dlsym(RTLD_DEFAULT, "PyObject_SetArenaAllocator");
	if (!pyfn.get_allocator || !pyfn.set_allocator || !py_gil_checkable() || !blockset_init(&objects))
		return 0;
	dl_iterate_phdr(rw_cb, (void *)(uintptr_t)pyfn.set_allocator);
	return 1;
}

/*
 * Installs the hooks with PyMem_SetAllocator and finds the slots: from the
 * constructor when preloaded (before main: single-threaded, before
 * Py_Initialize), or with the GIL held when attached (as tracemalloc.start
 * does at run time). Then wraps the arena allocator and publishes.
 */
static void pymem_hook(void)
{
	pyfn.get_allocator(PYMEM_DOMAIN_RAW, &pm.raw);
	pyfn.get_allocator(PYMEM_DOMAIN_MEM, &pm.pymalloc);
	int domains[2] = {PYMEM_DOMAIN_MEM, PYMEM_DOMAIN_OBJ};
	for (int i = 0; i < 2; i++) {
		pymem_allocator *prev = &pm.ctx[i][pm.nctx[i]++];
		pyfn.get_allocator(domains[i], prev);
		if (!first.malloc)
			first = *prev;
		uintptr_t ours[5];
		ours_over(prev, ours);
		pymem_allocator set;
		memcpy(&set, ours, sizeof set);
		pyfn.set_allocator(domains[i], &set);
		for (int r = 0; r < pm.nrw && !pm.slot[i]; r++)
			for (uintptr_t *w = (uintptr_t *)pm.rw[r][0]; w + 5 <= (uintptr_t *)pm.rw[r][1]; w++)
				if (w[1] == ours[1] && w[0] == ours[0] && w[4] == ours[4]) {
					pm.slot[i] = w;
					break;
				}
	}
	if (!pm.slot[0] || !pm.slot[1]) { /* they could never be checked or repaired: take the hooks out */
		for (int i = 0; i < 2; i++)
			pyfn.set_allocator(domains[i], &pm.ctx[i][0]);
		pm.slot[0] = pm.slot[1] = NULL;
		return publish(HL_PYMEM_LOST);
	}
	arena_wrap();
	publish(HL_PYMEM_HOOKED);
}

/*
 * Preloaded: the hooks go in from the constructor, and py_pending makes
 * sure a later allocator (-X dev, PYTHONMALLOC) is wrapped once the
 * interpreter runs. Attached: the interpreter runs already; the hooks go in
 * from py_try_install, with the GIL held.
 */
void pymem_install(void)
{
	if (!pymem_find())
		return publish(HL_PYMEM_LOST);
#ifndef HEAPLENS_ATTACH
	pymem_hook();
	if (!pm.slot[0])
		return;
#endif
	__atomic_store_n(&py_pending, 1, __ATOMIC_RELEASE);
}

/*
 * While py_pending, every allocation comes here (see sample_slow) until
 * the interpreter runs and this thread holds its GIL: then the domains are
 * settled once. Given up on after many tries, for programs that load
 * libpython without ever starting it.
 */
void py_try_install(void)
{
	static long attempts;
	if (!__atomic_load_n(&py_pending, __ATOMIC_ACQUIRE))
		return;
	if (__atomic_add_fetch(&attempts, 1, __ATOMIC_RELAXED) > 50000000) {
		__atomic_store_n(&py_pending, 0, __ATOMIC_RELEASE);
		return;
	}
	if (!py_running() || !py_gil_held() || RELAXED(g.no_python))
		return;
	if (!pm.slot[0]) { /* attached: the first time */
		pymem_hook();
		if (!pm.slot[0]) {
			__atomic_store_n(&py_pending, 0, __ATOMIC_RELEASE);
			return;
		}
	}
	settle();
	__atomic_store_n(&py_pending, 0, __ATOMIC_RELEASE);
}

/* At each record: a domain that no longer runs through our hooks (tracemalloc stopped over them) is wrapped again. */
void pymem_check(void)
{
	if (__atomic_load_n(&py_pending, __ATOMIC_ACQUIRE) || !pm.slot[0] || !pm.slot[1])
		return;
	/* The slots are the interpreter's static allocator structs: read without the GIL, which only settle needs. */
	if (is_ours(word(&pm.slot[0][1])) && is_ours(word(&pm.slot[1][1])))
		return;
	if (py_running() && py_gil_held())
		settle();
}

void pymem_atfork_child(void)
{
	uint64_t state = __atomic_load_n(&pm.state, __ATOMIC_RELAXED);
	if (state)
		publish(state);
}
