/*
 * Sets of sampled blocks, kept beside the blocks rather than in them: a
 * block handed out is exactly what the allocator returned, so whichever
 * free reaches it (ours, the allocator's own called directly, a library's
 * bound to libc with RTLD_DEEPBIND) frees it correctly, and nothing is read
 * outside what the allocator handed out. One set holds the malloc family's
 * sampled blocks (hooks.c), one the Python objects (pymem.c). Declared in
 * blockset.h.
 *
 * A block's address goes into a lock-free open-addressed table (word:
 * address | size << 48, sizes above 0xffff kept as 0xffff; 0 empty,
 * 1 deleted). A slot once used never becomes empty again, so a lookup
 * that stops at an empty slot has passed every slot an insert could have
 * skipped: clearing a deleted slot whose next one looked empty lost blocks
 * when another thread filled that next one meanwhile (its free then went
 * unseen: a sampled block reported live at --rate 1, 1 run in ~10 of
 * test/workloads/stress.c). Inserts reuse deleted slots. When a block
 * finds no room in its probe window the set grows by a level four times
 * larger (at most LEVELS): older levels are still searched, newest first,
 * so nothing moves. In front sits a filter
 * of saturating byte counters indexed by another hash of the address:
 * freeing an unsampled block costs a multiply, a shift, one byte load and
 * a branch (blockset_maybe). With a few hundred blocks in the set, that
 * byte is set for a free now and then by chance (py_churn: 1 in 250–700
 * of its PyMem frees, with ~100 sampled objects live). A second filter of
 * 64 KiB, indexed by a third hash (bits 4–47 of the address: the first
 * hash reads its low 32), turns nearly all of those away with one more
 * byte (blockset_maybe2: read by the PyMem free hook itself, and first by
 * blockset_take). It is not on the fast path: its cache lines are touched
 * by these frees and by the set's changes only.
 */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "blockset.h"
#include "core.h"
#include "reserve.h"
#include "ring.h"
#include "sampler.h"

#define PROBES 64
#define ADDR(e) ((e) & ((1ull << 48) - 1))

