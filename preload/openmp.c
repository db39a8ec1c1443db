/*
 * OpenMP origins inside libheaplens.so (see pools.c for the model).
 *
 * libgomp: the GOMP_parallel* entry points that GCC emits are wrapped. The
 * outlined function is replaced by a trampoline that sets the team thread's
 * origin to the thread that opened the region, and each call is forwarded to
 * the libgomp copy that the caller's reference would have bound to (wheels
 * bundle renamed copies that only their own dependents see, so RTLD_NEXT
 * alone may find none, or another one). Entry points whose data
 * the runtime reads, or that need no origin (GOMP_task runs on the binding
 * team's threads), are left alone.
 *
 * LLVM libomp and Intel libiomp5 (and clang's __kmpc_fork_call): an OMPT tool
 * (ompt_start_tool) does the same from parallel_begin/implicit_task.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "hooks.h"
#include "pools.h"
#include "ring.h"

/* What a team thread runs instead of fn. first stays first: see GOMP_parallel_reductions. */
struct region {
	void *first;
	omp_fn fn;
	void *data;
	uint64_t token;
	uint32_t origin; /* the opener's tid: its own share of the work is its own */
	int opened;      /* this thread opened a slot for it (origin_begin) */
};

static void run_for(void *arg)
{
	const struct region *r = arg;
	uint64_t prev = tls.pool.origin;
	uint32_t method = tls.pool.origin_method;
	if (hl_tid() != r->origin)
		tls.pool.origin = r->token, tls.pool.origin_method = HL_ORIGIN_OPENMP;
	r->fn(r->data);
	tls.pool.origin = prev, tls.pool.origin_method = method;
}

/* Returns 0 when heaplens is inactive: call the runtime with fn and data unchanged. */
static int region_begin(struct region *r, omp_fn fn, void *data)
{
	if (!hl_active())
		return 0;
	r->fn = fn, r->data = data, r->first = NULL, r->opened = 0;
	if (tls.pool.origin) { /* a nested region keeps the outer origin */
		r->token = tls.pool.origin;
	} else {
		r->token = origin_begin();
		r->opened = 1;
	}
	r->origin = (uint32_t)(r->token >> 32);
	return 1;
}

static void region_end(const struct region *r)
{
	if (r->opened)
		origin_end();
}

/* ---- forwarding to the caller's libgomp ---- */

/* An object's dependency scope: the first definition of name there. */
static void *in_object(const char *name, const char *path)
{
	void *fn = NULL, *h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
	if (h) {
		fn = dlsym(h, name);
		dlclose(h);
	}
	return fn;
}

static void *in_scope_of(const char *name, const void *pc)
{
	Dl_info di;
	if (!pc || !dladdr(pc, &di) || !di.dli_fname || !di.dli_fname[0])
		return NULL;
	return in_object(name, di.dli_fname);
}

/* Loaded objects' names in load order, from the skip-th on, NUL-separated, as many as fit. */
struct names {
	unsigned skip, seen, next; /* next: the first object not in buf */
	size_t used;
	char buf[4096];
};

static int add_name(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct names *n = arg;
	if (n->seen++ < n->skip)
		return 0;
	size_t len = strlen(info->dlpi_name) + 1;
	if (n->used + len > sizeof n->buf)
		return 1; /* the rest in the next batch */
	if (len > 1)
		memcpy(n->buf + n->used, info->dlpi_name, len), n->used += len;
	n->next = n->seen;
	return 0;
}

/* The first loaded object whose scope defines name (dlopen is not called under dl_iterate_phdr's lock). */
static void *anywhere(const char *name, const void *self)
{
	struct names n = {0};
	for (;;) {
		n.seen = 0, n.used = 0, n.next = n.skip;
		dl_iterate_phdr(add_name, &n);
		for (size_t i = 0; i < n.used; i += strlen(n.buf + i) + 1) {
			void *fn = in_object(name, n.buf + i);
			if (fn && fn != self)
				return fn;
		}
		if (n.next >= n.seen) /* no object left */
			return NULL;
		n.skip = n.next > n.skip ? n.next : n.skip + 1; /* skips a name too long for buf */
	}
}

