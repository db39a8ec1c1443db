/*
 * The sampler: which allocations are sampled (a per-thread byte countdown),
 * and what a sample records (the stack, native and Python, and the pool
 * origin) into the ring.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <string.h>
#include <unwind.h>

#include "attach.h"
#include "boot.h"
#include "core.h"
#include "heapstats.h"
#include "modules.h"
#include "pools.h"
#include "python.h"
#include "ring.h"
#include "sampler.h"
#include "scratch.h"
#include "stacks.h"
#include "unwind.h"

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
 * sampled. While a Python interpreter's PyMem hooks wait to be settled, the
 * countdown is cut to PENDING_STEP bytes so that the hooks are settled
 * within that much allocation of the interpreter's start; the bytes held
 * back are kept in tls.owed, so the sampling itself is unchanged. (A step
 * of 1 byte, every allocation, cost 3.4 M instructions in a start-up of
 * python3.11 that runs 46.7 M; with 4 KiB, the whole library costs 1.9 M.)
 */
#define PENDING_STEP 4096
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
	tls.attach.epoch = epoch;
	if (session != tls.attach.session) /* a session began or ended since this thread last looked */
		tls.init = 0, tls.attach.session = session;
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
	if (pending && left > PENDING_STEP)
		tls.remaining = PENDING_STEP, tls.owed = left - PENDING_STEP;
	return sampled;
}


/*
 * libgcc's walk, kept within the stack: libgcc reads wherever a frame's
 * rules say (and the code at any return address it meets), so each frame
 * it reports is checked before it finds that frame's caller, and the walk
 * ends (cut) at the first that would lead outside: a frame outside the
 * stack or in no code; where the frame's rule is known, a caller's frame
 * outside the stack or a return into no code (a stale slice of a
 * coroutine's stack, as greenlet's switching leaves above each one); where
 * it is not, an rbp outside the stack.
 */
struct libgcc_walk {
	uintptr_t lo, hi, last;
	int cut;
};

/* The rule of the frame at return address ip, from the tables or its .eh_frame; 0 if neither gives one. */
static int rule_of(uintptr_t ip, uint32_t *rule)
{
#ifndef HEAPLENS_ATTACH
	if (table_rule(ip - 1, rule))
		return (*rule >> 24 & 3) != 2;
#endif
	return fde_rule(ip - 1, rule) > 0;
}

static _Unwind_Reason_Code unwind_cb(struct _Unwind_Context *ctx, void *arg)
{
	struct libgcc_walk *a = arg;
	uintptr_t ip = _Unwind_GetIP(ctx), cfa = _Unwind_GetCFA(ctx);
	if (!ip)
		return _URC_END_OF_STACK;
	if (cfa < a->last || cfa > a->hi) {
		a->cut = 1;
		return _URC_END_OF_STACK;
	}
	a->last = cfa;
	uintptr_t lo = RELAXED(g.self_lo);
	if (ip - lo < RELAXED(g.self_hi) - lo)
		return _URC_NO_REASON;
	uint32_t hint = 0;
	if (!covered(ip, &hint) && !new_module(ip)) {
		a->cut = 1;
		return _URC_END_OF_STACK;
	}
	if (tls.nframes >= HL_MAX_FRAMES)
		return _URC_END_OF_STACK;
	tls.scratch->frames[tls.nframes++] = ip;
	/*
	 * libgcc now finds this frame's caller, and reads the caller's code
	 * (its FDE, or the bytes of a signal trampoline): where this frame's
	 * rule is known, the caller's return address is checked first.
	 */
	uintptr_t bp = _Unwind_GetGR(ctx, DWARF_FP);
	uint32_t rule;
	if (!rule_of(ip, &rule)) /* libgcc alone knows: only rbp, if not within the stack, could lead outside */
		return bp - cfa > a->hi - cfa ? (a->cut = 1, _URC_END_OF_STACK) : _URC_NO_REASON;
	uint32_t kind = rule >> 24 & 3;
	if (kind == 3)
		return _URC_NO_REASON;
	uintptr_t next = (kind == 0 ? cfa : bp) + (rule & 0xffff), ra;
	uint32_t slot = RULE_RA_SLOT(rule, rule >> 16 & 0xff);
	if (next < cfa + 8 * (uintptr_t)slot || next > a->hi ||
	    ((ra = STRIP_PAC(((const uintptr_t *)next)[-(intptr_t)slot])) && !covered(ra, &hint) && !new_module(ra))) {
		a->cut = 1;
		return _URC_END_OF_STACK;
	}
	return _URC_NO_REASON;
}

