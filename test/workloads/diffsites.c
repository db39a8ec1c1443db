/*
 * diffsites: two runs of this program differ in one site only, for
 * heaplens diff. Sites and their exact bytes (F = argv[1], 1 or 2):
 *   steady_keep   20000 blocks of 256 B, kept      (5000 KiB, leaked)
 *   steady_big    8 blocks of 1 MiB, kept          (8 MiB, leaked)
 *   steady_churn  20000 blocks of 4 KiB, freed     (80000 KiB allocated)
 *   scaled_keep   F*256 blocks of 64 KiB, kept     (F*16 MiB, leaked)
 * Prints nothing; exits 0.
 */
#include <stdlib.h>
#include <string.h>

static void *volatile sink;

__attribute__((noinline)) static void steady_keep(void **out)
{
	for (int i = 0; i < 20000; i++) {
		out[i] = malloc(256);
		memset(out[i], 1, 256);
	}
}

__attribute__((noinline)) static void steady_big(void **out)
{
	for (int i = 0; i < 8; i++) {
		out[i] = malloc(1 << 20);
		memset(out[i], 2, 64);
	}
}

__attribute__((noinline)) static void steady_churn(void)
{
	for (int i = 0; i < 20000; i++) {
		char *p = malloc(4096);
		p[0] = (char)i;
		sink = p;
		free(p);
	}
}

__attribute__((noinline)) static void scaled_keep(void **out, int n)
{
	for (int i = 0; i < n; i++) {
		out[i] = malloc(64 << 10);
		memset(out[i], 3, 64);
	}
}

int main(int argc, char **argv)
{
	int f = argc > 1 ? atoi(argv[1]) : 1;
	if (f < 1 || f > 4)
		return 2;
	static void *keep[20000], *big[8], *scaled[4 * 256];
	steady_keep(keep);
	steady_big(big);
	steady_churn();
	scaled_keep(scaled, f * 256);
	sink = keep[0];
	return 0;
}
