/*
 * threads_once: THREADS short-lived threads, each making exactly one
 * allocation of SIZE bytes that it keeps. A sampler that starts every thread
 * at zero would sample each first allocation and overstate this site
 * enormously; an unbiased one samples about 1 − e^(−SIZE/rate) of them.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 2000
#define SIZE 1000

void *kept[THREADS];

__attribute__((noinline)) static void *one_allocation(void *arg)
{
	kept[(long)arg] = malloc(SIZE);
	return NULL;
}

int main(void)
{
	for (long i = 0; i < THREADS; i += 50) { /* 50 at a time keeps thread stacks bounded */
		pthread_t t[50];
		for (long j = 0; j < 50; j++)
			pthread_create(&t[j], NULL, one_allocation, (void *)(i + j));
		for (long j = 0; j < 50; j++)
			pthread_join(t[j], NULL);
	}
	printf("kept %d\n", THREADS * SIZE);
	return 0;
}
