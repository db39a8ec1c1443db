/*
 * Memory the program maps itself: anonymous mmap, mremap and sbrk growth,
 * sampled by bytes like malloc, and munmap. glibc's malloc and the loader
 * call their own internal mmap, never these symbols; another allocator's
 * (jemalloc's extents, tcmalloc's spans, mimalloc's segments) come here
 * from its own module, and are counted in the ring header, not sampled:
 * the blocks in them are, by the malloc hooks, so a malloc'd block is
 * never counted twice. pymalloc's arenas are kept out by python.c, which
 * runs CPython's arena allocator with the sampler paused.
 *
 * mmap, munmap and mremap are the system calls glibc's wrappers make on
 * x86-64 (no wrapper does more), made directly so that no lookup of the
 * next definition is needed, however early they are called. sbrk keeps
 * glibc's own state and is looked up at its first use.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core.h"
#include "hooks.h"
#include "ring.h"
#include "sampler.h"

static void *sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

/*
 * Anonymous mappings that can be used: a PROT_NONE mapping only reserves
 * address space (runtimes reserve gigabytes that way and commit parts later
 * with mprotect, which is not followed).
 */
/* Called from the allocator's own code (ra: the hook's return address). */
static inline int by_allocator(uintptr_t ra)
{
	uintptr_t lo = RELAXED(g.alloc_lo);
	return ra - lo < RELAXED(g.alloc_hi) - lo;
}

/* Counts what the allocator mapped (or took from the break) for itself: 1 if ra is in it. */
static int allocator_own(uintptr_t ra, size_t len)
{
	if (!by_allocator(ra))
		return 0;
	struct hl_ring_header *h = ring_now();
	if (h) {
		__atomic_fetch_add(&h->allocator_maps, 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&h->allocator_map_bytes, len, __ATOMIC_RELAXED);
	}
	return 1;
}

static void *mapped(void *p, size_t len, int prot, int flags, uintptr_t ra)
{
	if (p != MAP_FAILED && (flags & MAP_ANONYMOUS) && prot != PROT_NONE && !allocator_own(ra, len) && sample_now(len))
		record_alloc(p, len, HL_FUNC_MMAP, NULL);
	return p;
}

EXPORT void *HOOK(mmap)(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return mapped(sys_mmap(addr, len, prot, flags, fd, off), len, prot, flags, (uintptr_t)__builtin_return_address(0));
}

EXPORT void *HOOK(mmap64)(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return mapped(sys_mmap(addr, len, prot, flags, fd, off), len, prot, flags, (uintptr_t)__builtin_return_address(0));
}

/* The unmap is recorded first: once the range is gone, another thread may map it again at once. */
EXPORT int HOOK(munmap)(void *addr, size_t len)
{
	if (!tls.busy && !by_allocator((uintptr_t)__builtin_return_address(0)))
		record_unmap(addr, len);
	return (int)syscall(SYS_munmap, addr, len);
}

EXPORT void *HOOK(mremap)(void *old, size_t oldlen, size_t newlen, int flags, ...)
{
	void *want = NULL;
	if (flags & MREMAP_FIXED) {
		va_list ap;
		va_start(ap, flags);
		want = va_arg(ap, void *);
		va_end(ap);
	}
	void *p = (void *)syscall(SYS_mremap, old, oldlen, newlen, flags, want);
	if (p == MAP_FAILED || tls.busy || by_allocator((uintptr_t)__builtin_return_address(0)))
		return p;
	/* Like realloc: the old mapping goes, the new one is drawn by its size. */
	record_unmap(old, oldlen);
	if (sample_now(newlen))
		record_alloc(p, newlen, HL_FUNC_MREMAP, NULL);
	return p;
}

EXPORT void *HOOK(sbrk)(intptr_t inc)
{
	static void *(*next)(intptr_t);
	void *(*f)(intptr_t) = __atomic_load_n(&next, __ATOMIC_ACQUIRE);
	if (!f) {
		f = (void *(*)(intptr_t))dlsym(HL_NEXT, "sbrk");
		if (!f) {
			errno = ENOMEM;
			return (void *)-1;
		}
		__atomic_store_n(&next, f, __ATOMIC_RELEASE);
	}
	void *p = f(inc);
	if (p != (void *)-1 && inc > 0 && !allocator_own((uintptr_t)__builtin_return_address(0), (size_t)inc) &&
	    sample_now((size_t)inc))
		record_alloc(p, (size_t)inc, HL_FUNC_SBRK, NULL);
	return p;
}
