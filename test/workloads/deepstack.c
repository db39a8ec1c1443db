/*
 * deepstack: one 1 MiB block allocated at the bottom of a recursion 5000
 * calls deep, deeper than the 4096 native frames the library records; and
 * one at depth 10. The library cuts the first stack, and reports mark it.
 */
#include <stdio.h>
#include <stdlib.h>

static void *volatile keep[2];

__attribute__((noinline)) static int down(int n, int slot)
{
	if (n == 0) {
		keep[slot] = malloc(1 << 20);
		return 1;
	}
	int r = down(n - 1, slot);
	__asm__ volatile("" ::: "memory"); /* no tail call */
	return r + 1;
}

int main(void)
{
	int a = down(5000, 0), b = down(10, 1);
	printf("%d %d\n", a, b);
	return 0;
}
