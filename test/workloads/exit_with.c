/* exit_with CODE | exit_with -SIG: prints a line, then exits with CODE or kills itself with SIG. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	int v = argc > 1 ? atoi(argv[1]) : 0;
	void *keep = malloc(1000);
	printf("exit_with %d %p\n", v, keep != NULL ? (void *)1 : NULL);
	fflush(stdout);
	if (v < 0)
		raise(-v);
	return v;
}
