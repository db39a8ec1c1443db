/*
 * Python support inside libheaplens.so: find the interpreter, read the
 * allocating thread's Python frames with raw loads (never a call into CPython
 * that could allocate, run the GC or release the GIL), send each code object
 * once, and hook the PyMem domains so that objects served from pymalloc's
 * arenas are sampled too, where the allocator puts them. Offsets (the
 * layouts table) are verified on CPython 3.8–3.13; 3.13 reads its own
 * _Py_DebugOffsets. See docs/python.md.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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

static void pymem_install(void);
static void pymem_check(void);


/*
 * The layouts, verified against each version's headers and by the tests on
 * real interpreters (docs/python.md). Fields a version lacks are -1.
 */
static const struct pylayout layouts[] = {
	[8] = {.ts_frame = 24, .f_back = 24, .f_code = 32, .f_pos = 104, .co_filename = 104,
	        .co_name = 112, .co_table = 120, .co_firstlineno = 40, .str_ascii = 48, .str_compact = 72,
	        .rt_finalizing = 16, .cf_current = -1, .f_owner = -1, .f_is_entry = -1,
	        .co_firsttraceable = -1, .co_adaptive = -1},
	[9] = {.ts_frame = 24, .f_back = 24, .f_code = 32, .f_pos = 104, .co_filename = 104,
	        .co_name = 112, .co_table = 120, .co_firstlineno = 40, .str_ascii = 48, .str_compact = 72,
	        .rt_finalizing = 16, .cf_current = -1, .f_owner = -1, .f_is_entry = -1,
	        .co_firsttraceable = -1, .co_adaptive = -1},
	[10] = {.ts_frame = 24, .f_back = 24, .f_code = 32, .f_pos = 96, .co_filename = 104,
	        .co_name = 112, .co_table = 120, .co_firstlineno = 40, .str_ascii = 48, .str_compact = 72,
	        .rt_finalizing = 16, .cf_current = -1, .f_owner = -1, .f_is_entry = -1,
	        .co_firsttraceable = -1, .co_adaptive = -1},
	[11] = {.ts_frame = 56, .cf_current = 8, .f_back = 48, .f_code = 32, .f_pos = 56, .f_owner = 69,
	        .f_is_entry = 68, .co_filename = 112, .co_name = 128, .co_table = 136,
	        .co_firstlineno = 72, .co_firsttraceable = 168, .co_adaptive = 184, .str_ascii = 48,
	        .str_compact = 72, .rt_finalizing = 24},
	[12] = {.ts_frame = 56, .cf_current = 0, .f_back = 8, .f_code = 0, .f_pos = 56, .f_owner = 70,
	        .co_filename = 112, .co_name = 128, .co_table = 136, .co_firstlineno = 68,
	        .co_firsttraceable = 176, .co_adaptive = 192, .str_ascii = 40, .str_compact = 56,
	        .rt_finalizing = 24, .f_is_entry = -1},
	[13] = {.ts_frame = 72, .f_back = 8, .f_code = 0, .f_pos = 56, .f_owner = 70, .co_filename = 112,
	        .co_name = 128, .co_table = 136, .co_firstlineno = 68, .co_firsttraceable = 184,
	        .co_adaptive = 200, .str_ascii = 40, .str_compact = 56, .rt_finalizing = 608,
	        .cf_current = -1, .f_is_entry = -1},
};

/* Object fields at the same place in every supported version (64-bit). */
enum {
	OB_TYPE = 8,        /* PyObject.ob_type */
	OB_SIZE = 16,       /* PyVarObject.ob_size; PyASCIIObject.length */
	STR_STATE = 32,     /* PyASCIIObject.state (a bit field word) */
	BYTES_SVAL = 32,    /* PyBytesObject.ob_sval */
};

/* PyMemAllocatorEx and the domains, as in CPython's public headers. */
typedef struct {
	void *ctx;
	void *(*malloc)(void *ctx, size_t size);
	void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
	void *(*realloc)(void *ctx, void *ptr, size_t new_size);
	void (*free)(void *ctx, void *ptr);
} pymem_allocator;

