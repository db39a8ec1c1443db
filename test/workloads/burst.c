/*
 * burst: a workload with a known peak, for the peak, live, temporary,
 * leaks and timeline views.
 *
 *   burst       allocates BURST_N blocks of 1 MiB (touched, so RSS rises),
 *               holds them HOLD_MS, then frees them all: the peak.
 *   churn_temp  allocates and frees TEMP_N blocks of 1 KiB at once
 *               (temporary), after the burst.
 *   hold        allocates KEEP_N blocks of 4 KiB kept until exit (leaks),
 *               after the burst: a smaller live set than the peak.
 *
 * "burst slow" waits 4 s first (for the --live test).
 * "burst tree" forks: the child runs burst (48 MiB) and exits; then the
 * parent holds PARENT_N MiB from parent_hold for HOLD_MS. The tree's peak is
 * the child's 48 MiB, not the 80 MiB sum of both processes' peaks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MIB (1 << 20)
#define BURST_N 64
#define TREE_BURST_N 48
#define PARENT_N 32
#define TEMP_N 20000
#define TEMP_SZ 1024
#define KEEP_N 2000
#define KEEP_SZ 4096
#define HOLD_MS 300

static void *volatile sink;

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

__attribute__((noinline)) static void burst(int n)
{
	void **b = calloc(n, sizeof *b); /* n*8 bytes: negligible */
	for (int i = 0; i < n; i++) {
		b[i] = malloc(MIB);
		memset(b[i], 1, MIB);
	}
	sleep_ms(HOLD_MS);
	for (int i = 0; i < n; i++)
		free(b[i]);
	free(b);
}

__attribute__((noinline)) static void churn_temp(void)
{
	for (int i = 0; i < TEMP_N; i++) {
		char *p = malloc(TEMP_SZ);
		p[0] = (char)i;
		sink = p;
		free(p);
	}
}

__attribute__((noinline)) static void hold(void **out)
{
	for (int i = 0; i < KEEP_N; i++) {
		out[i] = malloc(KEEP_SZ);
		memset(out[i], 3, 64);
	}
}

__attribute__((noinline)) static void parent_hold(void)
{
	void *b[PARENT_N];
	for (int i = 0; i < PARENT_N; i++) {
		b[i] = malloc(MIB);
		memset(b[i], 2, MIB);
	}
	sleep_ms(HOLD_MS);
	for (int i = 0; i < PARENT_N; i++)
		free(b[i]);
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "tree") == 0) {
		pid_t pid = fork();
		if (pid == 0) {
			burst(TREE_BURST_N);
			_exit(0);
		}
		int st;
		waitpid(pid, &st, 0);
		sleep_ms(100);
		parent_hold();
		printf("tree: child burst %d MiB, parent %d MiB\n", TREE_BURST_N, PARENT_N);
		return 0;
	}
	static void *kept[KEEP_N];
	if (argc > 1 && strcmp(argv[1], "slow") == 0)
		sleep_ms(4000); /* time for a browser to open the --live page first */
	sleep_ms(150); /* a baseline before the burst, for the timeline */
	burst(BURST_N);
	sleep_ms(150);
	churn_temp();
	hold(kept);
	sleep_ms(250);
	sink = kept[0];
	printf("burst %d MiB (peak), temporary %d B, kept %d B\n", BURST_N, TEMP_N * TEMP_SZ, KEEP_N * KEEP_SZ);
	return 0;
}
