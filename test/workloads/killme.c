/*
 * killme MODE: a process dies by SIGKILL holding known allocations.
 *   self:  this process allocates KILL_N blocks of KILL_SZ bytes, then SIGKILLs itself.
 *   child: a forked child does that; the parent reaps it and exits 0.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KILL_N 100
#define KILL_SZ 65536

void *held[KILL_N];

__attribute__((noinline)) static void hold(void)
{
	for (int i = 0; i < KILL_N; i++) {
		held[i] = malloc(KILL_SZ);
		memset(held[i], 7, 64);
	}
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "child") == 0) {
		pid_t pid = fork();
		if (pid == 0) {
			hold();
			raise(SIGKILL);
		}
		int st;
		waitpid(pid, &st, 0);
		printf("child killed by %d\n", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
		return 0;
	}
	hold();
	fflush(stdout);
	raise(SIGKILL);
	return 1;
}
