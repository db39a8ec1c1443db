/*
 * sandbox: installs a seccomp filter that kills the process at any system
 * call it does not list (as sandboxed servers do), through prctl or, as
 * libseccomp does, syscall(SYS_seccomp) (argv[1]: "prctl" or "seccomp"),
 * at once, before its first allocation of note. Then it keeps N blocks of
 * SZ bytes at keep_after and forks a child that keeps CHILD_N blocks of SZ
 * at child_keep, sleeps 700 ms (for heaplens to see it) and exits with 0.
 * Prints what it kept. `sandbox exec [COPY]` execs itself (or a copy of
 * itself) under a filter that also allows what an exec takes, to keep N
 * blocks there. `sandbox
 * container COMMAND...` runs COMMAND under a filter that allows everything
 * but acct, as a container's does.
 */
#define _GNU_SOURCE
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N 1000
#define CHILD_N 100
#define SZ 4096

void *kept[N];

#define ALLOW(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

/* What this program makes from here on, bare: its allocator, fork, wait, sleep, write, exit. */
#define FILTER(...)                                                                         \
	{                                                                                   \
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),   \
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),              \
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),                       \
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),     \
		ALLOW(SYS_brk), ALLOW(SYS_mmap), ALLOW(SYS_munmap), ALLOW(SYS_mremap),      \
		ALLOW(SYS_clone), ALLOW(SYS_wait4), ALLOW(SYS_clock_nanosleep), ALLOW(SYS_write), \
		ALLOW(SYS_exit), ALLOW(SYS_exit_group), ALLOW(SYS_rt_sigreturn), ALLOW(SYS_rt_sigprocmask), \
		ALLOW(SYS_futex), ALLOW(SYS_getpid), ALLOW(SYS_gettid), ALLOW(SYS_set_robust_list), \
		ALLOW(SYS_getrandom), /* glibc's malloc, at its first call */              \
		__VA_ARGS__                                                                 \
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),                       \
	}
static struct sock_filter filter[] = FILTER();
/* With what execve of a dynamic program takes (the loader's, libc's start). */
static struct sock_filter exec_filter[] = FILTER(ALLOW(SYS_execve), ALLOW(SYS_access), ALLOW(SYS_arch_prctl),
	ALLOW(SYS_openat), ALLOW(SYS_read), ALLOW(SYS_pread64), ALLOW(SYS_close), ALLOW(SYS_newfstatat),
	ALLOW(SYS_fstat), ALLOW(SYS_mprotect), ALLOW(SYS_prlimit64), ALLOW(SYS_rseq), ALLOW(SYS_set_tid_address),
	ALLOW(SYS_ioctl), );

__attribute__((noinline)) static void keep_after(void)
{
	for (int i = 0; i < N; i++)
		kept[i] = malloc(SZ);
}

__attribute__((noinline)) static void child_keep(void)
{
	for (int i = 0; i < CHILD_N; i++)
		kept[i] = malloc(SZ);
}

/* Everything allowed but acct, which fails with EPERM: as a container's filter does. */
static struct sock_filter container[] = {
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_acct, 0, 1),
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1),
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
};

int main(int argc, char **argv)
{
	if (argc > 2 && strcmp(argv[1], "container") == 0) { /* sandbox container COMMAND...: COMMAND under that filter */
		struct sock_fprog c = {sizeof container / sizeof *container, container};
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &c) != 0)
			return 2;
		execvp(argv[2], argv + 2);
		return 127;
	}
	if (argc > 1 && strcmp(argv[1], "execd") == 0) { /* exec'd under the filter: keep, and be seen */
		keep_after();
		struct timespec ts = {0, 700 * 1000 * 1000};
		nanosleep(&ts, NULL);
		return write(1, "execd kept\n", 11) == 11 ? 0 : 1;
	}
	int by_prctl = argc > 1 && strcmp(argv[1], "prctl") == 0, exec = argc > 1 && strcmp(argv[1], "exec") == 0;
	struct sock_fprog prog = {sizeof filter / sizeof *filter, filter};
	if (exec)
		prog = (struct sock_fprog){sizeof exec_filter / sizeof *exec_filter, exec_filter};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	    (by_prctl ? prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) : syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog)) != 0) {
		perror("sandbox: seccomp");
		return 2;
	}
	if (exec) {
		execl(argc > 2 ? argv[2] : "/proc/self/exe", "sandbox", "execd", (char *)NULL);
		return 127;
	}
	keep_after();
	pid_t pid = fork();
	if (pid == 0) {
		child_keep();
		struct timespec ts = {0, 700 * 1000 * 1000};
		nanosleep(&ts, NULL);
		_exit(0);
	}
	int st = -1;
	waitpid(pid, &st, 0);
	char out[128];
	int n = snprintf(out, sizeof out, "kept %d blocks of %d, child %s\n", N, SZ, WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "ok" : "failed");
	return write(1, out, (size_t)n) == n ? 0 : 1;
}
