/* shortrun: a run of about 30 ms that touches MIB mebibytes (argv[1], 40
 * by default) in one block, so that its peak RSS is known from the kernel
 * (/usr/bin/time's %M) and lasts less than the agent's 100 ms between RSS
 * readings. With argv[2] = "late", it instead touches 48 MiB for 0.15 s,
 * frees them, allocates eight 4 MiB blocks at once, sleeps 1.3 s (past the
 * agent's reading of residency at about 1 s),
 * fills them with ones and exits 0.2 s later (before the next one) without
 * freeing them: the leaks view must find them resident. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
	size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 40;
	if (argc > 2 && strcmp(argv[2], "late") == 0) {
		/* RSS's high comes first, from a block freed at once: the fill
		 * below stays under it, so no reading of the pages follows it
		 * (the agent reads them when RSS reaches a new high). */
		char *first = malloc(48 << 20);
		memset(first, 1, 48 << 20);
		sleep_ms(150); /* through the agent's first readings */
		free(first);
		char *blocks[8];
		for (int i = 0; i < 8; i++)
			blocks[i] = malloc(4 << 20);
		sleep_ms(1300);
		for (int i = 0; i < 8; i++)
			memset(blocks[i], 1, 4 << 20);
		sleep_ms(200);
		printf("filled %d\n", blocks[7][12345]);
		return 0; /* the blocks leak on purpose */
	}
	char *p = malloc(mib << 20);
	memset(p, 1, mib << 20);
	sleep_ms(20);
	printf("touched %zu MiB %d\n", mib, p[mib << 19]);
	free(p);
	return 0;
}
