/*
 * fragment: glibc fragmentation. 8 threads (8 arenas) each allocate 20000
 * blocks of 1000 bytes (1008-byte chunks), then free all but every 16th:
 * 8 · 18750 · 1008 = 151,200,000 bytes lie free in the arenas, between
 * kept blocks, so RSS stays while the heap is 10 MB. The main thread then
 * allocates and frees small blocks for 1.5 s, so that the library samples
 * and reports what malloc holds. Prints the freed chunk bytes; exits 0.
 */
#include <pthread.h>
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
	return 0;
}
