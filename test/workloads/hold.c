/* hold MIB MS: allocates and touches MIB MiB in hold_block, keeps it MS milliseconds, exits without freeing. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

__attribute__((noinline)) static char *hold_block(size_t n)
{
	char *p = malloc(n);
	if (p)
		memset(p, 1, n);
	return p;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	size_t mib = strtoul(argv[1], NULL, 10);
	long ms = strtol(argv[2], NULL, 10);
	char *volatile p = hold_block(mib << 20);
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
	return p ? 0 : 1;
}
