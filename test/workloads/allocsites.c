/*
 * Known allocation sites for any allocator: keep_blocks keeps 200 blocks
 * of 3000 bytes (600,000 bytes, live at exit), churn allocates and frees
 * 1000 blocks of 5000 bytes (5,000,000 bytes), grow_block reallocates one
 * block up to 64 KiB in 16 steps, then frees it. Prints a checksum of
 * what it wrote, so that the output shows the memory held what it should.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *kept[200];

__attribute__((noinline)) void keep_blocks(void)
{
	for (int i = 0; i < 200; i++) {
		kept[i] = malloc(3000);
		memset(kept[i], i, 3000);
	}
}

__attribute__((noinline)) unsigned churn(void)
{
	unsigned sum = 0;
	for (int i = 0; i < 1000; i++) {
		unsigned char *p = malloc(5000);
		memset(p, i, 5000);
		sum += p[i % 5000];
		free(p);
	}
	return sum;
}

__attribute__((noinline)) unsigned grow_block(void)
{
	unsigned char *p = NULL;
	for (int i = 1; i <= 16; i++) {
		p = realloc(p, (size_t)i * 4096);
		p[i * 4096 - 1] = (unsigned char)i;
	}
	unsigned sum = 0;
	for (int i = 1; i <= 16; i++)
		sum += p[i * 4096 - 1];
	free(p);
	return sum;
}

int main(void)
{
	keep_blocks();
	unsigned sum = churn() + grow_block();
	for (int i = 0; i < 200; i++)
		sum += ((unsigned char *)kept[i])[2999];
	printf("sum %u\n", sum);
	return 0;
}
