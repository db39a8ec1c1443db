/*
 * The interposed malloc family. An unsampled call costs a countdown and the
 * call below; a sampled block carries a tag in front of it (see tag) so that
 * free, realloc and malloc_usable_size recognise it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#ifndef HEAPLENS_ATTACH /* attached, attach.c has the malloc family */

/* ---- sampled blocks ---- */

/*
 * A sampled block carries two words just below the pointer we return:
 * p[-1] is a random per-process secret and p[-2] is the offset from the real
 * block to p mixed with p. free() of an unsampled pointer costs one load of
 * p[-1], a word glibc's own free reads next anyway, and one compare: glibc
 * keeps its chunk size there, which can never equal a random 64-bit secret.
 * The slow path then checks p[-2] against the address, so a stray copy of a
 * header elsewhere is never taken for a sampled block.
 *
 * A tagged block reallocated to a size the sampler passes over keeps its
 * tag, marked UNRECORDED, and is reallocated in place as glibc would (a
 * large one by mremap): moving it to an untagged block would copy it all.
 */

void *tag(void *raw, uint64_t off, int recorded)
{
	uint64_t *p = (uint64_t *)((char *)raw + off);
	p[-2] = (recorded ? off : off | UNRECORDED) ^ ((uint64_t)(uintptr_t)p * RELAXED(real.mix));
	p[-1] = RELAXED(real.secret);
	return p;
}

static void untag_and_free(void *p)
{
	void *raw = raw_of(p);
	((uint64_t *)p)[-1] = 0;
	NEXT(free)(raw);
}

static COLD void *sampled_malloc(size_t n, int func, int zero)
{
	if (n > SIZE_MAX - HDR) {
		errno = ENOMEM;
		return NULL;
	}
	void *raw = zero ? NEXT(calloc)(1, n + HDR) : NEXT(malloc)(n + HDR);
	if (!raw)
		return NULL;
	void *p = tag(raw, HDR, 1);
	record_alloc(p, n, func);
	return p;
}

/* glibc 2.36 semantics: memalign and aligned_alloc round a non-power-of-two alignment up. */
static COLD void *sampled_aligned(size_t align, size_t n, int func)
{
	size_t a = 16;
	while (a < align && a <= SIZE_MAX / 4)
		a <<= 1;
	if (a < align || n > SIZE_MAX - a)
		return NULL; /* only reached for sizes libc rejects too; caller retries with libc */
	void *raw = NEXT(memalign)(a, n + a);
	if (!raw)
		return NULL;
	void *p = tag(raw, a, 1);
	record_alloc(p, n, func);
	return p;
}

static void free_sampled(void *p)
{
	if (in_boot(p))
		return;
	if (!tagged(p)) { /* p[-1] matched by accident: an ordinary block */
		NEXT(free)(p);
		return;
	}
	if (recorded(p))
		record_free(p);
	untag_and_free(p);
}

/* ---- the hooks ---- */

EXPORT HOT void *HOOK(malloc)(size_t n)
{
	if (likely(!sample_now(n)))
		return NEXT(malloc)(n);
	return sampled_malloc(n, HL_FUNC_MALLOC, 0);
}

EXPORT HOT void HOOK(free)(void *p)
{
	if (unlikely(p && word_below(p, 1) == RELAXED(real.secret))) {
		free_sampled(p);
		return;
	}
	NEXT(free)(p);
}

EXPORT void *HOOK(calloc)(size_t k, size_t n)
{
	size_t t;
	if (unlikely(__builtin_mul_overflow(k, n, &t))) {
		errno = ENOMEM;
		return NULL;
	}
	if (likely(!sample_now(t)))
		return NEXT(calloc)(k, n);
	return sampled_malloc(t, HL_FUNC_CALLOC, 1);
}

static size_t sampled_size(void *p)
{
	void *raw = raw_of(p);
	if (in_boot(p))
		return ((uint64_t *)p)[-3];
	return NEXT(malloc_usable_size)(raw) - (size_t)((char *)p - (char *)raw);
}

/*
 * counted: the realloc hook's countdown ran out on n, so sample_slow
 * decides (else n is counted down here).
 */
