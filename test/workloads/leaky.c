/*
 * leaky: a demo and test workload with known answers. Four threads; each
 * site allocates a fixed number of bytes:
 *   keep_small  retains SMALL_N blocks of 256 B   (leaked)
 *   keep_large  retains LARGE_N blocks of 1 MiB   (leaked)
 *   churn       allocates and frees CHURN_N blocks of 4 KiB (not leaked)
 *   grow        realloc()s one buffer up to 4 MiB, then frees it (not leaked)
 * Built with -fomit-frame-pointer on purpose: stacks must come from CFI.
 * Prints the exact totals per site so tests can compare.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 4
#define SMALL_N 20000
#define SMALL_SZ 256
#define LARGE_N 16
#define LARGE_SZ (1 << 20)
#define CHURN_N 50000
#define CHURN_SZ 4096

static void *volatile sink;

__attribute__((noinline)) static void keep_small(void **out)
{
	for (int i = 0; i < SMALL_N; i++) {
		out[i] = malloc(SMALL_SZ);
		memset(out[i], 1, SMALL_SZ);
	}
}

__attribute__((noinline)) static void keep_large(void **out)
{
	for (int i = 0; i < LARGE_N; i++) {
		out[i] = malloc(LARGE_SZ);
		memset(out[i], 2, 64);
	}
}

__attribute__((noinline)) static void churn(void)
{
	for (int i = 0; i < CHURN_N; i++) {
		char *p = malloc(CHURN_SZ);
		p[0] = (char)i;
		sink = p;
		free(p);
	}
}

__attribute__((noinline)) static void grow(void)
{
	char *p = NULL;
	for (size_t n = 4096; n <= (4u << 20); n *= 2) {
		p = realloc(p, n);
		p[n - 1] = 1;
	}
	free(p);
}

static void *worker(void *arg)
{
	(void)arg;
	static _Thread_local void *small[SMALL_N];
	static _Thread_local void *large[LARGE_N];
	keep_small(small);
	keep_large(large);
	churn();
	grow();
	sink = small[0];
	return NULL;
}

int main(void)
{
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, worker, NULL);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	printf("keep_small %llu\n", (unsigned long long)THREADS * SMALL_N * SMALL_SZ);
	printf("keep_large %llu\n", (unsigned long long)THREADS * LARGE_N * LARGE_SZ);
	printf("churn %llu\n", (unsigned long long)THREADS * CHURN_N * CHURN_SZ);
	return 0;
}