/* 1 if it was cut. */
static int libgcc_walk(const struct stack_region *r)
{
	struct libgcc_walk a = {r->lo, r->hi, r->lo, 0};
	tls.nframes = 0, tls.scratch->trace_frames = 0; /* frames are not the kept walk's (walk_hash) */
	__atomic_fetch_add(&g.unwinding, 1, __ATOMIC_SEQ_CST);
	_Unwind_Backtrace(unwind_cb, &a);
	__atomic_fetch_sub(&g.unwinding, 1, __ATOMIC_RELEASE);
	return a.cut;
}

#ifndef HEAPLENS_ATTACH /* attached: no unwind tables, no stacks by ref (see stack_ref) */
/*
 * A hash of the taken stack: native frames, Python frames, the cut flag of
 * flags. splice (g.walk_splice, read once by the caller): the native frames
 * hashed from the outermost in, where a spliced walk reuses the kept walk's
 * (walk_hash); else from the innermost, as cheap as ever for a native
 * program. A process changes at most once, from 0 to 1: some stacks then
 * get a second ref.
 */
static inline __attribute__((always_inline)) uint64_t py_hash(uint64_t x)
{
	const uint64_t *py = tls.scratch->py;
	for (uint32_t i = 0, n = tls.npy; i < n; i++, py += 2) /* a frame's two words a turn */
		MIX(x, py[0]), MIX(x, py[1]);
	return x;
}

/* Out of stack_hash, which then needs no frame of its own (a native program's path). */
static __attribute__((noinline)) uint64_t spliced_hash(uint64_t x)
{
	MIX(x, walk_hash());
	return py_hash(x);
}

static uint64_t stack_hash(uint32_t flags, int splice)
{
	uint64_t x = (uint64_t)tls.nframes << 32 ^ tls.npy ^ (uint64_t)(flags & HL_ALLOC_TRUNCATED) << 63;
	if (splice)
		return spliced_hash(x);
	for (uint32_t i = 0; i < tls.nframes; i++)
		MIX(x, tls.scratch->frames[i]);
	return py_hash(x);
}
#endif

/*
 * libgcc needs several KiB of stack (its context and frame state, the
 * FDE search): it runs only on a thread's own stack, with this much left
 * below sp. A signal's alternate stack or a coroutine's may be a few KiB.
 */
#define LIBGCC_STACK (16u << 10)
/*
 * What a sample uses of the stack below its entry point's frame at most
 * (measured: TestSmallSignalStack), with a margin: with less left, the
 * sample is dropped, counted.
 */
#define SAMPLE_ROOM 1024u

/*
 * The native stack into tls.scratch->frames: with the rules of the agent's
 * unwind tables or, where none covers a frame yet, of its FDE (cfi.c); at
 * a frame whose rule neither gives, by libgcc where that is safe (on the
 * thread's own stack with room to spare), else cut there. Each read is
 * within the stack the sample runs on (stacks.c). In check mode, libgcc's
 * walk too, compared. 1: every frame is in a module the library has
 * scanned. *cut: the walk ended before the outermost frame.
 */