/* Without heaplens the reference could not have bound: fail as the dynamic linker would have. */
COLD static void no_runtime(const char *name, const void *pc)
{
	Dl_info di;
	const char *obj = pc && dladdr(pc, &di) && di.dli_fname ? di.dli_fname : "?";
	dprintf(2, "%s: symbol lookup error: %s: undefined symbol: %s\n", program_invocation_name, obj, name);
	_exit(127);
}

/*
 * What the caller's reference would have bound to without heaplens: the
 * global scope after this library first, then the calling object's own
 * dependencies (a wheel's bundled libgomp, loaded RTLD_LOCAL, is found only
 * there). The calling object is the one holding pc, the outlined function,
 * not the return address: a function that ends in a region tail-calls
 * GOMP_parallel, and the return address is then its caller's (libffi's,
 * under ctypes), whose scope may have no libgomp. An object that uses a
 * runtime without linking it binds in its dlopen root's scope, which no
 * public interface shows: the return address's scope, then any object's,
 * are guesses, and are counted.
 */
static void *resolve(const char *name, const void *self, const void *pc, const void *ra, int *guessed)
{
	void *fn = dlsym(HL_NEXT, name);
	if (!fn || fn == self)
		fn = in_scope_of(name, pc);
	*guessed = !fn || fn == self;
	if (*guessed)
		fn = in_scope_of(name, ra);
	if (!fn || fn == self)
		fn = anywhere(name, self);
	if (!fn || fn == self)
		no_runtime(name, pc);
	return fn;
}

_Static_assert(offsetof(struct hl_ring_header, omp_guessed) == 312, "docs/ring-format.md");

static void count_guess(void)
{
	struct hl_ring_header *h = ring_now();
	if (h)
		__atomic_fetch_add(&h->omp_guessed, 1, __ATOMIC_RELAXED);
}

/* Resolutions by calling object, keyed by an address in it (the outlined function). */
#define FWD 64
struct fwd {
	uintptr_t key; /* 0 free, 1 being filled */
	void *fn;
	int guessed;
};

/*
 * The real entry point for a region whose code is at pc (ra: the return
 * address, a hint); count: this call starts a region, count it if guessed.
 */
