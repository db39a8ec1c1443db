/*
 * maplayout: where the program's own mappings land once samples have been
 * taken. It maps 1 MiB (first), then a thread and main each allocate and
 * free 32 MiB in 4 KiB blocks (about 64 samples each at 512 KiB: each
 * thread's first maps its scratch, a walk may load a module's unwind
 * table), then maps 8 × 16 KiB and 2 × 1 MiB and prints each one's
 * address less first's, one line "layout=A B C ...". The kernel places a
 * mapping in the highest hole it fits (next to the last one made, when no
 * hole is left), so the line is the same in a run where nothing is
 * sampled and in a sampled one only if nothing the profiler mapped
 * meanwhile took address space the program's mappings would have had
 * (run with address randomization off to compare runs). Exits 0.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static void *volatile sink;

static char *map(size_t n)
{
	char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		exit(3);
	memset(p, 1, 4096);
	return p;
}

__attribute__((noinline)) static void *churn(void *arg)
{
	for (int i = 0; i < 8192; i++) {
		sink = malloc(4096);
		free(sink);
	}
	return arg;
}

int main(void)
{
	char *first = map(1 << 20);
	pthread_t th;
	if (pthread_create(&th, NULL, churn, NULL) || pthread_join(th, NULL))
		return 4;
	churn(NULL);
	printf("layout=");
	for (int i = 0; i < 10; i++)
		printf("%s%ld", i ? " " : "", (long)(map(i < 8 ? 16 << 10 : 1 << 20) - first));
	printf("\n");
	return 0;
}
