/*
 * startup: a program with a known output, for the "never a broken start"
 * tests (test/e2e/platforms_test.go), built 64-bit, 32-bit and with musl.
 * It writes one line to each stream, lives a second (long enough for the
 * agent to see it run unprofiled) and exits with status 5.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
	char *p = malloc(100);
	strcpy(p, "startup");
	printf("%s out %zu\n", p, sizeof(void *));
	fprintf(stderr, "%s err\n", p);
	fflush(NULL);
	sleep(1);
	free(p);
	return 5;
}
