/*
 * shrink: blocks that a realloc shrinks and grows again, as a buffer that
 * is trimmed and refilled. glibc shrinks in place (a large block by mremap),
 * so each shrink keeps its address; the program prints whether it did and
 * checks the contents, and a profiler must not change either.
 *   shrink_keep  ROUNDS × (malloc BIG, realloc to SMALL, realloc back to BIG): kept (leaked)
 *   shrink_free  ROUNDS × (malloc BIG, realloc to SMALL, free)                  (not leaked)
 * The BIG blocks are sampled at any rate up to a few MiB (the chance to miss
 * one is e^(−BIG/rate)), the SMALL ones almost never.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 8
#define BIG (8u << 20)
#define SMALL 64u
#define MID (100u << 10) /* below glibc's mmap threshold: shrunk inside the heap */

static int moved;
static void *kept[ROUNDS];

static void check(const unsigned char *p, size_t n, unsigned char v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v) {
			printf("contents lost\n");
			exit(1);
		}
}

/* p (of at least SMALL bytes, filled with v) shrunk to SMALL: it should stay where it is. */
__attribute__((noinline)) static unsigned char *shrink(unsigned char *p, unsigned char v)
{
	unsigned char *q = realloc(p, SMALL);
	if (!q)
		exit(2);
	moved += q != p;
	check(q, SMALL, v);
	return q;
}

__attribute__((noinline)) static unsigned char *grow_back(unsigned char *p, unsigned char v)
{
	unsigned char *q = realloc(p, BIG);
	if (!q)
		exit(2);
	check(q, SMALL, v);
	memset(q, v, BIG);
	return q;
}

__attribute__((noinline)) static void shrink_keep(int i, unsigned char v)
{
	unsigned char *p = malloc(BIG);
	if (!p)
		exit(2);
	memset(p, v, BIG);
	kept[i] = grow_back(shrink(p, v), v);
}

__attribute__((noinline)) static void shrink_free(size_t n, unsigned char v)
{
	unsigned char *p = malloc(n);
	if (!p)
		exit(2);
	memset(p, v, n);
	free(shrink(p, v));
}

int main(void)
{
	for (int i = 0; i < ROUNDS; i++) {
		shrink_keep(i, (unsigned char)(i + 1));
		shrink_free(BIG, (unsigned char)(i + 101));
		shrink_free(MID, (unsigned char)(i + 201));
	}
	printf("shrinks moved=%d of %d\n", moved, 3 * ROUNDS);
	return kept[0] == NULL;
}
