/* threads1000 creates 1,000 threads at once, each with a stack of the size
 * given (16 KiB is PTHREAD_STACK_MIN on x86-64), and each thread mallocs
 * THREAD_BLOCK bytes in thread_block, a site the test finds by name. It
 * prints how many threads it created and exits 1 at the first failure,
 * naming pthread_create's error. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 1000
#define THREAD_BLOCK 3000

static pthread_barrier_t all_started;

/* noinline: the test looks for this frame in the profile. */
__attribute__((noinline)) static char *thread_block(size_t i)
{
	char *p = malloc(THREAD_BLOCK);
	if (p)
		memset(p, (int)(i & 0xff), THREAD_BLOCK);
	return p;
}

static void *worker(void *arg)
{
	size_t i = (size_t)arg;
	char *p = thread_block(i);
	/* Every thread is alive at once: the process holds 1,000 stacks. */
	pthread_barrier_wait(&all_started);
	long ok = p != NULL && p[THREAD_BLOCK - 1] == (char)(i & 0xff);
	free(p);
	return (void *)ok;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s STACK_BYTES\n", argv[0]);
		return 2;
	}
	size_t stack = strtoul(argv[1], NULL, 0);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	int err = pthread_attr_setstacksize(&attr, stack);
	if (err) {
		printf("pthread_attr_setstacksize %zu: %s\n", stack, strerror(err));
		return 1;
	}
	pthread_barrier_init(&all_started, NULL, THREADS + 1);
	static pthread_t tids[THREADS];
	for (size_t i = 0; i < THREADS; i++) {
		err = pthread_create(&tids[i], &attr, worker, (void *)i);
		if (err) {
			printf("stack %zu: created %zu threads, then pthread_create: %s\n", stack, i, strerror(err));
			return 1; /* the threads created wait at the barrier: exit ends them */
		}
	}
	pthread_barrier_wait(&all_started);
	long good = 0;
	for (size_t i = 0; i < THREADS; i++) {
		void *ok;
		pthread_join(tids[i], &ok);
		good += (long)ok;
	}
	printf("stack %zu: created %d threads, %ld blocks of %d bytes checked\n", stack, THREADS, good, THREAD_BLOCK);
	return good == THREADS ? 0 : 1;
}