/* Adds d (±1) to a counter; 255 sticks, as it may stand for more. */
static void counter_add(uint8_t *c, int d)
{
	uint8_t v = __atomic_load_n(c, __ATOMIC_RELAXED);
	do
		if (v == 255 || (v == 0 && d < 0))
			return;
	while (!__atomic_compare_exchange_n(c, &v, d > 0 && v == 254 ? 255 : (uint8_t)(v + d), 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

/* Adds d to p's counters in both filters. */
static void filter_add(struct blockset *s, const void *p, int d)
{
	counter_add(&s->filter[blockset_filter_at(p)], d);
	counter_add(&s->filter2[blockset_filter2_at(p)], d);
}

/* p's counters stuck at 255: every free of p comes to the slow path (boot.c's static blocks). */
void blockset_pin(struct blockset *s, const void *p)
{
	__atomic_store_n(&s->filter[blockset_filter_at(p)], 255, __ATOMIC_RELAXED);
	__atomic_store_n(&s->filter2[blockset_filter2_at(p)], 255, __ATOMIC_RELAXED);
}

/* p's first slot in a level of 2^bits slots; the probe window follows it. */
static inline uint64_t home_of(uint32_t bits, const void *p)
{
	return (((uint64_t)(uintptr_t)p >> 4) * 0xc2b2ae3d27d4eb4full) >> (64 - bits);
}

/*
 * A new level, four times the last. Every thread that finds no room maps
 * one and races to install it: the first CAS wins, the others unmap theirs
 * and help publish the winner's. None waits for another, and none drops
 * its block because another is growing the set (one that was preempted
 * between its mmap and its store made the others drop theirs). bits[had]
 * is the same value whoever writes it, and is written before levels is
 * published.
 */
static int grow(struct blockset *s, uint32_t had)
{
	if (had >= BLOCKSET_LEVELS || NO_NEW_CALLS()) /* under a seccomp filter, no new system call (seccomp.c) */
		return 0;
	if (__atomic_load_n(&s->levels, __ATOMIC_ACQUIRE) != had)
		return 1; /* another thread grew it meanwhile */
	uint32_t bits = s->bits[had - 1] + 2;
	if (!__atomic_load_n(&s->table[had], __ATOMIC_ACQUIRE)) {
		void *m = reserve_map(8ull << bits, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1);
		if (m == MAP_FAILED)
			return 0;
		uint64_t *none = NULL;
		if (!__atomic_compare_exchange_n(&s->table[had], &none, (uint64_t *)m, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			reserve_unmap(m, 8ull << bits); /* another's is in: use it */
	}
	__atomic_store_n(&s->bits[had], bits, __ATOMIC_RELAXED);
	__atomic_compare_exchange_n(&s->levels, &had, had + 1, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
	return 1;
}

/*
 * Puts p (n bytes) in the set's newest level, at the first free slot of
 * its probe window; 0 when the set has no room. An entry for p met on the
 * way is a block whose free went unseen (docs/allocators.md): its slot is
 * taken over. (One further along, or in an older level, stays until a
 * free of p removes it: frees take the newest first.)
 */
static int put(struct blockset *s, void *p, size_t n)
{
	uint64_t want = (uint64_t)(uintptr_t)p | (uint64_t)(n < 0xffff ? n : 0xffff) << 48;
	uint32_t levels = __atomic_load_n(&s->levels, __ATOMIC_ACQUIRE);
	if (!levels || (uint64_t)(uintptr_t)p >> 48)
		return 0;
	for (int tries = 0; tries < 8; tries++) {
		uint32_t l = levels - 1;
		uint64_t *table = s->table[l], mask = (1ull << s->bits[l]) - 1, home = home_of(s->bits[l], p);
		for (uint32_t k = 0; k < PROBES; k++) {
			uint64_t *e_at = &table[(home + k) & mask], e = __atomic_load_n(e_at, __ATOMIC_ACQUIRE);
			if (e > 1) {
				if (ADDR(e) == (uint64_t)(uintptr_t)p && __atomic_compare_exchange_n(e_at, &e, want, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
					return 1;
				continue;
			}
			if (__atomic_compare_exchange_n(e_at, &e, want, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
				filter_add(s, p, 1);
				return 1;
			}
		}
		if (!grow(s, levels))
			return 0;
		levels = __atomic_load_n(&s->levels, __ATOMIC_ACQUIRE);
	}
	return 0;
}

/*
 * A counter is raised after its block's entry is in the table and lowered
 * after it left, and a block is put before the program has its address,
 * so a block's free never finds its own counters at 0.
 */
int64_t blockset_take(struct blockset *s, void *p)
{
	if (!blockset_maybe2(s, p))
		return -1;
	for (uint32_t l = __atomic_load_n(&s->levels, __ATOMIC_ACQUIRE); l-- > 0;) {
		uint64_t *table = s->table[l], mask = (1ull << s->bits[l]) - 1, home = home_of(s->bits[l], p);
		for (uint32_t k = 0; k < PROBES; k++) {
			uint64_t *e_at = &table[(home + k) & mask];
			uint64_t e = __atomic_load_n(e_at, __ATOMIC_ACQUIRE);
			if (!e)
				break;
			if (e > 1 && ADDR(e) == (uint64_t)(uintptr_t)p) {
				/* Deleted, never empty again: see the comment at the top. */
				if (!__atomic_compare_exchange_n(e_at, &e, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
					return -1;
				filter_add(s, p, -1);
				return (int64_t)(e >> 48);
			}
		}
	}
	return -1;
}

/*
 * The first level: room for twice the samples of 256 MiB of live blocks at
 * the rate, 2^12 to 2^16 slots (32 KiB at the default rate, 512 KiB at
 * --rate 1); the levels after it, four times as many each, up to 2^26
 * slots. Pages never touched cost nothing. Attached, the set is sized for
 * the finest rate at load, as sessions may change the rate.
 */
int blockset_init(struct blockset *s)
{
	if (EXACT()) { /* no set: every counter pinned, so that every free takes its slow path */
		memset(s->filter, 255, sizeof s->filter);
		memset(s->filter2, 255, sizeof s->filter2);
		return 1;
	}
	if (__atomic_load_n(&s->levels, __ATOMIC_ACQUIRE))
		return 1;
	uint64_t rate = hl_rate() ? hl_rate() : 1, want = 2 * ((256ull << 20) / rate);
	uint32_t bits = 12;
	while (bits < 16 && (1ull << bits) < want)
		bits++;
	void *m = (void *)syscall(SYS_mmap, NULL, 8ull << bits, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return 0;
	s->bits[0] = bits, s->table[0] = m;
	__atomic_store_n(&s->levels, 1, __ATOMIC_RELEASE);
	return 1;
}

/* Records a sampled block, or counts it dropped when the set has no room; in exact mode, records it. */
static COLD void keep_put(struct blockset *s, void *p, size_t n, int func, const struct walk_start *at)
{
	if (put(s, p, n)) {
		record_alloc(p, n, func, at);
		return;
	}
	struct hl_ring_header *h = ring_now();
	if (h)
		__atomic_fetch_add(&h->dropped_alloc, 1, __ATOMIC_RELAXED);
}

/* Exact mode's check before any register is saved (put's need them): a jump to record_alloc. */
COLD void blockset_keep(struct blockset *s, void *p, size_t n, int func, const struct walk_start *at)
{
	if (EXACT())
		record_alloc(p, n, func, at);
	else
		keep_put(s, p, n, func, at);
}
