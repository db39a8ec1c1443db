/*
 * exactfrees: frees that --rate 1's exact mode must pair right, with known
 * answers. The parent keeps PARENT_N blocks of PARENT_SZ bytes
 * (parent_keep), and one block of FAILED_SZ bytes whose realloc to an
 * impossible size fails (failed_grow: the block lives on). A fork child,
 * whose profile starts empty, frees half of the parent's blocks and
 * reallocs the other half to CHILD_SZ bytes (child_grow), which it keeps:
 * frees of blocks it never saw allocated, left out. It also allocates and
 * frees CHURN_N blocks of its own (child_churn). After the child exits the
 * parent frees FREED_N of its blocks. Known answers, leaked at exit:
 *   parent: parent_keep (PARENT_N - FREED_N) * PARENT_SZ, failed_grow FAILED_SZ
 *   child:  child_grow (PARENT_N / 2) * CHILD_SZ, child_churn 0
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PARENT_N 100
#define PARENT_SZ 1000
#define FREED_N 30
#define FAILED_SZ 777
#define CHILD_SZ 2000
#define CHURN_N 1000

static void *blocks[PARENT_N];
static void *volatile sink;
static volatile size_t huge = SIZE_MAX / 4; /* no allocator gives this: realloc fails */

__attribute__((noinline)) static void parent_keep(void)
{
	for (int i = 0; i < PARENT_N; i++) {
		blocks[i] = malloc(PARENT_SZ);
		memset(blocks[i], 1, PARENT_SZ);
	}
}

__attribute__((noinline)) static void *failed_grow(void)
{
	char *p = malloc(FAILED_SZ);
	memset(p, 2, FAILED_SZ);
	errno = 0;
	if (realloc(p, huge) != NULL || errno != ENOMEM) {
		fprintf(stderr, "realloc to %zu bytes did not fail with ENOMEM\n", (size_t)huge);
		exit(2);
	}
	return p;
}

__attribute__((noinline)) static void child_grow(void)
{
	for (int i = PARENT_N / 2; i < PARENT_N; i++) {
		void *q = realloc(blocks[i], CHILD_SZ);
		if (!q)
			exit(3);
		blocks[i] = q;
	}
}

__attribute__((noinline)) static void child_churn(void)
{
	for (int i = 0; i < CHURN_N; i++) {
		sink = malloc(64 + i % 200);
		free(sink);
	}
}

int main(void)
{
	parent_keep();
	sink = failed_grow();
	pid_t pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		for (int i = 0; i < PARENT_N / 2; i++)
			free(blocks[i]);
		child_grow();
		child_churn();
		exit(0);
	}
	int st;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return 4;
	for (int i = 0; i < FREED_N; i++)
		free(blocks[i]);
	printf("ok\n");
	return 0;
}