static void *do_realloc(void *p, size_t n, int func, int counted)
{
	int new;
	if (!p) {
		new = counted ? sample_slow(n) : sample_now(n);
		return new ? sampled_malloc(n, func, 0) : NEXT(malloc)(n);
	}
	int old = tagged(p);
	if (n == 0 && !in_boot(p)) { /* glibc frees and returns NULL */
		if (!old)
			return NEXT(realloc)(p, 0);
		if (recorded(p))
			record_free(p);
		((uint64_t *)p)[-1] = 0;
		return NEXT(realloc)(raw_of(p), 0);
	}
	new = counted ? sample_slow(n) : sample_now(n);
	if (likely(!old && !new))
		return NEXT(realloc)(p, n);
	if (!old) { /* plain -> sampled */
		size_t have = NEXT(malloc_usable_size)(p);
		void *q = sampled_malloc(n, func, 0);
		if (q) {
			memcpy(q, p, have < n ? have : n);
			NEXT(free)(p);
		}
		return q;
	}
	size_t have = sampled_size(p);
	if (!in_boot(p) && off_of(p) == HDR && n <= SIZE_MAX - HDR) {
		/* tagged -> tagged in place: the free first, as the old address may be reused at once */
		int was = recorded(p);
		if (was)
			record_free(p);
		void *raw = NEXT(realloc)(raw_of(p), n + HDR);
		if (!raw) {
			if (was)
				record_alloc(p, have, func); /* the old block lives on */
			return NULL;
		}
		void *q = tag(raw, HDR, new);
		if (new)
			record_alloc(q, n, func);
		return q;
	}
	/* bootstrap or over-aligned -> new block */
	void *q = new ? sampled_malloc(n, func, 0) : NEXT(malloc)(n);
	if (!q)
		return NULL;
	memcpy(q, p, have < n ? have : n);
	free_sampled(p);
	return q;
}

static COLD void *realloc_slow(void *p, size_t n, int func) { return do_realloc(p, n, func, 1); }

/* The common case (an untagged block, the countdown not run out) without a stack frame. */
EXPORT HOT void *HOOK(realloc)(void *p, size_t n)
{
	if (likely(p && word_below(p, 1) != RELAXED(real.secret))) {
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

static int pow2(size_t a) { return a && !(a & (a - 1)); }

EXPORT int HOOK(posix_memalign)(void **r, size_t align, size_t n)
{
	if (likely(!sample_now(n)) || align % sizeof(void *) || !pow2(align))
		return NEXT(posix_memalign)(r, align, n);
	void *p = sampled_aligned(align, n, HL_FUNC_POSIX_MEMALIGN);
	if (!p)
		return NEXT(posix_memalign)(r, align, n);
	*r = p;
	return 0;
}

EXPORT void *HOOK(aligned_alloc)(size_t align, size_t n)
{
	void *p;
	if (likely(!sample_now(n)) || align > SIZE_MAX / 2 + 1 || !(p = sampled_aligned(align, n, HL_FUNC_ALIGNED_ALLOC)))
		return NEXT(aligned_alloc)(align, n);
	return p;
}

EXPORT void *HOOK(memalign)(size_t align, size_t n)
{
	void *p;
	if (likely(!sample_now(n)) || align > SIZE_MAX / 2 + 1 || !(p = sampled_aligned(align, n, HL_FUNC_MEMALIGN)))
		return NEXT(memalign)(align, n);
	return p;
}

EXPORT void *HOOK(valloc)(size_t n)
{
	void *p;
	if (likely(!sample_now(n)) || !(p = sampled_aligned((size_t)sysconf(_SC_PAGESIZE), n, HL_FUNC_VALLOC)))
		return NEXT(valloc)(n);
	return p;
}

EXPORT void *HOOK(pvalloc)(size_t n)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), r;
	void *p;
	if (n > SIZE_MAX - page)
		return NEXT(pvalloc)(n);
	r = n ? (n + page - 1) & ~(page - 1) : page;
	if (likely(!sample_now(r)) || !(p = sampled_aligned(page, r, HL_FUNC_PVALLOC)))
		return NEXT(pvalloc)(n);
	return p;
}

EXPORT size_t HOOK(malloc_usable_size)(void *p)
{
	if (p && tagged(p))
		return sampled_size(p);
	return NEXT(malloc_usable_size)(p);
}
#endif
