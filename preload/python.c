/*
 * Python support inside libheaplens.so: find the interpreter, read the
 * allocating thread's Python frames with raw loads (never a call into CPython
 * that could allocate, run the GC or release the GIL), send each code object
 * once, and wrap the PyMem domains so that objects served from pymalloc's
 * arenas are sampled too. Offsets: ../shared/reference/cpython-stacks.md,
 * verified on CPython 3.8–3.13; 3.13 reads its own _Py_DebugOffsets.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Per-version layout. -1 = absent in that version. */
struct pylayout {
	int ts_frame;    /* tstate -> frame (≤3.10), cframe (3.11/3.12), current_frame (3.13) */
	int cf_current;  /* cframe -> current_frame (3.11: 8, 3.12: 0) */
	int f_back, f_code, f_pos, f_owner, f_is_entry;
	int co_filename, co_name, co_table, co_firstlineno, co_firsttraceable, co_adaptive;
	int str_ascii, str_compact; /* sizeof(PyASCIIObject), sizeof(PyCompactUnicodeObject) */
	int rt_finalizing;
};

static const struct pylayout layouts[] = {
	/*        ts  cf back code pos own ent  file name table first trace adapt asc cmp fin */
	[8] = {24, -1, 24, 32, 104, -1, -1, 104, 112, 120, 40, -1, -1, 48, 72, 16},
	[9] = {24, -1, 24, 32, 104, -1, -1, 104, 112, 120, 40, -1, -1, 48, 72, 16},
	[10] = {24, -1, 24, 32, 96, -1, -1, 104, 112, 120, 40, -1, -1, 48, 72, 16},
	[11] = {56, 8, 48, 32, 56, 69, 68, 112, 128, 136, 72, 168, 184, 48, 72, 24},
	[12] = {56, 0, 8, 0, 56, 70, -1, 112, 128, 136, 68, 176, 192, 40, 56, 24},
	[13] = {72, -1, 8, 0, 56, 70, -1, 112, 128, 136, 68, 184, 200, 40, 56, 608},
};

/* PyMemAllocatorEx and the domains, as in CPython's public headers. */
typedef struct {
	void *ctx;
	void *(*malloc)(void *ctx, size_t size);
	void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
	void *(*realloc)(void *ctx, void *ptr, size_t new_size);
	void (*free)(void *ctx, void *ptr);
} pymem_allocator;
enum { PYMEM_DOMAIN_RAW, PYMEM_DOMAIN_MEM, PYMEM_DOMAIN_OBJ };
#define PYMALLOC_MAX 512 /* SMALL_REQUEST_THRESHOLD: larger requests go on to malloc, which samples them */

int py_pending;

static struct {
	int minor;
	struct pylayout L;
	char *runtime;
	void *code_type, *none;
	void *(*gilstate_tstate)(void);
	void *(*attached_tstate)(void); /* 3.12+: the thread's attached tstate, NULL when detached */
	int (*is_initialized)(void);
	int (*gil_check)(void);
	void (*get_allocator)(int, pymem_allocator *);
	void (*set_allocator)(int, pymem_allocator *);
	pymem_allocator prev[2]; /* MEM, OBJ */
	long attempts;
	uint32_t generation; /* bumped in a fork child: its ring has seen no code yet */
	uintptr_t text_lo, text_hi; /* the interpreter's code (libpython, or the executable) */
	void *eval; /* _PyEval_EvalFrameDefault, looked up once: a fork child must not call dlsym */
} py;

static void set_status(uint32_t version, uint32_t status)
{
	struct hl_ring_header *h = ring_now();
	if (h) {
		h->py_version = version;
		h->py_eval = (uint64_t)(uintptr_t)py.eval;
		__atomic_store_n(&h->py_status, status, __ATOMIC_RELEASE);
	}
}

