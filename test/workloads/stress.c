/*
 * stress: THREADS threads each make ITERS allocations of mixed sizes (8 B to
 * 256 KiB, some aligned, some realloc'd), hand half of them to other threads
 * to free (cross-thread frees through a shared slot array), and the main
 * thread fork()s children in the middle that allocate, check and exit. Every
 * block carries a pattern that is verified before it is freed; the output is
 * a deterministic summary that must be the same with and without heaplens,
 * with the exact bytes and blocks the workers and the children allocated
 * (replayed from the same generators), for the tests' known answers.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 8
#define SLOTS 4096

static long iters = 250000;
static unsigned char *_Atomic slots[SLOTS];
static _Atomic long bad, exchanged;

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
	return *s;
}

/* What one make() asks the allocator for: a size, and which call. */
struct req {
	uint64_t r;
	size_t sz;
};

static struct req plan(uint64_t *rng)
{
	uint64_t r = next(rng);
	size_t sz = (r % 8 == 0) ? 4096 + r % (256 << 10) : 8 + r % 512;
	return (struct req){r, sz};
}

/* Adds what one make() allocates to *bytes and *blocks, as the allocator
 * is asked: aligned_alloc rounds up to its alignment, the realloc path is
 * two allocations (the malloc, then the realloc). */
static void count(struct req q, uint64_t *bytes, uint64_t *blocks)
{
	switch (q.r % 5) {
	case 1: *bytes += (q.sz + 63) & ~(size_t)63, *blocks += 1; break;
	case 2: *bytes += q.sz / 2 + 1 + q.sz, *blocks += 2; break;
	default: *bytes += q.sz, *blocks += 1; break;
	}
}

/* First byte: pattern seed; the block is filled with it so any corruption shows. */
static unsigned char *make(uint64_t *rng, size_t *n)
{
	struct req q = plan(rng);
	uint64_t r = q.r;
	size_t sz = q.sz;
	unsigned char *p;
	switch (r % 5) {
	case 0: p = calloc(1, sz); break;
	case 1: p = aligned_alloc(64, (sz + 63) & ~(size_t)63); break;
	case 2: p = realloc(malloc(sz / 2 + 1), sz); break;
	default: p = malloc(sz); break;
	}
	if (!p)
		abort();
	unsigned char v = (unsigned char)(r >> 32) | 1;
	memset(p, v, 8);
	p[sz - 1] = v;
	*n = sz;
	return p;
}

static void check_free(unsigned char *p, size_t sz)
{
	unsigned char v = p[0];
	for (int i = 1; i < 8; i++)
		if (p[i] != v)
			bad++;
	if (sz && p[sz - 1] != v)
		bad++;
	free(p);
}


static uint64_t worker_seed(uintptr_t i) { return 0x9e3779b97f4a7c15ull * (i + 1); }

/* What the workers and the children allocate, replayed without allocating. */
static void expect(uint64_t *bytes, uint64_t *blocks, uint64_t *cbytes, uint64_t *cblocks)
{
	for (uintptr_t w = 0; w < THREADS; w++) {
		uint64_t rng = worker_seed(w);
		for (long i = 0; i < iters; i++) {
			count(plan(&rng), bytes, blocks);
			if (!(i & 1))
				next(&rng); /* the slot */
		}
	}
	for (int k = 0; k < 20; k++) {
		uint64_t rng = 77 + (uint64_t)k;
		for (int i = 0; i < 2000; i++)
			count(plan(&rng), cbytes, cblocks);
	}
}

static void *worker(void *arg)
{
	uint64_t rng = worker_seed((uintptr_t)arg);
	for (long i = 0; i < iters; i++) {
		size_t sz;
		unsigned char *p = make(&rng, &sz);
		if (i & 1) {
			check_free(p, sz);
			continue;
		}
		p[sz - 1] = p[0];
		unsigned char *old = __atomic_exchange_n(&slots[next(&rng) % SLOTS], p, __ATOMIC_ACQ_REL);
		if (old) {
			exchanged++;
			check_free(old, 0);
		}
	}
	return NULL;
}

static int child_work(int k)
{
	uint64_t rng = 77 + (uint64_t)k;
	long sum = 0;
	for (int i = 0; i < 2000; i++) {
		size_t sz;
		unsigned char *p = make(&rng, &sz);
		sum += p[0] == p[sz - 1];
		free(p);
	}
	return sum == 2000 ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		iters = atol(argv[1]);
	pthread_t t[THREADS];
	for (long i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	int child_failures = 0, forks = 0;
	for (int k = 0; k < 20; k++) { /* fork while the workers allocate */
		usleep(2000);
		pid_t pid = fork();
		if (pid == 0)
			_exit(child_work(k));
		int st;
		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			child_failures++;
		forks++;
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < SLOTS; i++)
		if (slots[i])
			check_free(slots[i], 0);
	uint64_t bytes = 0, blocks = 0, cbytes = 0, cblocks = 0;
	expect(&bytes, &blocks, &cbytes, &cblocks);
	printf("threads=%d iterations=%ld forks=%d child_failures=%d corrupt=%ld\n", THREADS, iters, forks,
	       child_failures, (long)bad);
	/* What the workers allocated, and the 20 children together. */
	printf("worker_bytes=%llu worker_blocks=%llu child_bytes=%llu child_blocks=%llu\n", (unsigned long long)bytes,
	       (unsigned long long)blocks, (unsigned long long)cbytes, (unsigned long long)cblocks);
	return bad || child_failures;
}
