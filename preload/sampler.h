/*
 * The sampler (sampler.c): which allocations are sampled (a per-thread
 * byte countdown), and the records a sample writes.
 */
#ifndef HEAPLENS_SAMPLER_H
#define HEAPLENS_SAMPLER_H

#include "core.h"
#ifdef HEAPLENS_ATTACH
#include "attach.h"
#endif

#pragma GCC visibility push(hidden)

/*
 * The countdown of a thread while the library samples nothing. Preloaded
 * that is for good. Attached, a session may start again later: idle threads
 * come back every few kilobytes to see whether one has (sample_slow).
 */
#ifdef HEAPLENS_ATTACH
#define IDLE_GAP ((int64_t)4096)
#else
#define IDLE_GAP (INT64_MAX / 2)
#endif

int sample_slow(size_t n);

/*
 * The unsampled fast path: remaining -= n, and a jump to `label` unless it
 * stays above zero. Written as one subtract from thread-local memory and a
 * signed branch on its flags; C would add a load, a store and a test.
 * jle after sub is exactly "old remaining <= n" in signed arithmetic. At the
 * label the caller must call sample_slow(n) to decide.
 */
#ifdef HEAPLENS_ATTACH
/* Attached, a new epoch (a session starts or ends) sends every thread's next call to the slow path. */
#define COUNTDOWN_OR_GOTO(n, label)                                                         \
	do {                                                                                \
		struct tls *t_ = &tls;                                                      \
		int64_t old_ = t_->remaining;                                               \
		t_->remaining = old_ - (int64_t)(n);                                        \
		if (old_ <= (int64_t)(n) || t_->attach.epoch != RELAXED(hl_ctl.epoch))  \
			goto label;                                                         \
	} while (0)
#elif !defined(__x86_64__)
/* aarch64: its atomics-free load, subtract, store and compare-and-branch are what the C gives. */
#define COUNTDOWN_OR_GOTO(n, label)                                                         \
	do {                                                                                \
		struct tls *t_ = &tls;                                                      \
		int64_t old_ = t_->remaining;                                               \
		t_->remaining = old_ - (int64_t)(n);                                        \
		if (old_ <= (int64_t)(n))                                                   \
			goto label;                                                         \
	} while (0)
#else
#define COUNTDOWN_OR_GOTO(n, label)                                              \
	__asm__ goto("movq heaplens_tls@gottpoff(%%rip), %%rax\n\t"                \
		     "subq %0, %%fs:(%%rax)\n\t"                                   \
		     "jle %l[" #label "]"                                           \
		     :                                                              \
		     : "r"(n)                                                       \
		     : "rax", "cc", "memory"                                        \
		     : label)
#endif

static inline __attribute__((always_inline)) int sample_now(size_t n)
{
	COUNTDOWN_OR_GOTO(n, slow);
	return 0;
slow:
	return sample_slow(n);
}

struct walk_start;
/*
 * at: where the walk may start, the frame of the hook's caller (its
 * frames in between are the library's own, never in a stack); NULL: at
 * record_alloc's own caller.
 */
void record_alloc(void *p, size_t n, int func, const struct walk_start *at);
void record_free(void *p);
int64_t free_hold(void *p); /* exact mode: a FREE of p reserved, or -1 */
void free_settle(int64_t pos, int pymem, int freed); /* commits it (freed) or withdraws it */
/* Exact mode: the FREE of a block released now. */
static inline void record_free_any(void *p, int pymem) { free_settle(free_hold(p), pymem, 1); }
void record_unmap(void *p, size_t n);
void record_origin(uint64_t token, int walked);
void stacks_atfork_child(void); /* the stacks sent by ref, forgotten */

#pragma GCC visibility pop

#endif
