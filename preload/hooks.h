/*
 * Every function the library interposes, each once: name, return type,
 * parameters (libgomp's entry points add two columns for openmp.c). From
 * these lists come the declarations below, struct hl_real (the allocator
 * below us), boot.c's bootstrap table, attach.c's table of routed
 * functions, openmp.c's mechanical wrappers, and the test that the
 * library exports exactly these (internal/launch/exports_test.go).
 */
#ifndef HEAPLENS_HOOKS_H
#define HEAPLENS_HOOKS_H

#include <pthread.h>
#include <sys/types.h>
#include <time.h>

#include "core.h"

#pragma GCC visibility push(hidden)

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
 * The malloc family below us (hooks.c interposes each; boot.c finds the
 * real ones and serves dlsym before it has them). malloc and free come
 * first: they are read on every call (see real).
 */
#define HL_ALLOCATOR(X)                                        \
	X(malloc, void *, (size_t n))                          \
	X(free, void, (void *p))                               \
	X(calloc, void *, (size_t k, size_t n))                \
	X(realloc, void *, (void *p, size_t n))                \
	X(memalign, void *, (size_t a, size_t n))              \
	X(posix_memalign, int, (void **r, size_t a, size_t n)) \
	X(aligned_alloc, void *, (size_t a, size_t n))         \
	X(valloc, void *, (size_t n))                          \
	X(pvalloc, void *, (size_t n))                         \
	X(malloc_usable_size, size_t, (void *p))

/*
 * libgomp's entry points (openmp.c), as libgomp's ABI has them; then the
 * arguments after fn and data, and how openmp.c wraps the call: REGION
 * (it runs a region: run_for in fn's place), START (a pre-4.9 start, see
 * legacy_push), or BY_HAND (written out in openmp.c).
 */
typedef void (*omp_fn)(void *);
#define HL_GOMP_LOOP (omp_fn fn, void *data, unsigned n, long a, long b, long c, long chunk, unsigned flags)
#define HL_GOMP_LOOP_RUNTIME (omp_fn fn, void *data, unsigned n, long a, long b, long c, unsigned flags)
#define HL_GOMP_LOOP_START (omp_fn fn, void *data, unsigned n, long a, long b, long c, long chunk)
#define HL_GOMP(X)                                                                                             \
	X(GOMP_parallel, void, (omp_fn fn, void *data, unsigned n, unsigned flags), (n, flags), REGION)         \
	X(GOMP_parallel_reductions, unsigned, (omp_fn fn, void *data, unsigned n, unsigned flags), (n, flags), BY_HAND) \
	X(GOMP_parallel_loop_static, void, HL_GOMP_LOOP, (n, a, b, c, chunk, flags), REGION)                    \
	X(GOMP_parallel_loop_dynamic, void, HL_GOMP_LOOP, (n, a, b, c, chunk, flags), REGION)                   \
	X(GOMP_parallel_loop_guided, void, HL_GOMP_LOOP, (n, a, b, c, chunk, flags), REGION)                    \
	X(GOMP_parallel_loop_nonmonotonic_dynamic, void, HL_GOMP_LOOP, (n, a, b, c, chunk, flags), REGION)      \
	X(GOMP_parallel_loop_nonmonotonic_guided, void, HL_GOMP_LOOP, (n, a, b, c, chunk, flags), REGION)       \
	X(GOMP_parallel_loop_runtime, void, HL_GOMP_LOOP_RUNTIME, (n, a, b, c, flags), REGION)                  \
	X(GOMP_parallel_loop_nonmonotonic_runtime, void, HL_GOMP_LOOP_RUNTIME, (n, a, b, c, flags), REGION)     \
	X(GOMP_parallel_loop_maybe_nonmonotonic_runtime, void, HL_GOMP_LOOP_RUNTIME, (n, a, b, c, flags), REGION) \
	X(GOMP_parallel_sections, void, (omp_fn fn, void *data, unsigned n, unsigned count, unsigned flags),    \
	  (n, count, flags), REGION)                                                                           \
	X(GOMP_teams_reg, void, (omp_fn fn, void *data, unsigned teams, unsigned limit, unsigned flags),        \
	  (teams, limit, flags), REGION)                                                                       \
	X(GOMP_parallel_start, void, (omp_fn fn, void *data, unsigned n), (n), START)                          \
	X(GOMP_parallel_sections_start, void, (omp_fn fn, void *data, unsigned n, unsigned count), (n, count), START) \
	X(GOMP_parallel_loop_static_start, void, HL_GOMP_LOOP_START, (n, a, b, c, chunk), START)               \
	X(GOMP_parallel_loop_dynamic_start, void, HL_GOMP_LOOP_START, (n, a, b, c, chunk), START)              \
	X(GOMP_parallel_loop_guided_start, void, HL_GOMP_LOOP_START, (n, a, b, c, chunk), START)               \
	X(GOMP_parallel_loop_runtime_start, void, (omp_fn fn, void *data, unsigned n, long a, long b, long c),  \
	  (n, a, b, c), START)                                                                                 \
	X(GOMP_parallel_end, void, (void), (), BY_HAND)

/*
 * Every function attach.c routes to the library, as preloaded: the malloc
 * family (hooks.c); mmap, munmap, mremap and sbrk (maps.c); the thread-pool
 * wrappers (pools.c, openmp.c).
 */
#define HL_HOOKED(X)                                                                                  \
	HL_ALLOCATOR(X)                                                                               \
	X(reallocarray, void *, (void *p, size_t k, size_t n))                                        \
	X(mmap, void *, (void *addr, size_t len, int prot, int flags, int fd, off_t off))             \
	X(mmap64, void *, (void *addr, size_t len, int prot, int flags, int fd, off_t off))           \
	X(munmap, int, (void *addr, size_t len))                                                      \
	X(mremap, void *, (void *old, size_t oldlen, size_t newlen, int flags, ...))                  \
	X(sbrk, void *, (intptr_t inc))                                                               \
	X(pthread_create, int, (pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)) \
	X(pthread_cond_wait, int, (pthread_cond_t *c, pthread_mutex_t *m))                            \
	X(pthread_cond_timedwait, int, (pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *t)) \
	X(pthread_cond_clockwait, int, (pthread_cond_t *c, pthread_mutex_t *m, clockid_t k, const struct timespec *t)) \
	HL_GOMP(X)

/* Wrapped by the preloaded library only (seccomp.c): attached, no filter can have come before us. */
#define HL_PRELOADED_ONLY(X)          \
	X(prctl, int, (int option, ...)) \
	X(syscall, long, (long nr, ...))

/*
 * Under the harness, rename.h has made malloc hl_malloc before HOOK sees
 * it: no declarations there (it builds without -Wmissing-prototypes).
 */
#ifndef HEAPLENS_HARNESS
#define HL_DECLARE(name, ret, params, ...) EXPORT ret HOOK(name) params;
HL_HOOKED(HL_DECLARE)
HL_PRELOADED_ONLY(HL_DECLARE)
#undef HL_DECLARE
#endif

/* The allocator below us (boot.c defines it). */
struct hl_real {
#define HL_REAL_FIELD(name, ret, params) ret(*name) params;
	HL_ALLOCATOR(HL_REAL_FIELD)
#undef HL_REAL_FIELD
};
extern struct hl_real real;
#define NEXT(f) RELAXED(real.f)

#pragma GCC visibility pop

#endif