/* PyObjectArenaAllocator: where pymalloc gets its arenas (mmap, by default). */
typedef struct {
	void *ctx;
	void *(*alloc)(void *ctx, size_t size);
	void (*free)(void *ctx, void *ptr, size_t size);
} arena_allocator;
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
	void (*get_allocator)(int, pymem_allocator *);
	void (*set_allocator)(int, pymem_allocator *);
	void (*get_arena)(arena_allocator *);
	void (*set_arena)(arena_allocator *);
	uint32_t generation; /* bumped in a fork child: its ring has seen no code yet */
	uintptr_t text_lo, text_hi; /* the interpreter's code (libpython, or the executable) */
	uintptr_t eval;             /* _PyEval_EvalFrameDefault */
	uint32_t hex;               /* PY_VERSION_HEX */
} py;

/* No dlsym here: it also runs in a fork child, where the loader's lock may be held forever. */
static void set_status(uint32_t version, uint32_t status)
{
	struct hl_ring_header *h = ring_now();
	if (h) {
		__atomic_store_n(&h->py_version, version, __ATOMIC_RELAXED);
		__atomic_store_n(&h->py_eval, (uint64_t)py.eval, __ATOMIC_RELAXED);
		__atomic_store_n(&h->py_status, status, __ATOMIC_RELEASE);
	}
}

/*
 * 3.13: take the fields _Py_DebugOffsets publishes; the rest stay as
 * verified. Its words, by index, as Include/internal/pycore_debug_offsets.h
 * lays them out in 3.13: a cookie, the version, free_threaded, then
 * per-struct offsets.
 */
enum {
	DBG_FREE_THREADED = 2,
	DBG_RT_FINALIZING = 4,      /* runtime_state.finalizing */
	DBG_TS_CURRENT_FRAME = 23,  /* thread_state.current_frame */
	DBG_F_PREVIOUS = 29,        /* interpreter_frame.previous */
	DBG_F_EXECUTABLE = 30,      /* interpreter_frame.executable */
	DBG_F_INSTR_PTR = 31,       /* interpreter_frame.instr_ptr */
	DBG_F_OWNER = 33,           /* interpreter_frame.owner */
	DBG_CO_FILENAME = 35,       /* code_object.filename */
	DBG_CO_QUALNAME = 37,       /* code_object.qualname */
	DBG_CO_LINETABLE = 38,      /* code_object.linetable */
	DBG_CO_FIRSTLINENO = 39,    /* code_object.firstlineno */
	DBG_CO_CODE_ADAPTIVE = 43,  /* code_object.co_code_adaptive */
	DBG_STR_ASCII_SIZE = 70,    /* unicode_object.asciiobject_size */
};

