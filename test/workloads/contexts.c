/*
 * Coroutines on small stacks (makecontext/swapcontext), as green-thread
 * libraries run them, half from malloc, half mapped each on its own with a
 * guard page below: NCTX contexts, each recursing to its own
 * depth, allocating in ctx_alloc and switching back to main, which resumes
 * them round-robin. Each context keeps ROUNDS blocks of 1000 + its index
 * bytes at ctx_alloc. Usage: contexts [rounds]. Prints a checksum and "done".
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#define NCTX 16
#define STACK (32 << 10)

static ucontext_t main_ctx, ctx[NCTX];
static int rounds;
static unsigned long sum;
static void **kept;
static int nkept;

__attribute__((noinline)) static void *ctx_alloc(size_t n)
{
	char *p = malloc(n);
	if (!p)
		exit(3);
	memset(p, (int)(n & 0x7f), n);
	return p;
}

__attribute__((noinline)) static unsigned long dive(int id, int depth)
{
	volatile char pad[64];
	pad[depth % 64] = (char)id;
	if (depth > 0)
		return dive(id, depth - 1) + (unsigned long)pad[depth % 64];
	for (int r = 0; r < rounds; r++) {
		char *p = ctx_alloc(1000 + (size_t)id);
		sum += (unsigned char)p[id] + (unsigned long)r;
		kept[nkept++] = p;
		swapcontext(&ctx[id], &main_ctx);
	}
	return 0;
}

static void body(int id) { sum += dive(id, 1 + (id * 7) % 23); }

int main(int argc, char **argv)
{
	rounds = argc > 1 ? atoi(argv[1]) : 200;
	if (rounds < 1 || rounds > 100000)
		return 2;
	kept = calloc((size_t)NCTX * (size_t)rounds, sizeof *kept);
	if (!kept)
		return 3;
	for (int i = 0; i < NCTX; i++) {
		getcontext(&ctx[i]);
		if (i & 1) {
			char *m = mmap(NULL, STACK + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (m == MAP_FAILED || mprotect(m, 4096, PROT_NONE))
				return 3;
			ctx[i].uc_stack.ss_sp = m + 4096;
		} else
			ctx[i].uc_stack.ss_sp = malloc(STACK);
		ctx[i].uc_stack.ss_size = STACK;
		ctx[i].uc_link = &main_ctx;
		if (!ctx[i].uc_stack.ss_sp)
			return 3;
		makecontext(&ctx[i], (void (*)(void))body, 1, i);
	}
	/* Round-robin until every context has returned (uc_link brings it back here). */
	int live = NCTX, done[NCTX] = {0}, turns[NCTX] = {0};
	while (live)
		for (int i = 0; i < NCTX; i++)
			if (!done[i]) {
				swapcontext(&main_ctx, &ctx[i]);
				if (++turns[i] > rounds)
					done[i] = 1, live--;
			}
	for (int i = 0; i < nkept; i++)
		free(kept[i]);
	for (int i = 0; i < NCTX; i++)
		if (i & 1)
			munmap((char *)ctx[i].uc_stack.ss_sp - 4096, STACK + 4096);
		else
			free(ctx[i].uc_stack.ss_sp);
	free(kept);
	printf("blocks %d sum %lu\ndone\n", nkept, sum);
	return 0;
}
