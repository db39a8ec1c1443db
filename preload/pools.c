/*
 * Thread pools inside libheaplens.so: who asked for this allocation?
 *
 * Every thread has an origin, the thread it currently works for (tls.pool.origin,
 * a token: origin tid << 32 | sequence number). A sampled allocation records
 * its origin and the method that decided it; the origin's own stack is sent
 * once per token as an ORIGIN record, which the agent stitches above the
 * worker's frames (docs/ring-format.md, "Thread pools"). Methods, most
 * exact first:
 *   api      heaplens_pool_capture/enter/exit, called by the pool (docs/pool-api.md);
 *   openmp   GOMP_parallel* wrapped (libgomp), or OMPT callbacks (LLVM libomp);
 *   fallback a non-Python thread's allocation goes to the one Python thread
 *            blocked in native code, if there is exactly one;
 *   unattributed otherwise, in a Python process.
 *
 * An origin thread that blocks (in a wrapped OpenMP region, or waiting on a
 * condition variable from outside the interpreter) opens a slot. A worker that
 * samples on its behalf marks the slot wanted, and the origin thread sends its
 * stack when it stops waiting: the stack it waited in, taken only when some
 * sample needs it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "core.h"
#include "heaplens.h"
#include "hooks.h"
#include "pools.h"
#include "python.h"
#include "sampler.h"
#include "scratch.h"

/* ---- slots: origin threads blocked on pool work ---- */

/* A slot word: OPEN | WANTED | PY | tid << 32 | seq; 0 = free. */
#define SLOTS 256
#define S_OPEN (1ull << 63)
#define S_WANTED (1ull << 62)
#define S_PY (1ull << 61) /* a Python thread: a fallback candidate */
#define S_TID ((1ull << 29) - 1)

static uint64_t slots[SLOTS];

static uint64_t token_of(uint64_t s) { return (s >> 32 & S_TID) << 32 | (uint32_t)s; }

static uint64_t new_token(void)
{
	if (!++tls.pool.origin_seq)
		tls.pool.origin_seq = 1;
	return (uint64_t)hl_tid() << 32 | tls.pool.origin_seq;
}

/*
 * This thread starts waiting for pool work done on its behalf; nested calls
 * share the outermost token. Never blocks: with no free slot the work still
 * carries the token, and the report says the origin's stack is unknown.
 */
