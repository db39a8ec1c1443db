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
 * with the heap. The next call waits at least 1 s and 1000 times as long
 * as the last one took: it never takes more than 0.1 % of a thread's time,
 * nor holds a lock for long.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>

#include "core.h"
#include "heapstats.h"
#include "ring.h"

#define MIN_GAP_NS 1000000000ll
#define COST_FACTOR 1000

/* A reading, in the MALLINFO record's fields (docs/ring-format.md). */
struct reading {
	uint64_t arena, mmapped, in_use, free, keep;
};

static struct mallinfo2 (*glibc_info)(void);
static int (*je_ctl)(const char *, void *, size_t *, void *, size_t);
static int (*tc_prop)(const char *, size_t *);
static int64_t next_at; /* CLOCK_MONOTONIC ns; INT64_MAX while a thread takes one */

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
void heapstats_atfork_child(void) { next_at = 0; }

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

void heapstats_maybe(int64_t now)
{
	if ((!glibc_info && !je_ctl && !tc_prop) || !RELAXED(g.ring))
		return;
	int64_t due = __atomic_load_n(&next_at, __ATOMIC_RELAXED);
	if (now < due || !__atomic_compare_exchange_n(&next_at, &due, INT64_MAX, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return;
	tls.busy++;
	struct reading r;
	int ok = take(&r);
	int64_t took = now_ns(CLOCK_MONOTONIC) - now;
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
	int64_t gap = took * COST_FACTOR > MIN_GAP_NS ? took * COST_FACTOR : MIN_GAP_NS;
	__atomic_store_n(&next_at, now + gap, __ATOMIC_RELEASE);
}
