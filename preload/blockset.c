/*
 * Sets of sampled blocks that carry no tag in front of them: Python
 * objects (pymem.c), whose layout must not change, and, in a process
 * heaplens attached to, every sampled block (attach.c), since a free that
 * bypasses our hooks must still find a plain glibc block. Declared in
 * internal.h.
 *
 * A block's address goes into a lock-free open-addressed table (word:
 * address | size << 48, sizes above 0xffff kept as 0xffff; 0 empty,
 * 1 deleted). In front of it sits a filter of saturating byte counters
 * indexed by another hash of the address: freeing an unsampled block costs
 * a multiply, a shift, one byte load and a branch (blockset_maybe).
 */
#define _GNU_SOURCE
#include <sys/mman.h>

#include "internal.h"

#define PROBES 64

static inline uint32_t filter_at(const void *p)
{
	return (uint32_t)(((uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull) >> (64 - BLOCKSET_FILTER_BITS));
}

/* Adds d (±1) to p's counter; 255 sticks, as it may stand for more. */
static void filter_add(struct blockset *s, const void *p, int d)
{
	uint8_t *c = &s->filter[filter_at(p)], v = __atomic_load_n(c, __ATOMIC_RELAXED);
	do
		if (v == 255 || (v == 0 && d < 0))
			return;
	while (!__atomic_compare_exchange_n(c, &v, (uint8_t)(v + d), 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

static inline uint64_t table_at(const struct blockset *s, const void *p, uint32_t k)
{
	uint64_t h = ((uint64_t)(uintptr_t)p >> 4) * 0xc2b2ae3d27d4eb4full;
	return ((h >> (64 - s->bits)) + k) & ((1ull << s->bits) - 1);
}

#define ADDR(e) ((e) & ((1ull << 48) - 1))

/* Puts p (n bytes) in the set; 0 when its probe window is full. */
static int put(struct blockset *s, void *p, size_t n)
{
	uint64_t want = (uint64_t)(uintptr_t)p | (uint64_t)(n < 0xffff ? n : 0xffff) << 48;
	uint64_t *table = __atomic_load_n(&s->table, __ATOMIC_ACQUIRE);
	if (!table || (uint64_t)(uintptr_t)p >> 48)
		return 0;
	for (int tries = 0; tries < 4; tries++) {
		int64_t free_at = -1;
		for (uint32_t k = 0; k < PROBES; k++) {
			uint64_t *e_at = &table[table_at(s, p, k)];
			uint64_t e = __atomic_load_n(e_at, __ATOMIC_ACQUIRE);
			if (e > 1 && ADDR(e) == (uint64_t)(uintptr_t)p) { /* its free went unseen: take the slot over */
				__atomic_store_n(e_at, want, __ATOMIC_RELEASE);
				return 1;
			}
			if (e <= 1 && free_at < 0)
				free_at = (int64_t)table_at(s, p, k);
			if (!e)
				break;
		}
		if (free_at < 0)
			return 0;
		uint64_t old = __atomic_load_n(&table[free_at], __ATOMIC_ACQUIRE);
		if (old <= 1 && __atomic_compare_exchange_n(&table[free_at], &old, want, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			filter_add(s, p, 1);
			return 1;
		}
	}
	return 0;
}

int64_t blockset_take(struct blockset *s, void *p)
{
	uint64_t *table = __atomic_load_n(&s->table, __ATOMIC_ACQUIRE);
	if (!table)
		return -1;
	for (uint32_t k = 0; k < PROBES; k++) {
		uint64_t *e_at = &table[table_at(s, p, k)];
		uint64_t e = __atomic_load_n(e_at, __ATOMIC_ACQUIRE);
		if (!e)
			return -1;
		if (e > 1 && ADDR(e) == (uint64_t)(uintptr_t)p) {
			/* Nothing probes past an empty slot: when the next one is empty, so may this one be. */
			uint64_t next = __atomic_load_n(&table[table_at(s, p, k + 1)], __ATOMIC_RELAXED);
			if (!__atomic_compare_exchange_n(e_at, &e, next ? 1 : 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				return -1;
			filter_add(s, p, -1);
			return (int64_t)(e >> 48);
		}
	}
	return -1;
}

/*
 * Room for twice the samples of 4 GiB of live blocks at the rate, 2^14 to
 * 2^22 slots (128 KiB at the default rate; 32 MiB at --rate 1, where every
 * block is a sample). Untouched pages cost nothing. Attached, the table is
 * sized for the finest rate at load, as sessions may change the rate.
 */
int blockset_init(struct blockset *s)
{
	if (s->table)
		return 1;
	uint64_t rate = hl_rate() ? hl_rate() : 1, want = 2 * ((4ull << 30) / rate);
	uint32_t bits = 14;
	while (bits < 22 && (1ull << bits) < want)
		bits++;
	struct countdown cd = pause_sampling(); /* our table, not the program's mapping */
	void *m = mmap(NULL, 8ull << bits, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	resume_sampling(cd);
	if (m == MAP_FAILED)
		return 0;
	s->bits = bits;
	__atomic_store_n(&s->table, (uint64_t *)m, __ATOMIC_RELEASE);
	return 1;
}

/* Records a sampled block, or counts it dropped when the table has no room. */
COLD void blockset_keep(struct blockset *s, void *p, size_t n, int func)
{
	if (put(s, p, n)) {
		record_alloc(p, n, func);
		return;
	}
	struct hl_ring_header *h = ring_now();
	if (h)
		__atomic_fetch_add(&h->dropped_alloc, 1, __ATOMIC_RELAXED);
}
