/*
 * retitle: does what setproctitle does (nginx, sshd, PostgreSQL, Python's
 * setproctitle): moves the environment to the heap, points environ at the
 * copy and writes a title over the original argv and environment block,
 * zero-padded. Then it forks CHILDREN children, each of which keeps
 * CHILD_N blocks of CHILD_SZ bytes at child_keep and exits with 0; the
 * last one execs `sh -c 'echo $RETITLE_CHECK'` to show that the moved
 * environment still reaches an exec.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILDREN 8
#define CHILD_N 10
#define CHILD_SZ 100000

extern char **environ;
void *child_kept[CHILD_N];

__attribute__((noinline)) static void child_keep(void)
{
	for (int i = 0; i < CHILD_N; i++)
		child_kept[i] = malloc(CHILD_SZ);
}

static void retitle(int argc, char **argv, const char *title)
{
	char *end = argv[argc - 1] + strlen(argv[argc - 1]) + 1;
	size_t n = 0;
	while (environ[n])
		n++;
	char **moved = malloc((n + 1) * sizeof *moved);
	for (size_t i = 0; i < n; i++) {
		if (environ[i] == end)
			end += strlen(environ[i]) + 1;
		moved[i] = strdup(environ[i]);
	}
	moved[n] = NULL;
	environ = moved;
	memset(argv[0], 0, (size_t)(end - argv[0]));
	strncpy(argv[0], title, (size_t)(end - argv[0]) - 1);
}

int main(int argc, char **argv)
{
	retitle(argc, argv, "retitle: master process");
	int ok = 0;
	for (int k = 0; k < CHILDREN; k++) {
		pid_t pid = fork();
		if (pid == 0) {
			child_keep();
			if (k == CHILDREN - 1) {
				execl("/bin/sh", "sh", "-c", "echo \"$RETITLE_CHECK\"", (char *)NULL);
				_exit(127);
			}
			exit(0);
		}
		int st;
		if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0)
			ok++;
	}
	printf("children ok %d of %d\n", ok, CHILDREN);
	return ok == CHILDREN ? 0 : 1;
}
