/*
 * An OpenMP extension for the thread-pool tests, built by the test with gcc
 * (libgomp) and with clang (libomp): every iteration of a parallel loop
 * allocates `size` bytes on whichever team thread runs it, so each worker's
 * bytes are known. Called through ctypes, which releases the GIL.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Returns how many iterations the region's non-master threads ran. */
int work_alloc(int n, long size, int nthreads)
{
	void **keep = calloc((size_t)n, sizeof *keep);
	int by_workers = 0;
	if (!keep)
		return -1;
#pragma omp parallel for num_threads(nthreads) schedule(static, 1) reduction(+ : by_workers)
	for (int i = 0; i < n; i++) {
		keep[i] = malloc((size_t)size);
		if (keep[i])
			memset(keep[i], i, (size_t)size);
		by_workers += omp_get_thread_num() != 0;
	}
	for (int i = 0; i < n; i++)
		free(keep[i]);
	free(keep);
	return by_workers;
}
