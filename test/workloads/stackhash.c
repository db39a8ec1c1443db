/*
 * The library's stack identity (docs/ring-format.md, "A stack's identity")
 * over 2^20 distinct stacks shaped like real ones, hashed as
 * preload/sampler.c's stack_hash does, with the library's own MIX, both
 * ways: native frames folded from the outermost in (a walk that splices)
 * and from the innermost (one that does not). Prints, for each way, the
 * pairs of stacks whose 48-bit keys are equal, the pairs whose keys' top
 * and low 24 bits are, and the chi-square of the 16384 home slots; TestStackHashKeys
 * compares them with what a random function gives.
 *
 * The stacks are the nodes of a call tree: each node's stack is its
 * parent's plus one frame, and siblings' frames differ only in a few low
 * bits (call sites a few bytes apart, code objects 192 bytes apart,
 * positions 2 apart), where a weak hash would collide first.
 * Usage: stackhash [SEED].
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>

#include "../../preload/unwind.h" /* MIX */

#define NODES (1u << 20)
#define MAXDEPTH 64
#define SLOTS 16384u /* HL_STACK_REFS */

static uint32_t parent[NODES], depth[NODES], children[NODES];
static uint64_t word[NODES][2]; /* a native frame's return address, or a Python frame's code and position */
static uint8_t python[NODES];
static uint64_t keys[NODES];

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return rng;
}

/*
 * A new child of p: a call site in the parent's function, 5 bytes after
 * its previous sibling's, or a Python frame whose code object is 192 bytes
 * from its neighbours'. Every word names one node, so no two nodes' stacks
 * are equal, even as the library sees them (native and Python frames apart).
 */
static void add(uint32_t i, uint32_t p)
{
	uint32_t k = children[p]++;
	if (k >= 13000) {
		fprintf(stderr, "node %u has too many children\n", p);
		exit(2);
	}
	parent[i] = p, depth[i] = depth[p] + 1;
	python[i] = next() % 3 == 0;
	if (python[i]) {
		word[i][0] = 0x7f3a5c000000ull + 192 * (uint64_t)(i % 4096);  /* its code object */
		word[i][1] = (uint64_t)(i % 4096 + 1) << 32 | 2 * (i / 4096); /* the code's identity, a position */
	} else
		word[i][0] = 0x55d1e3400000ull + ((uint64_t)p << 16) + 5 * k;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* The hash of node i's stack: sampler.c's stack_hash, splice or not. */
static uint64_t hash(uint32_t i, int splice)
{
	uint32_t path[MAXDEPTH + 1], n = 0, nf = 0, npy = 0;
	for (uint32_t j = i; j; j = parent[j])
		path[n++] = j; /* innermost first */
	for (uint32_t j = 0; j < n; j++)
		python[path[j]] ? npy++ : nf++;
	uint64_t x = (uint64_t)nf << 32 ^ npy, w = 0;
	if (splice) {
		for (uint32_t j = n; j-- > 0;) /* walk_hash: from the outermost in */
			if (!python[path[j]])
				MIX(w, word[path[j]][0]);
		MIX(x, w);
	} else
		for (uint32_t j = 0; j < n; j++)
			if (!python[path[j]])
				MIX(x, word[path[j]][0]);
	for (uint32_t j = 0; j < n; j++) /* py_hash: innermost first, two words a frame */
		if (python[path[j]])
			MIX(x, word[path[j]][0]), MIX(x, word[path[j]][1]);
	return x;
}

/* Pairs of equal values among the sorted a[0..n) under mask. */
static uint64_t pairs(const uint64_t *a, uint32_t n, uint64_t mask)
{
	uint64_t total = 0, run = 1;
	for (uint32_t i = 1; i <= n; i++) {
		if (i < n && (a[i] & mask) == (a[i - 1] & mask)) {
			run++;
			continue;
		}
		total += run * (run - 1) / 2, run = 1;
	}
	return total;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		rng ^= strtoull(argv[1], NULL, 0) * 0x9e3779b97f4a7c15ull;
	/*
	 * Each new node calls deeper from the last one, or returns a few
	 * levels (not into the 4 start-up frames) and calls from there; now
	 * and then the program moves elsewhere (another request, another
	 * thread): to any node so far.
	 */
	uint32_t at = 0;
	for (uint32_t i = 1; i < NODES; i++) {
		if (i > 4 && next() % 32 == 0)
			at = 4 + (uint32_t)(next() % (i - 4));
		else if (next() % 5 < 2) {
			uint32_t up = 1 + (uint32_t)(next() % 3);
			while (up-- && depth[at] > 4)
				at = parent[at];
		}
		if (depth[at] >= MAXDEPTH)
			at = parent[at];
		add(i, at);
		at = i;
	}
	static uint32_t slot[SLOTS];
	for (int splice = 1; splice >= 0; splice--) {
		for (uint32_t i = 0; i < SLOTS; i++)
			slot[i] = 0;
		for (uint32_t i = 1; i < NODES; i++) {
			uint64_t x = hash(i, splice);
			keys[i - 1] = x & ~0xffffull; /* sampler.c's STACK_KEY */
			slot[(x >> 16) & (SLOTS - 1)]++;
		}
		uint32_t n = NODES - 1;
		double e = (double)n / SLOTS, chi2 = 0;
		for (uint32_t i = 0; i < SLOTS; i++)
			chi2 += (slot[i] - e) * (slot[i] - e) / e;
		qsort(keys, n, sizeof keys[0], cmp);
		uint64_t p48 = pairs(keys, n, ~0xffffull), hi24 = pairs(keys, n, ~0ull << 40);
		for (uint32_t i = 0; i < n; i++)
			keys[i] = keys[i] >> 16 & 0xffffff; /* the key's low 24 bits */
		qsort(keys, n, sizeof keys[0], cmp);
		printf("splice=%d stacks=%u pairs48=%llu pairs_hi24=%llu pairs_lo24=%llu chi2=%.1f\n", splice, n, (unsigned long long)p48,
		       (unsigned long long)hi24, (unsigned long long)pairs(keys, n, ~0ull), chi2);
	}
	return 0;
}
