/*
 * blockset.c: a set of sampled blocks kept beside them, not in them: a
 * lock-free open-addressed table in levels, with a filter of saturating
 * counters in front, so that a free of an unsampled block costs a
 * multiply, a shift and one byte load; and a second, larger filter behind
 * it, read only by the frees the first lets through.
 */
#ifndef HEAPLENS_BLOCKSET_H
#define HEAPLENS_BLOCKSET_H

#include "core.h"
#include "unwind.h"

#pragma GCC visibility push(hidden)

#define BLOCKSET_FILTER_BITS 14
#define BLOCKSET_FILTER2_BITS 16
#define BLOCKSET_LEVELS 6
struct blockset {
	uint8_t filter[1u << BLOCKSET_FILTER_BITS];
	uint8_t filter2[1u << BLOCKSET_FILTER2_BITS]; /* the same counters, another hash: see blockset_take */
	uint64_t *table[BLOCKSET_LEVELS];
	uint32_t bits[BLOCKSET_LEVELS];
	uint32_t levels; /* published with release once table[levels - 1] is there */
};
/* A multiplicative hash of the address's low 32 bits: blocks near each other spread over the filter. */
static inline uint32_t blockset_filter_at(const void *p)
{
	return ((uint32_t)(uintptr_t)p * 0x9e3779b1u) >> (32 - BLOCKSET_FILTER_BITS);
}
static inline int blockset_maybe(const struct blockset *s, const void *p)
{
	return __atomic_load_n(&s->filter[blockset_filter_at(p)], __ATOMIC_RELAXED) != 0;
}
/* The second filter's index: the address's bits 4–47 (blocks are 16-byte aligned), another multiplier, the top bits. */
static inline uint32_t blockset_filter2_at(const void *p)
{
	return (uint32_t)((((uint64_t)(uintptr_t)p >> 4) * 0xff51afd7ed558ccdull) >> (64 - BLOCKSET_FILTER2_BITS));
}
/* After blockset_maybe said yes: 0 if the second filter knows p is not there (blockset_take checks it too). */
static inline int blockset_maybe2(const struct blockset *s, const void *p)
{
	return __atomic_load_n(&s->filter2[blockset_filter2_at(p)], __ATOMIC_RELAXED) != 0;
}
/*
 * blockset_maybe as a jump to label, for free's fast path: the compare
 * reads the filter byte itself (C's relaxed load adds a zero-extend and a
 * test). The hash is blockset_filter_at's.
 */
#ifndef __x86_64__
#define BLOCKSET_MAYBE_GOTO(s, p, label)     \
	do {                                 \
		if (blockset_maybe((s), (p))) \
			goto label;          \
	} while (0)
#else
#define BLOCKSET_MAYBE_GOTO(s, p, label)                                         \
	__asm__ goto("imull $0x9e3779b1, %k0, %%eax\n\t"                        \
		     "shrl $(32 - " HL_STR(BLOCKSET_FILTER_BITS) "), %%eax\n\t"  \
		     "cmpb $0, (%1,%%rax)\n\t"                                   \
		     "jne %l[" #label "]"                                       \
		     :                                                          \
		     : "r"(p), "r"((s)->filter)                                 \
		     : "rax", "cc"                                              \
		     : label)
#endif
int blockset_init(struct blockset *s);
int64_t blockset_take(struct blockset *s, void *p); /* its size (at most 0xffff), or -1 if not there */
void blockset_keep(struct blockset *s, void *p, size_t n, int func, const struct walk_start *at); /* puts and records (record_alloc), or counts a drop */
/*
 * blockset_keep from a hook's slow path, whose stack walk starts at that
 * function's caller: the library frames below it (~50 instructions a
 * sample to step through) are never in a stack.
 */
#define KEEP_FROM_CALLER(s, p, n, func)                          \
	do {                                                     \
		struct walk_start at_ = WALK_START();            \
		blockset_keep((s), (p), (n), (func), &at_);      \
	} while (0)
void blockset_pin(struct blockset *s, const void *p); /* every free of p takes the slow path */
extern struct blockset sampled_blocks; /* hooks.c: the malloc family's sampled blocks */
void *kept_block(void *p, size_t n, int func); /* hooks.c: p (sampled) into sampled_blocks and the ring; p */

#pragma GCC visibility pop

#endif
