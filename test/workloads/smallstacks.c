/*
 * Threads with the smallest stacks a program may ask for: for each stack
 * size given (bytes), 200 threads created with that size through
 * pthread_attr_setstacksize, and 200 more on stacks the program allocates
 * itself (pthread_attr_setstack), each running in_thread, which allocates
 * 1000 bytes once. Prints, per size, how many threads of each kind started
 * or the error that stopped them.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 200
#define BLOCK 1000

__attribute__((noinline)) void *in_thread(void *arg)
{
	char *p = malloc(BLOCK);
	if (p)
		memset(p, 1, BLOCK);
	__asm__ volatile("" : : "r"(p) : "memory"); /* the block is used: not elided */
	free(p);
	return arg;
}

static int start(size_t size, int own)
{
	for (int i = 0; i < THREADS; i++) {
		pthread_attr_t a;
		pthread_attr_init(&a);
		void *stack = NULL;
		int e = own ? (posix_memalign(&stack, 4096, size) ? -1 : pthread_attr_setstack(&a, stack, size))
			    : pthread_attr_setstacksize(&a, size);
		pthread_t t;
		if (!e)
			e = pthread_create(&t, &a, in_thread, NULL);
		pthread_attr_destroy(&a);
		if (e) {
			printf("%zu %s: thread %d: %s\n", size, own ? "own" : "size", i, e < 0 ? "no memory" : strerror(e));
			free(stack);
			return i;
		}
		pthread_join(t, NULL);
		free(stack);
	}
	return THREADS;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		size_t size = strtoul(argv[i], NULL, 0);
		int n = start(size, 0), m = start(size, 1);
		printf("stack %zu: %d threads by size, %d on own stacks\n", size, n, m);
	}
	return 0;
}