/* 3.13: take the fields _Py_DebugOffsets publishes; the rest stay as verified. */
static int debug_offsets(void)
{
	const uint64_t *d = (const uint64_t *)py.runtime;
	if (memcmp(py.runtime, "xdebugpy", 8) != 0 || d[2] /* free-threaded */)
		return 0;
	struct pylayout *L = &py.L;
	L->rt_finalizing = (int)d[4];
	L->ts_frame = (int)d[23];
	L->f_back = (int)d[29];
	L->f_code = (int)d[30];
	L->f_pos = (int)d[31];
	L->f_owner = (int)d[33];
	L->co_filename = (int)d[35];
	L->co_table = (int)d[38];
	L->co_firstlineno = (int)d[39];
	L->co_adaptive = (int)d[43];
	L->co_name = (int)d[37]; /* qualname */
	L->str_ascii = (int)d[70];
	return 1;
}

void py_detect(void)
{
	if (py.minor || !ring_now())
		return;
	const char *env = getenv("HEAPLENS_PYTHON");
	const char *(*get_version)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "Py_GetVersion");
	if (!get_version)
		return;
	py.eval = dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
	if (env && env[0] == '0') {
		set_status(0, HL_PY_OFF);
		py.minor = -1;
		return;
	}
	uint32_t hex = 0;
	const unsigned long *pv = dlsym(RTLD_DEFAULT, "Py_Version"); /* 3.11+ */
	if (pv)
		hex = (uint32_t)*pv;
	else { /* "3.8.18 (default, ...)" */
		const char *v = get_version();
		unsigned a = 0, b = 0, c = 0;
		for (; *v >= '0' && *v <= '9'; v++) a = a * 10 + (unsigned)(*v - '0');
		if (*v == '.') for (v++; *v >= '0' && *v <= '9'; v++) b = b * 10 + (unsigned)(*v - '0');
		if (*v == '.') for (v++; *v >= '0' && *v <= '9'; v++) c = c * 10 + (unsigned)(*v - '0');
		hex = a << 24 | b << 16 | c << 8;
	}
	int major = (int)(hex >> 24), minor = (int)(hex >> 16 & 0xff);
	py.runtime = dlsym(RTLD_DEFAULT, "_PyRuntime");
	py.code_type = dlsym(RTLD_DEFAULT, "PyCode_Type");
	py.none = dlsym(RTLD_DEFAULT, "_Py_NoneStruct");
	py.gilstate_tstate = (void *(*)(void))dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
	py.attached_tstate = (void *(*)(void))dlsym(RTLD_DEFAULT, minor >= 13 ? "PyThreadState_GetUnchecked" : "_PyThreadState_GetCurrent");
	py.is_initialized = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsInitialized");
	py.gil_check = (int (*)(void))dlsym(RTLD_DEFAULT, "PyGILState_Check");
	py.get_allocator = (void (*)(int, pymem_allocator *))dlsym(RTLD_DEFAULT, "PyMem_GetAllocator");
	py.set_allocator = (void (*)(int, pymem_allocator *))dlsym(RTLD_DEFAULT, "PyMem_SetAllocator");
	if (major != 3 || minor < 8 || minor > 13 || !py.runtime || !py.code_type || !py.gilstate_tstate ||
	    (minor >= 12 && !py.attached_tstate)) {
		set_status(hex, HL_PY_UNSUPPORTED);
		py.minor = -1;
		return;
	}
	py.L = layouts[minor];
	if (minor == 13 && !debug_offsets()) {
		set_status(hex, HL_PY_UNSUPPORTED);
		py.minor = -1;
		return;
	}
	py.minor = minor;
	set_status(hex, HL_PY_ACTIVE);
	if (py.eval)
		module_range((uintptr_t)py.eval, &py.text_lo, &py.text_hi);
	const char *pm = getenv("PYTHONMALLOC"); /* without pymalloc every object already reaches malloc */
	if (py.is_initialized && py.gil_check && py.get_allocator && py.set_allocator && (!pm || !strcmp(pm, "pymalloc")))
		__atomic_store_n(&py_pending, 1, __ATOMIC_RELEASE);
}

