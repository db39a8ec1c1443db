/*
 * many_objects: a process with many loaded objects, for the attach pause
 * (hlbench attach). Usage: many_objects SECONDS LIB...
 * It dlopens every LIB (each defines obj_work, which allocates), then for
 * SECONDS runs a 1 ms loop on the main thread (absolute sleeps), calling
 * one object's obj_work per round, and measures how late each sleep wakes
 * up. A second thread waits in read() on a pipe that never has data. At the
 * end it prints "max_late_ms=X late2=N rounds=R": the worst lateness and
 * the rounds late by more than 2 ms.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int64_t now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int fds[2];

static void *reader(void *arg)
{
	(void)arg;
	char c;
	while (read(fds[0], &c, 1) > 0)
		;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	double seconds = atof(argv[1]);
	int n = argc - 2;
	void (**work)(void) = calloc((size_t)n, sizeof *work);
	for (int i = 0; i < n; i++) {
		void *h = dlopen(argv[i + 2], RTLD_NOW | RTLD_LOCAL);
		if (!h || !(*(void **)&work[i] = dlsym(h, "obj_work"))) {
			fprintf(stderr, "%s: %s\n", argv[i + 2], dlerror());
			return 1;
		}
	}
	if (pipe(fds))
		return 1;
	pthread_t t;
	pthread_create(&t, NULL, reader, NULL);
	int64_t start = now(), worst = 0;
	long rounds = (long)(seconds * 1000), late2 = 0;
	for (long r = 1; r <= rounds; r++) {
		work[r % n]();
		int64_t due = start + r * 1000000;
		struct timespec ts = {due / 1000000000, due % 1000000000};
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
		int64_t late = now() - due;
		worst = late > worst ? late : worst;
		late2 += late > 2000000;
	}
	printf("max_late_ms=%.3f late2=%ld rounds=%ld\n", (double)worst / 1e6, late2, rounds);
	return 0;
}
