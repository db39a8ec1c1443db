/*
 * What the allocator holds, as it says itself: bytes in use, free bytes it
 * keeps, and what of those it would give back. Sent now and then as a
 * MALLINFO record once a sampled allocation is recorded, where this thread
 * holds no allocator lock, with that record's time (no clock read of its
 * own: at --rate 1 every allocation is sampled), so that reports can tell
 * the heap's live blocks from the free memory the allocator keeps
 * (docs/views.md, "Where RSS goes"; docs/allocators.md).
 *
 * glibc's mallinfo2, jemalloc's mallctl statistics and gperftools
 * tcmalloc's MallocExtension_GetNumericProperty are read, each only in the
 * allocator that defines it (find_allocator); others are not asked.
 * mallinfo2 takes each arena's lock in turn and walks its free lists, and
 * jemalloc's "epoch" merges its arenas' statistics, so their cost grows
 * with the heap. The next reading waits until the samples since the last
 * stand for 64 MiB of allocations (at least 128 samples at the default
 * rate, whatever the speed of the run: a wall-clock pace would read more
 * often per instruction in a slowed run, under valgrind or on a loaded
 * machine), and until 1000 times as long as the last one took has passed
 * (measured in one clock, so the bound holds at any speed): it never takes
 * more than 0.1 % of the time, nor holds a lock for long. A reading
 * stretched by the scheduler or a lock wait at most doubles the wait.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>

#include "core.h"
#include "heapstats.h"
#include "ring.h"
#include "scratch.h"

#define GAP_BYTES (64ull << 20)
#define COST_FACTOR 1000
#define BATCH (1ull << 20) /* a thread adds its count to the shared one in batches, or at its first sample */

/* A reading, in the MALLINFO record's fields (docs/ring-format.md). */
struct reading {
	uint64_t arena, mmapped, in_use, free, keep;
};

static struct mallinfo2 (*glibc_info)(void);
static int (*je_ctl)(const char *, void *, size_t *, void *, size_t);
static int (*tc_prop)(const char *, size_t *);
static uint64_t allocated; /* bytes the threads' samples stood for, added in batches */
static uint64_t due_bytes; /* the next reading once allocated reaches it; 0: at the first sample */
static int64_t next_at;    /* and not before (CLOCK_MONOTONIC ns); INT64_MAX while a thread takes one */
static int64_t cost_ns;    /* what a reading takes, as the waits count it */

/* name, looked up below us, when the allocator's own module defines it. */
static void *allocator_fn(const char *name)
{
	void *f = dlsym(HL_NEXT, name);
	return f && (uintptr_t)f - g.alloc_lo < g.alloc_hi - g.alloc_lo ? f : NULL;
}

/* From init_global: dlsym must not run inside a hook. glibc 2.33+. */
void heapstats_init(void)
{
	if (g.alloc_flags & HL_ALLOCATOR_GLIBC)
		glibc_info = (struct mallinfo2 (*)(void))dlsym(HL_NEXT, "mallinfo2");
	else if (!(je_ctl = (int (*)(const char *, void *, size_t *, void *, size_t))allocator_fn("mallctl")))
		tc_prop = (int (*)(const char *, size_t *))allocator_fn("MallocExtension_GetNumericProperty");
}

/* A fork child starts afresh: the thread that was taking stats is gone. */
void heapstats_atfork_child(void) { next_at = 0, due_bytes = 0, allocated = 0, cost_ns = 0; }

/* What a reading costs, in the clock described above. */
static int64_t cost_clock(void)
{
	return now_ns(RELAXED(g.sandboxed) ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID);
}

static uint64_t je_stat(const char *name)
{
	size_t v = 0, len = sizeof v;
	return je_ctl(name, &v, &len, NULL, 0) == 0 && len == sizeof v ? v : 0;
}

static uint64_t tc_stat(const char *name)
{
	size_t v = 0;
	return tc_prop(name, &v) ? v : 0;
}

