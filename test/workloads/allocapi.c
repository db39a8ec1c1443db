/*
 * allocsites.c's sites through an allocator's own API instead of malloc:
 * built with -DJE (jemalloc's mallocx family, -ljemalloc), -DMI
 * (mimalloc's mi_*, -lmimalloc) or -DTC (gperftools' tc_*, -ltcmalloc).
 * churn frees with the sized free, cross_free with free(), which is the
 * same allocator's.
 */

#if defined(JE)
#include <jemalloc/jemalloc.h>
#define ALLOC(n) mallocx(n, 0)
#define ZALLOC(n) mallocx(n, MALLOCX_ZERO)
#define RESIZE(p, n) ((p) ? rallocx(p, n, 0) : mallocx(n, 0))
#define FREE_SIZED(p, n) sdallocx(p, n, 0)
#define FREE(p) dallocx(p, 0)
#elif defined(MI)
#include <mimalloc.h>
#define ALLOC(n) mi_malloc(n)
#define ZALLOC(n) mi_zalloc(n)
#define RESIZE(p, n) mi_realloc(p, n)
#define FREE_SIZED(p, n) mi_free_size(p, n)
#define FREE(p) mi_free(p)
#elif defined(TC)
#include <gperftools/tcmalloc.h>
#define ALLOC(n) tc_malloc(n)
#define ZALLOC(n) tc_calloc(1, n)
#define RESIZE(p, n) tc_realloc(p, n)
#define FREE_SIZED(p, n) tc_free_sized(p, n)
#define FREE(p) tc_free(p)
#else
#error "build with -DJE, -DMI or -DTC"
#endif

#include "allocsites.c"
