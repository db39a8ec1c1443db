/*
 * attachserver: a threaded C server loop with a slow leak, for heaplens
 * attach. Usage: attachserver SECONDS LOG
 * Every 10 ms tick, for SECONDS seconds, the main thread serves a request;
 * every 10th tick leak_slowly keeps a 512 KiB block forever and appends
 * "CLOCK_MONOTONIC-ns bytes" to LOG, so that a test knows what leaked when.
 * Three workers churn meanwhile (malloc, calloc, realloc, free of 1 B to
 * 64 KiB), 20 times per tick and about as long as the main loop, summing
 * what they read back. The main
 * thread also measures how late its sleeps wake up. stdout is the same in
 * every run: every 100th tick, then the workers' checksum; the worst
 * lateness goes to LOG. Exits 0.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LEAK (512 << 10)

static void *volatile sink;

static int64_t now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

__attribute__((noinline)) static void *leak_slowly(void)
{
	char *p = malloc(LEAK);
	memset(p, 7, LEAK);
	return p;
}

__attribute__((noinline)) static uint64_t churn(uint64_t *seed)
{
	uint64_t sum = 0;
	*seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
	size_t n = 1 + (*seed >> 33) % (64 << 10);
	unsigned char *a = (*seed & 1) ? calloc(1, n) : malloc(n);
	memset(a, (int)(n & 0xff), n);
	unsigned char *b = realloc(a, n + 100);
	b[n] = 3;
	for (size_t i = 0; i < n + 1; i += 97)
		sum += b[i];
	free(b);
	return sum;
}

static long ticks;

static void *worker(void *arg)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg, *sum = malloc(sizeof *sum);
	*sum = 0;
	for (long i = 0; i < ticks * 20; i++) {
		*sum += churn(&seed);
		if (i % 20 == 19) {
			struct timespec d = {0, 8000000};
			nanosleep(&d, NULL);
		}
	}
	return sum;
}

__attribute__((noinline)) static void serve(void)
{
	char *req = malloc(4096);
	snprintf(req, 4096, "GET /%d", rand());
	sink = req;
	free(req);
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	ticks = atol(argv[1]) * 100;
	FILE *log = fopen(argv[2], "w");
	if (!log)
		return 2;
	setvbuf(log, NULL, _IOLBF, 0);
	pthread_t w[3];
	for (int i = 0; i < 3; i++)
		pthread_create(&w[i], NULL, worker, (void *)(uintptr_t)(i + 1));
	void **kept = calloc((size_t)ticks / 10 + 1, sizeof *kept);
	int64_t start = now(), worst = 0;
	size_t leaked = 0;
	for (long t = 1; t <= ticks; t++) {
		serve();
		if (t % 10 == 0) {
			kept[t / 10] = leak_slowly();
			leaked += LEAK;
			fprintf(log, "%lld %zu\n", (long long)now(), leaked);
		}
		if (t % 100 == 0) {
			printf("tick %ld\n", t);
			fflush(stdout);
		}
		int64_t due = start + t * 10000000;
		struct timespec ts = {due / 1000000000, due % 1000000000};
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
		int64_t late = now() - due;
		if (late > worst && now() - start > 0)
			worst = late;
	}
	uint64_t total = 0;
	for (int i = 0; i < 3; i++) {
		uint64_t *s;
		pthread_join(w[i], (void **)&s);
		total += *s;
		free(s);
	}
	printf("checksum %llu\n", (unsigned long long)total);
	fprintf(log, "worst-late-ns %lld\n", (long long)worst);
	fclose(log);
	sink = kept;
	return 0;
}
