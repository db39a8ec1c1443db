/*
 * A malloc that starts every block right after a guard page, as debugging
 * allocators do: a block is [meta page][guard page][data], so the word
 * just below a block is unmapped, and any read of it crashes. Built as a
 * shared library and preloaded (after heaplens's), it serves the whole
 * process. Slow (a mapping per block), thread-safe (no state), and
 * alignments up to a page.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE 4096ul

struct meta {
	size_t size, len; /* asked for; the whole mapping */
};

static struct meta *meta_of(void *p) { return (struct meta *)((char *)p - 2 * PAGE); }

static void *alloc(size_t n)
{
	if (n > ((size_t)1 << 46)) {
		errno = ENOMEM;
		return NULL;
	}
	size_t len = 2 * PAGE + ((n + PAGE - 1) & ~(PAGE - 1));
	if (len == 2 * PAGE)
		len += PAGE;
	char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		errno = ENOMEM;
		return NULL;
	}
	mprotect(m + PAGE, PAGE, PROT_NONE);
	((struct meta *)m)->size = n, ((struct meta *)m)->len = len;
	return m + 2 * PAGE;
}

void *malloc(size_t n) { return alloc(n); }
void *calloc(size_t k, size_t n) { return __builtin_mul_overflow(k, n, &n) ? (errno = ENOMEM, NULL) : alloc(n); }
void *valloc(size_t n) { return alloc(n); }
void *pvalloc(size_t n) { return alloc(n); }
void *memalign(size_t a, size_t n) { return a > PAGE ? (errno = EINVAL, NULL) : alloc(n); }
void *aligned_alloc(size_t a, size_t n) { return memalign(a, n); }

int posix_memalign(void **r, size_t a, size_t n)
{
	if (a > PAGE)
		return EINVAL;
	void *p = alloc(n);
	if (!p)
		return ENOMEM;
	*r = p;
	return 0;
}

void free(void *p)
{
	if (p)
		munmap(meta_of(p), meta_of(p)->len);
}

size_t malloc_usable_size(void *p) { return p ? meta_of(p)->len - 2 * PAGE : 0; }

void *realloc(void *p, size_t n)
{
	if (!p)
		return alloc(n);
	if (!n) {
		free(p);
		return NULL;
	}
	void *q = alloc(n);
	if (q) {
		size_t old = meta_of(p)->size;
		memcpy(q, p, old < n ? old : n);
		free(p);
	}
	return q;
}