static int walk_native(struct hl_ring_header *h, const struct walk_start *from, const struct stack_region *on, int *cut)
{
	if (!on) {
		*cut = 1, tls.scratch->trace_frames = 0;
		return 0;
	}
	struct stack_region r = *on;
	int libgcc_ok = r.own && from->sp - r.lo >= LIBGCC_STACK;
	int end = table_walk(from, &r);
	if (end == WALK_DONE || end == WALK_UNSCANNED) {
		__atomic_fetch_add(&h->unwind_tables, 1, __ATOMIC_RELAXED);
#ifndef HEAPLENS_ATTACH
		if (g.unwind_check && libgcc_ok) {
			/* Compared by length and hash (no room for a copy of 4096 frames); tls.scratch->py is not walked yet, the same in both. */
			uint32_t n = tls.nframes;
			int splice = RELAXED(g.walk_splice);
			uint64_t sum = stack_hash(0, splice);
			libgcc_walk(&r);
			if (tls.nframes != n || stack_hash(0, splice) != sum)
				__atomic_fetch_add(&h->unwind_differed, 1, __ATOMIC_RELAXED);
			return 0;
		}
#endif
		return end == WALK_DONE;
	}
	if (end == WALK_CUT || !libgcc_ok) {
		*cut = 1; /* the frames found so far stay */
		return 0;
	}
	__atomic_fetch_add(&h->unwind_libgcc, 1, __ATOMIC_RELAXED);
	*cut = libgcc_walk(&r);
	return 0;
}

/*
 * Unwinds this thread into tls.scratch->frames and, unless the caller
 * already did, reads its Python frames into tls.scratch->py; then makes sure the agent can name
 * every pc (the caller sends the code objects: a stack sent by ref needs
 * none). Returns the ALLOC/ORIGIN flags; *python_thread: py_walk, run
 * here, found the thread's Python thread state.
 */
static uint32_t take_stack(struct hl_ring_header *h, int walked, const struct walk_start *from, const struct stack_region *on,
			   int *python_thread)
{
	tls.nframes = 0;
	int cut = 0, known = 0;
	if (likely(!RELAXED(g.no_unwind)))
		known = walk_native(h, from, on, &cut);
	else
		tls.scratch->trace_frames = 0; /* frames are not the kept walk's (walk_hash) */
	py_check_final();
	if (!walked)
		*python_thread = py_walk();
	uint32_t nf = tls.nframes, flags = 0;
	if (nf >= HL_MAX_FRAMES || cut)
		flags |= HL_ALLOC_TRUNCATED;
	if (RELAXED(g.unsent))
		resend_modules();
	uint32_t hint = 0;
	if (!known || nf >= HL_MAX_FRAMES) /* the tables' walk looked up every frame but one at the limit */
		for (uint32_t i = 0; i < nf; i++)
			if (!covered(tls.scratch->frames[i], &hint) && new_module(tls.scratch->frames[i])) {
				scan_modules();
				break;
			}
	return flags;
}

/* Writes the innermost nf native and npy Python frames of the taken stack at pos: native, then Python. */
static void put_frames(uint64_t pos, uint32_t nf, uint32_t npy)
{
	for (uint32_t i = 0; i < nf; i++)
		ring_put(pos + 8 * (uint64_t)i, tls.scratch->frames[i]);
	for (uint32_t i = 0; i < 2 * npy; i++)
		ring_put(pos + 8 * (uint64_t)(nf + i), tls.scratch->py[i]);
}

static void put_stack(uint64_t pos) { put_frames(pos, tls.nframes, tls.npy); }

static uint64_t stack_words(void) { return (uint64_t)tls.nframes + 2 * (uint64_t)tls.npy; }

#ifndef HEAPLENS_ATTACH /* attached, a session's stacks are always sent whole */
/*
 * Stacks sent once (HL_REC_STACK) and named by a ref in later ALLOCs: at
 * --rate 1 a few stacks come back millions of times, and a ref is one word
 * where a stack is dozens. A slot holds the stack's hash (its top 48 bits:
 * why that is enough, docs/ring-format.md, "A stack's identity"), the
 * slot's generation and bit 0 once its STACK record is committed, BUSY
 * while one is written, 0 if free. An ALLOC naming a slot is reserved
 * after that record, so the agent reads the stack first. A new stack that
 * finds no free slot among a few evicts one (an interpreter's start-up
 * alone has more distinct stacks than there are slots): the generation,
 * part of the ref, tells the agent which stack of that slot an ALLOC
 * means. Only at rates below 64 KiB: at sparser ones a new stack would
 * cost a STACK record and an ALLOC for little.
 */
