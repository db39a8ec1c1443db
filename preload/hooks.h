/*
 * The malloc family (hooks.c) and the allocator below us: each function
 * once, as name, return type, parameters. hooks.c interposes each; boot.c
 * finds the real ones (and serves dlsym before it has them), attach.c
 * those the program's calls reached.
 */
#ifndef HEAPLENS_HOOKS_H
#define HEAPLENS_HOOKS_H

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

/* malloc and free come first: they are read on every call (see real). */
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