/* ---- frames ---- */

#define LOAD(type, base, off) (*(const type *)((const char *)(base) + (off)))

static void *thread_state(void)
{
	if (py.minor >= 12) {
		void *t = py.attached_tstate();
		if (t)
			return t;
	}
	return py.gilstate_tstate(); /* the thread's own, held GIL or not */
}

static uint32_t identity(const char *code)
{
	uint64_t h = (uint64_t)(uintptr_t)LOAD(void *, code, py.L.co_filename) * 0x9e3779b97f4a7c15ull;
	h ^= (uint64_t)(uintptr_t)LOAD(void *, code, py.L.co_name) * 0xc2b2ae3d27d4eb4full;
	h ^= (uint64_t)(uintptr_t)LOAD(void *, code, py.L.co_table) * 0x165667b19e3779f9ull;
	h ^= (uint64_t)(uint32_t)LOAD(int, code, py.L.co_firstlineno);
	return (uint32_t)(h ^ h >> 32) | 1; /* never 0 */
}

static void push(const char *code, int64_t pos)
{
	if (tls.npy >= HL_MAX_PYFRAMES)
		return;
	uint64_t w = (uint64_t)identity(code) << 32 | (uint64_t)((pos + 1) & 0x7fffffff);
	tls.py[2 * tls.npy] = (uint64_t)(uintptr_t)code;
	tls.py[2 * tls.npy + 1] = w;
	tls.npy++;
}

static void end_activation(void)
{
	if (tls.npy)
		tls.py[2 * tls.npy - 1] |= HL_PY_ACTIVATION_END;
}

/*
 * Fills tls.py with the calling thread's Python frames, innermost first,
 * marking the outermost frame of each _PyEval_EvalFrameDefault activation so
 * that the agent can place them where their native eval frames sit. Only
 * this thread pushes and pops its frames, so the walk is race-free.
 */
void py_walk(void)
{
	tls.npy = 0;
	if (py.minor <= 0 || LOAD(uint64_t, py.runtime, py.L.rt_finalizing))
		return;
	const struct pylayout *L = &py.L;
	const char *ts = thread_state();
	if (!ts)
		return;
	const char *f = LOAD(const char *, ts, L->ts_frame);
	if (f && L->cf_current >= 0)
		f = LOAD(const char *, f, L->cf_current);
	for (int n = 0; f && n < 4 * HL_MAX_PYFRAMES; n++, f = LOAD(const char *, f, L->f_back)) {
		int owner = L->f_owner >= 0 ? LOAD(uint8_t, f, L->f_owner) : 0;
		if (py.minor >= 12 && owner >= 3) { /* the C-stack shim below each activation */
			end_activation();
			continue;
		}
		const char *code = LOAD(const char *, f, L->f_code);
		if (!code || code == py.none || LOAD(void *, code, 8) != py.code_type)
			continue;
		int64_t pos;
		if (py.minor <= 10)
			pos = LOAD(int, f, L->f_pos);
		else {
			const char *ip = LOAD(const char *, f, L->f_pos);
			pos = (ip - (code + L->co_adaptive)) / 2;
		}
		int entry = py.minor <= 10 || (py.minor == 11 && LOAD(uint8_t, f, L->f_is_entry));
		/* Frames pushed but not yet running (and 3.13's __init__ cleanup shim) are not shown. */
		if (py.minor >= 11 && owner != 1 && pos < LOAD(int, code, L->co_firsttraceable)) {
			if (entry)
				end_activation();
			continue;
		}
		push(code, pos);
		if (entry)
			end_activation();
	}
	end_activation();
}

/* A running interpreter, not finalizing: thread states can be asked for. */
static int py_running(void)
{
	return py.minor > 0 && py.is_initialized && py.is_initialized() && !LOAD(uint64_t, py.runtime, py.L.rt_finalizing);
}

int py_thread(void) { return py_running() && thread_state() != NULL; }