#define STACK_BUSY 2ull
#define STACK_PROBES 8
#define STACK_KEY (~0xffffull)
#define STACK_REF_RATE (64u << 10)
static uint64_t stack_slot[HL_STACK_REFS];
static int stacks_used;

/*
 * The thread's last STACK record, in scratch->sent (scratch.h): the ring
 * it went to (0: none), its tid, n | p << 32, its ref, then the outermost
 * n (at most SENT_NATIVE) of its native frames and, at SENT_PY, the outermost p (at
 * most SENT_PYFRAMES) of its Python frames, outermost first, so that the
 * next record rewrites only the frames past those it shares; only outer
 * frames are ever compared. A new stack sends only the inner frames that differ
 * from them and names the record by tid and ref (HL_STACK_DELTA): the agent
 * keeps each thread's last STACK record. The same thread committed that
 * record before it reserves this one, so the agent reads it first; a
 * thread's scratch is its own, fresh (zero) when it starts and forgotten at
 * fork, so while it lives no other thread sends a STACK record with its tid.
 */

/* Sends the taken stack as a STACK record in slot i, which this thread holds (BUSY); old is what it held. */
static int64_t send_stack(struct hl_ring_header *h, uint32_t i, uint64_t key, uint64_t old, uint32_t flags)
{
	uint64_t gen = old ? (old >> 1 & 0x7fff) + 1 : 0, pos, ref = i | (gen & 0x7fff) << 14;
	uint64_t *base = tls.scratch->sent, *py = tls.scratch->py;
	const uintptr_t *fr = tls.scratch->frames;
	uint32_t nf = tls.nframes, npy = tls.npy, me = tid(), k = 0, j = 0;
	if (base[0] == (uint64_t)(uintptr_t)h && base[1] == me && me) {
		/* The outer frames both share, compared from the outermost. */
		uint32_t bn = (uint32_t)base[2], bp = (uint32_t)(base[2] >> 32);
		while (k < bn && k < nf && base[SENT_FRAMES + k] == fr[nf - 1 - k])
			k++;
		while (j < bp && j < npy && base[SENT_PY + 2 * j] == py[2 * (npy - 1 - j)] &&
		       base[SENT_PY + 2 * j + 1] == py[2 * (npy - 1 - j) + 1])
			j++;
	}
	/*
	 * Its code objects first, all of them (a ref skips that step), but for
	 * the j outermost Python frames: those are the base record's, each the
	 * same code pointer and identity, and that record was sent, in this
	 * ring, only once py_emit_codes said all its frames' code objects were.
	 */
	int codes = !npy || py_emit_codes(npy - j);
	uint32_t kept = k, kept_py = j; /* the base's frames already equal to this stack's */
	if (k + 2 * j < 2) /* the delta's word would cost as much */
		k = j = 0;
	uint64_t delta = k + j > 0;
	uint64_t len = 24 + 8 * delta + 8 * ((uint64_t)(nf - k) + 2 * (uint64_t)(npy - j));
	if (!codes || !ring_reserve(len, &pos)) {
		__atomic_store_n(&stack_slot[i], old, __ATOMIC_RELEASE);
		return -1; /* nothing sent: the thread's last STACK record stays its base */
	}
	uint64_t f = (flags & HL_ALLOC_TRUNCATED) | (delta ? HL_STACK_DELTA : 0);
	ring_put(pos + 8, ref);
	ring_put(pos + 16, me | f << 32 | (uint64_t)(npy - j) << 48);
	if (delta)
		ring_put(pos + 24, k | (uint64_t)j << 16 | base[3] << 32);
	put_frames(pos + 24 + 8 * delta, nf - k, npy - j);
	ring_commit(pos, hl_rec_header((uint32_t)len, HL_REC_STACK, 0, nf - k));
	__atomic_store_n(&stack_slot[i], key | (gen & 0x7fff) << 1 | 1, __ATOMIC_RELEASE);
	uint32_t bn = nf < SENT_NATIVE ? nf : SENT_NATIVE, bp = npy < SENT_PYFRAMES ? npy : SENT_PYFRAMES;
	base[0] = (uint64_t)(uintptr_t)h, base[1] = me, base[2] = bn | (uint64_t)bp << 32, base[3] = ref;
	for (uint32_t n = kept; n < bn; n++)
		base[SENT_FRAMES + n] = fr[nf - 1 - n];
	for (uint32_t n = kept_py; n < bp; n++)
		base[SENT_PY + 2 * n] = py[2 * (npy - 1 - n)], base[SENT_PY + 2 * n + 1] = py[2 * (npy - 1 - n) + 1];
	return (int64_t)ref;
}

