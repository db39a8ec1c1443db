/*
 * forkstorm: CHILDREN short-lived children forked from a parent whose
 * THREADS threads keep allocating and freeing. Each child allocates
 * CHILD_N blocks of CHILD_SZ bytes, keeps them, and exits with 0.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 4
#define CHILDREN 300
#define CHILD_N 10
#define CHILD_SZ 1000

static atomic_int stop;
void *child_kept[CHILD_N];

static void *spin(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		void *p = malloc(64 + (rand() & 4095));
		free(p);
	}
	return NULL;
}

__attribute__((noinline)) static void child_keep(void)
{
	for (int i = 0; i < CHILD_N; i++)
		child_kept[i] = malloc(CHILD_SZ);
}

int main(void)
{
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, spin, NULL);
	int ok = 0;
	for (int k = 0; k < CHILDREN; k++) {
		pid_t pid = fork();
		if (pid == 0) {
			child_keep();
			exit(0);
		}
		int st;
		if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0)
			ok++;
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	printf("children ok %d of %d\n", ok, CHILDREN);
	return ok == CHILDREN ? 0 : 1;
}
