/*
 * Residency at exit: the agent reads which pages of the largest sampled
 * blocks are resident once a second, from /proc/PID/pagemap, which is gone
 * once the process is reaped. So at exit(), and when a Python interpreter
 * starts finalizing (before it frees the program's objects: what "live
 * at exit" means for Python), the library counts, with
 * mincore, the pages of the blocks the agent listed in the ring header
 * (resident_blocks) and writes one RESIDENT record each: the agent then
 * knows what the blocks held when the process ended, not a second before.
 * mincore only reads page tables: a torn or stale entry gives a wrong
 * count (the agent checks it against its blocks) or an error, never harm.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core.h"
#include "resident.h"
#include "ring.h"

#define BUDGET (1u << 19) /* pages counted in one report, at most: 2 GiB, a few ms of mincore */
#define VEC 256 /* pages per mincore call: a small vector on the stack, which may be a 16 KiB thread's */

/* The resident bytes of [addr, addr+size), by pages; 0 and *ok unset on error. */
static uint64_t resident_bytes(uint64_t addr, uint64_t size, uint64_t page, uint64_t *span, int *ok)
{
	unsigned char vec[VEC];
	uint64_t first = addr & ~(page - 1), end = (addr + size + page - 1) & ~(page - 1), res = 0;
	*span = end - first;
	for (uint64_t at = first; at < end;) {
		uint64_t n = (end - at) / page;
		if (n > VEC)
			n = VEC;
		if (mincore((void *)(uintptr_t)at, n * page, vec) != 0)
			return *ok = 0, 0;
		for (uint64_t i = 0; i < n; i++)
			res += (vec[i] & 1) ? page : 0;
		at += n * page;
	}
	return res;
}

/* Writes a RESIDENT record for each block the agent listed; never blocks. */
void resident_report(void)
{
	struct hl_ring_header *h = ring_now();
	if (!h || NO_NEW_CALLS()) /* mincore: no new system call under a seccomp filter (seccomp.c) */
		return;
	uint32_t n = __atomic_load_n(&h->resident_count, __ATOMIC_ACQUIRE);
	if (n > HL_RESIDENT_BLOCKS)
		n = HL_RESIDENT_BLOCKS;
	long ps = sysconf(_SC_PAGESIZE);
	uint64_t page = ps > 0 ? (uint64_t)ps : 4096, budget = BUDGET;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t addr = __atomic_load_n(&h->resident_blocks[i][0], __ATOMIC_RELAXED);
		uint64_t size = __atomic_load_n(&h->resident_blocks[i][1], __ATOMIC_RELAXED);
		if (addr == 0 || size == 0 || addr + size < addr || size / page + 1 > budget)
			continue; /* a reservation too large to count quickly keeps its last reading */
		budget -= size / page + 1;
		int ok = 1;
		uint64_t span, res = resident_bytes(addr, size, page, &span, &ok), pos;
		if (!ok)
			continue;
		if (!ring_reserve(40, &pos)) {
			__atomic_fetch_add(&h->dropped_other, 1, __ATOMIC_RELAXED);
			return;
		}
		ring_put(pos + 8, (uint64_t)now_ns(CLOCK_MONOTONIC));
		ring_put(pos + 16, addr);
		ring_put(pos + 24, span);
		ring_put(pos + 32, res);
		ring_commit(pos, hl_rec_header(40, HL_REC_RESIDENT, 0, 0));
	}
}

/* Up to cap bytes of path, by raw system calls (no allocation, no lock); -1 when it cannot be opened. */
long read_small_file(const char *path, char *buf, size_t cap)
{
	long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC), n = 0, r;
	if (fd < 0)
		return -1;
	while ((size_t)n < cap && (r = syscall(SYS_read, (int)fd, buf + n, cap - (size_t)n)) > 0)
		n += r;
	syscall(SYS_close, (int)fd);
	return n;
}

/* A MARK with the process's resident bytes, less the ring's resident pages
 * (heaplens's, not the program's), at the ring's creation and at exit():
 * a run too short for the agent's polls still has an RSS reading at both
 * ends. statm's second field is VmRSS in pages. */
void rss_mark(void)
{
	struct hl_ring_header *h = ring_now();
	if (!h || NO_NEW_CALLS())
		return;
	char buf[128];
	long n = read_small_file("/proc/self/statm", buf, sizeof buf - 1);
	if (n <= 0)
		return;
	buf[n] = 0;
	const char *q = buf;
	while (*q && *q != ' ')
		q++;
	uint64_t pages = 0;
	for (q += *q == ' '; *q >= '0' && *q <= '9'; q++)
		pages = pages * 10 + (uint64_t)(*q - '0');
	long ps = sysconf(_SC_PAGESIZE);
	uint64_t page = ps > 0 ? (uint64_t)ps : 4096, span;
	int ok = 1;
	uint64_t ring = resident_bytes((uint64_t)(uintptr_t)h, HL_RING_HEADER_SIZE + g.ring_size, page, &span, &ok);
	uint64_t rss = pages * page;
	if (pages && ok)
		emit_mark(HL_MARK_RSS, rss - (ring < rss ? ring : rss));
}
