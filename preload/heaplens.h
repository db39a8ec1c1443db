/*
 * The public API of libheaplens.so: what a program may call. A thread pool
 * says which thread a task's allocations are for (docs/pool-api.md); a
 * test runner marks points in time. The library exists only in processes heaplens
 * profiles: look the functions up with dlsym(RTLD_DEFAULT, "...") and call
 * them when found, rather than linking against them.
 */
#ifndef HEAPLENS_H
#define HEAPLENS_H

#include <stdint.h>

/* On the submitting thread, at submit: a token for its current stack; 0
 * when heaplens is not profiling this process. */
uint64_t heaplens_pool_capture(void);

/* On the worker, before running the task: work for the token's thread
 * until heaplens_pool_exit; returns what to pass to it. */
uint64_t heaplens_pool_enter(uint64_t token);

/* On the worker, after running the task: restore what the thread worked
 * for before. Pairs nest. */
void heaplens_pool_exit(uint64_t prev);

/* The types of the three, for dlsym. */
typedef uint64_t (*heaplens_pool_capture_fn)(void);
typedef uint64_t (*heaplens_pool_enter_fn)(uint64_t);
typedef void (*heaplens_pool_exit_fn)(uint64_t);

/* Puts a mark with this value in the capture, timed now: the agent
 * writes it as a MARK record and flushes the capture at once, so that a
 * reader who sees the mark has everything recorded before it (the pytest
 * plugin, docs/pytest.md). Returns 1 if the mark was recorded, 0 when
 * heaplens is not profiling this process or the ring is full. */
int heaplens_mark(uint64_t value);
typedef int (*heaplens_mark_fn)(uint64_t);

/* The number of sampled allocations and frees this process could not
 * record so far because its ring was full (the agent fell behind): a
 * window in which it grew has figures that are too low, or leaks that
 * are not. 0 when heaplens is not profiling this process. */
uint64_t heaplens_dropped(void);
typedef uint64_t (*heaplens_dropped_fn)(void);

#endif
