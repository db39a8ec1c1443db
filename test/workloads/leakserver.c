/*
 * leakserver: a server loop with a slow leak, for the fleet endpoints.
 * Usage: leakserver SECONDS [LEAK_BYTES]
 * Every 10 ms tick, for SECONDS seconds:
 *   leak_slowly   one block of LEAK_BYTES (default 64 KiB), kept forever
 *   churn         16 blocks of 8 KiB, freed at once
 * After each tick it prints "tick N leaked B" (B = N * LEAK_BYTES) and
 * flushes, so a test knows what was allocated when. Exits 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *volatile sink;

__attribute__((noinline)) static void *leak_slowly(size_t n)
{
	char *p = malloc(n);
	memset(p, 1, n < 64 ? n : 64);
	return p;
}

__attribute__((noinline)) static void churn(void)
{
	void *b[16];
	for (int i = 0; i < 16; i++) {
		b[i] = malloc(8192);
		sink = b[i];
	}
	for (int i = 0; i < 16; i++)
		free(b[i]);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	long ticks = atol(argv[1]) * 100;
	size_t leak = argc > 2 ? (size_t)atol(argv[2]) : 64 << 10;
	void **kept = malloc((size_t)(ticks > 0 ? ticks : 1) * sizeof *kept);
	struct timespec next;
	clock_gettime(CLOCK_MONOTONIC, &next);
	for (long t = 1; t <= ticks; t++) {
		kept[t - 1] = leak_slowly(leak);
		churn();
		printf("tick %ld leaked %zu\n", t, (size_t)t * leak);
		fflush(stdout);
		next.tv_nsec += 10 * 1000 * 1000;
		if (next.tv_nsec >= 1000000000L) {
			next.tv_nsec -= 1000000000L;
			next.tv_sec++;
		}
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
	}
	sink = kept;
	return 0;
}