static int debug_offsets(void)
{
	const uint64_t *d = (const uint64_t *)py.runtime;
	if (memcmp(py.runtime, "xdebugpy", 8) != 0 || d[DBG_FREE_THREADED])
		return 0;
	struct pylayout *L = &py.L;
	L->rt_finalizing = (int)d[DBG_RT_FINALIZING];
	L->ts_frame = (int)d[DBG_TS_CURRENT_FRAME];
	L->f_back = (int)d[DBG_F_PREVIOUS];
	L->f_code = (int)d[DBG_F_EXECUTABLE];
	L->f_pos = (int)d[DBG_F_INSTR_PTR];
	L->f_owner = (int)d[DBG_F_OWNER];
	L->co_filename = (int)d[DBG_CO_FILENAME];
	L->co_table = (int)d[DBG_CO_LINETABLE];
	L->co_firstlineno = (int)d[DBG_CO_FIRSTLINENO];
	L->co_adaptive = (int)d[DBG_CO_CODE_ADAPTIVE];
	L->co_name = (int)d[DBG_CO_QUALNAME];
	L->str_ascii = (int)d[DBG_STR_ASCII_SIZE];
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
	py.eval = (uintptr_t)dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
	py.runtime = dlsym(RTLD_DEFAULT, "_PyRuntime");
	py.code_type = dlsym(RTLD_DEFAULT, "PyCode_Type");
	py.none = dlsym(RTLD_DEFAULT, "_Py_NoneStruct");
	py.gilstate_tstate = (void *(*)(void))dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
	py.attached_tstate = (void *(*)(void))dlsym(RTLD_DEFAULT, minor >= 13 ? "PyThreadState_GetUnchecked" : "_PyThreadState_GetCurrent");
	py.is_initialized = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsInitialized");
	py.get_allocator = (void (*)(int, pymem_allocator *))dlsym(RTLD_DEFAULT, "PyMem_GetAllocator");
	py.set_allocator = (void (*)(int, pymem_allocator *))dlsym(RTLD_DEFAULT, "PyMem_SetAllocator");
	py.get_arena = (void (*)(arena_allocator *))dlsym(RTLD_DEFAULT, "PyObject_GetArenaAllocator");
	py.set_arena = (void (*)(arena_allocator *))dlsym(RTLD_DEFAULT, "PyObject_SetArenaAllocator");
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
	py.minor = minor, py.hex = hex;
	set_status(hex, HL_PY_ACTIVE);
	if (py.eval)
		module_range(py.eval, &py.text_lo, &py.text_hi);
	if (py.is_initialized)
		pymem_install();
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
		if (!code || code == py.none || LOAD(void *, code, OB_TYPE) != py.code_type)
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
int py_running(void)
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
	uint64_t tag; /* identity | generation << 32 */
} sent[CODE_SLOTS];

/* A str's PEP 393 data: kind 1/2/4 and its length in bytes. */
static const char *str_data(const char *s, uint32_t *kind, uint64_t *bytes)
{
	uint32_t state = LOAD(uint32_t, s, STR_STATE);
	int64_t len = LOAD(int64_t, s, OB_SIZE);
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
	int64_t tlen = LOAD(int64_t, table, OB_SIZE);
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
	ring_put_bytes(at, table + BYTES_SVAL, tb);
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
			uintptr_t c = __atomic_load_n(&sent[slot].code, __ATOMIC_ACQUIRE);
			uint64_t t = __atomic_load_n(&sent[slot].tag, __ATOMIC_RELAXED);
			if (t >> 32 != py.generation || !c)
				break; /* a free slot: not sent yet */
			if (c == code && (uint32_t)t == ident)
				goto next; /* sent already (a torn pair from two writers only sends it again) */
		}
		if (k == 8)
			slot = first; /* no room to remember it: take the first slot */
		if (emit_code((const char *)code, ident)) {
			__atomic_store_n(&sent[slot].tag, ident | (uint64_t)py.generation << 32, __ATOMIC_RELAXED);
			__atomic_store_n(&sent[slot].code, code, __ATOMIC_RELEASE);
		}
	next:;
	}
}

static int final_sent;

/*
 * Marks the moment the interpreter starts finalizing, once: CPython then
 * frees nearly every object, and "live at exit" means live before that.
 * Called from the sampled slow paths only, so it costs one load there; so
 * does the check that the PyMem hooks are still in place.
 */
void py_check_final(void)
{
	if (py.minor <= 0)
		return;
	pymem_check();
	if (__atomic_load_n(&final_sent, __ATOMIC_RELAXED) || !LOAD(uint64_t, py.runtime, py.L.rt_finalizing) || !ring_now())
		return;
	if (!__atomic_exchange_n(&final_sent, 1, __ATOMIC_RELAXED))
		emit_mark(HL_MARK_PY_FINALIZING, 0);
}

/* ---- PyMem domains: objects from pymalloc's arenas never reach malloc ---- */