int py_foreign_thread(void) { return py_running() && thread_state() == NULL; }

int py_waiter(uintptr_t ra)
{
	return py.minor > 0 && ra - py.text_lo >= py.text_hi - py.text_lo && py_thread();
}

/* ---- code records: each code object once per ring ---- */

#define CODE_SLOTS 65536
static struct {
	uintptr_t code;
	uint32_t ident, generation;
} sent[CODE_SLOTS];

/* A str's PEP 393 data: kind 1/2/4 and its length in bytes. */
static const char *str_data(const char *s, uint32_t *kind, uint64_t *bytes)
{
	uint32_t state = LOAD(uint32_t, s, 32);
	int64_t len = LOAD(int64_t, s, 16);
	*kind = state >> 2 & 7;
	if (len < 0 || len > 4096 || (*kind != 1 && *kind != 2 && *kind != 4) || !(state & 0x20)) {
		*kind = 1, *bytes = 0; /* legacy or odd string: leave it out */
		return NULL;
	}
	*bytes = (uint64_t)len * *kind;
	return s + ((state & 0x40) ? py.L.str_ascii : py.L.str_compact);
}

static int emit_code(const char *code, uint32_t ident)
{
	uint32_t fk, qk;
	uint64_t fb, qb, tb, pos;
	const char *fd = str_data(LOAD(const char *, code, py.L.co_filename), &fk, &fb);
	const char *qd = str_data(LOAD(const char *, code, py.L.co_name), &qk, &qb);
	const char *table = LOAD(const char *, code, py.L.co_table);
	int64_t tlen = LOAD(int64_t, table, 16);
	tb = tlen > 0 && tlen < (1 << 20) ? (uint64_t)tlen : 0;
	uint64_t len = 48 + ((fb + 7) & ~7ull) + ((qb + 7) & ~7ull) + ((tb + 7) & ~7ull);
	struct hl_ring_header *h = ring_now();
	if (!h)
		return 0;
	if (!ring_reserve(len, &pos)) {
		__atomic_fetch_add(&h->dropped_other, 1, __ATOMIC_RELAXED);
		return 0;
	}
	ring_put(pos + 8, (uint64_t)(uintptr_t)code);
	ring_put(pos + 16, ident | (uint64_t)(uint32_t)LOAD(int, code, py.L.co_firstlineno) << 32);
	ring_put(pos + 24, fk | fb << 8);
	ring_put(pos + 32, qk | qb << 8);
	ring_put(pos + 40, tb);
	uint64_t at = pos + 48;
	ring_put_bytes(at, fd, fb), at += (fb + 7) & ~7ull;
	ring_put_bytes(at, qd, qb), at += (qb + 7) & ~7ull;
	ring_put_bytes(at, table + 32, tb);
	ring_commit(pos, hl_rec_header((uint32_t)len, HL_REC_CODE, (uint32_t)py.minor, 0));
	return 1;
}

/* Sends a CODE record for every frame's code object this ring has not seen. */
void py_emit_codes(void)
{
	for (uint32_t i = 0; i < tls.npy; i++) {
		uintptr_t code = (uintptr_t)tls.py[2 * i];
		uint32_t ident = (uint32_t)(tls.py[2 * i + 1] >> 32);
		uint32_t first = (uint32_t)((code >> 4) * 0x9e3779b1u) % CODE_SLOTS, slot = first, k;
		for (k = 0; k < 8; k++, slot = (slot + 1) % CODE_SLOTS) {
			if (sent[slot].generation != py.generation || !sent[slot].code)
				break; /* a free slot: not sent yet */
			if (__atomic_load_n(&sent[slot].code, __ATOMIC_ACQUIRE) == code && sent[slot].ident == ident)
				goto next; /* sent already */
		}
		if (k == 8)
			slot = first; /* no room to remember it: take the first slot */
		if (emit_code((const char *)code, ident)) {
			sent[slot].ident = ident, sent[slot].generation = py.generation;
			__atomic_store_n(&sent[slot].code, code, __ATOMIC_RELEASE);
		}
	next:;
	}
}

