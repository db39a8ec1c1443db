/*
 * allocsites.c's sites through an allocator's own API instead of malloc:
 * built with -DJE (jemalloc's mallocx family, -ljemalloc), -DMI
 * (mimalloc's mi_*, -lmimalloc) or -DTC (gperftools' tc_*, -ltcmalloc).
 * keep_blocks keeps 200 blocks of 3000 bytes, churn allocates and frees
 * (sized) 1000 blocks of 5000 bytes, grow_block resizes one block up to
 * 64 KiB in 16 steps, then frees it; cross_free allocates 100 blocks of
 * 7000 bytes through the API and frees them with free(), which is the same
 * allocator's. Prints a checksum of what it wrote.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void *kept[200];

__attribute__((noinline)) void keep_blocks(void)
{
	for (int i = 0; i < 200; i++) {
		kept[i] = ALLOC(3000);
		memset(kept[i], i, 3000);
	}
}

__attribute__((noinline)) unsigned churn(void)
{
	unsigned sum = 0;
	for (int i = 0; i < 1000; i++) {
		unsigned char *p = ZALLOC(5000);
		sum += p[4999];
		memset(p, i, 5000);
		sum += p[i % 5000];
		FREE_SIZED(p, 5000);
	}
	return sum;
}

__attribute__((noinline)) unsigned grow_block(void)
{
	unsigned char *p = NULL;
	for (int i = 1; i <= 16; i++) {
		p = RESIZE(p, (size_t)i * 4096);
		p[i * 4096 - 1] = (unsigned char)i;
	}
	unsigned sum = 0;
	for (int i = 1; i <= 16; i++)
		sum += p[i * 4096 - 1];
	FREE(p);
	return sum;
}

__attribute__((noinline)) unsigned cross_free(void)
{
	unsigned sum = 0;
	for (int i = 0; i < 100; i++) {
		unsigned char *p = ALLOC(7000);
		memset(p, i, 7000);
		sum += p[6999];
		free(p);
	}
	return sum;
}

int main(void)
{
	keep_blocks();
	unsigned sum = churn() + grow_block() + cross_free();
	for (int i = 0; i < 200; i++)
		sum += ((unsigned char *)kept[i])[2999];
	printf("sum %u\n", sum);
	return 0;
}
