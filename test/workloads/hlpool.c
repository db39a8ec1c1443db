/*
 * A persistent worker pool of the BLAS-server kind for the thread-pool
 * tests: workers are created once and sleep between jobs; a caller submits a
 * job of `n` tasks (each task allocates `size` bytes on a worker) and blocks
 * until the work is done. With `api` set it declares its tasks through
 * heaplens's pool API (docs/pool-api.md), looked up with dlsym so that it
 * runs unchanged without heaplens.
 *
 * pool_gate(k) holds the workers until k callers are waiting and keeps every
 * caller waiting until all submitted tasks are done, so that a test can make
 * two Python threads wait at once for the whole job.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../preload/heaplens.h" /* the pool API's declarations */

#define MAX_TASKS 65536

struct task {
	size_t size;
	uint64_t token;
	void **slot;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER, done_cv = PTHREAD_COND_INITIALIZER;
static struct task queue[MAX_TASKS];
static int head, tail, running, waiting, gate = 1;

static heaplens_pool_capture_fn capture;
static heaplens_pool_enter_fn enter;
static heaplens_pool_exit_fn leave;

static void *worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	for (;;) {
		while (head == tail || waiting < gate)
			pthread_cond_wait(&work_cv, &mu);
		struct task t = queue[head++ % MAX_TASKS];
		running++;
		pthread_mutex_unlock(&mu);
		uint64_t prev = enter && t.token ? enter(t.token) : 0;
		void *p = malloc(t.size);
		if (p)
			memset(p, 7, t.size);
		if (enter && t.token)
			leave(prev);
		pthread_mutex_lock(&mu);
		*t.slot = p;
		running--;
		if (head == tail && !running)
			pthread_cond_broadcast(&done_cv);
	}
	return NULL;
}

/* Starts the pool's workers, once. */
int pool_start(int nworkers)
{
	capture = (heaplens_pool_capture_fn)dlsym(RTLD_DEFAULT, "heaplens_pool_capture");
	enter = (heaplens_pool_enter_fn)dlsym(RTLD_DEFAULT, "heaplens_pool_enter");
	leave = (heaplens_pool_exit_fn)dlsym(RTLD_DEFAULT, "heaplens_pool_exit");
	for (int i = 0; i < nworkers; i++) {
		pthread_t th;
		if (pthread_create(&th, NULL, worker, NULL))
			return -1;
		pthread_detach(th);
	}
	return capture != NULL;
}

void pool_gate(int k)
{
	pthread_mutex_lock(&mu);
	gate = k;
	pthread_mutex_unlock(&mu);
}

/* Runs n tasks of size bytes on the pool and waits for them; frees the blocks. */
int pool_run(int n, long size, int api)
{
	void **blocks = calloc((size_t)n, sizeof *blocks);
	if (!blocks || n > MAX_TASKS / 2)
		return -1;
	uint64_t token = api && capture ? capture() : 0;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < n; i++)
		queue[tail++ % MAX_TASKS] = (struct task){(size_t)size, token, &blocks[i]};
	waiting++;
	pthread_cond_broadcast(&work_cv);
	while (head != tail || running)
		pthread_cond_wait(&done_cv, &mu);
	waiting--;
	pthread_mutex_unlock(&mu);
	int ok = 0;
	for (int i = 0; i < n; i++) {
		ok += blocks[i] != NULL;
		free(blocks[i]);
	}
	free(blocks);
	return ok;
}
