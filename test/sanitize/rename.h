/*
 * Included first (-include) in a workload built into the sanitizer harness:
 * its allocator calls go to the library's hooks, exported as hl_malloc etc.
 * when preload/ is built with -DHEAPLENS_HARNESS (a sanitizer runtime brings
 * its own malloc, so the library cannot simply be preloaded beside it).
 */
#define malloc hl_malloc
#define free hl_free
#define calloc hl_calloc
#define realloc hl_realloc
#define reallocarray hl_reallocarray
#define posix_memalign hl_posix_memalign
#define aligned_alloc hl_aligned_alloc
#define memalign hl_memalign
#define valloc hl_valloc
#define pvalloc hl_pvalloc
#define malloc_usable_size hl_malloc_usable_size
