/*
 * The interposed malloc family, preloaded and attached alike. An unsampled
 * call costs a countdown and the call below. A sampled block is exactly
 * what the allocator below returned, remembered in a set beside it
 * (blockset.c), never tagged: any allocator may start a block at a
 * mapping's first byte, and any free may reach it (ours, the allocator's
 * own through RTLD_DEEPBIND or a pointer taken before us): each must find
 * the block as the allocator made it. docs/allocators.md says what this
 * sees under each allocator.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "attach.h"
#include "blockset.h"
#include "boot.h"
#include "core.h"
#include "hooks.h"
#include "sampler.h"

struct blockset sampled_blocks;

COLD void *kept_block(void *p, size_t n, int func)
{
	if (p)
		KEEP_FROM_CALLER(&sampled_blocks, p, n, func);
	return p;
}

/* The FREE goes out before the block is released: its address may be reused at once. */
static COLD void free_slow(void *p)
{
	if (in_boot(p))
		return;
	if (EXACT())
		record_free_any(p, 0);
	else if (blockset_take(&sampled_blocks, p) >= 0)
		record_free(p);
	NEXT(free)(p);
}

static COLD void *malloc_slow(size_t n)
{
	if (!sample_slow(n))
		return NEXT(malloc)(n);
	return kept_block(NEXT(malloc)(n), n, HL_FUNC_MALLOC);
}

/* malloc and free without a stack frame: four and six instructions to the allocator's. */
EXPORT HOT void *HOOK(malloc)(size_t n)
{
	if (FROM_LOADER())
		return NEXT(malloc)(n);
	COUNTDOWN_OR_GOTO(n, slow);
	return NEXT(malloc)(n);
slow:
	return malloc_slow(n);
}

EXPORT HOT void HOOK(free)(void *p)
{
	BLOCKSET_MAYBE_GOTO(&sampled_blocks, p, slow);
	NEXT(free)(p);
	return;
slow:
	free_slow(p);
}

EXPORT void *HOOK(calloc)(size_t k, size_t n)
{
	size_t t;
	if (FROM_LOADER() || __builtin_mul_overflow(k, n, &t) || likely(!sample_now(t)))
		return NEXT(calloc)(k, n);
	return kept_block(NEXT(calloc)(k, n), t, HL_FUNC_CALLOC);
}

/*
 * p may be sampled, or the countdown ran out on n (counted: sample_slow
 * decides). A realloc of a sampled block is its FREE, then an ALLOC if the
 * new block is sampled. In exact mode every realloc comes here (the
 * filter is pinned) and p's FREE is sent whether or not it was sampled.
 */
static COLD void *do_realloc(void *p, size_t n, int func, int counted)
{
	int new = counted ? sample_slow(n) : sample_now(n);
	if (p && in_boot(p)) { /* a bootstrap block moves to the allocator */
		void *q = new ? kept_block(NEXT(malloc)(n), n, func) : NEXT(malloc)(n);
		if (q)
			memcpy(q, p, boot_size(p) < n ? boot_size(p) : n);
		return q;
	}
	if (EXACT()) { /* the FREE held over the call: withdrawn if the old block lives on */
		int64_t held = free_hold(p);
		void *q = NEXT(realloc)(p, n);
		free_settle(held, 0, q || !n);
		return new ? kept_block(q, n, func) : q;
	}
	int64_t old = p && blockset_maybe(&sampled_blocks, p) ? blockset_take(&sampled_blocks, p) : -1;
	if (old < 0 && !new)
		return NEXT(realloc)(p, n);
	size_t have = 0;
	if (old >= 0) {
		have = old < 0xffff ? (size_t)old : NEXT(malloc_usable_size)(p);
		record_free(p);
	}
	void *q = NEXT(realloc)(p, n);
	if (!q && p && n) { /* failed: the old block lives on */
		if (old >= 0)
			blockset_keep(&sampled_blocks, p, have, func, NULL);
		return NULL;
	}
	return new ? kept_block(q, n, func) : q;
}

static COLD void *realloc_slow(void *p, size_t n, int func) { return do_realloc(p, n, func, 1); }

/* The common case (an unsampled block, the countdown not run out) without a stack frame. */
EXPORT HOT void *HOOK(realloc)(void *p, size_t n)
{
	if (FROM_LOADER())
		return NEXT(realloc)(p, n);
	if (likely(!blockset_maybe(&sampled_blocks, p))) {
		COUNTDOWN_OR_GOTO(n, slow);
		return NEXT(realloc)(p, n);
	}
	return do_realloc(p, n, HL_FUNC_REALLOC, 0);
slow:
	return realloc_slow(p, n, HL_FUNC_REALLOC);
}

EXPORT void *HOOK(reallocarray)(void *p, size_t k, size_t n)
{
	size_t t;
	if (__builtin_mul_overflow(k, n, &t)) {
		errno = ENOMEM;
		return NULL;
	}
	return do_realloc(p, t, HL_FUNC_REALLOCARRAY, 0);
}

EXPORT int HOOK(posix_memalign)(void **r, size_t align, size_t n)
{
	if (FROM_LOADER() || likely(!sample_now(n)))
		return NEXT(posix_memalign)(r, align, n);
	int e = NEXT(posix_memalign)(r, align, n);
	if (!e)
		kept_block(*r, n, HL_FUNC_POSIX_MEMALIGN);
	return e;
}

EXPORT void *HOOK(aligned_alloc)(size_t align, size_t n)
{
	if (FROM_LOADER() || likely(!sample_now(n)))
		return NEXT(aligned_alloc)(align, n);
	return kept_block(NEXT(aligned_alloc)(align, n), n, HL_FUNC_ALIGNED_ALLOC);
}

EXPORT void *HOOK(memalign)(size_t align, size_t n)
{
	if (FROM_LOADER() || likely(!sample_now(n)))
		return NEXT(memalign)(align, n);
	return kept_block(NEXT(memalign)(align, n), n, HL_FUNC_MEMALIGN);
}

EXPORT void *HOOK(valloc)(size_t n)
{
	if (FROM_LOADER() || likely(!sample_now(n)))
		return NEXT(valloc)(n);
	return kept_block(NEXT(valloc)(n), n, HL_FUNC_VALLOC);
}

/* pvalloc rounds up to whole pages: the sampler counts what it gives. */
EXPORT void *HOOK(pvalloc)(size_t n)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), r = n ? (n + page - 1) & ~(page - 1) : page;
	if (FROM_LOADER() || n > SIZE_MAX - page || likely(!sample_now(r)))
		return NEXT(pvalloc)(n);
	return kept_block(NEXT(pvalloc)(n), r, HL_FUNC_PVALLOC);
}

EXPORT size_t HOOK(malloc_usable_size)(void *p)
{
	if (unlikely(p && in_boot(p)))
		return boot_size(p);
	return NEXT(malloc_usable_size)(p);
}