static void *forward(struct fwd *tab, const char *name, const void *self, const void *pc, const void *ra, int count)
{
	uintptr_t key = (uintptr_t)pc;
	uint32_t h = (uint32_t)(key >> 4) * 0x9e3779b1u >> 26;
	for (uint32_t k = 0; key > 1 && k < FWD; k++) {
		const struct fwd *e = &tab[(h + k) % FWD];
		uintptr_t r = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
		if (r == key) {
			if (unlikely(e->guessed && count))
				count_guess();
			return e->fn;
		}
		if (!r)
			break;
	}
	int guessed;
	struct countdown c = pause_sampling();
	void *fn = resolve(name, self, pc, ra, &guessed);
	resume_sampling(c);
	for (uint32_t k = 0; key > 1 && k < FWD; k++) {
		struct fwd *e = &tab[(h + k) % FWD];
		uintptr_t z = 0;
		if (__atomic_compare_exchange_n(&e->key, &z, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			e->fn = fn, e->guessed = guessed;
			__atomic_store_n(&e->key, key, __ATOMIC_RELEASE);
			break;
		}
	}
	if (guessed && count)
		count_guess();
	return fn;
}

#define SELF(name) ((const void *)(uintptr_t)name)
#define REAL(name)                   \
	static struct fwd tab_[FWD]; \
	__typeof__(&name) real_ = (__typeof__(&name))forward(tab_, #name, SELF(name), SELF(fn), __builtin_return_address(0), 1)

/* A region never runs on fewer threads than without heaplens: there is always a runtime to call. */
#define RUN(call_real, call_wrapped)                   \
	do {                                           \
		struct region r_;                      \
		if (!region_begin(&r_, fn, data))      \
			call_real;                     \
		else {                                 \
			call_wrapped;                  \
			region_end(&r_);               \
		}                                      \
	} while (0)

/* The runtime reads the reduction list through *data: the region's first word carries it. */
EXPORT unsigned GOMP_parallel_reductions(omp_fn fn, void *data, unsigned n, unsigned flags)
{
	REAL(GOMP_parallel_reductions);
	struct region r_;
	if (!region_begin(&r_, fn, data))
		return real_(fn, data, n, flags);
	r_.first = *(void **)data;
	unsigned ret = real_(run_for, &r_, n, flags);
	region_end(&r_);
	return ret;
}

/*
 * The pre-4.9 pairs: GOMP_parallel_start (or a _loop_*_start or
 * _sections_start) starts the team, the caller runs fn(data) itself, then
 * calls GOMP_parallel_end, which has no outlined function to resolve from
 * and may be a tail call too: it goes to the runtime that started the
 * region, remembered with the region in a small per-thread stack. Every
 * start is wrapped, so that the stack pairs with the ends.
 */
#define LEGACY 8
typedef void (*end_t)(void);
static _Thread_local struct {
	struct region r[LEGACY];
	end_t end[LEGACY];
	int wrapped[LEGACY];
	int depth;
} legacy;

static struct fwd ends[FWD];

static struct region *legacy_push(omp_fn fn, void *data, const void *ra)
{
	end_t end = (end_t)forward(ends, "GOMP_parallel_end", SELF(GOMP_parallel_end), SELF(fn), ra, 0);
	int d = legacy.depth++;
	if (d >= LEGACY)
		return NULL;
	legacy.end[d] = end;
	legacy.wrapped[d] = region_begin(&legacy.r[d], fn, data);
	return legacy.wrapped[d] ? &legacy.r[d] : NULL;
}

#define START(call_real, call_wrapped)                                                  \
	do {                                                                            \
		struct region *r_ = legacy_push(fn, data, __builtin_return_address(0)); \
		if (r_)                                                                 \
			call_wrapped;                                                   \
		else                                                                    \
			call_real;                                                      \
	} while (0)

/* The mechanical wrappers, from hooks.h's list: the call with run_for and its region in place of fn and data. */
#define ARGS(...) __VA_ARGS__
#define WRAP_REGION(name, ret, params, rest)                                           \
	EXPORT ret name params                                                         \
	{                                                                              \
		REAL(name);                                                            \
		RUN(real_(fn, data, ARGS rest), real_(run_for, &r_, ARGS rest));       \
	}
#define WRAP_START(name, ret, params, rest)                                            \
	EXPORT ret name params                                                         \
	{                                                                              \
		REAL(name);                                                            \
		START(real_(fn, data, ARGS rest), real_(run_for, r_, ARGS rest));      \
	}
#define WRAP_BY_HAND(name, ret, params, rest)
#define WRAP(name, ret, params, rest, how) WRAP_##how(name, ret, params, rest)
HL_GOMP(WRAP)

EXPORT void GOMP_parallel_end(void)
{
	end_t end = NULL;
	const struct region *r = NULL;
	if (legacy.depth > 0) {
		int d = --legacy.depth;
		if (d < LEGACY)
			end = legacy.end[d], r = legacy.wrapped[d] ? &legacy.r[d] : NULL;
	}
	if (!end) { /* deeper than the stack: the return address's runtime (a guess if it is a tail call) */
		const void *ra = __builtin_return_address(0);
		end = (end_t)forward(ends, "GOMP_parallel_end", SELF(GOMP_parallel_end), ra, ra, 1);
	}
	end();
	if (r)
		region_end(r);
}

/* ---- OMPT (OpenMP 5.0 tool interface), for LLVM libomp and Intel libiomp5 ---- */

typedef union {
	uint64_t value;
	void *ptr;
} ompt_data_t;
typedef void (*ompt_interface_fn_t)(void);
typedef ompt_interface_fn_t (*ompt_function_lookup_t)(const char *);
typedef int (*ompt_set_callback_t)(int event, ompt_interface_fn_t callback);
typedef struct {
	int (*initialize)(ompt_function_lookup_t lookup, int initial_device, ompt_data_t *tool_data);
	void (*finalize)(ompt_data_t *tool_data);
	ompt_data_t tool_data;
} ompt_start_tool_result_t;

EXPORT ompt_start_tool_result_t *ompt_start_tool(unsigned version, const char *runtime);

enum { OMPT_PARALLEL_BEGIN = 3, OMPT_PARALLEL_END = 4, OMPT_IMPLICIT_TASK = 7 };
enum { OMPT_SCOPE_BEGIN = 1, OMPT_SCOPE_END = 2 };
#define OMPT_TASK_INITIAL 1
#define OMPT_SET 1 /* task_data->value: this thread's origin was set; the rest is the previous origin */
#define OMPT_PREV_SHIFT 1

/* Runs on the thread that encounters the region. */
static void ompt_parallel_begin(ompt_data_t *task, const void *frame, ompt_data_t *parallel,
				unsigned requested, int flags, const void *ra)
{
	(void)task, (void)frame, (void)requested, (void)flags, (void)ra;
	parallel->value = tls.pool.origin ? tls.pool.origin : origin_begin();
}

static void ompt_parallel_end(ompt_data_t *parallel, ompt_data_t *task, int flags, const void *ra)
{
	(void)task, (void)flags, (void)ra;
	if (parallel->value >> 32 == hl_tid()) /* opened by this thread (inherited tokens name another) */
		origin_end();
}

/* Runs on every team thread, at the start and end of its share. */
static void ompt_implicit_task(int endpoint, ompt_data_t *parallel, ompt_data_t *task,
			       unsigned actual, unsigned index, int flags)
{
	(void)actual, (void)index;
	if (flags & OMPT_TASK_INITIAL)
		return;
	if (endpoint == OMPT_SCOPE_BEGIN) {
		uint64_t token = parallel ? parallel->value : 0;
		task->value = 0;
		if (!token || token >> 32 == hl_tid())
			return;
		task->value = OMPT_SET | tls.pool.origin << OMPT_PREV_SHIFT;
		tls.pool.origin = token, tls.pool.origin_method = HL_ORIGIN_OPENMP;
	} else if (endpoint == OMPT_SCOPE_END && (task->value & OMPT_SET)) {
		tls.pool.origin = task->value >> OMPT_PREV_SHIFT;
		tls.pool.origin_method = tls.pool.origin ? HL_ORIGIN_OPENMP : HL_ORIGIN_SELF;
	}
}

static int ompt_initialize(ompt_function_lookup_t lookup, int device, ompt_data_t *data)
{
	(void)device, (void)data;
	ompt_set_callback_t set = (ompt_set_callback_t)lookup("ompt_set_callback");
	if (!set)
		return 0;
	set(OMPT_PARALLEL_BEGIN, (ompt_interface_fn_t)ompt_parallel_begin);
	set(OMPT_PARALLEL_END, (ompt_interface_fn_t)ompt_parallel_end);
	set(OMPT_IMPLICIT_TASK, (ompt_interface_fn_t)ompt_implicit_task);
	return 1;
}

static void ompt_finalize(ompt_data_t *data) { (void)data; }

/* The runtime looks this up when it starts; NULL keeps heaplens out of an inactive process. */
EXPORT ompt_start_tool_result_t *ompt_start_tool(unsigned version, const char *runtime)
{
	(void)version, (void)runtime;
	static ompt_start_tool_result_t result = {ompt_initialize, ompt_finalize, {0}};
	return hl_active() ? &result : NULL;
}
