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
#define REF_HINTS 1024
/* A walk's steps, kept for the thread's next walk to splice onto (unwind.c): 40 bytes each, 2 * TRACE_MAX + 1 */
#define TRACE_MAX 256
struct trace_step {
	uintptr_t pc, sp, bp; /* the walk's registers at this frame */
	uint64_t h;           /* the hash of the walk's frames from this step out, from trace_hashed on (walk_hash) */
	uint32_t rule;        /* the rule it followed from here; KIND_END at the walk's last step */
	uint8_t kind, k, ra;  /* the rule's, decoded once: its kind, bp's slot, the return address's slot */
	uint8_t emit;         /* 1: pc is one of the walk's frames (not the library's, not 0) */
};
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
	uint16_t ref_hint[REF_HINTS];     /* by bits of a stack's hash: the slot this thread last found it in (sampler.c) */
	/* A walk's steps: [0, TRACE_MAX) as it goes; the last whole walk's at [trace_start, 2 * TRACE_MAX) (unwind.c) */
	struct trace_step trace[2 * TRACE_MAX + 1]; /* and a sentinel */
	uint32_t trace_start; /* 0 (fresh scratch) or 2 * TRACE_MAX: none */
	uint32_t trace_hashed; /* the steps from here to the end have their h */
	uint32_t trace_frames; /* 1: frames holds the kept walk's (the last walk was kept whole) */
	uintptr_t trace_hi;   /* the end of the stack it was on */
};
struct scratch *scratch_make(void); /* the thread's first: mapped now; NULL: none can be had */
/* The thread's scratch; NULL: none can be had, the sample is dropped. */
static inline struct scratch *scratch_get(void) { return likely(tls.scratch != NULL) ? tls.scratch : scratch_make(); }
void scratch_init(void);           /* from init_global: the key, before any thread's first sample */

#pragma GCC visibility pop

#endif
