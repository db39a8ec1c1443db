/*
 * Known allocation sites for any allocator: keep_blocks keeps 200 blocks
 * of 3000 bytes (600,000 bytes, live at exit), churn allocates and frees
 * 1000 blocks of 5000 bytes (5,000,000 bytes), grow_block reallocates one
 * block up to 64 KiB in 16 steps, then frees it, cross_free allocates 100
 * blocks of 7000 bytes and frees them with free(). Prints a checksum of
 * what it wrote, so that the output shows the memory held what it should.
 * allocapi.c builds the same sites on an allocator's own API (ALLOC…).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef ALLOC
#define ALLOC(n) malloc(n)
#define ZALLOC(n) malloc(n)
#define RESIZE(p, n) realloc(p, n)
#define FREE_SIZED(p, n) free(p)
#define FREE(p) free(p)
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
