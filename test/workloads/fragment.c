/*
 * fragment: glibc fragmentation. 8 threads (8 arenas) each allocate 20000
 * blocks of 1000 bytes (1008-byte chunks), then free all but every 16th:
 * 8 · 18750 · 1008 = 151,200,000 bytes lie free in the arenas, between
 * kept blocks, so RSS stays while the heap is 10 MB. The main thread then
 * allocates and frees small blocks for 1.5 s, so that the library samples
 * and reports what malloc holds. Prints the freed chunk bytes; exits 0.
 * Under jemalloc or gperftools tcmalloc (preloaded), whose slabs and spans
 * keep other amounts, it also prints what the allocator itself says it
 * holds beside the blocks in use: "allocator_free N".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define THREADS 8
#define BLOCKS 20000

static pthread_barrier_t all_allocated;
static void *volatile sink;

static void *fill_arena(void *arg)
{
	(void)arg;
	static __thread char *blocks[BLOCKS];
	for (int i = 0; i < BLOCKS; i++) {
		blocks[i] = malloc(1000);
		memset(blocks[i], 1, 1000);
	}
	pthread_barrier_wait(&all_allocated);
	for (int i = 0; i < BLOCKS; i++)
		if (i % 16)
			free(blocks[i]);
	return NULL;
}

/* jemalloc: resident - allocated; tcmalloc: heap - unmapped - allocated; -1 under glibc. */
static long allocator_free(void)
{
	int (*ctl)(const char *, void *, size_t *, void *, size_t) =
		(int (*)(const char *, void *, size_t *, void *, size_t))dlsym(RTLD_DEFAULT, "mallctl");
	int (*prop)(const char *, size_t *) = (int (*)(const char *, size_t *))dlsym(RTLD_DEFAULT, "MallocExtension_GetNumericProperty");
	size_t a = 0, b = 0, c = 0, len = sizeof a;
	if (ctl) {
		uint64_t epoch = 1, was;
		size_t elen = sizeof was;
		ctl("epoch", &was, &elen, &epoch, sizeof epoch);
		ctl("stats.resident", &a, &len, NULL, 0);
		ctl("stats.allocated", &b, &len, NULL, 0);
		return (long)(a - b);
	}
	if (prop) {
		prop("generic.heap_size", &a);
		prop("tcmalloc.pageheap_unmapped_bytes", &b);
		prop("generic.current_allocated_bytes", &c);
		return (long)(a - b - c);
	}
	return -1;
}

int main(void)
{
	pthread_t t[THREADS];
	pthread_barrier_init(&all_allocated, NULL, THREADS);
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, fill_arena, NULL);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		void *p = malloc(512);
		memset(p, 2, 512);
		sink = p;
		free(sink);
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < 1500000000L);
	printf("freed %ld\n", (long)THREADS * (BLOCKS - BLOCKS / 16) * 1008);
	long own = allocator_free();
	if (own >= 0)
		printf("allocator_free %ld\n", own);
	return 0;
}
