/* pools.c: thread-pool origins, the creator of a thread (the model: pools.c). */
#ifndef HEAPLENS_POOLS_H
#define HEAPLENS_POOLS_H

#include "core.h"

#pragma GCC visibility push(hidden)

int pool_origin_slow(uint64_t *token, int python_thread);
/*
 * A sampled allocation's origin token, and its HL_ORIGIN_*. python_thread:
 * the sample's py_walk found this thread's thread state, so it is no
 * foreign thread. A thread working for itself, the common case, is told
 * inline (pool_origin_slow saves registers first).
 */
static inline int pool_origin(uint64_t *token, int python_thread)
{
	if (likely(!tls.pool.origin && python_thread)) {
		*token = 0;
		return HL_ORIGIN_SELF;
	}
	return pool_origin_slow(token, python_thread);
}
uint64_t origin_begin(void);
void origin_end(void);
void pools_init(void);
void resolve_cond(void);
void pools_atfork_child(void);

#pragma GCC visibility pop

#endif