/*
 * The ref of the taken stack, sending it first if it is new; -1: send it
 * whole. The slot this thread last found the stack in is tried first
 * (scratch->ref_hint): in a table filling up, a stack sits a few probes
 * from its home (py_churn: ~4 on average). Whichever slot holds its key
 * (and its committed record), the ref names the same stack, as the probes
 * would: two slots hold one key only where two threads sent it at once.
 */
static int64_t stack_ref(struct hl_ring_header *h, uint32_t flags)
{
	if (g.rate >= STACK_REF_RATE)
		return -1;
	uint64_t x = stack_hash(flags, RELAXED(g.walk_splice)), key = x & STACK_KEY;
	uint16_t *hint = &tls.scratch->ref_hint[(x >> 40) & (REF_HINTS - 1)];
	uint32_t home = (uint32_t)(x >> 16) & (HL_STACK_REFS - 1), i = *hint;
	uint64_t v = __atomic_load_n(&stack_slot[i], __ATOMIC_ACQUIRE);
	if ((v & 1) && (v & STACK_KEY) == key)
		return i | (int64_t)(v >> 1 & 0x7fff) << 14;
	SET_RELAXED(stacks_used, 1);
	i = home;
	for (int probe = 0; probe < STACK_PROBES; probe++, i = (i + 1) & (HL_STACK_REFS - 1)) {
		v = __atomic_load_n(&stack_slot[i], __ATOMIC_ACQUIRE);
		if ((v & 1) && (v & STACK_KEY) == key) {
			*hint = (uint16_t)i;
			return i | (int64_t)(v >> 1 & 0x7fff) << 14;
		}
		if (v == 0 && __atomic_compare_exchange_n(&stack_slot[i], &v, STACK_BUSY, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			return *hint = (uint16_t)i, send_stack(h, i, key, 0, flags);
	}
	/* No free slot: evict one of the probed, chosen by other bits of the hash. */
	i = (home + (uint32_t)(x >> 30) % STACK_PROBES) & (HL_STACK_REFS - 1);
	v = __atomic_load_n(&stack_slot[i], __ATOMIC_ACQUIRE);
	if (!(v & 1) || !__atomic_compare_exchange_n(&stack_slot[i], &v, STACK_BUSY, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return -1; /* another thread is writing it */
	return *hint = (uint16_t)i, send_stack(h, i, key, v, flags);
}

/* A fork child's agent knows none of the parent's refs. */
void stacks_atfork_child(void)
{
	if (stacks_used)
		memset(stack_slot, 0, sizeof stack_slot);
	if (tls.scratch) /* the forking thread's: a new tid, a new ring */
		tls.scratch->sent[0] = 0;
}
#else
static int64_t stack_ref(struct hl_ring_header *h, uint32_t flags)
{
	(void)h, (void)flags;
	return -1;
}
void stacks_atfork_child(void) {}
#endif

COLD void record_alloc(void *p, size_t n, int func, const struct walk_start *at)
{
	struct walk_start from = WALK_START();
	int saved = errno;
	int64_t now;
	struct countdown cd = pause_sampling(); /* what the unwinder allocates is not the program's */
	struct hl_ring_header *h = __atomic_load_n(&g.ring, __ATOMIC_ACQUIRE);
	if (!h) {
		__atomic_fetch_add(&g.early_drops, 1, __ATOMIC_RELAXED); /* sampled before the ring existed */
		goto out;
	}
	if (!scratch_get()) {
		count_drop(&h->dropped_alloc);
		goto out;
	}
	struct stack_region r;
	int on = stack_of(from.sp, &r);
	if (on && from.sp - r.lo < SAMPLE_ROOM) { /* a small signal stack, nearly used up: as bare, we must not overflow it */
		count_drop(&h->dropped_alloc);
		goto out;
	}
	if (at) /* a frame of the same chain of calls, above ours: on the same stack */
		from = *at;
	int python_thread = 0;
	uint32_t flags = take_stack(h, 0, &from, on ? &r : NULL, &python_thread);
	uint64_t token = 0;
	uint32_t method = (uint32_t)pool_origin(&token, python_thread);
	flags |= method << HL_ALLOC_METHOD_SHIFT;
	if (token)
		flags |= HL_ALLOC_ORIGIN;
	if (func >= HL_FUNC_PYMEM_MALLOC)
		flags |= HL_ALLOC_PYMEM;
	int64_t ref = stack_ref(h, flags);
	uint64_t body = token ? 48 : 40, npy = tls.npy, nf = tls.nframes;
	if (ref >= 0)
		flags |= HL_ALLOC_STACKREF, npy = 0, nf = 0;
	else if (tls.npy)
		py_emit_codes(tls.npy);
	uint64_t len = body + (ref >= 0 ? 8 : 8 * stack_words()), pos;
	if (!ring_reserve(len, &pos)) {
		count_drop(&h->dropped_alloc);
		goto out;
	}
	if (flags & HL_ALLOC_TRUNCATED)
		__atomic_fetch_add(tls.nframes >= HL_MAX_FRAMES ? &h->truncated_stacks : &h->walks_cut, 1, __ATOMIC_RELAXED);
	now = now_ns(CLOCK_MONOTONIC);
	ring_put(pos + 8, (uint64_t)now);
	ring_put(pos + 16, (uint64_t)(uintptr_t)p);
	ring_put(pos + 24, n);
	ring_put(pos + 32, (uint64_t)tid() | (uint64_t)flags << 32 | npy << 48);
	if (token)
		ring_put(pos + 40, token);
	if (ref >= 0)
		ring_put(pos + body, (uint64_t)ref);
	else
		put_stack(pos + body);
	ring_commit(pos, hl_rec_header((uint32_t)len, HL_REC_ALLOC, (uint32_t)func, (uint32_t)nf));
	heapstats_maybe(now, n);
out:
	resume_sampling(cd);
	errno = saved;
}

/*
 * The stack of an origin thread, for the pool work done under token: taken
 * by that thread itself, while it waits for the work (or when it submits).
 * walked: tls.scratch->py already holds this thread's Python frames.
 */
COLD void record_origin(uint64_t token, int walked)
{
	struct hl_ring_header *h = __atomic_load_n(&g.ring, __ATOMIC_ACQUIRE);
	if (!h)
		return;
	struct walk_start from = WALK_START();
	int saved = errno;
	struct countdown cd = pause_sampling();
	if (!scratch_get()) {
		__atomic_fetch_add(&h->dropped_other, 1, __ATOMIC_RELAXED);
		goto out;
	}
	struct stack_region r;
	int on = stack_of(from.sp, &r);
	if (on && from.sp - r.lo < SAMPLE_ROOM) {
		__atomic_fetch_add(&h->dropped_other, 1, __ATOMIC_RELAXED);
		goto out;
	}
	int python_thread = 0;
	uint32_t flags = take_stack(h, walked, &from, on ? &r : NULL, &python_thread);
	if (tls.npy)
		py_emit_codes(tls.npy);
	uint64_t len = 32 + 8 * stack_words(), pos;
	if (ring_reserve(len, &pos)) {
		ring_put(pos + 8, (uint64_t)now_ns(CLOCK_MONOTONIC));
		ring_put(pos + 16, token);
		ring_put(pos + 24, (uint64_t)tid() | (uint64_t)flags << 32 | (uint64_t)tls.npy << 48);
		put_stack(pos + 32);
		ring_commit(pos, hl_rec_header((uint32_t)len, HL_REC_ORIGIN, 0, tls.nframes));
	} else
		__atomic_fetch_add(&h->dropped_other, 1, __ATOMIC_RELAXED);
out:
	resume_sampling(cd);
	errno = saved;
}

/*
 * A FREE record of p, len bytes, reserved and written but for its header
 * (and a munmap's length), for the caller to commit: of a sampled block
 * (func 0), of a munmap of [p, p+n) (HL_FUNC_MUNMAP, whose sampled
 * mappings the agent frees), of any block in exact mode (free_hold).
 * Reserved before the memory is released, so that a reuse of the address
 * is recorded after it. -1 if the ring is full (the drop counted).
 */
static int64_t reserve_free(struct hl_ring_header *h, void *p, uint64_t len)
{
	uint64_t pos;
	if (!ring_reserve(len, &pos)) { /* which may set errno: the callers keep it */
		__atomic_fetch_add(&h->dropped_free, 1, __ATOMIC_RELAXED);
		return -1;
	}
	ring_put(pos + 8, (uint64_t)now_ns(CLOCK_MONOTONIC));
	ring_put(pos + 16, (uint64_t)(uintptr_t)p);
	ring_put(pos + 24, (uint64_t)tid());
	return (int64_t)pos;
}

COLD void record_unmap(void *p, size_t n)
{
	struct hl_ring_header *h = __atomic_load_n(&g.ring, __ATOMIC_ACQUIRE);
	int64_t pos;
	int saved = errno;
	if (h && g.active && (pos = reserve_free(h, p, 40)) >= 0) {
		ring_put((uint64_t)pos + 32, n);
		ring_commit((uint64_t)pos, hl_rec_header(40, HL_REC_FREE, HL_FUNC_MUNMAP, 0));
	}
	errno = saved;
}

COLD void record_free(void *p)
{
	int64_t pos = free_hold(p);
	if (pos >= 0)
		ring_commit((uint64_t)pos, hl_rec_header(32, HL_REC_FREE, 0, 0));
}

/*
 * Exact mode (EXACT): the FREE of any block p, which the agent pairs with
 * the block it knows at p, if any (docs/ring-format.md, "Exact mode"),
 * reserved and written but not committed: the caller commits it with
 * free_settle once the block is released, or withdraws it if it is not (a
 * realloc that failed). Reserved before the block is released, it comes
 * before any ALLOC of a block reusing the address. -1: nothing reserved
 * (no ring, no session, p NULL, or the ring full: the drop counted).
 */
COLD int64_t free_hold(void *p)
{
	struct hl_ring_header *h = __atomic_load_n(&g.ring, __ATOMIC_ACQUIRE);
	if (!p || !h || !RELAXED(g.active)) /* attached: no session (blocks sampled in an earlier one are freed) */
		return -1;
	int saved = errno;
	py_check_final();
	int64_t pos = reserve_free(h, p, 32);
	errno = saved;
	return pos;
}

/* Commits free_hold's record as the FREE of a block freed by the malloc family or a PyMem domain, or as a VOID record, which says nothing. */
COLD void free_settle(int64_t pos, int pymem, int freed)
{
	if (pos >= 0)
		ring_commit((uint64_t)pos, hl_rec_header(32, freed ? HL_REC_FREE : HL_REC_VOID,
							 freed ? (pymem ? HL_FUNC_FREE_PYMEM : HL_FUNC_FREE_ANY) : 0, 0));
}