uint64_t origin_begin(void)
{
	if (tls.pool.open_depth++)
		return tls.pool.open_token;
	tls.pool.open_token = new_token();
	tls.pool.open_slot = -1;
	uint64_t s = S_OPEN | (py_thread() ? S_PY : 0) | tls.pool.open_token;
	for (uint32_t k = 0, t = hl_tid(); k < SLOTS; k++) {
		uint32_t i = (t + k) % SLOTS;
		uint64_t free_ = 0;
		if (!__atomic_load_n(&slots[i], __ATOMIC_RELAXED) &&
		    __atomic_compare_exchange_n(&slots[i], &free_, s, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			tls.pool.open_slot = (int)i;
			break;
		}
	}
	return tls.pool.open_token;
}

/* The wait is over: send this thread's stack if some sample asked for it. */
void origin_end(void)
{
	if (!tls.pool.open_depth || --tls.pool.open_depth || tls.pool.open_slot < 0)
		return;
	uint64_t old = __atomic_exchange_n(&slots[tls.pool.open_slot], 0, __ATOMIC_ACQ_REL);
	tls.pool.open_slot = -1;
	if (old & S_WANTED)
		record_origin(tls.pool.open_token, 0);
}

/* A sample made for token: ask its origin thread for its stack. */
static void want(uint64_t token)
{
	uint64_t t = token >> 32;
	for (uint32_t k = 0; k < SLOTS; k++) {
		uint32_t i = (uint32_t)(t + k) % SLOTS;
		uint64_t s = __atomic_load_n(&slots[i], __ATOMIC_ACQUIRE);
		if ((s & S_OPEN) && token_of(s) == token) {
			if (!(s & S_WANTED))
				__atomic_compare_exchange_n(&slots[i], &s, s | S_WANTED, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
			return;
		}
	}
}

/*
 * The one Python thread blocked on pool work, or 0 when there are none or
 * several; *waiting says how many there were (0, 1, or 2 for several).
 */
static uint64_t fallback(int *waiting)
{
	uint64_t found = 0;
	int n = 0;
	for (uint32_t i = 0; i < SLOTS && n < 2; i++) {
		uint64_t s = __atomic_load_n(&slots[i], __ATOMIC_ACQUIRE);
		if ((s & (S_OPEN | S_PY)) == (S_OPEN | S_PY))
			found = s, n++;
	}
	*waiting = n;
	if (n != 1)
		return 0;
	want(token_of(found));
	return token_of(found);
}

/* pool_origin, unless a Python thread works for itself; python_thread spares asking py_foreign_thread (~60 instructions). */
int pool_origin_slow(uint64_t *token, int python_thread)
{
	*token = 0;
	if (tls.pool.origin) {
		*token = tls.pool.origin;
		if (tls.pool.origin_method != HL_ORIGIN_API) /* API tokens sent their stack at capture */
			want(tls.pool.origin);
		return (int)tls.pool.origin_method;
	}
	if (python_thread || !py_foreign_thread())
		return HL_ORIGIN_SELF;
	int waiting;
	if ((*token = fallback(&waiting)) != 0)
		return HL_ORIGIN_FALLBACK;
	/* With several waiting, the origin is one of them: say it is unknown. */
	if (!waiting && (*token = tls.pool.creator) != 0)
		return HL_ORIGIN_CREATOR;
	return HL_ORIGIN_UNATTRIBUTED;
}

static void reset_capture_cache(void);

/*
 * The fork child's only thread: the parent's other threads are gone, and
 * whatever this thread worked for or waited on stayed in the parent (its
 * tokens name the parent's tids, their stacks are in the parent's ring).
 */
void pools_atfork_child(void)
{
	for (uint32_t i = 0; i < SLOTS; i++)
		slots[i] = 0;
	tls.pool.origin = 0, tls.pool.origin_method = HL_ORIGIN_SELF, tls.pool.creator = 0;
	tls.pool.open_depth = 0, tls.pool.open_slot = -1, tls.pool.open_token = 0;
	reset_capture_cache();
}

/* ---- public API: docs/pool-api.md ---- */

/*
 * Python callers are recognised by their frames: the same Python frames,
 * return address and stack pointer as a recent capture reuse its token, so a
 * loop submitting from one line unwinds once. Native-only callers unwind on
 * every capture (nothing cheap tells their stacks apart).
 */
#define CAPTURE_CACHE 4
static _Thread_local struct {
	uint64_t sig[CAPTURE_CACHE], token[CAPTURE_CACHE];
	uint32_t next;
} cap;

static void reset_capture_cache(void) { memset(&cap, 0, sizeof cap); }

EXPORT uint64_t heaplens_pool_capture(void)
{
	if (!hl_active())
		return 0;
	if (tls.pool.origin) /* a worker submitting more work passes its own origin on */
		return tls.pool.origin;
	tls.busy++;
	scratch_get();
	py_walk();
	uint64_t sig = 0;
	if (tls.npy) {
		sig = (uint64_t)(uintptr_t)__builtin_return_address(0) * 0x9e3779b97f4a7c15ull ^
		      (uint64_t)(uintptr_t)__builtin_frame_address(0);
		for (uint32_t i = 0; i < 2 * tls.npy; i++)
			sig = (sig ^ tls.scratch->py[i]) * 0xff51afd7ed558ccdull;
		sig |= 1;
		for (uint32_t i = 0; i < CAPTURE_CACHE; i++)
			if (cap.sig[i] == sig) {
				tls.busy--;
				return cap.token[i];
			}
	}
	uint64_t token = new_token();
	record_origin(token, 1);
	if (sig) {
		uint32_t i = cap.next++ % CAPTURE_CACHE;
		cap.sig[i] = sig, cap.token[i] = token;
	}
	tls.busy--;
	return token;
}

/* The previous origin, with its method in the top bits (tids fit in 29 bits). */
static uint64_t pack_origin(void) { return tls.pool.origin | (uint64_t)tls.pool.origin_method << 61; }

static void set_origin(uint64_t packed)
{
	tls.pool.origin = packed & ((1ull << 61) - 1);
	tls.pool.origin_method = (uint32_t)(packed >> 61);
}

EXPORT uint64_t heaplens_pool_enter(uint64_t token)
{
	uint64_t prev = pack_origin();
	if (token && token >> 32 != hl_tid()) /* work run by its own submitter is its own */
		tls.pool.origin = token, tls.pool.origin_method = HL_ORIGIN_API;
	return prev;
}

EXPORT void heaplens_pool_exit(uint64_t prev) { set_origin(prev); }

/* ---- condition variables: the fallback's notion of "waiting for a pool" ---- */

typedef int (*cond_wait_fn)(pthread_cond_t *, pthread_mutex_t *);
typedef int (*cond_timedwait_fn)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
typedef int (*cond_clockwait_fn)(pthread_cond_t *, pthread_mutex_t *, clockid_t, const struct timespec *);

static struct {
	cond_wait_fn wait;
	cond_timedwait_fn timedwait;
	cond_clockwait_fn clockwait;
} cond;

/* pthread_create, resolved with the condition variables (see the creator method below). */
typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
static create_fn next_create;

/* The current condition variables (the 2.2.5 symbols are the pre-NPTL compatibility ones). */
static void *libc_sym(const char *name)
{
	void *f = dlvsym(HL_NEXT, name, "GLIBC_2.3.2");
	return f ? f : dlsym(HL_NEXT, name);
}

/*
 * Called by resolve_real at the first allocation, before any thread can
 * wait: a wait must not call dlsym, which takes the loader lock that a
 * thread running a library constructor may hold while it waits for us.
 */
void resolve_cond(void)
{
	if (__atomic_load_n(&cond.wait, __ATOMIC_ACQUIRE))
		return;
	SET_RELAXED(cond.timedwait, (cond_timedwait_fn)libc_sym("pthread_cond_timedwait"));
	SET_RELAXED(cond.clockwait, (cond_clockwait_fn)dlsym(HL_NEXT, "pthread_cond_clockwait"));
	__atomic_store_n(&next_create, (create_fn)dlsym(HL_NEXT, "pthread_create"), __ATOMIC_RELEASE);
	__atomic_store_n(&cond.wait, (cond_wait_fn)libc_sym("pthread_cond_wait"), __ATOMIC_RELEASE);
}

/* Only a program that waits before its first allocation gets here unresolved. */
static void cond_ready(void)
{
	if (unlikely(!__atomic_load_n(&cond.wait, __ATOMIC_ACQUIRE)))
		resolve_cond();
}

/*
 * A Python thread waiting on a condition variable from outside the
 * interpreter (the interpreter's own waits are the GIL, locks and sleeps)
 * is taken to be waiting for native work: a pool's caller.
 */
static int pool_wait(const void *ra)
{
	return !tls.busy && !tls.pool.origin && py_waiter((uintptr_t)ra);
}

#define WAITING(ra, call)                     \
	do {                                  \
		int open_ = pool_wait(ra);    \
		if (open_)                    \
			origin_begin();       \
		int r_ = call;                \
		if (open_)                    \
			origin_end();         \
		return r_;                    \
	} while (0)

EXPORT int HOOK(pthread_cond_wait)(pthread_cond_t *c, pthread_mutex_t *m)
{
	cond_ready();
	WAITING(__builtin_return_address(0), RELAXED(cond.wait)(c, m));
}

EXPORT int HOOK(pthread_cond_timedwait)(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *t)
{
	cond_ready();
	WAITING(__builtin_return_address(0), RELAXED(cond.timedwait)(c, m, t));
}

EXPORT int HOOK(pthread_cond_clockwait)(pthread_cond_t *c, pthread_mutex_t *m, clockid_t k, const struct timespec *t)
{
	cond_ready();
	cond_clockwait_fn f = RELAXED(cond.clockwait);
	if (!f)
		return EINVAL;
	WAITING(__builtin_return_address(0), f(c, m, k, t));
}

/*
 * ---- thread creation: the creator method ----
 *
 * In a Python process, a native thread's allocation that no pool rule
 * claims is charged to the stack that created the thread: OpenBLAS's
 * workers allocate their buffers when they start, under the `import numpy`
 * that started them. Only there is pthread_create wrapped: the creator's
 * stack is recorded (an ORIGIN record) and the new thread starts in
 * started(), which sets its creator token and calls the program's start
 * routine with its argument. Elsewhere the call goes straight through.
 */
struct start {
	void *(*fn)(void *);
	void *arg;
	uint64_t token;
};

static void *started(void *p)
{
	struct start s = *(struct start *)p;
	tls.busy++;
	NEXT(free)(p);
	tls.busy--;
	tls.pool.creator = s.token;
	return s.fn(s.arg);
}

EXPORT int HOOK(pthread_create)(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
	cond_ready();
	create_fn f = __atomic_load_n(&next_create, __ATOMIC_ACQUIRE);
	if (!f)
		return EAGAIN; /* no pthread_create below us: nothing sane is possible */
	if (tls.busy || !hl_active() || !py_running())
		return f(t, a, fn, arg);
	tls.busy++;
	struct start *s = NEXT(malloc)(sizeof *s);
	tls.busy--;
	if (!s)
		return f(t, a, fn, arg);
	s->fn = fn, s->arg = arg;
	s->token = tls.pool.origin ? tls.pool.origin : new_token(); /* a worker creating threads passes its own origin on */
	if (!tls.pool.origin)
		record_origin(s->token, 0);
	int r = f(t, a, started, s);
	if (r) {
		tls.busy++;
		NEXT(free)(s);
		tls.busy--;
	}
	return r;
}

void pools_init(void)
{
	cond_ready();
	tls.pool.open_slot = -1;
}
