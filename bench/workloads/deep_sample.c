/*
 * deep_sample: the cost of one sampled allocation as a function of stack
 * depth. Under `heaplens run --rate 1` every allocation is sampled, so
 * (t_rate1 - t_bare) / N is the per-sample cost (unwind + ALLOC record +
 * FREE record) at this depth; two depths give the per-frame slope.
 *
 * usage: deep_sample DEPTH N
 *
 * Recurses DEPTH frames (noinline functions that do work after the call,
 * so they cannot become tail calls and the frames really exist), then
 * times N pairs of malloc(64)+free with CLOCK_MONOTONIC. Output:
 *     ns_total=... ns_per_alloc=...
 * DEPTH counts the frames of this program above main (DEPTH-1 recurse
 * frames plus leaf); main, __libc_start_call_main, __libc_start_main and
 * _start sit below them, so a sampled stack holds DEPTH + 4 frames.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void *(*volatile malloc_p)(size_t) = malloc;
static void (*volatile free_p)(void *) = free;
static volatile uint64_t sink;

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static __attribute__((noinline)) int64_t leaf(uint64_t n)
{
	int64_t t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		volatile char *p = malloc_p(64);
		if (!p)
			abort();
		p[0] = (char)i;
		free_p((void *)p);
	}
	return now_ns() - t0;
}

/* The add after the call keeps it from being a tail call; noinline/noclone keep one frame per level. */
static __attribute__((noinline, noclone)) int64_t recurse(int depth, uint64_t n)
{
	int64_t r = depth <= 1 ? leaf(n) : recurse(depth - 1, n);
	sink += (uint64_t)depth;
	return r;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: deep_sample DEPTH N\n");
		return 2;
	}
	int depth = atoi(argv[1]);
	uint64_t n = strtoull(argv[2], NULL, 0);
	if (depth < 1 || depth > 10000 || n == 0) {
		fprintf(stderr, "deep_sample: bad arguments\n");
		return 2;
	}
	int64_t t = recurse(depth, n);
	printf("ns_total=%lld ns_per_alloc=%.3f\n", (long long)t, (double)t / (double)n);
	return 0;
}
