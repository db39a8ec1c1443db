/*
 * sanstress: the library's hooks under ThreadSanitizer or AddressSanitizer
 * (built with -DHEAPLENS_HARNESS and -include rename.h, so malloc here is
 * the library's hl_malloc on top of the sanitizer's malloc). THREADS threads
 * call every allocation function, check a pattern before each free, free
 * each other's blocks, work under pool tokens and wait on condition
 * variables; a consumer thread drains the ring as the agent does; the main
 * thread forks children meanwhile, which allocate, drain their own ring and
 * check it. GCC 12's sanitizers do not lock their own allocators at fork (a
 * child forked while another thread refilled its cache hangs in it), so the
 * workers step aside through a gate while the main thread forks; forking
 * while other threads unwind is tested on the real library instead
 * (test/workloads/unwindfork.c). At HEAPLENS_RATE=1 every call is sampled, so each ring must hold
 * one ALLOC record per allocation call, or have counted it dropped.
 * Prints "ok ..." and exits 0, or prints FAIL and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../preload/heaplens_ring.h"

struct hl_ring_header *ring_now(void);
uint64_t heaplens_pool_capture(void);
uint64_t heaplens_pool_enter(uint64_t token);
void heaplens_pool_exit(uint64_t prev);
int hl_pthread_cond_timedwait(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);

#define THREADS 4
#define SLOTS 256

static long iters = 3000;
static int forks = 8;
static unsigned char *_Atomic slots[SLOTS];
static _Atomic uint64_t calls, bytes; /* allocation calls made and bytes asked for */
static _Atomic int stop, failed;
static uint64_t pool_token;
static pthread_rwlock_t gate; /* workers read-lock it around each block they make; fork write-locks it */
static _Atomic uint64_t waiter_token; /* the forking thread works under it: its children must not */

#define FAIL(...)                                  \
	do {                                       \
		printf("FAIL " __VA_ARGS__);       \
		putchar('\n');                     \
		fflush(stdout);                    \
		failed = 1;                        \
	} while (0)

/* ---- the agent's side of the ring (docs/ring-format.md, "Protocol") ---- */

struct tally {
	uint64_t allocs, alloc_bytes, frees;
	uint64_t origins; /* ALLOCs made on behalf of another thread (HL_ALLOC_ORIGIN) */
};

/* Consumes every committed record; returns 0 at a malformed one. */
static int drain(struct hl_ring_header *h, struct tally *t)
{
	uint8_t *data = (uint8_t *)h + HL_RING_HEADER_SIZE;
	uint64_t mask = h->data_size - 1, tail = __atomic_load_n(&h->tail, __ATOMIC_RELAXED);
	for (;;) {
		uint64_t hdr = __atomic_load_n((uint64_t *)(data + (tail & mask)), __ATOMIC_ACQUIRE);
		if (!hdr)
			return 1;
		uint32_t len = (uint32_t)hdr, type = hdr >> 32 & 0xff;
		if (len < 8 || len % 8 || len > h->data_size)
			return 0;
		if (type == HL_REC_ALLOC) {
			t->allocs++;
			t->alloc_bytes += *(uint64_t *)(data + ((tail + 24) & mask));
			t->origins += *(uint64_t *)(data + ((tail + 32) & mask)) >> 32 & HL_ALLOC_ORIGIN ? 1 : 0;
		} else if (type == HL_REC_FREE)
			t->frees++;
		for (uint64_t i = 0; i < len; i += 8)
			*(uint64_t *)(data + ((tail + i) & mask)) = 0;
		tail += len;
		__atomic_store_n(&h->tail, tail, __ATOMIC_RELEASE);
	}
}

/* The ring holds one ALLOC per call (bytes as asked), less what it counted dropped. */
static int check_ring(struct hl_ring_header *h, const struct tally *t, uint64_t n, uint64_t b, const char *who)
{
	uint64_t dropped = __atomic_load_n(&h->dropped_alloc, __ATOMIC_RELAXED);
	if (t->allocs + dropped != n) {
		FAIL("%s: %llu ALLOC records + %llu dropped, want %llu calls", who, (unsigned long long)t->allocs,
		     (unsigned long long)dropped, (unsigned long long)n);
		return 0;
	}
	if (!dropped && t->alloc_bytes != b) {
		FAIL("%s: ALLOC records hold %llu bytes, want %llu", who, (unsigned long long)t->alloc_bytes,
		     (unsigned long long)b);
		return 0;
	}
	return 1;
}

static void *consumer(void *arg)
{
	struct tally *t = arg;
	struct hl_ring_header *h = ring_now();
	while (!stop)
		if (!drain(h, t)) {
			FAIL("malformed record");
			stop = 1;
		}
	return NULL;
}

/* ---- the program's side ---- */

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
	return *s;
}

/* One block from one of the allocation functions; its first and last bytes carry v. */
static unsigned char *make(uint64_t *rng, size_t *n, uint64_t *ncalls, uint64_t *nbytes)
{
	uint64_t r = next(rng);
	size_t sz = r % 16 == 0 ? 4096 + r % (64 << 10) : 1 + r % 600;
	unsigned char *p = NULL;
	void *q;
	switch (r % 7) {
	case 0: p = calloc(1, sz); break;
	case 1: p = aligned_alloc(64, (sz + 63) & ~(size_t)63), sz = (sz + 63) & ~(size_t)63; break;
	case 2: p = posix_memalign(&q, 128, sz) ? NULL : q; break;
	case 3: p = memalign(256, sz); break;
	case 4: /* two calls: the first block is moved by the second */
		p = malloc(sz / 2 + 1);
		*ncalls += 1, *nbytes += sz / 2 + 1;
		p = realloc(p, sz);
		break;
	case 5: p = reallocarray(NULL, sz, 1); break;
	default: p = malloc(sz); break;
	}
	if (!p) {
		printf("FAIL allocation of %zu bytes: %s\n", sz, strerror(errno));
		abort();
	}
	if (malloc_usable_size(p) < sz)
		FAIL("usable size %zu < %zu", malloc_usable_size(p), sz);
	*ncalls += 1, *nbytes += sz;
	unsigned char v = (unsigned char)(r >> 40) | 1;
	p[0] = v, p[sz - 1] = v;
	*n = sz;
	return p;
}

