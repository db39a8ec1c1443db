/* pools.c: thread-pool origins, the creator of a thread (the model: pools.c). */
#ifndef HEAPLENS_POOLS_H
#define HEAPLENS_POOLS_H

#include "core.h"

#pragma GCC visibility push(hidden)

int pool_origin(uint64_t *token, int python_thread); /* a sampled allocation's origin token, and its HL_ORIGIN_*; python_thread: py_walk found its thread state */
uint64_t origin_begin(void);
void origin_end(void);
void pools_init(void);
void resolve_cond(void);
void pools_atfork_child(void);

#pragma GCC visibility pop

#endif
