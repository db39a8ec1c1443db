/*
 * A native library the sample project's tests call through ctypes: a leak
 * in C, and an OpenMP region whose worker threads allocate for the Python
 * code that started it. Built by the test as libnative.so with -fopenmp.
 */
#include <stdlib.h>
#include <string.h>

static void *volatile kept[4096];
static int nkept;

static void keep(void *p)
{
#pragma omp critical
	kept[nkept++ % 4096] = p;
}

/* Allocates n bytes in count blocks and keeps them. */
__attribute__((noinline)) void native_hold(size_t n, int count)
{
	for (int i = 0; i < count; i++) {
		char *p = malloc(n / (size_t)count);
		memset(p, 1, 64);
		keep(p);
	}
}

/* Each of threads OpenMP threads allocates n bytes in 64 KiB blocks and keeps them. */
__attribute__((noinline)) void omp_hold(size_t n, int threads)
{
#pragma omp parallel num_threads(threads)
	for (size_t done = 0; done < n; done += 64 << 10) {
		char *p = malloc(64 << 10);
		memset(p, 2, 64);
		keep(p);
	}
}
