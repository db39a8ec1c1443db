/*
 * splicecallers: one function reached from different callers at equal
 * stack depth, so that consecutive samples meet a frame with the same pc
 * and CFA whose outer frames differ: the case where the library's walk
 * must not splice onto the thread's last walk (unwind.c), which it does in
 * Python processes: a shared library that splicecallers.py calls. Four routes to
 * mid, each allocating its own size, in an order that switches often and
 * sometimes repeats:
 *   A: splice_run;route_a;mid;leaf (1000 B)   B: splice_run;route_b;mid;leaf (2000 B)
 *   P: splice_run;route_p;shared;mid;leaf (3000 B)   Q: splice_run;route_q;shared;mid;leaf (4000 B)
 * A and B differ at mid's return address, P and Q one frame further out,
 * at shared's. splice_run gives each route's count and whether the CFAs
 * were in fact equal, without which the test would not test that case.
 */
#include <stdlib.h>

static void *volatile sink;
static void *cfa_seen[4];
static int route_now;

__attribute__((noipa)) static void leaf(size_t n)
{
	void *p = malloc(n);
	sink = p;
	free(p);
}

__attribute__((noipa)) static void mid(size_t n)
{
	cfa_seen[route_now] = __builtin_frame_address(0);
	leaf(n);
	__asm__ volatile("" ::: "memory"); /* no tail call */
}

/* The routes' frames are alike, so mid's CFA is the same under each pair. */
__attribute__((noipa)) static void route_a(size_t n) { mid(n); __asm__ volatile("" ::: "memory"); }
__attribute__((noipa)) static void route_b(size_t n) { mid(n); __asm__ volatile("" ::: "memory"); }
__attribute__((noipa)) static void shared(size_t n) { mid(n); __asm__ volatile("" ::: "memory"); }
__attribute__((noipa)) static void route_p(size_t n) { shared(n); __asm__ volatile("" ::: "memory"); }
__attribute__((noipa)) static void route_q(size_t n) { shared(n); __asm__ volatile("" ::: "memory"); }

__attribute__((visibility("default"))) int splice_run(long iters, long *count)
{
	unsigned x = 12345;
	for (long i = 0; i < iters; i++) {
		x = x * 1103515245u + 12345u;
		int r = (int)(x >> 16) & 3;
		route_now = r;
		count[r]++;
		switch (r) {
		case 0: route_a(1000); break;
		case 1: route_b(2000); break;
		case 2: route_p(3000); break;
		default: route_q(4000); break;
		}
	}
	return cfa_seen[0] == cfa_seen[1] && cfa_seen[2] == cfa_seen[3];
}