static void check_free(unsigned char *p, size_t sz)
{
	if (p[0] != p[sz - 1])
		FAIL("block %p corrupt", (void *)p);
	free(p);
}

struct cell {
	unsigned char *p;
	size_t n;
};

static void *worker(void *arg)
{
	uint64_t rng = 0x9e3779b97f4a7c15ull * ((uintptr_t)arg + 1), nc = 0, nb = 0;
	for (long i = 0; i < iters; i++) {
		pthread_rwlock_rdlock(&gate);
		uint64_t prev = i % 4 == 0 ? heaplens_pool_enter(pool_token) : 0;
		size_t sz;
		unsigned char *p = make(&rng, &sz, &nc, &nb);
		if (i % 4 == 0)
			heaplens_pool_exit(prev);
		if (i & 1) {
			check_free(p, sz);
			pthread_rwlock_unlock(&gate);
			continue;
		}
		struct cell *c = malloc(sizeof *c); /* handed over with the block, freed by whoever takes it */
		nc++, nb += sizeof *c;
		c->p = p, c->n = sz;
		struct cell *old = (struct cell *)__atomic_exchange_n(&slots[next(&rng) % SLOTS], (unsigned char *)c, __ATOMIC_ACQ_REL);
		if (old) {
			check_free(old->p, old->n);
			free(old);
		}
		pthread_rwlock_unlock(&gate);
	}
	calls += nc;
	bytes += nb;
	return NULL;
}

static void *waiter(void *arg)
{
	(void)arg;
	pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t c = PTHREAD_COND_INITIALIZER;
	waiter_token = heaplens_pool_capture();
	pthread_mutex_lock(&m);
	while (!stop) {
		struct timespec t;
		clock_gettime(CLOCK_REALTIME, &t);
		t.tv_nsec += 1000000;
		if (t.tv_nsec >= 1000000000)
			t.tv_sec++, t.tv_nsec -= 1000000000;
		hl_pthread_cond_timedwait(&c, &m, &t);
	}
	pthread_mutex_unlock(&m);
	return NULL;
}

/* A fork child: its own ring, forked from the parent's, holding its own allocations. */
static int child(int k, struct hl_ring_header *parent)
{
	struct hl_ring_header *h = ring_now();
	if (!h || h == parent || !(h->flags & HL_FLAG_FORKED) || h->parent_pid != getppid() || h->pid != getpid()) {
		printf("FAIL child %d: no ring of its own\n", k);
		return 1;
	}
	uint64_t rng = 77 + (uint64_t)k, nc = 0, nb = 0;
	struct tally t = {0};
	for (int i = 0; i < 500; i++) {
		size_t sz;
		unsigned char *p = make(&rng, &sz, &nc, &nb);
		check_free(p, sz);
		if (i % 100 == 0)
			drain(h, &t);
	}
	drain(h, &t);
	if (!check_ring(h, &t, nc, nb, "child") || t.frees + h->dropped_free != nc || failed)
		return 1;
	if (t.origins) { /* the token and its stack belong to the parent's threads */
		printf("FAIL child %d: %llu allocations attributed to the parent's pool token\n", k, (unsigned long long)t.origins);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		iters = atol(argv[1]);
	if (argc > 2)
		forks = atoi(argv[2]);
	struct hl_ring_header *h = ring_now();
	if (!h) {
		printf("FAIL no ring: set HEAPLENS_DIR\n");
		return 1;
	}
	pool_token = heaplens_pool_capture();
	pthread_rwlockattr_t ga;
	pthread_rwlockattr_init(&ga);
	pthread_rwlockattr_setkind_np(&ga, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&gate, &ga);
	struct tally t = {0};
	pthread_t th[THREADS], cons, wait;
	pthread_create(&cons, NULL, consumer, &t);
	pthread_create(&wait, NULL, waiter, NULL);
	for (long i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, worker, (void *)i);
	int child_failures = 0;
	for (int k = 0; k < forks; k++) { /* fork while the workers sample and unwind */
		usleep(5000);
		fflush(stdout);
		while (!waiter_token)
			usleep(100);
		uint64_t prev = heaplens_pool_enter(waiter_token);
		pthread_rwlock_wrlock(&gate);
		pid_t pid = fork();
		if (pid == 0) {
			int rc = child(k, h);
			fflush(stdout);
			_exit(rc);
		}
		pthread_rwlock_unlock(&gate);
		heaplens_pool_exit(prev);
		int st;
		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			printf("FAIL child %d: status %#x\n", k, st);
			child_failures++;
		}
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < SLOTS; i++)
		if (slots[i]) {
			struct cell *c = (struct cell *)slots[i];
			check_free(c->p, c->n);
			free(c);
		}
	stop = 1;
	pthread_join(cons, NULL);
	pthread_join(wait, NULL);
	drain(h, &t);
	check_ring(h, &t, calls, bytes, "parent");
	printf("%s threads=%d calls=%llu records=%llu dropped=%llu forks=%d child_failures=%d\n", failed || child_failures ? "FAIL" : "ok",
	       THREADS, (unsigned long long)calls, (unsigned long long)t.allocs,
	       (unsigned long long)h->dropped_alloc, forks, child_failures);
	return failed || child_failures;
}
