/*
 * libgomp's entry points that heaplens interposes (openmp.c), as libgomp's
 * ABI has them; attach.c routes the same names.
 */
#ifndef HEAPLENS_GOMP_H
#define HEAPLENS_GOMP_H

#include "core.h"

#pragma GCC visibility push(hidden)
typedef void (*omp_fn)(void *);

EXPORT void GOMP_parallel(omp_fn fn, void *data, unsigned n, unsigned flags);
EXPORT unsigned GOMP_parallel_reductions(omp_fn fn, void *data, unsigned n, unsigned flags);
EXPORT void GOMP_parallel_loop_static(omp_fn fn, void *data, unsigned n, long a, long b, long c, long chunk, unsigned flags);
EXPORT void GOMP_parallel_loop_dynamic(omp_fn fn, void *data, unsigned n, long a, long b, long c, long chunk, unsigned flags);
EXPORT void GOMP_parallel_loop_guided(omp_fn fn, void *data, unsigned n, long a, long b, long c, long chunk, unsigned flags);
EXPORT void GOMP_parallel_loop_nonmonotonic_dynamic(omp_fn fn, void *data, unsigned n, long a, long b, long c, long chunk, unsigned flags);
EXPORT void GOMP_parallel_loop_nonmonotonic_guided(omp_fn fn, void *data, unsigned n, long a, long b, long c, long chunk, unsigned flags);
EXPORT void GOMP_parallel_loop_runtime(omp_fn fn, void *data, unsigned n, long a, long b, long c, unsigned flags);
EXPORT void GOMP_parallel_loop_nonmonotonic_runtime(omp_fn fn, void *data, unsigned n, long a, long b, long c, unsigned flags);
EXPORT void GOMP_parallel_loop_maybe_nonmonotonic_runtime(omp_fn fn, void *data, unsigned n, long a, long b, long c, unsigned flags);
EXPORT void GOMP_parallel_sections(omp_fn fn, void *data, unsigned n, unsigned count, unsigned flags);
EXPORT void GOMP_teams_reg(omp_fn fn, void *data, unsigned teams, unsigned limit, unsigned flags);
EXPORT void GOMP_parallel_start(omp_fn fn, void *data, unsigned n);
EXPORT void GOMP_parallel_sections_start(omp_fn fn, void *data, unsigned n, unsigned count);
EXPORT void GOMP_parallel_loop_static_start(omp_fn fn, void *data, unsigned n, long a, long b, long c, long chunk);
EXPORT void GOMP_parallel_loop_dynamic_start(omp_fn fn, void *data, unsigned n, long a, long b, long c, long chunk);
EXPORT void GOMP_parallel_loop_guided_start(omp_fn fn, void *data, unsigned n, long a, long b, long c, long chunk);
EXPORT void GOMP_parallel_loop_runtime_start(omp_fn fn, void *data, unsigned n, long a, long b, long c);
EXPORT void GOMP_parallel_end(void);

/* Every name above, for attach.c's list of routed functions. */
#define HL_GOMP(X)                                                                                   \
	X(GOMP_parallel) X(GOMP_parallel_reductions) X(GOMP_parallel_loop_static)                    \
	X(GOMP_parallel_loop_dynamic) X(GOMP_parallel_loop_guided) X(GOMP_parallel_loop_nonmonotonic_dynamic) \
	X(GOMP_parallel_loop_nonmonotonic_guided) X(GOMP_parallel_loop_runtime)                      \
	X(GOMP_parallel_loop_nonmonotonic_runtime) X(GOMP_parallel_loop_maybe_nonmonotonic_runtime)  \
	X(GOMP_parallel_sections) X(GOMP_teams_reg) X(GOMP_parallel_start) X(GOMP_parallel_sections_start) \
	X(GOMP_parallel_loop_static_start) X(GOMP_parallel_loop_dynamic_start)                       \
	X(GOMP_parallel_loop_guided_start) X(GOMP_parallel_loop_runtime_start) X(GOMP_parallel_end)

#pragma GCC visibility pop

#endif
