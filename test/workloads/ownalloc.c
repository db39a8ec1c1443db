/*
 * An executable with an allocator of its own beside malloc, as a service
 * that bundles jemalloc under the je_ prefix: je_mallocx hands out blocks
 * from 1 MiB chunks it maps itself (je_chunk_map), 64 blocks of 64 KiB
 * (4 chunks); malloc stays glibc's. heaplens sees the 4 chunks' mappings,
 * not the blocks, and says so.
 */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define CHUNK (1 << 20)

static char *chunk;
static size_t used = CHUNK;

__attribute__((noinline)) void *je_chunk_map(void)
{
	void *p = mmap(NULL, CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

__attribute__((noinline)) void *je_mallocx(size_t n, int flags)
{
	(void)flags;
	if (used + n > CHUNK) {
		if (!(chunk = je_chunk_map()))
			return NULL;
		used = 0;
	}
	void *p = chunk + used;
	used += (n + 15) & ~(size_t)15;
	return p;
}

__attribute__((noinline)) unsigned fill_blocks(void)
{
	unsigned sum = 0;
	for (int i = 0; i < 64; i++) {
		unsigned char *p = je_mallocx(64 << 10, 0);
		memset(p, i, 64 << 10);
		sum += p[i];
	}
	return sum;
}

int main(void)
{
	printf("sum %u\n", fill_blocks());
	return 0;
}