/*
 * A sampled object is allocated by the previous allocator exactly as an
 * unsampled one (same request, same address, same layout: anything else
 * changes how long the interpreter keeps it, e.g. in the type attribute
 * cache, which keys on a name's address). Its address goes into a side
 * table, a lock-free open-addressed set (word: address | size << 48; 0 empty,
 * 1 deleted). In front of the table sits a counting filter of saturating
 * byte counters indexed by another hash of the address, so that freeing an
 * unsampled object costs a multiply, a shift, one byte load and a branch
 * before the previous allocator's free. Requests over PYMALLOC_MAX pass
 * through uncounted: pymalloc takes them from malloc, whose hook samples
 * them (and so the blocks that grow past it by realloc).
 */
#define FILTER_BITS 14
#define PROBES 64
static uint8_t filter[1u << FILTER_BITS];
static uint64_t *table;
static uint32_t table_bits;

static inline uint32_t filter_at(const void *p)
{
	return (uint32_t)(((uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull) >> (64 - FILTER_BITS));
}

static inline int maybe_sampled(const void *p)
{
	return __atomic_load_n(&filter[filter_at(p)], __ATOMIC_RELAXED) != 0;
}

/* Adds d (±1) to p's counter; 255 sticks, as it may stand for more. */
static void filter_add(const void *p, int d)
{
	uint8_t *c = &filter[filter_at(p)], v = __atomic_load_n(c, __ATOMIC_RELAXED);
	do
		if (v == 255 || (v == 0 && d < 0))
			return;
	while (!__atomic_compare_exchange_n(c, &v, (uint8_t)(v + d), 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

static inline uint64_t table_at(const void *p, uint32_t k)
{
	uint64_t h = ((uint64_t)(uintptr_t)p >> 4) * 0xc2b2ae3d27d4eb4full;
	return ((h >> (64 - table_bits)) + k) & ((1ull << table_bits) - 1);
}

#define ADDR(e) ((e) & ((1ull << 48) - 1))

/* Puts p (n bytes) in the set; 0 when its probe window is full. */
static int table_put(void *p, size_t n)
{
	uint64_t want = (uint64_t)(uintptr_t)p | (uint64_t)n << 48;
	if (!table || (uint64_t)(uintptr_t)p >> 48 || n > 0xffff)
		return 0;
	for (int tries = 0; tries < 4; tries++) {
		int64_t free_at = -1;
		for (uint32_t k = 0; k < PROBES; k++) {
			uint64_t *s = &table[table_at(p, k)];
			uint64_t e = __atomic_load_n(s, __ATOMIC_ACQUIRE);
			if (e > 1 && ADDR(e) == (uint64_t)(uintptr_t)p) { /* its free went unseen: take the slot over */
				__atomic_store_n(s, want, __ATOMIC_RELEASE);
				return 1;
			}
			if (e <= 1 && free_at < 0)
				free_at = (int64_t)table_at(p, k);
			if (!e)
				break;
		}
		if (free_at < 0)
			return 0;
		uint64_t old = __atomic_load_n(&table[free_at], __ATOMIC_ACQUIRE);
		if (old <= 1 && __atomic_compare_exchange_n(&table[free_at], &old, want, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			filter_add(p, 1);
			return 1;
		}
	}
	return 0;
}

/* Takes p out of the set: its size, or -1 if it is not there. */
static int64_t table_take(void *p)
{
	if (!table)
		return -1;
	for (uint32_t k = 0; k < PROBES; k++) {
		uint64_t *s = &table[table_at(p, k)];
		uint64_t e = __atomic_load_n(s, __ATOMIC_ACQUIRE);
		if (!e)
			return -1;
		if (e > 1 && ADDR(e) == (uint64_t)(uintptr_t)p) {
			/* Nothing probes past an empty slot: when the next one is empty, so may this one be. */
			uint64_t next = __atomic_load_n(&table[table_at(p, k + 1)], __ATOMIC_RELAXED);
			if (!__atomic_compare_exchange_n(s, &e, next ? 1 : 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				return -1;
			filter_add(p, -1);
			return (int64_t)(e >> 48);
		}
	}
	return -1;
}

/*
 * Room for twice the samples of 4 GiB of live small objects, 2^14 to 2^22
 * slots (128 KiB at the default rate; 32 MiB at --rate 1, where every
 * object is a sample). Untouched pages cost nothing.
 */
static int table_init(void)
{
	uint64_t want = 2 * ((4ull << 30) / (hl_rate() ? hl_rate() : 1));
	table_bits = 14;
	while (table_bits < 22 && (1ull << table_bits) < want)
		table_bits++;
	tls.busy++; /* our table, not the program's mapping */
	void *m = mmap(NULL, 8ull << table_bits, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	tls.busy--;
	if (m == MAP_FAILED)
		return 0;
	table = m;
	return 1;
}

/* Records a sampled object, or counts it dropped when the table has no room. */
static COLD void keep(void *p, size_t n, int func)
{
	if (table_put(p, n)) {
		record_alloc(p, n, func);
		return;
	}
	struct hl_ring_header *h = ring_now();
	if (h)
		__atomic_fetch_add(&h->dropped_alloc, 1, __ATOMIC_RELAXED);
}

/*
 * The hooks run for every Python object. Their fast paths only count down
 * (or look at one filter byte) and jump on to the previous allocator;
 * everything else sits in COLD functions, so that they need no stack frame.
 * A sampled object is allocated outside any busy section, as an unsampled
 * one is: what pymalloc asks of malloc meanwhile is sampled there as usual.
 */
static COLD void *pm_malloc_slow(pymem_allocator *prev, size_t n)
{
	int sampled = sample_slow(n); /* first: what the allocator asks of malloc is counted after */
	void *p = prev->malloc(prev->ctx, n);
	if (p && sampled)
		keep(p, n, HL_FUNC_PYMEM_MALLOC);
	return p;
}

static void *pm_malloc(void *ctx, size_t n)
{
	pymem_allocator *prev = ctx;
	if (likely(n - 1 < PYMALLOC_MAX)) /* larger requests go on to malloc, whose hook counts them */
		COUNTDOWN_OR_GOTO(n, slow);
	return prev->malloc(prev->ctx, n);
slow:
	return pm_malloc_slow(prev, n);
}

static COLD void *pm_calloc_slow(pymem_allocator *prev, size_t k, size_t n)
{
	int sampled = sample_slow(k * n);
	void *p = prev->calloc(prev->ctx, k, n);
	if (p && sampled)
		keep(p, k * n, HL_FUNC_PYMEM_CALLOC);
	return p;
}

static void *pm_calloc(void *ctx, size_t k, size_t n)
{
	pymem_allocator *prev = ctx;
	size_t t;
	if (likely(!__builtin_mul_overflow(k, n, &t) && t - 1 < PYMALLOC_MAX))
		COUNTDOWN_OR_GOTO(t, slow);
	return prev->calloc(prev->ctx, k, n);
slow:
	return pm_calloc_slow(prev, k, n);
}

/* p's filter counter is set: it may be sampled. Its FREE goes out before the block is released. */
static COLD void pm_free_slow(pymem_allocator *prev, void *p)
{
	if (p && table_take(p) >= 0)
		record_free(p);
	prev->free(prev->ctx, p);
}

static void pm_free(void *ctx, void *p)
{
	pymem_allocator *prev = ctx;
	if (unlikely(maybe_sampled(p))) {
		pm_free_slow(prev, p);
		return;
	}
	prev->free(prev->ctx, p);
}

/*
 * p may be sampled (counted = 0: n not counted down yet), or the countdown
 * ran out on n (counted = 1: sample_slow decides). A realloc of a sampled
 * block is a FREE of it, then an ALLOC if the new block is sampled.
 */
static COLD void *pm_realloc_slow(pymem_allocator *prev, void *p, size_t n, int counted)
{
	int64_t old = p ? table_take(p) : -1;
	int new = counted ? sample_slow(n) : n - 1 < PYMALLOC_MAX && sample_now(n);
	if (old >= 0)
		record_free(p);
	void *q = prev->realloc(prev->ctx, p, n);
	if (!q) {
		if (old >= 0) /* the old block lives on */
			keep(p, (size_t)old, HL_FUNC_PYMEM_REALLOC);
		return NULL;
	}
	if (new)
		keep(q, n, HL_FUNC_PYMEM_REALLOC);
	return q;
}

static void *pm_realloc(void *ctx, void *p, size_t n)
{
	pymem_allocator *prev = ctx;
	if (unlikely(maybe_sampled(p)))
		return pm_realloc_slow(prev, p, n, 0);
	if (likely(n - 1 < PYMALLOC_MAX))
		COUNTDOWN_OR_GOTO(n, slow);
	return prev->realloc(prev->ctx, p, n);
slow:
	return pm_realloc_slow(prev, p, n, 1);
}

/*
 * Installing. PyMem_SetAllocator is called once, from the library's
 * constructor: before main, single-threaded, outside every hook, when the
 * MEM and OBJ domains still hold pymalloc's static defaults (an allocator
 * may be set before Py_Initialize). The constructor then finds the two
 * domain slots (the PyMemAllocatorEx structs in the interpreter's writable
 * data that now hold our functions). Pre-initialisation replaces every
 * domain when an allocator is asked for (-X dev, PYTHONDEVMODE,
 * PYTHONMALLOC): that is seen later, from a hook's slow path on a thread
 * that holds the GIL (every MEM and OBJ call needs it, so nothing reads the
 * slots meanwhile), and the new allocator is wrapped by writing the slot.
 *
 * What the hooks call in CPython, all lock-free and allocation-free:
 * Py_IsInitialized (reads a flag), PyGILState_GetThisThreadState (a TSS
 * get: pthread_getspecific), _PyThreadState_UncheckedGet (≤ 3.11: an atomic
 * load), _PyThreadState_GetCurrent / PyThreadState_GetUnchecked (3.12+: a
 * thread-local read). Everything else is a raw load or store.
 */
#define NCTX 4 /* wraps per domain; a context once published is never changed */
enum { LINK_OTHER, LINK_OURS, LINK_PYMALLOC, LINK_MALLOC };

static struct {
	uintptr_t *slot[2];         /* MEM, OBJ: 5 words each, in the interpreter's data */
	uintptr_t rw[4][2];         /* the interpreter's writable segments */
	int nrw;
	pymem_allocator pymalloc, raw; /* the defaults, as found at start-up */
	pymem_allocator ctx[2][NCTX]; /* the allocators we wrap */
	int nctx[2];
	uint64_t state;             /* HL_PYMEM_* published */
	void *(*unchecked_tstate)(void);
} pm;

static int rw_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	uintptr_t at = (uintptr_t)arg;
	int found = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && at - (info->dlpi_addr + ph->p_vaddr) < ph->p_memsz)
			found = 1;
	}
	if (!found)
		return 0;
	for (int i = 0; i < info->dlpi_phnum && pm.nrw < 4; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W)) {
			uintptr_t lo = (info->dlpi_addr + ph->p_vaddr) & ~(uintptr_t)7;
			pm.rw[pm.nrw][0] = lo, pm.rw[pm.nrw++][1] = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
		}
	}
	return 1;
}

static int in_rw(uintptr_t a, size_t n)
{
	for (int i = 0; i < pm.nrw; i++)
		if (a >= pm.rw[i][0] && a + n <= pm.rw[i][1] && !(a & 7))
			return 1;
	return 0;
}

static uintptr_t word(const uintptr_t *w) { return __atomic_load_n(w, __ATOMIC_RELAXED); }

/*
 * What an allocator (5 words at a) ends in: ours, pymalloc's, or malloc
 * (PYTHONMALLOC=malloc). Wrappers that CPython installs keep the wrapped
 * allocator in its data: tracemalloc at ctx, the debug hooks at ctx + 8.
 */
static int link_of(const uintptr_t *a, int depth)
{
	uintptr_t m = word(&a[1]);
	if (m == (uintptr_t)pm_malloc)
		return LINK_OURS;
	if (m == (uintptr_t)pm.pymalloc.malloc)
		return LINK_PYMALLOC;
	if (m == (uintptr_t)pm.raw.malloc)
		return LINK_MALLOC;
	for (uintptr_t off = 0; depth > 0 && off <= 8; off += 8) {
		uintptr_t c = word(&a[0]) + off;
		int r = in_rw(c, 5 * sizeof(uintptr_t)) ? link_of((const uintptr_t *)c, depth - 1) : LINK_OTHER;
		if (r != LINK_OTHER)
			return r;
	}
	return LINK_OTHER;
}

static void publish(uint64_t state)
{
	struct hl_ring_header *h = ring_now();
	__atomic_store_n(&pm.state, state, __ATOMIC_RELAXED);
	if (h)
		__atomic_store_n(&h->py_hooked, state, __ATOMIC_RELEASE);
}

/* This thread holds the GIL (lock-free reads only). */
static int gil_held(void)
{
	if (py.minor >= 12)
		return py.attached_tstate() != NULL;
	void *t = pm.unchecked_tstate ? pm.unchecked_tstate() : NULL;
	return t && t == py.gilstate_tstate();
}

/*
 * Makes sure both domains run through our hooks, wrapping what replaced
 * them. Only with the GIL held, on a running interpreter; the flag only
 * matters where two threads hold GILs at once (3.12+'s subinterpreters
 * with their own): the second one skips, it never waits.
 */
static void settle(void)
{
	static int settling;
	if (__atomic_exchange_n(&settling, 1, __ATOMIC_ACQUIRE))
		return;
	uint64_t state = HL_PYMEM_HOOKED;
	for (int i = 0; i < 2; i++) {
		uintptr_t *s = pm.slot[i];
		int link = link_of(s, 3);
		if (link == LINK_OURS)
			continue;
		if (link == LINK_MALLOC) { /* every object reaches malloc, whose hook samples it */
			state = state > HL_PYMEM_MALLOC ? state : HL_PYMEM_MALLOC;
			continue;
		}
		if (pm.nctx[i] >= NCTX) {
			state = HL_PYMEM_LOST;
			continue;
		}
		pymem_allocator *prev = &pm.ctx[i][pm.nctx[i]++];
		memcpy(prev, s, sizeof *prev); /* under the GIL: nobody writes it now */
		uintptr_t ours[5] = {(uintptr_t)prev, (uintptr_t)pm_malloc, (uintptr_t)pm_calloc, (uintptr_t)pm_realloc, (uintptr_t)pm_free};
		for (int k = 4; k >= 0; k--)
			__atomic_store_n(&s[k], ours[k], __ATOMIC_RELAXED);
		if (link == LINK_OTHER && state < HL_PYMEM_FOREIGN)
			state = HL_PYMEM_FOREIGN;
	}
	if (state != __atomic_load_n(&pm.state, __ATOMIC_RELAXED))
		publish(state);
	__atomic_store_n(&settling, 0, __ATOMIC_RELEASE);
}

/*
 * pymalloc's arenas hold the objects the PyMem hooks sample one by one:
 * their mmaps must not be sampled again as mappings (maps.c). The arena
 * allocator runs with the sampler paused. Wrapped once, from the
 * constructor: a later wrapper may call ours, and wrapping it in turn would
 * loop.
 */
static arena_allocator arena_prev;

static void *arena_alloc(void *ctx, size_t n)
{
	(void)ctx;
	tls.busy++;
	void *p = arena_prev.alloc(arena_prev.ctx, n);
	tls.busy--;
	return p;
}

static void arena_free(void *ctx, void *p, size_t n)
{
	(void)ctx;
	tls.busy++;
	arena_prev.free(arena_prev.ctx, p, n);
	tls.busy--;
}

static void arena_wrap(void)
{
	if (!py.get_arena || !py.set_arena)
		return;
	py.get_arena(&arena_prev);
	if (!arena_prev.alloc || !arena_prev.free)
		return;
	arena_allocator ours = {NULL, arena_alloc, arena_free};
	py.set_arena(&ours);
}

/* Constructor only: installs the hooks with PyMem_SetAllocator and finds the slots. */
static void pymem_install(void)
{
	if (!py.get_allocator || !py.set_allocator || !table_init())
		return publish(HL_PYMEM_LOST);
	pm.unchecked_tstate = (void *(*)(void))dlsym(RTLD_DEFAULT, "_PyThreadState_UncheckedGet");
	if (py.minor <= 11 && !pm.unchecked_tstate)
		return publish(HL_PYMEM_LOST);
	dl_iterate_phdr(rw_cb, (void *)(uintptr_t)py.set_allocator);
	py.get_allocator(PYMEM_DOMAIN_RAW, &pm.raw);
	py.get_allocator(PYMEM_DOMAIN_MEM, &pm.pymalloc);
	int domains[2] = {PYMEM_DOMAIN_MEM, PYMEM_DOMAIN_OBJ};
	for (int i = 0; i < 2; i++) {
		pymem_allocator *prev = &pm.ctx[i][pm.nctx[i]++];
		py.get_allocator(domains[i], prev);
		pymem_allocator ours = {prev, pm_malloc, pm_calloc, pm_realloc, pm_free};
		py.set_allocator(domains[i], &ours);
		for (int r = 0; r < pm.nrw && !pm.slot[i]; r++)
			for (uintptr_t *w = (uintptr_t *)pm.rw[r][0]; w + 5 <= (uintptr_t *)pm.rw[r][1]; w++)
				if (w[1] == (uintptr_t)pm_malloc && w[0] == (uintptr_t)prev && w[4] == (uintptr_t)pm_free) {
					pm.slot[i] = w;
					break;
				}
	}
	if (!pm.slot[0] || !pm.slot[1]) { /* they could never be checked or repaired: take the hooks out */
		for (int i = 0; i < 2; i++)
			py.set_allocator(domains[i], &pm.ctx[i][0]);
		return publish(HL_PYMEM_LOST);
	}
	arena_wrap();
	publish(HL_PYMEM_HOOKED);
	__atomic_store_n(&py_pending, 1, __ATOMIC_RELEASE);
}

/*
 * While py_pending, every allocation comes here (see sample_slow) until
 * the interpreter runs and this thread holds its GIL: then the domains are
 * settled once. Given up on after many tries, for programs that load
 * libpython without ever starting it.
 */
void py_try_install(void)
{
	static long attempts;
	if (!__atomic_load_n(&py_pending, __ATOMIC_ACQUIRE))
		return;
	if (__atomic_add_fetch(&attempts, 1, __ATOMIC_RELAXED) > 50000000) {
		__atomic_store_n(&py_pending, 0, __ATOMIC_RELEASE);
		return;
	}
	if (!py_running() || !gil_held())
		return;
	settle();
	__atomic_store_n(&py_pending, 0, __ATOMIC_RELEASE);
}

/* At each record: a domain that no longer runs through our hooks (tracemalloc stopped over them) is wrapped again. */
static void pymem_check(void)
{
	if (__atomic_load_n(&py_pending, __ATOMIC_ACQUIRE) || !pm.slot[0] || !pm.slot[1] || !py_running() || !gil_held())
		return;
	if (word(&pm.slot[0][1]) != (uintptr_t)pm_malloc || word(&pm.slot[1][1]) != (uintptr_t)pm_malloc)
		settle();
}

void py_atfork_child(void)
{
	__atomic_store_n(&final_sent, 0, __ATOMIC_RELAXED);
	py.generation++;
	if (py.minor > 0) {
		set_status(py.hex, HL_PY_ACTIVE);
		uint64_t state = __atomic_load_n(&pm.state, __ATOMIC_RELAXED);
		if (state)
			publish(state);
	}
}
