/* reserve: a 256 MiB anonymous mapping of which 8 KiB are touched (a
 * reservation, as OpenBLAS's buffers), beside 40 MiB of heap in use (one
 * malloc, every byte written). Both live to the end; it sleeps 0.3 s after
 * touching them so that the agent reads RSS and the pages meanwhile.
 * Reserved, the mapping is first; resident, the heap is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static char *reserve(size_t n)
{
	char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		exit(1);
	return p;
}

static char *used(size_t n)
{
	char *p = malloc(n);
	if (!p)
		exit(1);
	memset(p, 7, n);
	return p;
}

int main(void)
{
	char *r = reserve(256u << 20);
	memset(r, 1, 8192);
	char *u = used(40u << 20);
	struct timespec ts = {1, 300000000}; /* past the agent's residency reading at 1 s */
	nanosleep(&ts, NULL);
	printf("reserved %d used %d\n", r[4096], u[1 << 20]);
	return 0;
}
