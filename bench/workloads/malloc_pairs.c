/*
 * malloc_pairs: the cost of one malloc+free pair, the hot path every
 * allocation-heavy program pays and the one heaplens must not slow down.
 *
 * usage: malloc_pairs SIZE ITERS THREADS
 *
 * Each of THREADS threads waits at a barrier, then runs ITERS times
 *     p = malloc(SIZE); p[0] = 1 (volatile store); free(p);
 * timing its own loop with CLOCK_MONOTONIC. Output (one line, key=value):
 *     ns_per_pair  max over threads of (thread loop time / ITERS): the
 *                  per-pair latency seen by the slowest thread, so two
 *                  threads that contend on the allocator show it;
 *     wall_ns      from the barrier release to the last thread's end;
 *     min_ns_per_pair  the fastest thread, to show imbalance;
 *     maxrss_kb    the process's peak RSS (VmHWM);
 *     cpu_s        the process's own user+system time (getrusage), so a
 *                  profiler's agent can be told apart from its target.
 *
 * Built with gcc -O2 -fomit-frame-pointer -pthread: malloc and free are
 * called through volatile function pointers so the compiler can neither
 * elide the pair (GCC removes malloc+free of an unused block) nor inline
 * or specialise it, and the store into the block makes it "used".
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static void *(*volatile malloc_p)(size_t) = malloc;
static void (*volatile free_p)(void *) = free;

static size_t size;
static uint64_t iters;
static pthread_barrier_t start;

struct result {
	int64_t t0, t1;
};

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *worker(void *arg)
{
	struct result *r = arg;
	pthread_barrier_wait(&start);
	r->t0 = now_ns();
	for (uint64_t i = 0; i < iters; i++) {
		volatile char *p = malloc_p(size);
		if (!p) {
			fprintf(stderr, "malloc_pairs: malloc(%zu) failed\n", size);
			exit(1);
		}
		p[0] = 1;
		free_p((void *)p);
	}
	r->t1 = now_ns();
	return NULL;
}

/* VmHWM of /proc/self/status: ru_maxrss would not do, a process started
 * from a Go program keeps its parent's peak across exec. */
static long peak_rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, "VmHWM:", 6) == 0)
			kb = strtol(line + 6, NULL, 10);
	fclose(f);
	return kb;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: malloc_pairs SIZE ITERS THREADS\n");
		return 2;
	}
	size = strtoull(argv[1], NULL, 0);
	iters = strtoull(argv[2], NULL, 0);
	int threads = atoi(argv[3]);
	if (size == 0 || iters == 0 || threads < 1 || threads > 256) {
		fprintf(stderr, "malloc_pairs: bad arguments\n");
		return 2;
	}
	struct result res[256];
	pthread_t tid[256];
	/* The main thread is one of the workers: one thread means no pthread_create at all. */
	pthread_barrier_init(&start, NULL, (unsigned)threads);
	for (int i = 1; i < threads; i++)
		if (pthread_create(&tid[i], NULL, worker, &res[i]) != 0) {
			fprintf(stderr, "malloc_pairs: pthread_create failed\n");
			return 1;
		}
	worker(&res[0]);
	for (int i = 1; i < threads; i++)
		pthread_join(tid[i], NULL);
	int64_t first = res[0].t0, last = res[0].t1, maxd = 0, mind = INT64_MAX;
	for (int i = 0; i < threads; i++) {
		int64_t d = res[i].t1 - res[i].t0;
		if (res[i].t0 < first)
			first = res[i].t0;
		if (res[i].t1 > last)
			last = res[i].t1;
		if (d > maxd)
			maxd = d;
		if (d < mind)
			mind = d;
	}
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
		     ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
	printf("ns_per_pair=%.3f min_ns_per_pair=%.3f wall_ns=%lld maxrss_kb=%ld cpu_s=%.4f\n", (double)maxd / (double)iters,
	       (double)mind / (double)iters, (long long)(last - first), peak_rss_kb(), cpu);
	return 0;
}
