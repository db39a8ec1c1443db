/*
 * Python support inside libheaplens.so: find the interpreter, read the
 * allocating thread's Python frames with raw loads (never a call into CPython
 * that could allocate, run the GC or release the GIL), send each code object
 * once (the PyMem hooks are in pymem.c). Offsets (the
 * layouts table, pylayout.c) are verified on CPython 3.8–3.15; 3.13 and
 * later are read from the interpreter's own _Py_DebugOffsets. See
 * docs/python.md.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "modules.h"
#include "pylayout.h"
#include "python.h"
#include "resident.h"
#include "ring.h"
#include "scratch.h"

/* Object fields at the same place in every supported version (64-bit). */
enum {
	OB_TYPE = 8,        /* PyObject.ob_type */
	OB_SIZE = 16,       /* PyVarObject.ob_size; PyASCIIObject.length */
	STR_STATE = 32,     /* PyASCIIObject.state (a bit field word) */
	BYTES_SVAL = 32,    /* PyBytesObject.ob_sval */
};


static struct {
	int minor;
	struct pylayout L;
	char *runtime;
	void *code_type, *none;
	void *(*gilstate_tstate)(void);
	void *(*attached_tstate)(void); /* 3.12+: the thread's attached tstate, NULL when detached */
	int (*is_initialized)(void);
	void *(*unchecked_tstate)(void); /* ≤ 3.11: the thread state holding the GIL */
	uint32_t generation; /* bumped in a fork child: its ring has seen no code yet */
	uintptr_t text_lo, text_hi; /* the interpreter's code (libpython, or the executable) */
	uintptr_t eval;             /* _PyEval_EvalFrameDefault */
	uint32_t hex;               /* PY_VERSION_HEX */
} py;

/* No dlsym here: it also runs in a fork child, where the loader's lock may be held forever. */
static uint32_t status_version, status_now; /* for a ring made later (py_new_ring) */

static void set_status(uint32_t version, uint32_t status)
{
	status_version = version, status_now = status;
	struct hl_ring_header *h = ring_now();
	if (h) {
		__atomic_store_n(&h->py_version, version, __ATOMIC_RELAXED);
		__atomic_store_n(&h->py_eval, (uint64_t)py.eval, __ATOMIC_RELAXED);
		__atomic_store_n(&h->py_status, status, __ATOMIC_RELEASE);
	}
}

