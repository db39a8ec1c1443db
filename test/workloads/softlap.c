/*
 * Records far more than a ring's soft lap at --rate 1 (docs/ring-format.md,
 * "Protocol"), slowly enough for the agent to keep up: N allocations of 200
 * bytes in churn(), each freed at once, a millisecond's pause every 2048. Then prints
 * "paused PID" and waits for its standard input to close, so that the test
 * can look at the ring while the process lives.
 * Usage: softlap N.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void *volatile keep;

/* The site: 200 bytes, freed at once. */
static __attribute__((noinline)) void churn(void)
{
	keep = malloc(200);
	free(keep);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	struct timespec ms = {0, 1000000};
	for (long i = 0; i < n; i++) {
		churn();
		if (i % 2048 == 2047)
			nanosleep(&ms, NULL);
	}
	printf("paused %d\n", (int)getpid());
	fflush(stdout);
	char buf[64];
	while (read(0, buf, sizeof buf) > 0)
		;
	return 0;
}