static int final_sent;

/*
 * Marks the moment the interpreter starts finalizing, once: CPython then
 * frees nearly every object, and "live at exit" means live before that.
 * Called from the sampled slow paths only, so it costs one load there.
 */
void py_check_final(void)
{
	if (py.minor <= 0 || final_sent || !LOAD(uint64_t, py.runtime, py.L.rt_finalizing) || !ring_now())
		return;
	final_sent = 1;
	emit_mark(HL_MARK_PY_FINALIZING, 0);
}

void py_atfork_child(void)
{
	final_sent = 0;
	py.generation++;
	if (py.minor > 0)
		set_status(ring_now() ? ring_now()->py_version : 0, HL_PY_ACTIVE);
}

/* ---- PyMem domains: objects from pymalloc's arenas never reach malloc ---- */

/*
 * Two modes. Direct, for the default allocator (both domains pymalloc with a
 * NULL context, as in every release build) at rates of DIRECT_RATE and more:
 * a sampled object is allocated through pymalloc's own path for large
 * requests, so it is an ordinary malloc block, tagged like the ones malloc's
 * hook samples (HDR bytes in front).
 * pymalloc hands every block outside its arenas to PyMem_RawFree and
 * PyMem_RawRealloc, that is to free and realloc, whose hooks see the tag; so
 * free needs no hook, and Python calls pymalloc's free as it would without
 * heaplens. A sampled object then takes at least PYMALLOC_MAX + 1 bytes,
 * which adds at most (PYMALLOC_MAX + 1 + HDR) / rate to the heap: under 1 %
 * from DIRECT_RATE on. Wrapping, for anything else (debug hooks under -X dev,
 * tracemalloc started first, low rates): every function is wrapped, and a
 * sampled block carries a PYHDR-byte header inside the previous allocator's
 * block, with p[-3] its requested size.
 */
#define PYHDR 32u
#define DIRECT_RATE (64u << 10)

static int direct;

/* Direct mode's request for n bytes and a header: more than pymalloc serves, so it takes it from malloc (and counts it as its own block). */
static size_t past_pymalloc(size_t n) { return n + HDR > PYMALLOC_MAX ? n + HDR : PYMALLOC_MAX + 1; }

static COLD void *pm_sampled(pymem_allocator *prev, size_t n, int zero, int func)
{
	size_t want = direct ? past_pymalloc(n) : n + PYHDR;
	struct countdown cd = pause_sampling();
	char *raw = zero ? prev->calloc(prev->ctx, 1, want) : prev->malloc(prev->ctx, want);
	resume_sampling(cd);
	if (!raw)
		return NULL;
	uint64_t *p = tag(raw, direct ? HDR : PYHDR);
	if (!direct)
		p[-3] = n;
	record_alloc(p, n, func);
	return p;
}

/*
 * The hooks run for every Python object. Their fast paths only count down
 * (or look at one word) and jump on to pymalloc; everything else sits in
 * COLD functions, so that the fast paths need no stack frame. Each is
 * written once, inlined into the wrapping hook (prev = ctx) and the direct
 * one (prev = pymalloc).
 */
static COLD void *pm_malloc_slow(pymem_allocator *prev, size_t n)
{
	if (sample_slow(n))
		return pm_sampled(prev, n, 0, HL_FUNC_PYMEM_MALLOC);
	return prev->malloc(prev->ctx, n);
}

static inline __attribute__((always_inline)) void *malloc_via(pymem_allocator *prev, size_t n)
{
	if (likely(n - 1 < PYMALLOC_MAX)) /* larger requests go on to malloc, whose hook counts them */
		COUNTDOWN_OR_GOTO(n, slow);
	return prev->malloc(prev->ctx, n);
slow:
	return pm_malloc_slow(prev, n);
}

