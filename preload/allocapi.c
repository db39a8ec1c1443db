/*
 * Allocation APIs beside malloc: jemalloc's mallocx family (and Rust's
 * _rjem_-prefixed builds), mimalloc's mi_*, gperftools' tc_*, and the C++
 * operators new and delete where malloc's own allocator defines them.
 * Sampled as the malloc family is (same countdown, same set of sampled
 * blocks: a block from mallocx may be freed by free, and the reverse).
 *
 * The library does not export these names: a program that probes for
 * jemalloc with a weak symbol or dlsym must find what it finds bare.
 * Instead each module that imports one has its GOT entry pointed at the
 * wrapper here, at start and as modules are scanned (scan_modules;
 * attached, at load), the way `heaplens attach` routes the malloc family
 * (internal/gotpatch), done here by the library itself since run mode has
 * no agent inside the process. An
 * entry holding another definition than the one found at start (a module
 * bound to an allocator of its own) is left alone. docs/allocators.md.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>
#include <sys/mman.h>

#include "allocapi.h"
#include "blockset.h"
#include "boot.h"
#include "core.h"
#include "sampler.h"

/* The definitions below ours: found once at start (allocapi_resolve), where dlsym may run. */
#define R(name) real_##name

static size_t mul_or_zero(size_t k, size_t n)
{
	size_t t;
	return __builtin_mul_overflow(k, n, &t) ? 0 : t; /* the call fails: nothing to sample */
}

/* A free through any of these: the block leaves the set (its FREE first: the address may be reused at once). */
static COLD int forget(void *p)
{
	if (in_boot(p))
		return 0;
	if (EXACT())
		record_free_any(p, 0);
	else if (blockset_take(&sampled_blocks, p) >= 0)
		record_free(p);
	return 1;
}
#define FORGET(p) (likely(!blockset_maybe(&sampled_blocks, p)) || forget(p))

/*
 * The old block's FREE before a resize: -1 if it was not sampled, else its
 * size (capped at 0xffff); in exact mode, the FREE held (free_hold), which
 * resized settles.
 */
static int64_t resize_take(void *p)
{
	if (EXACT())
		return free_hold(p);
	if (!p || likely(!blockset_maybe(&sampled_blocks, p)))
		return -1;
	int64_t old = blockset_take(&sampled_blocks, p);
	if (old >= 0)
		record_free(p);
	return old;
}

static void *resized(void *p, void *q, size_t n, int64_t old, int func)
{
	if (EXACT())
		free_settle(old, 0, q || !n);
	if (!q && p && n) { /* failed: the old block lives on */
		if (old >= 0 && !EXACT())
			blockset_keep(&sampled_blocks, p, (size_t)old, func, NULL);
		return q;
	}
	return unlikely(sample_now(n)) ? kept_block(q, n, func) : q;
}

/*
 * The wrappers, by shape: name, return type, parameters, arguments, the
 * size sampled (ALLOC_AFTER's after the call: q is what it returned), the
 * HL_FUNC_* recorded. FREE's size is unused. ALLOC and FREE end in a jump
 * to the allocator's function when nothing is sampled, as malloc's hooks.
 */
#define SHAPE_ALLOC(name, ret, params, args, size, func)                          \
	static COLD ret s_##name params                                            \
	{                                                                          \
		if (!sample_slow(size))                                            \
			return RELAXED(R(name)) args;                              \
		return kept_block(RELAXED(R(name)) args, size, func);              \
	}                                                                          \
	static ret w_##name params                                                 \
	{                                                                          \
		COUNTDOWN_OR_GOTO(size, slow);                                     \
		return RELAXED(R(name)) args;                                      \
	slow:                                                                      \
		return s_##name args;                                              \
	}
/* The size known only from the block (a string's copy). */
#define SHAPE_ALLOC_AFTER(name, ret, params, args, size, func)                    \
	static ret w_##name params                                                 \
	{                                                                          \
		void *q = RELAXED(R(name)) args;                                   \
		return unlikely(sample_now(size)) ? kept_block(q, size, func) : q; \
	}
#define SHAPE_FREE(name, ret, params, args, size, func) \
	static void w_##name params                      \
	{                                                \
		if (FORGET(p))                           \
			RELAXED(R(name)) args;                    \
	}
#define SHAPE_RESIZE(name, ret, params, args, size, func)     \
	static ret w_##name params                             \
	{                                                      \
		int64_t old = resize_take(p);                  \
		return resized(p, RELAXED(R(name)) args, size, old, func); \
	}
