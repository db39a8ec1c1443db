/*
 * A program that allocates only through jemalloc's own API (-ljemalloc):
 * je_loop makes a block of 10,000 bytes with mallocx and frees it with
 * sdallocx every millisecond, 4000 times; it never calls malloc itself.
 * For heaplens attach, whose session must start in one of these calls.
 */
#include <jemalloc/jemalloc.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

__attribute__((noinline)) unsigned je_loop(int i)
{
	unsigned char *p = mallocx(10000, 0);
	memset(p, i, 10000);
	unsigned v = p[i % 10000];
	sdallocx(p, 10000, 0);
	return v;
}

int main(void)
{
	unsigned sum = 0;
	struct timespec ms = {0, 1000000};
	for (int i = 0; i < 4000; i++) {
		sum += je_loop(i);
		nanosleep(&ms, NULL);
	}
	printf("sum %u\n", sum);
	return 0;
}
