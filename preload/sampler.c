/*
 * The sampler: which allocations are sampled (a per-thread byte countdown),
 * and what a sample records (the stack, native and Python, and the pool
 * origin) into the ring.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <unwind.h>

#include "internal.h"

/* ---- the sampler ---- */

/*
 * Per-byte Bernoulli sampling with p = 1/rate: the distance to the next
 * sampled byte is geometric, G = 1 + floor(ln U / ln(1 - p)). An allocation
 * is sampled when it contains that byte; by memorylessness the next distance
 * is drawn afresh from its end. At rate 1 every byte is sampled; the gap of 0
 * also samples zero-byte calls, so `--rate 1` sees every call.
 */
static int64_t draw_gap(void)
{
	if (g.rate <= 1)
		return 0;
	uint64_t x = splitmix(&tls.rng);
	double u = (double)((x >> 11) + 1) * 0x1.0p-53; /* (0, 1] */
	double gap = 1.0 + floor(-log(u) * g.inv_log_keep);
	return gap > 4e18 ? (int64_t)4e18 : (int64_t)gap;
}

/*
 * Called when the countdown crossed zero. Returns 1 when this allocation is
 * sampled. While a Python interpreter's PyMem hooks wait to be installed,
 * the countdown is cut to 1 byte so that every allocation comes here and the
 * hooks go in right after the interpreter starts; the bytes held back are
 * kept in tls.owed, so the sampling itself is unchanged.
 */
COLD int sample_slow(size_t n)
{
	if (tls.busy) { /* our own allocations: invisible to the sampler */
		tls.remaining += (int64_t)n;
		return 0;
	}
#ifdef HEAPLENS_ATTACH
	uint64_t epoch = RELAXED(hl_ctl.epoch), session;
	if (!attach_poll(&session)) /* another thread is switching: this call is not sampled, the next looks again */
		return 0;
	tls.epoch = epoch;
	if (session != tls.session) /* a session began or ended since this thread last looked */
		tls.init = 0, tls.session = session;
#endif
	if (!tls.init) {
		tls.busy++;
		if (__atomic_load_n(&g.state, __ATOMIC_ACQUIRE) != 2)
			init_global();
		tls.busy--;
		if (__atomic_load_n(&g.state, __ATOMIC_ACQUIRE) != 2) { /* another thread initialises: retry later */
			tls.remaining = 0;
			return 0;
		}
		if (!g.active) {
			tls.remaining = IDLE_GAP;
			return 0;
		}
		tls.init = 1;
		uint64_t idx = __atomic_add_fetch(&g.threads, 1, __ATOMIC_RELAXED);
		uint64_t s = g.seed ^ (idx * 0xd1b54a32d192ed03ull);
		tls.rng = splitmix(&s);
		/* Starting from a drawn gap, not from zero, keeps the first allocation of a thread unbiased. */
		tls.remaining = draw_gap() - (int64_t)n, tls.owed = 0;
	}
	if (!g.active) {
		tls.remaining = IDLE_GAP;
		return 0;
	}
	heapstats_maybe();
	int pending = __atomic_load_n(&py_pending, __ATOMIC_RELAXED) && !RELAXED(g.no_python);
	if (pending) {
		tls.busy++;
		py_try_install();
		tls.busy--;
		pending = __atomic_load_n(&py_pending, __ATOMIC_RELAXED);
	}
	int64_t left = tls.remaining + tls.owed;
	int sampled = left <= 0;
	if (sampled)
		left = draw_gap();
	tls.remaining = left, tls.owed = 0;
	if (pending && left > 1)
		tls.remaining = 1, tls.owed = left - 1;
	return sampled;
}


static _Unwind_Reason_Code unwind_cb(struct _Unwind_Context *ctx, void *arg)
{
	(void)arg;
	uintptr_t ip = _Unwind_GetIP(ctx);
	if (!ip)
		return _URC_END_OF_STACK;
	uintptr_t lo = RELAXED(g.self_lo);
	if (ip - lo < RELAXED(g.self_hi) - lo)
		return _URC_NO_REASON;
	if (tls.nframes >= HL_MAX_FRAMES)
		return _URC_END_OF_STACK;
	tls.frames[tls.nframes++] = ip;
	return _URC_NO_REASON;
}

/*
 * Unwinds this thread into tls.frames and, unless the caller already did,
 * reads its Python frames into tls.py; then makes sure the agent can name
 * every pc and code object. Returns the ALLOC/ORIGIN flags.
 */
static uint32_t take_stack(int walked)
{
	tls.nframes = 0;
	if (!RELAXED(g.no_unwind)) {
		__atomic_fetch_add(&g.unwinding, 1, __ATOMIC_SEQ_CST);
		_Unwind_Backtrace(unwind_cb, NULL);
		__atomic_fetch_sub(&g.unwinding, 1, __ATOMIC_RELEASE);
	}
	py_check_final();
	if (!walked)
		py_walk();
	uint32_t nf = tls.nframes, flags = 0;
	if (nf >= HL_MAX_FRAMES)
		flags |= HL_ALLOC_TRUNCATED;
	uint32_t hint = 0;
	for (uint32_t i = 0; i < nf; i++)
		if (!covered(tls.frames[i], &hint) && new_module(tls.frames[i])) {
			scan_modules();
			break;
		}
	if (tls.npy)
		py_emit_codes();
	return flags;
}