/*
 * jemalloc: in use is what the program holds; free, what its resident pages
 * hold beside that (partly used pages, dirty pages, metadata); keep, the
 * dirty and muzzy pages its decay (or "arena.<i>.purge") gives back.
 * tcmalloc: free is its heap less what it released and what is in use;
 * keep, its page heap's free bytes (ReleaseFreeMemory gives them back).
 */
static int take(struct reading *r)
{
	if (glibc_info) {
		struct mallinfo2 mi = glibc_info();
		*r = (struct reading){mi.arena, mi.hblkhd, mi.uordblks, mi.fordblks, mi.keepcost};
		return 1;
	}
	if (je_ctl) {
		uint64_t epoch = 1, was = 0;
		size_t len = sizeof was;
		if (je_ctl("epoch", &was, &len, &epoch, sizeof epoch))
			return 0;
		uint64_t in_use = je_stat("stats.allocated"), active = je_stat("stats.active");
		uint64_t resident = je_stat("stats.resident");
		if (!resident || resident < active || active < in_use) /* a build without statistics */
			return 0;
		*r = (struct reading){resident, 0, in_use, resident - in_use, resident - active};
		return 1;
	}
	if (tc_prop) {
		uint64_t in_use = tc_stat("generic.current_allocated_bytes"), heap = tc_stat("generic.heap_size");
		uint64_t released = tc_stat("tcmalloc.pageheap_unmapped_bytes"), keep = tc_stat("tcmalloc.pageheap_free_bytes");
		if (heap < released + in_use)
			return 0;
		*r = (struct reading){heap - released, 0, in_use, heap - released - in_use, keep};
		return 1;
	}
	return 0;
}

static COLD void take_due(int64_t now, struct scratch *s, uint64_t want);

/* Every sample's: the batch check alone, so that it pays for no registers saved (take_due's). */
void heapstats_maybe(int64_t now, size_t n)
{
	struct scratch *s = tls.scratch;
	if ((!glibc_info && !je_ctl && !tc_prop) || !RELAXED(g.ring) || !s)
		return;
	s->stat_bytes += n > g.rate ? n : g.rate; /* what the sample stands for, on average */
	uint64_t want = RELAXED(due_bytes);
	if (s->stat_bytes < BATCH && want)
		return;
	take_due(now, s, want);
}

static void take_due(int64_t now, struct scratch *s, uint64_t want)
{
	uint64_t sum = __atomic_add_fetch(&allocated, s->stat_bytes, __ATOMIC_RELAXED);
	s->stat_bytes = 0;
	int64_t due = __atomic_load_n(&next_at, __ATOMIC_RELAXED);
	if (sum < want || now < due || !__atomic_compare_exchange_n(&next_at, &due, INT64_MAX, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return;
	if (sum < RELAXED(due_bytes)) { /* another thread took one since we looked */
		__atomic_store_n(&next_at, due, __ATOMIC_RELEASE);
		return;
	}
	tls.busy++;
	struct reading r;
	int64_t began = cost_clock();
	int ok = take(&r);
	int64_t took = cost_clock() - began;
	uint64_t pos;
	struct hl_ring_header *h = RELAXED(g.ring);
	if (ok && !ring_reserve(56, &pos)) {
		if (h)
			__atomic_fetch_add(&h->dropped_other, 1, __ATOMIC_RELAXED);
	} else if (ok) {
		ring_put(pos + 8, (uint64_t)now);
		ring_put(pos + 16, r.arena);
		ring_put(pos + 24, r.mmapped);
		ring_put(pos + 32, r.in_use);
		ring_put(pos + 40, r.free);
		ring_put(pos + 48, r.keep);
		ring_commit(pos, hl_rec_header(56, HL_REC_MALLINFO, 0, 0));
	}
	tls.busy--;
	__atomic_store_n(&due_bytes, sum + GAP_BYTES, __ATOMIC_RELAXED);
	/* A reading the scheduler or a lock stretched at most doubles the
	 * wait; one on a heap grown costly reaches it in a few readings. */
	cost_ns = cost_ns && took > 2 * cost_ns ? 2 * cost_ns : took;
	__atomic_store_n(&next_at, now + cost_ns * COST_FACTOR, __ATOMIC_RELEASE);
}
