/*
 * semantics: every hooked function must behave as glibc's. Prints one line
 * per check and exits 1 on the first failure. Run bare and under heaplens at
 * --rate 1 (every call takes the sampled path) and at a small rate (mixed
 * sampled/unsampled blocks, so realloc crosses between the two kinds).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int checks;
#define CHECK(cond, what)                                                     \
	do {                                                                  \
		checks++;                                                     \
		if (!(cond)) {                                                \
			printf("FAIL %s (%s:%d) errno=%d\n", what, __FILE__, __LINE__, errno); \
			exit(1);                                              \
		}                                                             \
	} while (0)

/*
 * Built into the sanitizer harness (test/sanitize), the allocator below the
 * hooks is a sanitizer's, whose aligned_alloc keeps C11's rule that the size
 * be a multiple of the alignment; glibc's does not.
 */
#ifdef HEAPLENS_HARNESS
#define ALIGNED_SIZE(n, a) (((n) + (a) - 1) / (a) * (a))
#else
#define ALIGNED_SIZE(n, a) (n)
#endif

static int aligned(void *p, size_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(seed + i * 7);
}

static int same(const unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (unsigned char)(seed + i * 7))
			return 0;
	return 1;
}

int main(void)
{
	long page = sysconf(_SC_PAGESIZE);
	volatile size_t half = SIZE_MAX / 2, huge = SIZE_MAX - 8; /* volatile: keep the calls */
	void *p, *q;

	/* calloc */
	errno = 0;
	CHECK(calloc(half, 3) == NULL && errno == ENOMEM, "calloc overflow -> NULL, ENOMEM");
	for (int round = 0; round < 50; round++) { /* reused memory must come back zeroed */
		unsigned char *d = malloc(1000);
		memset(d, 0xff, 1000);
		free(d);
		unsigned char *z = calloc(10, 100);
		for (int i = 0; i < 1000; i++)
			CHECK(z[i] == 0, "calloc zeroes");
		CHECK(malloc_usable_size(z) >= 1000, "calloc usable size");
		free(z);
	}

	/* free and realloc edge cases */
	free(NULL);
	CHECK(1, "free(NULL)");
	p = realloc(NULL, 100);
	CHECK(p != NULL && malloc_usable_size(p) >= 100, "realloc(NULL, n) allocates");
	fill(p, 100, 1);
	errno = 0;
	q = realloc(p, 0);
	CHECK(q == NULL, "realloc(p, 0) frees and returns NULL");

	/* realloc keeps contents through growth and shrinkage */
	size_t sizes[] = {1, 24, 100, 4000, 70000, 200000, 3 << 20, 5000, 16, 1 << 20, 64};
	unsigned char *r = NULL;
	size_t have = 0;
	for (unsigned k = 0; k < 20; k++)
		for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
			size_t n = sizes[i];
			r = realloc(r, n);
			CHECK(r != NULL, "realloc grows/shrinks");
			CHECK(same(r, have < n ? have : n, k * 31 + (unsigned)i), "realloc keeps contents");
			CHECK(malloc_usable_size(r) >= n, "usable size after realloc");
			fill(r, n, k * 31 + (unsigned)i + 1);
			have = n;
			if (i + 1 < sizeof sizes / sizeof *sizes)
				fill(r, n, k * 31 + (unsigned)i + 1);
			else
				fill(r, n, (k + 1) * 31);
		}
	free(r);

	/* reallocarray */
	errno = 0;
	p = malloc(16);
	CHECK(reallocarray(p, half, 3) == NULL && errno == ENOMEM, "reallocarray overflow -> NULL, ENOMEM");
	q = reallocarray(p, 10, 10);
	CHECK(q && malloc_usable_size(q) >= 100, "reallocarray");
	free(q);

	/* posix_memalign */
	p = (void *)1;
	CHECK(posix_memalign(&p, 3, 24) == EINVAL && p == (void *)1, "posix_memalign bad alignment -> EINVAL");
	CHECK(posix_memalign(&p, 0, 24) == EINVAL, "posix_memalign zero alignment -> EINVAL");
	CHECK(posix_memalign(&p, 24, 24) == EINVAL, "posix_memalign non-power-of-two -> EINVAL");
	size_t aligns[] = {8, 16, 32, 64, 256, 4096, 65536};
	for (size_t i = 0; i < sizeof aligns / sizeof *aligns; i++)
		for (size_t n = 1; n < 300000; n = n * 5 + 3) {
			CHECK(posix_memalign(&p, aligns[i], n) == 0 && aligned(p, aligns[i]), "posix_memalign honours alignment");
			CHECK(malloc_usable_size(p) >= n, "posix_memalign usable size");
			memset(p, 1, n);
			q = realloc(p, n + 100); /* a realloc of an aligned block */
			CHECK(q != NULL, "realloc of an aligned block");
			free(q);
			p = aligned_alloc(aligns[i], ALIGNED_SIZE(n, aligns[i]));
			CHECK(p && aligned(p, aligns[i]), "aligned_alloc honours alignment");
			CHECK(malloc_usable_size(p) >= n, "aligned_alloc usable size");
			free(p);
			p = memalign(aligns[i], n);
			CHECK(p && aligned(p, aligns[i]), "memalign honours alignment");
			free(p);
		}
#ifndef HEAPLENS_HARNESS /* glibc rounds a non-power-of-two up; a sanitizer's memalign refuses it */
	p = memalign(48, 100);
	CHECK(p && aligned(p, 64), "memalign(48) aligns to 64");
	free(p);
#endif
	errno = 0;
	CHECK(memalign(SIZE_MAX / 2 + 2, 10) == NULL && errno == EINVAL, "memalign huge alignment -> EINVAL");
	errno = 0;
	CHECK(malloc(huge) == NULL && errno == ENOMEM, "malloc(huge) -> NULL, ENOMEM");

	/* valloc, pvalloc */
	p = valloc(100);
	CHECK(p && aligned(p, (size_t)page) && malloc_usable_size(p) >= 100, "valloc page-aligned");
	free(p);
	p = pvalloc(100);
	CHECK(p && aligned(p, (size_t)page) && malloc_usable_size(p) >= (size_t)page, "pvalloc rounds up to a page");
	memset(p, 3, (size_t)page);
	free(p);

	/* many blocks of mixed kinds, freed out of order */
	enum { N = 5000 };
	static void *blocks[N];
	for (int i = 0; i < N; i++) {
		size_t n = (size_t)(i * 37 % 9000) + 1;
		switch (i % 4) {
		case 0: blocks[i] = malloc(n); break;
		case 1: blocks[i] = calloc(1, n); break;
		case 2: blocks[i] = aligned_alloc(64, ALIGNED_SIZE(n, 64)); break;
		default: blocks[i] = realloc(NULL, n); break;
		}
		CHECK(blocks[i] && malloc_usable_size(blocks[i]) >= n, "mixed allocation");
		fill(blocks[i], n, (unsigned)i);
	}
	for (int i = N - 1; i >= 0; i -= 2)
		free(blocks[i]);
	for (int i = 0; i < N; i += 2) {
		size_t n = (size_t)(i * 37 % 9000) + 1;
		CHECK(same(blocks[i], n, (unsigned)i), "blocks keep their contents");
		free(blocks[i]);
	}

	/* errno survives a successful malloc/free pair */
	errno = 4242;
	p = malloc(300);
	free(p);
	CHECK(errno == 4242, "errno preserved by malloc+free");

	printf("ok %d checks\n", checks);
	return 0;
}