#define SHAPE_POSIX(name, ret, params, args, size, func)                 \
	static ret w_##name params                                        \
	{                                                                 \
		int e = RELAXED(R(name)) args;                                     \
		if (!e && unlikely(sample_now(size)))                     \
			kept_block(*r, size, func);                       \
		return e;                                                 \
	}
#define SHAPE_XALLOC(name, ret, params, args, size, func) \
	static ret w_##name params { return in_place(p, n, RELAXED(R(name)) args, func); }

/*
 * jemalloc's xallocx resizes in place and returns the block's usable size:
 * below n when it could not reach n, the block then as it was.
 */
static size_t in_place(void *p, size_t n, size_t got, int func)
{
	if (got < n)
		return got;
	int64_t old = resize_take(p);
	if (EXACT())
		free_settle(old, 0, 1);
	if (unlikely(sample_now(n)))
		kept_block(p, n, func);
	return got;
}

#define VP void *
#define JE_API(X, P)                                                                                        \
	X(ALLOC, P##mallocx, VP, (size_t n, int f), (n, f), n, HL_FUNC_MALLOC)                                \
	X(RESIZE, P##rallocx, VP, (void *p, size_t n, int f), (p, n, f), n, HL_FUNC_REALLOC)                  \
	X(XALLOC, P##xallocx, size_t, (void *p, size_t n, size_t e, int f), (p, n, e, f), n, HL_FUNC_REALLOC)  \
	X(FREE, P##sdallocx, void, (void *p, size_t n, int f), (p, n, f), 0, 0)                               \
	X(FREE, P##dallocx, void, (void *p, int f), (p, f), 0, 0)
/* A prefixed jemalloc (Rust's tikv-jemalloc-sys) does not replace malloc: its malloc family too. */
#define RJEM_MALLOC(X)                                                                                    \
	X(ALLOC, _rjem_malloc, VP, (size_t n), (n), n, HL_FUNC_MALLOC)                                      \
	X(ALLOC, _rjem_calloc, VP, (size_t k, size_t n), (k, n), mul_or_zero(k, n), HL_FUNC_CALLOC)         \
	X(RESIZE, _rjem_realloc, VP, (void *p, size_t n), (p, n), n, HL_FUNC_REALLOC)                       \
	X(FREE, _rjem_free, void, (void *p), (p), 0, 0)                                                    \
	X(POSIX, _rjem_posix_memalign, int, (void **r, size_t a, size_t n), (r, a, n), n, HL_FUNC_POSIX_MEMALIGN) \
	X(ALLOC, _rjem_aligned_alloc, VP, (size_t a, size_t n), (a, n), n, HL_FUNC_ALIGNED_ALLOC)
#define MI_API(X)                                                                                          \
	X(ALLOC, mi_malloc, VP, (size_t n), (n), n, HL_FUNC_MALLOC)                                          \
	X(ALLOC, mi_zalloc, VP, (size_t n), (n), n, HL_FUNC_CALLOC)                                          \
	X(ALLOC, mi_malloc_small, VP, (size_t n), (n), n, HL_FUNC_MALLOC)                                    \
	X(ALLOC, mi_zalloc_small, VP, (size_t n), (n), n, HL_FUNC_CALLOC)                                    \
	X(ALLOC, mi_new, VP, (size_t n), (n), n, HL_FUNC_MALLOC)                                             \
	X(ALLOC, mi_new_nothrow, VP, (size_t n), (n), n, HL_FUNC_MALLOC)                                     \
	X(ALLOC, mi_calloc, VP, (size_t k, size_t n), (k, n), mul_or_zero(k, n), HL_FUNC_CALLOC)             \
	X(ALLOC, mi_mallocn, VP, (size_t k, size_t n), (k, n), mul_or_zero(k, n), HL_FUNC_MALLOC)            \
	X(ALLOC, mi_new_n, VP, (size_t k, size_t n), (k, n), mul_or_zero(k, n), HL_FUNC_MALLOC)              \
	X(ALLOC, mi_malloc_aligned, VP, (size_t n, size_t a), (n, a), n, HL_FUNC_MEMALIGN)                   \
	X(ALLOC, mi_zalloc_aligned, VP, (size_t n, size_t a), (n, a), n, HL_FUNC_MEMALIGN)                   \
	X(ALLOC, mi_calloc_aligned, VP, (size_t k, size_t n, size_t a), (k, n, a), mul_or_zero(k, n), HL_FUNC_MEMALIGN) \
	X(ALLOC, mi_new_aligned, VP, (size_t n, size_t a), (n, a), n, HL_FUNC_MEMALIGN)                      \
	X(ALLOC, mi_aligned_alloc, VP, (size_t a, size_t n), (a, n), n, HL_FUNC_ALIGNED_ALLOC)               \
	X(ALLOC, mi_memalign, VP, (size_t a, size_t n), (a, n), n, HL_FUNC_MEMALIGN)                         \
	X(POSIX, mi_posix_memalign, int, (void **r, size_t a, size_t n), (r, a, n), n, HL_FUNC_POSIX_MEMALIGN) \
	X(ALLOC_AFTER, mi_strdup, VP, (const char *s), (s), q ? strlen(q) + 1 : 0, HL_FUNC_MALLOC)                 \
	X(ALLOC_AFTER, mi_strndup, VP, (const char *s, size_t n), (s, n), q ? strlen(q) + 1 : 0, HL_FUNC_MALLOC)   \
	X(RESIZE, mi_realloc, VP, (void *p, size_t n), (p, n), n, HL_FUNC_REALLOC)                           \
	X(RESIZE, mi_rezalloc, VP, (void *p, size_t n), (p, n), n, HL_FUNC_REALLOC)                          \
	X(RESIZE, mi_realloc_aligned, VP, (void *p, size_t n, size_t a), (p, n, a), n, HL_FUNC_REALLOC)      \
	X(RESIZE, mi_reallocn, VP, (void *p, size_t k, size_t n), (p, k, n), mul_or_zero(k, n), HL_FUNC_REALLOC) \
	X(RESIZE, mi_recalloc, VP, (void *p, size_t k, size_t n), (p, k, n), mul_or_zero(k, n), HL_FUNC_REALLOC) \
	X(FREE, mi_free, void, (void *p), (p), 0, 0)                                                        \
	X(FREE, mi_free_size, void, (void *p, size_t n), (p, n), 0, 0)                                      \
	X(FREE, mi_free_aligned, void, (void *p, size_t a), (p, a), 0, 0)                                   \
	X(FREE, mi_free_size_aligned, void, (void *p, size_t n, size_t a), (p, n, a), 0, 0)
#define TC_API(X)                                                                                          \
	X(ALLOC, tc_malloc, VP, (size_t n), (n), n, HL_FUNC_MALLOC)                                          \
	X(ALLOC, tc_malloc_skip_new_handler, VP, (size_t n), (n), n, HL_FUNC_MALLOC)                         \
	X(ALLOC, tc_new, VP, (size_t n), (n), n, HL_FUNC_MALLOC)                                             \
	X(ALLOC, tc_newarray, VP, (size_t n), (n), n, HL_FUNC_MALLOC)                                        \
	X(ALLOC, tc_new_nothrow, VP, (size_t n, const void *t), (n, t), n, HL_FUNC_MALLOC)                  \
	X(ALLOC, tc_newarray_nothrow, VP, (size_t n, const void *t), (n, t), n, HL_FUNC_MALLOC)             \
	X(ALLOC, tc_new_aligned, VP, (size_t n, size_t a), (n, a), n, HL_FUNC_MEMALIGN)                      \
	X(ALLOC, tc_newarray_aligned, VP, (size_t n, size_t a), (n, a), n, HL_FUNC_MEMALIGN)                 \
	X(ALLOC, tc_calloc, VP, (size_t k, size_t n), (k, n), mul_or_zero(k, n), HL_FUNC_CALLOC)             \
	X(ALLOC, tc_memalign, VP, (size_t a, size_t n), (a, n), n, HL_FUNC_MEMALIGN)                         \
	X(ALLOC, tc_valloc, VP, (size_t n), (n), n, HL_FUNC_VALLOC)                                          \
	X(POSIX, tc_posix_memalign, int, (void **r, size_t a, size_t n), (r, a, n), n, HL_FUNC_POSIX_MEMALIGN) \
	X(RESIZE, tc_realloc, VP, (void *p, size_t n), (p, n), n, HL_FUNC_REALLOC)                           \
	X(FREE, tc_free, void, (void *p), (p), 0, 0)                                                        \
	X(FREE, tc_cfree, void, (void *p), (p), 0, 0)                                                       \
	X(FREE, tc_free_sized, void, (void *p, size_t n), (p, n), 0, 0)                                     \
	X(FREE, tc_delete, void, (void *p), (p), 0, 0)                                                      \
	X(FREE, tc_deletearray, void, (void *p), (p), 0, 0)                                                 \
	X(FREE, tc_delete_nothrow, void, (void *p, const void *t), (p, t), 0, 0)                            \
	X(FREE, tc_deletearray_nothrow, void, (void *p, const void *t), (p, t), 0, 0)                       \
	X(FREE, tc_delete_sized, void, (void *p, size_t n), (p, n), 0, 0)                                   \
	X(FREE, tc_deletearray_sized, void, (void *p, size_t n), (p, n), 0, 0)                              \
	X(FREE, tc_delete_aligned, void, (void *p, size_t a), (p, a), 0, 0)                                 \
	X(FREE, tc_deletearray_aligned, void, (void *p, size_t a), (p, a), 0, 0)                            \
	X(FREE, tc_delete_sized_aligned, void, (void *p, size_t n, size_t a), (p, n, a), 0, 0)              \
	X(FREE, tc_deletearray_sized_aligned, void, (void *p, size_t n, size_t a), (p, n, a), 0, 0)
/*
 * C++'s operators, hooked only where malloc's allocator defines them
 * (jemalloc, tcmalloc, mimalloc do): libstdc++'s call malloc, already seen.
 */
#define NT const void *t /* const std::nothrow_t & */
#define CXX_API(X)                                                                                         \
	X(ALLOC, _Znwm, VP, (size_t n), (n), n, HL_FUNC_MALLOC)                                              \
	X(ALLOC, _Znam, VP, (size_t n), (n), n, HL_FUNC_MALLOC)                                              \
	X(ALLOC, _ZnwmRKSt9nothrow_t, VP, (size_t n, NT), (n, t), n, HL_FUNC_MALLOC)                        \
	X(ALLOC, _ZnamRKSt9nothrow_t, VP, (size_t n, NT), (n, t), n, HL_FUNC_MALLOC)                        \
	X(ALLOC, _ZnwmSt11align_val_t, VP, (size_t n, size_t a), (n, a), n, HL_FUNC_MEMALIGN)                \
	X(ALLOC, _ZnamSt11align_val_t, VP, (size_t n, size_t a), (n, a), n, HL_FUNC_MEMALIGN)                \
	X(ALLOC, _ZnwmSt11align_val_tRKSt9nothrow_t, VP, (size_t n, size_t a, NT), (n, a, t), n, HL_FUNC_MEMALIGN) \
	X(ALLOC, _ZnamSt11align_val_tRKSt9nothrow_t, VP, (size_t n, size_t a, NT), (n, a, t), n, HL_FUNC_MEMALIGN) \
	X(FREE, _ZdlPv, void, (void *p), (p), 0, 0)                                                         \
	X(FREE, _ZdaPv, void, (void *p), (p), 0, 0)                                                         \
	X(FREE, _ZdlPvm, void, (void *p, size_t n), (p, n), 0, 0)                                           \
	X(FREE, _ZdaPvm, void, (void *p, size_t n), (p, n), 0, 0)                                           \
	X(FREE, _ZdlPvRKSt9nothrow_t, void, (void *p, NT), (p, t), 0, 0)                                    \
	X(FREE, _ZdaPvRKSt9nothrow_t, void, (void *p, NT), (p, t), 0, 0)                                    \
	X(FREE, _ZdlPvSt11align_val_t, void, (void *p, size_t a), (p, a), 0, 0)                             \
	X(FREE, _ZdaPvSt11align_val_t, void, (void *p, size_t a), (p, a), 0, 0)                             \
	X(FREE, _ZdlPvmSt11align_val_t, void, (void *p, size_t n, size_t a), (p, n, a), 0, 0)               \
	X(FREE, _ZdaPvmSt11align_val_t, void, (void *p, size_t n, size_t a), (p, n, a), 0, 0)               \
	X(FREE, _ZdlPvSt11align_val_tRKSt9nothrow_t, void, (void *p, size_t a, NT), (p, a, t), 0, 0)        \
	X(FREE, _ZdaPvSt11align_val_tRKSt9nothrow_t, void, (void *p, size_t a, NT), (p, a, t), 0, 0)
#define ALL_API(X) JE_API(X, ) JE_API(X, _rjem_) RJEM_MALLOC(X) MI_API(X) TC_API(X) CXX_API(X)

#define DECLARE(shape, name, ret, params, args, size, func) static ret(*R(name)) params;
ALL_API(DECLARE)
#undef DECLARE
#define DEFINE(shape, name, ret, params, args, size, func) SHAPE_##shape(name, ret, params, args, size, func)
ALL_API(DEFINE)
#undef DEFINE

struct api {
	const char *name;
	void *wrap;
	void **real;
	int cxx; /* C++'s: only where malloc's own allocator (not glibc) defines it */
};
static const struct api apis[] = {
#define ENTRY(shape, name, ret, params, args, size, func) {#name, (void *)w_##name, (void **)&R(name), 0},
#define CXX_ENTRY(shape, name, ret, params, args, size, func) {#name, (void *)w_##name, (void **)&R(name), 1},
	JE_API(ENTRY, ) JE_API(ENTRY, _rjem_) RJEM_MALLOC(ENTRY) MI_API(ENTRY) TC_API(ENTRY) CXX_API(CXX_ENTRY)
#undef ENTRY
#undef CXX_ENTRY
};
#define NAPI (sizeof apis / sizeof apis[0])

static int any; /* one of them is defined in the process */
/*
 * Between allocapi_resolve and allocapi_started: the constructor's pass,
 * when every module is relocated and no dlopen runs in another thread.
 */
static int startup;

/*
 * From the constructor, after find_allocator, where dlsym may run: the
 * definitions the wrappers call. Each list's first name is looked up first,
 * and the rest only if it is there: 5 lookups in most processes, not 90.
 */
void allocapi_resolve(void)
{
	static const char *const first[] = {"mallocx", "_rjem_mallocx", "mi_malloc", "tc_malloc", "_Znwm"};
	int foreign = !(g.alloc_flags & HL_ALLOCATOR_GLIBC), there = 0;
	SET_RELAXED(startup, 1);
	for (size_t i = 0; i < NAPI; i++) {
		for (size_t k = 0; k < sizeof first / sizeof first[0]; k++)
			if (strcmp(apis[i].name, first[k]) == 0)
				there = (!apis[i].cxx || foreign) && dlsym(HL_NEXT, first[k]);
		uintptr_t f = there ? (uintptr_t)dlsym(HL_NEXT, apis[i].name) : 0;
		if (apis[i].cxx && f - g.alloc_lo >= g.alloc_hi - g.alloc_lo)
			f = 0;
		*apis[i].real = (void *)f;
		any |= f != 0;
	}
}

/* A quick look at the first letters first: most modules import thousands of other names. */
static const struct api *api_named(const char *s)
{
	int maybe = (s[0] == 'm' && s[1] == 'i' && s[2] == '_') || (s[0] == 't' && s[1] == 'c' && s[2] == '_') ||
		    (s[0] == '_' && (s[1] == 'r' || (s[1] == 'Z' && (s[2] == 'n' || s[2] == 'd')))) ||
		    ((s[0] == 'm' || s[0] == 'r' || s[0] == 'x' || s[0] == 's' || s[0] == 'd') && strstr(s, "allocx"));
	for (size_t i = 0; maybe && i < NAPI; i++)
		if (strcmp(s, apis[i].name) == 0)
			return &apis[i];
	return NULL;
}

/* A dynamic-section address: the loader relocated most in place, not all (the vDSO's). */
static uintptr_t dyn_ptr(const struct dl_phdr_info *info, uintptr_t v)
{
	return v < info->dlpi_addr ? v + info->dlpi_addr : v;
}

void allocapi_started(void) { SET_RELAXED(startup, 0); }

/*
 * Points one GOT entry at w; a read-only (RELRO) page is made writable for
 * the store, only in a module the loader is done with (settled): one that a
 * dlopen in another thread still relocates is in the loader's list already,
 * its RELRO pages writable until the loader protects them.
 */
static void route(uintptr_t slot, void *w, uintptr_t relro_lo, uintptr_t relro_hi, int settled)
{
	uintptr_t page = slot & ~(uintptr_t)4095;
	int ro = slot - relro_lo < relro_hi - relro_lo;
	if (ro && (!settled || mprotect((void *)page, 4096, PROT_READ | PROT_WRITE) != 0))
		return;
	__atomic_store_n((void **)slot, w, __ATOMIC_RELAXED);
	if (ro)
		mprotect((void *)page, 4096, PROT_READ);
}

/*
 * Routes the module's GOT entries that import one of the APIs and hold its
 * definition (or, not yet bound, the module's own PLT stub). From scan_cb,
 * once per module, inside dl_iterate_phdr.
 */
void allocapi_patch(const struct dl_phdr_info *info)
{
	if (!any || NO_NEW_CALLS()) /* under a seccomp filter: no mprotect (seccomp.c) */
		return;
	const ElfW(Dyn) *dyn = NULL;
	uintptr_t lo = UINTPTR_MAX, hi = 0, relro_lo = 0, relro_hi = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t b = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)b;
		else if (ph->p_type == PT_GNU_RELRO)
			relro_lo = b & ~(uintptr_t)4095, relro_hi = (b + ph->p_memsz) & ~(uintptr_t)4095;
		else if (ph->p_type == PT_LOAD)
			lo = b < lo ? b : lo, hi = b + ph->p_memsz > hi ? b + ph->p_memsz : hi;
	}
	uintptr_t self = (uintptr_t)&allocapi_patch;
	if (!dyn || self - lo < hi - lo)
		return;
	const ElfW(Sym) *sym = NULL;
	const char *str = NULL;
	uintptr_t tab[2] = {0, 0}, len[2] = {0, 0};
	for (; dyn->d_tag != DT_NULL; dyn++) {
		switch (dyn->d_tag) {
		case DT_SYMTAB: sym = (const ElfW(Sym) *)dyn_ptr(info, dyn->d_un.d_ptr); break;
		case DT_STRTAB: str = (const char *)dyn_ptr(info, dyn->d_un.d_ptr); break;
		case DT_JMPREL: tab[0] = dyn_ptr(info, dyn->d_un.d_ptr); break;
		case DT_PLTRELSZ: len[0] = dyn->d_un.d_val; break;
		case DT_RELA: tab[1] = dyn_ptr(info, dyn->d_un.d_ptr); break;
		case DT_RELASZ: len[1] = dyn->d_un.d_val; break;
		}
	}
	if (!sym || !str)
		return;
	/* _dl_find_object knows a dlopen'ed module once it is relocated and protected (glibc 2.35+). */
	struct dl_find_object o;
	int settled = RELAXED(startup) || (g.find_object && g.find_object((void *)lo, &o) == 0);
	for (int t = 0; t < 2; t++) {
		const ElfW(Rela) *r = (const ElfW(Rela) *)tab[t];
		for (size_t i = 0; r && i < len[t] / sizeof *r; i++) {
			uint32_t type = (uint32_t)ELF64_R_TYPE(r[i].r_info), s = (uint32_t)ELF64_R_SYM(r[i].r_info);
			if ((type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) || !s)
				continue;
			const struct api *a = api_named(str + sym[s].st_name);
			void *def = a ? RELAXED(*a->real) : NULL;
			uintptr_t slot = info->dlpi_addr + r[i].r_offset, v = *(const uintptr_t *)slot;
			int undef = sym[s].st_shndx == SHN_UNDEF, own = v - lo < hi - lo;
			if (!def || !v || v == (uintptr_t)a->wrap)
				continue;
			if ((uintptr_t)def - lo < hi - lo) {
				/* The module holding def: its own calls are left alone, unless def is this executable's PLT entry (it takes the address): then v is the definition. */
				if (undef && !own) {
					SET_RELAXED(*a->real, (void *)v);
					route(slot, a->wrap, relro_lo, relro_hi, settled);
				}
			} else if (v == (uintptr_t)def || (type == R_X86_64_JUMP_SLOT && own)) /* bound to def, or not yet bound (binds to it) */
				route(slot, a->wrap, relro_lo, relro_hi, settled);
		}
	}
}

static int route_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size, (void)arg;
	allocapi_patch(info);
	return 0;
}

/*
 * Attached: every module's entries at load, as the agent routes the malloc
 * family's then; a program that calls only mallocx must reach a hook for a
 * session to start. They stay routed after a detach, idle between sessions.
 */
void allocapi_route_all(void)
{
	__atomic_fetch_add(&g.unwinding, 1, __ATOMIC_SEQ_CST); /* dl_iterate_phdr's lock, at a fork */
	dl_iterate_phdr(route_cb, NULL);
	__atomic_fetch_sub(&g.unwinding, 1, __ATOMIC_RELEASE);
}