/* Writes the taken stack at pos: native frames, then Python frames. */
static void put_stack(uint64_t pos)
{
	for (uint32_t i = 0; i < tls.nframes; i++)
		ring_put(pos + 8 * (uint64_t)i, tls.frames[i]);
	for (uint32_t i = 0; i < 2 * tls.npy; i++)
		ring_put(pos + 8 * (uint64_t)(tls.nframes + i), tls.py[i]);
}

static uint64_t stack_words(void) { return (uint64_t)tls.nframes + 2 * (uint64_t)tls.npy; }

COLD void record_alloc(void *p, size_t n, int func)
{
	int saved = errno;
	struct countdown cd = pause_sampling(); /* what the unwinder allocates is not the program's */
	struct hl_ring_header *h = __atomic_load_n(&g.ring, __ATOMIC_ACQUIRE);
	if (!h) {
		__atomic_fetch_add(&g.early_drops, 1, __ATOMIC_RELAXED); /* sampled before the ring existed */
		goto out;
	}
	uint32_t flags = take_stack(0);
	uint64_t token = 0;
	uint32_t method = (uint32_t)pool_origin(&token);
	flags |= method << HL_ALLOC_METHOD_SHIFT;
	if (token)
		flags |= HL_ALLOC_ORIGIN;
	if (func >= HL_FUNC_PYMEM_MALLOC)
		flags |= HL_ALLOC_PYMEM;
	uint64_t body = token ? 48 : 40;
	uint64_t len = body + 8 * stack_words(), pos;
	if (!ring_reserve(len, &pos)) {
		count_drop(&h->dropped_alloc);
		goto out;
	}
	if (flags & HL_ALLOC_TRUNCATED)
		__atomic_fetch_add(&h->truncated_stacks, 1, __ATOMIC_RELAXED);
	ring_put(pos + 8, (uint64_t)now_ns(CLOCK_MONOTONIC));
	ring_put(pos + 16, (uint64_t)(uintptr_t)p);
	ring_put(pos + 24, n);
	ring_put(pos + 32, (uint64_t)tid() | (uint64_t)flags << 32 | (uint64_t)tls.npy << 48);
	if (token)
		ring_put(pos + 40, token);
	put_stack(pos + body);
	ring_commit(pos, hl_rec_header((uint32_t)len, HL_REC_ALLOC, (uint32_t)func, tls.nframes));
out:
	resume_sampling(cd);
	errno = saved;
}

/*
 * The stack of an origin thread, for the pool work done under token: taken
 * by that thread itself, while it waits for the work (or when it submits).
 * walked: tls.py already holds this thread's Python frames.
 */
COLD void record_origin(uint64_t token, int walked)
{
	struct hl_ring_header *h = __atomic_load_n(&g.ring, __ATOMIC_ACQUIRE);
	if (!h)
		return;
	int saved = errno;
	struct countdown cd = pause_sampling();
	uint32_t flags = take_stack(walked);
	uint64_t len = 32 + 8 * stack_words(), pos;
	if (ring_reserve(len, &pos)) {
		ring_put(pos + 8, (uint64_t)now_ns(CLOCK_MONOTONIC));
		ring_put(pos + 16, token);
		ring_put(pos + 24, (uint64_t)tid() | (uint64_t)flags << 32 | (uint64_t)tls.npy << 48);
		put_stack(pos + 32);
		ring_commit(pos, hl_rec_header((uint32_t)len, HL_REC_ORIGIN, 0, tls.nframes));
	} else
		__atomic_fetch_add(&h->dropped_other, 1, __ATOMIC_RELAXED);
	resume_sampling(cd);
	errno = saved;
}

/*
 * A FREE record: of a sampled block (func 0), or of a munmap of [p, p+n)
 * (HL_FUNC_MUNMAP), whose sampled mappings the agent frees. Must be called
 * before the memory is released, so that a reuse of the address is
 * recorded after it.
 */
static void put_free(struct hl_ring_header *h, void *p, uint64_t n, uint32_t func)
{
	uint64_t pos, len = func ? 40 : 32;
	int saved = errno;
	if (!ring_reserve(len, &pos)) {
		__atomic_fetch_add(&h->dropped_free, 1, __ATOMIC_RELAXED);
		errno = saved;
		return;
	}
	ring_put(pos + 8, (uint64_t)now_ns(CLOCK_MONOTONIC));
	ring_put(pos + 16, (uint64_t)(uintptr_t)p);
	ring_put(pos + 24, (uint64_t)tid());
	if (func)
		ring_put(pos + 32, n);
	ring_commit(pos, hl_rec_header((uint32_t)len, HL_REC_FREE, func, 0));
	errno = saved;
}

COLD void record_unmap(void *p, size_t n)
{
	struct hl_ring_header *h = __atomic_load_n(&g.ring, __ATOMIC_ACQUIRE);
	if (h && g.active)
		put_free(h, p, n, HL_FUNC_MUNMAP);
}

COLD void record_free(void *p)
{
	struct hl_ring_header *h = __atomic_load_n(&g.ring, __ATOMIC_ACQUIRE);
	if (!h || !RELAXED(g.active)) /* attached: no session (blocks sampled in an earlier one are freed) */
		return;
	int saved = errno;
	py_check_final();
	errno = saved;
	put_free(h, p, 0, 0);
}
