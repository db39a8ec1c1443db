/* heapstats.c: what the allocator says it holds (MALLINFO records). */
#ifndef HEAPLENS_HEAPSTATS_H
#define HEAPLENS_HEAPSTATS_H

#include "core.h"

#pragma GCC visibility push(hidden)

void heapstats_init(void);
void heapstats_maybe(int64_t now, size_t n); /* the time and size of the ALLOC just recorded */
void heapstats_atfork_child(void);

#pragma GCC visibility pop

#endif
