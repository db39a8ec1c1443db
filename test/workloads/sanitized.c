/*
 * sanitized: a small threaded program with a known output, built with the
 * sanitizers (-fsanitize=address, thread, leak, undefined). Two threads
 * sum disjoint halves of a table; main prints the total on standard output
 * and a line on standard error, and leaks LEAK bytes at keep_leak on
 * purpose, which LeakSanitizer (alone or in ASan) reports at exit.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 100000
#define LEAK 4000

static long table[N];
void *volatile leaked;

struct half {
	int from, to;
	long sum;
};

static void *sum(void *arg)
{
	struct half *h = arg;
	for (int i = h->from; i < h->to; i++) {
		long *tmp = malloc(sizeof *tmp); /* allocations for the sanitizer's allocator to serve */
		*tmp = table[i];
		h->sum += *tmp;
		free(tmp);
	}
	return NULL;
}

__attribute__((noinline)) static void keep_leak(void)
{
	leaked = malloc(LEAK);
	memset(leaked, 1, LEAK);
	leaked = NULL; /* lost: a leak */
}

int main(void)
{
	for (int i = 0; i < N; i++)
		table[i] = i % 1000;
	struct half a = {0, N / 2, 0}, b = {N / 2, N, 0};
	pthread_t t;
	pthread_create(&t, NULL, sum, &a);
	sum(&b);
	pthread_join(t, NULL);
	keep_leak();
	printf("total %ld\n", a.sum + b.sum);
	fflush(stdout); /* LeakSanitizer ends the process with _exit */
	fprintf(stderr, "sanitized: done\n");
	return 0;
}
