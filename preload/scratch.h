/*
 * What a sample needs beside the countdown, too large for static TLS
 * (scratch.c): a thread's own, mapped on its first sample.
 */
#ifndef HEAPLENS_SCRATCH_H
#define HEAPLENS_SCRATCH_H

#include "core.h"

#pragma GCC visibility push(hidden)

#define FOREIGN_STACKS 8
/* sent: the ring, tid, counts and ref, then the outermost native and Python frames kept (sampler.c) */
#define SENT_FRAMES 4
#define SENT_NATIVE 256
#define SENT_PYFRAMES 128
#define SENT_PY (SENT_FRAMES + SENT_NATIVE)
struct scratch {
	uintptr_t rule_pc[256]; /* the rules this thread's walks looked up last, by address: 128 sets of 2 (unwind.c) */
	uint32_t rule_of[256];
	uintptr_t frames[HL_MAX_FRAMES];
	uint64_t py[2 * HL_MAX_PYFRAMES]; /* code pointer, position word: see heaplens_ring.h */
	char buf[4096];                   /* a path, or lines of /proc/self/maps: not on the caller's stack */
	uintptr_t foreign_lo[FOREIGN_STACKS], foreign_hi[FOREIGN_STACKS]; /* stacks not the thread's own (stacks.c) */
	uint32_t foreign_next;            /* the entry a new one replaces */
	unsigned char vec[256];           /* mincore's answer over one of them */
	uint64_t stat_bytes;              /* sampled bytes not yet added to heapstats.c's count */
	uint64_t sent[SENT_PY + 2 * SENT_PYFRAMES]; /* the outer frames of the last STACK record this thread sent (sampler.c) */
};
struct scratch *scratch_get(void); /* NULL: none can be had, the sample is dropped */
void scratch_init(void);           /* from init_global: the key, before any thread's first sample */

#pragma GCC visibility pop

#endif