static COLD void *pm_calloc_slow(pymem_allocator *prev, size_t k, size_t n)
{
	if (sample_slow(k * n))
		return pm_sampled(prev, k * n, 1, HL_FUNC_PYMEM_CALLOC);
	return prev->calloc(prev->ctx, k, n);
}

static inline __attribute__((always_inline)) void *calloc_via(pymem_allocator *prev, size_t k, size_t n)
{
	size_t t;
	if (likely(!__builtin_mul_overflow(k, n, &t) && t - 1 < PYMALLOC_MAX))
		COUNTDOWN_OR_GOTO(t, slow);
	return prev->calloc(prev->ctx, k, n);
slow:
	return pm_calloc_slow(prev, k, n);
}

static inline int is_sampled(void *p) { return p && ((uint64_t *)p)[-1] == real.secret && tagged(p); }

/* Wrapping mode only: direct mode leaves free to pymalloc. */
static COLD void pm_free_slow(pymem_allocator *prev, void *p)
{
	if (tagged(p)) {
		record_free(p);
		void *raw = raw_of(p);
		((uint64_t *)p)[-1] = 0;
		p = raw; /* a 16-byte-header block from malloc ends up in free() as an ordinary block */
	}
	prev->free(prev->ctx, p);
}

static void pm_free(void *ctx, void *p)
{
	pymem_allocator *prev = ctx;
	if (unlikely(p && ((uint64_t *)p)[-1] == real.secret)) {
		pm_free_slow(prev, p);
		return;
	}
	prev->free(prev->ctx, p);
}

/* The requested size of a sampled block: ours keep it in p[-3]; malloc's hook's blocks have their usable size. */
static size_t pm_size(void *p, uint64_t off)
{
	return off == PYHDR ? (size_t)((uint64_t *)p)[-3] : real.usable(raw_of(p)) - off;
}

/* Direct mode: see pm_realloc_slow. */
static void *realloc_direct(pymem_allocator *prev, void *p, size_t n, int counted)
{
	if (!counted) {
		if (is_sampled(p)) /* a malloc block: pymalloc passes it to realloc, whose hook counts and samples */
			return prev->realloc(prev->ctx, p, n);
		if (!(n - 1 < PYMALLOC_MAX && sample_now(n)))
			return prev->realloc(prev->ctx, p, n);
	} else if (!sample_slow(n))
		return prev->realloc(prev->ctx, p, n);
	/* Sampled: grow it past pymalloc's limit, so that it moves to a malloc block, and tag that. */
	struct countdown cd = pause_sampling();
	char *raw = prev->realloc(prev->ctx, p, past_pymalloc(n));
	resume_sampling(cd);
	if (!raw)
		return NULL;
	memmove(raw + HDR, raw, n);
	void *q = tag(raw, HDR);
	record_alloc(q, n, HL_FUNC_PYMEM_REALLOC);
	return q;
}

/*
 * p is NULL or its p[-1] looks like a tag (counted = 0), or the countdown
 * ran out on n (counted = 1: sample_slow decides).
 */
static COLD void *pm_realloc_slow(pymem_allocator *prev, void *p, size_t n, int counted)
{
	if (!p)
		return malloc_via(prev, n);
	if (direct)
		return realloc_direct(prev, p, n, counted);
	int old = is_sampled(p);
	int new = counted ? sample_slow(n) : n - 1 < PYMALLOC_MAX && sample_now(n);
	if (!old && !new)
		return prev->realloc(prev->ctx, p, n);
	uint64_t off = old ? off_of(p) : 0;
	if (old && n - 1 >= PYMALLOC_MAX) {
		/* Growing past pymalloc's limit: the new block comes from malloc, whose
		 * hook must see it (and sample it or not) like any large object. */
		size_t have = pm_size(p, off);
		void *q = prev->malloc(prev->ctx, n);
		if (!q)
			return NULL;
		memcpy(q, p, have < n ? have : n);
		pm_free(prev, p);
		return q;
	}
	if (old)
		record_free(p);
	char *src = old ? raw_of(p) : p;
	uint64_t noff = new ? PYHDR : 0;
	struct countdown cd = pause_sampling();
	char *raw = prev->realloc(prev->ctx, src, n + (noff > off ? noff : off));
	resume_sampling(cd);
	if (!raw) {
		if (old) /* the old block lives on */
			record_alloc(p, pm_size(p, off), HL_FUNC_PYMEM_REALLOC);
		return NULL;
	}
	if (old)
		((uint64_t *)(raw + off))[-1] = 0;
	if (noff != off) /* the data sits at raw + off; move it to raw + noff */
		memmove(raw + noff, raw + off, n);
	if (!new)
		return raw;
	uint64_t *q = tag(raw, noff);
	q[-3] = n;
	record_alloc(q, n, HL_FUNC_PYMEM_REALLOC);
	return q;
}