void py_detect(void)
{
#ifndef HEAPLENS_ATTACH /* attached, at load: before any ring */
	if (!ring_now())
		return;
#endif
	if (py.minor)
		return;
#ifdef HEAPLENS_ATTACH
	const char *env = NULL; /* the program's environment, not ours: sessions say (g.no_python) */
#else
	const char *env = getenv("HEAPLENS_PYTHON");
#endif
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
	py.unchecked_tstate = (void *(*)(void))dlsym(RTLD_DEFAULT, "_PyThreadState_UncheckedGet");
	if (major != 3 || minor < PY_MINOR_MIN || minor > PY_MINOR_MAX || !py.runtime || !py.code_type ||
	    !py.gilstate_tstate || (minor >= 12 && !py.attached_tstate)) {
		set_status(hex, HL_PY_UNSUPPORTED);
		py.minor = -1;
		return;
	}
	py.L = py_layouts[minor];
	/* 3.13+: the interpreter's own offsets win over the table, which only checks them (the tests). */
	int dbg = minor >= 13 ? py_debug_layout(py.runtime, hex, &py.L) : PYDBG_OK;
	if (dbg != PYDBG_OK) {
		set_status(hex, dbg == PYDBG_FREE_THREADED ? HL_PY_FREE_THREADED : HL_PY_BAD_OFFSETS);
		py.minor = -1;
		return;
	}
	py.minor = minor, py.hex = hex;
	set_status(hex, HL_PY_ACTIVE);
	SET_RELAXED(g.walk_splice, 1); /* deep native stacks, mostly alike from one sample to the next (unwind.c) */
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

static inline __attribute__((always_inline)) uint32_t identity(const char *code, const struct pylayout *L)
{
	uint64_t h = (uint64_t)(uintptr_t)LOAD(void *, code, L->co_filename) * 0x9e3779b97f4a7c15ull;
	h ^= (uint64_t)(uintptr_t)LOAD(void *, code, L->co_name) * 0xc2b2ae3d27d4eb4full;
	h ^= (uint64_t)(uintptr_t)LOAD(void *, code, L->co_table) * 0x165667b19e3779f9ull;
	h ^= (uint64_t)(uint32_t)LOAD(int, code, L->co_firstlineno);
	return (uint32_t)(h ^ h >> 32) | 1; /* never 0 */
}

/* The layouts' families: frame objects (≤ 3.10), 3.11's interpreter frames, and 3.12's on (a shim frame per activation). */
enum { FAM_OBJECTS, FAM_311, FAM_312 };

/*
 * The walk of py_walk for one family (fam is a constant: compiled once
 * each), so that the loop tests no version and keeps the offsets in
 * registers: ~30 instructions a frame where one loop for all took ~50.
 * Returns the number of frames written to out.
 */
static inline __attribute__((always_inline)) uint32_t walk_frames(const char *f, const int fam, uint64_t *restrict out)
{
	const struct pylayout *L = &py.L; /* not a copy: ~16 instructions a walk */
	const void *none = py.none, *code_type = py.code_type;
	uint32_t n = 0;
#define END_ACTIVATION() (n ? (void)(out[2 * n - 1] |= HL_PY_ACTIVATION_END) : (void)0)
	for (int k = 0; f && k < 4 * HL_MAX_PYFRAMES; k++, f = LOAD(const char *, f, L->f_back)) {
		int owner = fam != FAM_OBJECTS ? LOAD(uint8_t, f, L->f_owner) : 0;
		if (fam == FAM_312 && owner >= 3) { /* the C-stack shim below each activation */
			END_ACTIVATION();
			continue;
		}
		uintptr_t cw = LOAD(uintptr_t, f, L->f_code);
		const char *code = (const char *)(fam == FAM_312 ? cw & ~(uintptr_t)L->f_code_tag : cw);
		if (!code || code == none || LOAD(void *, code, OB_TYPE) != code_type)
			continue;
		int64_t pos;
		if (fam == FAM_OBJECTS)
			pos = LOAD(int, f, L->f_pos);
		else
			pos = (LOAD(const char *, f, L->f_pos) - (code + L->co_adaptive)) / 2;
		int entry = fam == FAM_OBJECTS || (fam == FAM_311 && LOAD(uint8_t, f, L->f_is_entry));
		/* Frames pushed but not yet running (and 3.13's __init__ cleanup shim) are not shown. */
		if (fam != FAM_OBJECTS && owner != 1 && pos < LOAD(int, code, L->co_firsttraceable)) {
			if (entry)
				END_ACTIVATION();
			continue;
		}
		if (n < HL_MAX_PYFRAMES) {
			out[2 * n] = (uint64_t)(uintptr_t)code;
			out[2 * n + 1] = (uint64_t)identity(code, L) << 32 | (uint64_t)((pos + 1) & 0x7fffffff);
			n++;
		}
		if (entry)
			END_ACTIVATION();
	}
	END_ACTIVATION();
#undef END_ACTIVATION
	return n;
}

/*
 * Fills tls.scratch->py with the calling thread's Python frames, innermost first,
 * marking the outermost frame of each _PyEval_EvalFrameDefault activation so
 * that the agent can place them where their native eval frames sit. Only
 * this thread pushes and pops its frames, so the walk is race-free.
 * Returns whether the thread has a thread state (then it is no foreign thread).
 */
int py_walk(void)
{
	tls.npy = 0;
	if (!tls.scratch || py.minor <= 0 || RELAXED(g.no_python) || LOAD(uint64_t, py.runtime, py.L.rt_finalizing))
		return 0;
	const char *ts = thread_state();
	if (!ts)
		return 0;
	const char *f = LOAD(const char *, ts, py.L.ts_frame);
	if (f && py.L.cf_current >= 0)
		f = LOAD(const char *, f, py.L.cf_current);
	uint64_t *out = tls.scratch->py;
	tls.npy = py.minor <= 10 ? walk_frames(f, FAM_OBJECTS, out) : py.minor == 11 ? walk_frames(f, FAM_311, out)
										     : walk_frames(f, FAM_312, out);
	return 1;
}

/* A running interpreter, not finalizing: thread states can be asked for. */
int py_running(void)
{
	return py.minor > 0 && py.is_initialized && py.is_initialized() && !LOAD(uint64_t, py.runtime, py.L.rt_finalizing);
}

int py_thread(void) { return py_running() && thread_state() != NULL; }

int py_foreign_thread(void) { return py_running() && thread_state() == NULL; }

/* This thread holds the GIL (lock-free reads only). */
/* Whether py_gil_held can tell: ≤ 3.11 needs _PyThreadState_UncheckedGet. */
int py_gil_checkable(void) { return py.minor >= 12 || py.unchecked_tstate; }

int py_gil_held(void)
{
	if (py.minor >= 12)
		return py.attached_tstate() != NULL;
	void *t = py.unchecked_tstate ? py.unchecked_tstate() : NULL;
	return t && t == py.gilstate_tstate();
}

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

/* Sends a CODE record for the code object of each of the innermost n frames that this ring has not seen. */
int py_emit_codes(uint32_t n)
{
	int all = 1;
	for (uint32_t i = 0; i < n; i++) {
		uintptr_t code = (uintptr_t)tls.scratch->py[2 * i];
		uint32_t ident = (uint32_t)(tls.scratch->py[2 * i + 1] >> 32);
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
		} else
			all = 0;
	next:;
	}
	return all;
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
	if (!__atomic_exchange_n(&final_sent, 1, __ATOMIC_RELAXED)) {
		emit_mark(HL_MARK_PY_FINALIZING, 0);
		resident_report(); /* the program's blocks before shutdown frees them */
	}
}

/* Whether this ring has the finalizing mark (and the residency read then). */
int py_final_sent(void) { return __atomic_load_n(&final_sent, __ATOMIC_RELAXED); }

void py_new_ring(void)
{
	__atomic_store_n(&final_sent, 0, __ATOMIC_RELAXED);
	py.generation++;
	if (py.minor > 0) {
		set_status(py.hex, RELAXED(g.no_python) ? HL_PY_OFF : HL_PY_ACTIVE);
		pymem_atfork_child();
	} else if (status_now)
		set_status(status_version, status_now);
}
