/*
 * Address space for the mappings the library makes after start-up: a
 * thread's scratch at its first sample (scratch.c), a module's unwind
 * table at the first walk that needs it (unwind.c), a larger level of the
 * sampled set (blockset.c). They go into one range reserved at start-up
 * (PROT_NONE: address space, no memory), from its bottom up, with
 * MAP_FIXED. Mapped anywhere, each would move every mapping the program
 * makes after it (the kernel places them next to the last), so that after
 * the first sample the program's addresses would differ from those of a
 * run with no sample, and its own work with them: CPython's check that a
 * freed address is in one of its 1 MiB arenas takes 4 more instructions
 * for the part of an arena in the first 1 MiB-aligned span it straddles,
 * and a dict keyed by id() probes more or less (docs/benchmarks.md, "The
 * program's layout after the first sample"). What does not fit, or comes
 * when nothing could be reserved, is mapped anywhere, as before. A piece
 * unmapped becomes reserved again (PROT_NONE) and is not reused.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "reserve.h"

/*
 * Enough for a few threads' scratch (80 KiB each) and the tables of an interpreter and
 * libc; not a whole number of 2 MiB, which the kernel places on a 2 MiB boundary (for huge
 * pages), leaving a hole above that the program's next mappings would fill.
 */
#define RESERVE_SIZE ((8ull << 20) - (64 << 10))

static uintptr_t lo, hi, next, page;

static void *sys_mmap(uintptr_t at, size_t len, int prot, int flags, int fd)
{
	return (void *)syscall(SYS_mmap, at, len, prot, flags, fd, 0);
}

/*
 * Once per process, at start-up (a child of fork keeps its parent's range
 * and cursor). Under an address-space limit, only when the range is at
 * most 1/256 of it, as the ring (limits.c): the program's own mappings
 * come first.
 */
void reserve_init(void)
{
	struct rlimit r;
	if (__atomic_load_n(&lo, __ATOMIC_ACQUIRE) || getrlimit(RLIMIT_AS, &r) ||
	    (r.rlim_cur != RLIM_INFINITY && r.rlim_cur / 256 < RESERVE_SIZE))
		return;
	void *m = sys_mmap(0, RESERVE_SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1);
	if (m == MAP_FAILED)
		return;
	page = (uintptr_t)sysconf(_SC_PAGESIZE);
	hi = (uintptr_t)m + RESERVE_SIZE;
	next = (uintptr_t)m;
	__atomic_store_n(&lo, (uintptr_t)m, __ATOMIC_RELEASE);
}

/* mmap(NULL, len, prot, flags, fd, 0) made in the range when it fits, anywhere else otherwise. */
void *reserve_map(size_t len, int prot, int flags, int fd)
{
	uintptr_t base = __atomic_load_n(&lo, __ATOMIC_ACQUIRE);
	if (base && len && len <= RESERVE_SIZE) {
		uintptr_t n = (len + page - 1) & ~(page - 1);
		uintptr_t at = __atomic_fetch_add(&next, n, __ATOMIC_RELAXED); /* past hi: no room, for good */
		if (at + n <= hi) {
			void *m = sys_mmap(at, len, prot, flags | MAP_FIXED, fd);
			if (m != MAP_FAILED)
				return m;
		}
	}
	return sys_mmap(0, len, prot, flags, fd);
}

/* munmap of what reserve_map returned: in the range, the pages are reserved again. */
void reserve_unmap(void *p, size_t len)
{
	uintptr_t a = (uintptr_t)p, base = __atomic_load_n(&lo, __ATOMIC_ACQUIRE);
	if (base && a >= base && a < hi)
		sys_mmap(a, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1);
	else
		syscall(SYS_munmap, p, len);
}