static inline __attribute__((always_inline)) void *realloc_via(pymem_allocator *prev, void *p, size_t n)
{
	if (unlikely(!p || ((uint64_t *)p)[-1] == real.secret))
		return pm_realloc_slow(prev, p, n, 0);
	if (likely(n - 1 < PYMALLOC_MAX))
		COUNTDOWN_OR_GOTO(n, slow);
	return prev->realloc(prev->ctx, p, n);
slow:
	return pm_realloc_slow(prev, p, n, 1);
}

static void *pm_malloc(void *ctx, size_t n) { return malloc_via(ctx, n); }
static void *pm_calloc(void *ctx, size_t k, size_t n) { return calloc_via(ctx, k, n); }
static void *pm_realloc(void *ctx, void *p, size_t n) { return realloc_via(ctx, p, n); }
static void *pmd_malloc(void *ctx, size_t n) { (void)ctx; return malloc_via(&py.prev[0], n); }
static void *pmd_calloc(void *ctx, size_t k, size_t n) { (void)ctx; return calloc_via(&py.prev[0], k, n); }
static void *pmd_realloc(void *ctx, void *p, size_t n) { (void)ctx; return realloc_via(&py.prev[0], p, n); }

static pymem_allocator ours[2];

/*
 * Wraps the MEM and OBJ domains once the interpreter is initialised and this
 * thread holds the GIL. Wrapping (calling the previous allocator) is allowed
 * at any time; blocks allocated before pass through to the previous
 * allocator's free. Checked at every allocation until done (see sample_slow),
 * so few early objects are missed; given up on after many tries for programs
 * that load libpython without ever starting it.
 */
void py_try_install(void)
{
	if (!__atomic_load_n(&py_pending, __ATOMIC_ACQUIRE))
		return;
	if (++py.attempts > 50000000) {
		py_pending = 0;
		return;
	}
	if (!py.is_initialized() || !py.gil_check() || LOAD(uint64_t, py.runtime, py.L.rt_finalizing))
		return;
	if (!__atomic_exchange_n(&py_pending, 0, __ATOMIC_ACQ_REL))
		return;
	int domains[2] = {PYMEM_DOMAIN_MEM, PYMEM_DOMAIN_OBJ};
	for (int i = 0; i < 2; i++)
		py.get_allocator(domains[i], &py.prev[i]);
	direct = hl_rate() >= DIRECT_RATE && !py.prev[0].ctx && !memcmp(&py.prev[0], &py.prev[1], sizeof py.prev[0]);
	for (int i = 0; i < 2; i++) {
		if (direct) /* the context stays pymalloc's (NULL), for its free */
			ours[i] = (pymem_allocator){NULL, pmd_malloc, pmd_calloc, pmd_realloc, py.prev[i].free};
		else
			ours[i] = (pymem_allocator){&py.prev[i], pm_malloc, pm_calloc, pm_realloc, pm_free};
		py.set_allocator(domains[i], &ours[i]);
	}
	struct hl_ring_header *h = ring_now();
	if (h)
		__atomic_store_n(&h->py_hooked, 1, __ATOMIC_RELEASE);
}
