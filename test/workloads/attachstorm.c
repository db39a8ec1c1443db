/*
 * attachstorm: busy moments to attach in, for heaplens attach.
 *   attachstorm fork N   forks N children one after another (each
 *                        allocates and keeps 10 blocks, exits 0) while 3
 *                        threads allocate and free; prints how many
 *                        children exited 0.
 *   attachstorm omp N    runs N OpenMP regions of the default team size,
 *                        each allocating in every thread for ~20 ms;
 *                        prints the team sizes seen and what they summed.
 * Build with -fopenmp. stdout is the same in every run.
 */
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop;
static void *volatile sink;

static void *spin(void *arg)
{
	unsigned seed = (unsigned)(size_t)arg;
	while (!atomic_load(&stop)) {
		void *p = malloc(64 + (rand_r(&seed) & 4095));
		sink = p;
		free(p);
	}
	return NULL;
}

__attribute__((noinline)) static void child_keep(void)
{
	for (int i = 0; i < 10; i++)
		sink = malloc(1000);
}

static int forks(int n)
{
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, spin, (void *)(size_t)(i + 1));
	int ok = 0;
	for (int k = 0; k < n; k++) {
		pid_t pid = fork();
		if (pid == 0) {
			child_keep();
			exit(0);
		}
		int st;
		if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0)
			ok++;
		struct timespec d = {0, 2000000};
		nanosleep(&d, NULL);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	printf("children ok %d of %d\n", ok, n);
	return ok == n ? 0 : 1;
}

__attribute__((noinline)) static long region(void)
{
	long sum = 0;
	int team = 0;
#pragma omp parallel reduction(+ : sum)
	{
#pragma omp single
		team = omp_get_num_threads();
		for (int i = 0; i < 200; i++) {
			char *p = malloc(4096 + (size_t)i);
			memset(p, i & 0x7f, 4096);
			sink = p; /* or the compiler drops the allocation */
			sum += p[100];
			free(p);
			struct timespec d = {0, 100000};
			nanosleep(&d, NULL);
		}
	}
	return sum * 1000 + team;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	int n = atoi(argv[2]);
	if (!strcmp(argv[1], "fork"))
		return forks(n);
	for (int k = 0; k < n; k++) {
		long r = region();
		printf("region %d team %ld sum %ld\n", k, r % 1000, r / 1000);
	}
	return 0;
}
