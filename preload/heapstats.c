/*
 * What glibc's malloc holds, as mallinfo2 says: bytes in its arenas, in use
 * and free, and its own mappings. Sent now and then as a MALLINFO record
 * once a sampled allocation is recorded, where this thread holds no
 * allocator lock, with that record's time (no clock read of its own: at
 * --rate 1 every allocation is sampled), so that reports can tell the
 * heap's live blocks from the free memory the allocator keeps
 * (docs/views.md, "Where RSS goes").
 *
 * mallinfo2 takes each arena's lock in turn and walks its free lists, so
 * its cost grows with fragmentation. The next call waits at least 1 s and
 * 1000 times as long as the last one took: it never takes more than 0.1 %
 * of a thread's time, nor holds an arena for long.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>

#include "internal.h"

#define MIN_GAP_NS 1000000000ll
#define COST_FACTOR 1000

static struct mallinfo2 (*info)(void);
static int64_t next_at; /* CLOCK_MONOTONIC ns; INT64_MAX while a thread takes one */

/* From init_global: dlsym must not run inside a hook. glibc 2.33+. */
void heapstats_init(void)
{
	if (!(g.alloc_flags & HL_ALLOCATOR_GLIBC))
		return; /* mallinfo2 would describe glibc's arenas, which hold nothing of the program's */
	info = (struct mallinfo2 (*)(void))dlsym(HL_NEXT, "mallinfo2");
}

/* A fork child starts afresh: the thread that was taking stats is gone. */
void heapstats_atfork_child(void) { next_at = 0; }

void heapstats_maybe(int64_t now)
{
	if (!info || !RELAXED(g.ring))
		return;
	int64_t due = __atomic_load_n(&next_at, __ATOMIC_RELAXED);
	if (now < due || !__atomic_compare_exchange_n(&next_at, &due, INT64_MAX, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return;
	tls.busy++;
	struct mallinfo2 mi = info();
	int64_t took = now_ns(CLOCK_MONOTONIC) - now;
	uint64_t pos;
	struct hl_ring_header *h = RELAXED(g.ring);
	if (!ring_reserve(56, &pos)) {
		if (h)
			__atomic_fetch_add(&h->dropped_other, 1, __ATOMIC_RELAXED);
	} else {
		ring_put(pos + 8, (uint64_t)now);
		ring_put(pos + 16, mi.arena);
		ring_put(pos + 24, mi.hblkhd);
		ring_put(pos + 32, mi.uordblks);
		ring_put(pos + 40, mi.fordblks);
		ring_put(pos + 48, mi.keepcost);
		ring_commit(pos, hl_rec_header(56, HL_REC_MALLINFO, 0, 0));
	}
	tls.busy--;
	int64_t gap = took * COST_FACTOR > MIN_GAP_NS ? took * COST_FACTOR : MIN_GAP_NS;
	__atomic_store_n(&next_at, now + gap, __ATOMIC_RELEASE);
}
