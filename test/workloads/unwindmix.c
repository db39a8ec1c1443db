/*
 * unwindmix: allocations under frames of every shape the unwind tables
 * describe, for SECONDS (argv[1]), in two threads: frames found from rsp
 * (-fomit-frame-pointer), from rbp (a variable-length array; a function
 * built with a frame pointer), frames in libc between ours (qsort calling
 * back), and deep recursion. With HEAPLENS_UNWIND_CHECK=1 the library
 * walks each stack both ways and counts differences.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *volatile sink;

__attribute__((noinline)) static void leaf(size_t n)
{
	void *p = malloc(n);
	sink = p;
	free(p);
}

/* A VLA: the CFA is found from rbp in this frame. */
__attribute__((noinline)) static void vla_frame(int n)
{
	volatile char buf[n];
	buf[0] = 1;
	leaf(4000 + (size_t)buf[0]);
	__asm__ volatile("" ::: "memory"); /* no tail call */
}

__attribute__((noinline, optimize("no-omit-frame-pointer"))) static void fp_frame(int n)
{
	vla_frame(n);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noipa)) static int recurse(int depth) /* noipa: one frame per call, none split off */
{
	if (depth == 0) {
		fp_frame(64);
		return 0;
	}
	int r = recurse(depth - 1);
	__asm__ volatile("" ::: "memory"); /* no tail call */
	return r + 1;
}

static int cmp(const void *a, const void *b)
{
	leaf(4100);
	return memcmp(a, b, sizeof(int));
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double until;

static void *work(void *arg)
{
	(void)arg;
	int v[4];
	struct timespec pause = {0, 200000}; /* ~30 000 samples a second at 4 KiB: the agent keeps up */
	while (now() < until) {
		recurse(40);
		for (int i = 0; i < 4; i++)
			v[i] = 3 - i;
		qsort(v, 4, sizeof v[0], cmp);
		nanosleep(&pause, NULL);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: unwindmix SECONDS\n");
		return 2;
	}
	until = now() + atof(argv[1]);
	pthread_t t;
	pthread_create(&t, NULL, work, NULL);
	work(NULL);
	pthread_join(t, NULL);
	printf("done\n");
	return 0;
}
