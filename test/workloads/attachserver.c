/*
 * attachserver: a threaded C server loop with a slow leak, for heaplens
 * attach. Usage: attachserver SECONDS [FILTER] LOG
 * Every 10 ms tick, for SECONDS seconds, the main thread serves a request;
 * every 10th tick leak_slowly keeps a 512 KiB block forever and appends
 * "CLOCK_MONOTONIC-ns bytes" to LOG, so that a test knows what leaked when.
 * Three workers churn meanwhile (malloc, calloc, realloc, free of 1 B to
 * 64 KiB), 20 times per tick and about as long as the main loop, summing
 * what they read back. The main
 * thread also measures how late its sleeps wake up. stdout is the same in
 * every run: every 100th tick, then the workers' checksum; the worst
 * lateness goes to LOG. Exits 0.
 *
 * FILTER puts the process under a seccomp filter before its threads start
 * (they inherit it), as a container runtime does: "docker" an allow-list
 * like Docker's default profile (EPERM for what it does not list, ENOSYS
 * for clone3), "noexec" EPERM for an mmap with PROT_EXEC (a W^X policy),
 * "strict" Docker's list less the calls to size files (ftruncate, fallocate),
 * which this program does not make, and death for any call not listed;
 * "tight:N,N,…" death for any call but this program's own (own[]) and the
 * numbers given: those heaplens says it needs, so that any other it made
 * would kill the process.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>

#define LEAK (512 << 10)

static void *volatile sink;

static int64_t now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

__attribute__((noinline)) static void *leak_slowly(void)
{
	char *p = malloc(LEAK);
	memset(p, 7, LEAK);
	return p;
}

__attribute__((noinline)) static uint64_t churn(uint64_t *seed)
{
	uint64_t sum = 0;
	*seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
	size_t n = 1 + (*seed >> 33) % (64 << 10);
	unsigned char *a = (*seed & 1) ? calloc(1, n) : malloc(n);
	memset(a, (int)(n & 0xff), n);
	unsigned char *b = realloc(a, n + 100);
	b[n] = 3;
	for (size_t i = 0; i < n + 1; i += 97)
		sum += b[i];
	free(b);
	return sum;
}

static long ticks;

/* Docker's default profile's allow-list, the calls x86-64 has (moby's profiles/seccomp/default.json, abridged). */
static const int docker[] = {
	SYS_accept, SYS_accept4, SYS_access, SYS_alarm, SYS_arch_prctl, SYS_bind, SYS_brk, SYS_capget, SYS_capset,
	SYS_chdir, SYS_chmod, SYS_chown, SYS_clock_getres, SYS_clock_gettime, SYS_clock_nanosleep, SYS_clone,
	SYS_close, SYS_connect, SYS_copy_file_range, SYS_creat, SYS_dup, SYS_dup2, SYS_dup3, SYS_epoll_create,
	SYS_epoll_create1, SYS_epoll_ctl, SYS_epoll_pwait, SYS_epoll_wait, SYS_eventfd, SYS_eventfd2, SYS_execve,
	SYS_execveat, SYS_exit, SYS_exit_group, SYS_faccessat, SYS_fadvise64, SYS_fallocate, SYS_fchdir, SYS_fchmod,
	SYS_fchmodat, SYS_fchown, SYS_fchownat, SYS_fcntl, SYS_fdatasync, SYS_flock, SYS_fork, SYS_fstat,
	SYS_fstatfs, SYS_fsync, SYS_ftruncate, SYS_futex, SYS_getcwd, SYS_getdents, SYS_getdents64, SYS_getegid,
	SYS_geteuid, SYS_getgid, SYS_getgroups, SYS_getitimer, SYS_getpeername, SYS_getpgid, SYS_getpgrp,
	SYS_getpid, SYS_getppid, SYS_getpriority, SYS_getrandom, SYS_getresgid, SYS_getresuid, SYS_getrlimit,
	SYS_get_robust_list, SYS_getrusage, SYS_getsid, SYS_getsockname, SYS_getsockopt, SYS_gettid,
	SYS_gettimeofday, SYS_getuid, SYS_ioctl, SYS_kill, SYS_link, SYS_linkat, SYS_listen, SYS_lseek, SYS_lstat,
	SYS_madvise, SYS_membarrier, SYS_mincore, SYS_mkdir, SYS_mkdirat, SYS_mlock, SYS_mmap, SYS_mprotect,
	SYS_mremap, SYS_munmap, SYS_nanosleep, SYS_newfstatat, SYS_open, SYS_openat, SYS_pipe, SYS_pipe2, SYS_poll,
	SYS_ppoll, SYS_prctl, SYS_pread64, SYS_preadv, SYS_prlimit64, SYS_pselect6, SYS_pwrite64, SYS_read,
	SYS_readlink, SYS_readlinkat, SYS_readv, SYS_recvfrom, SYS_recvmsg, SYS_rename, SYS_renameat,
	SYS_renameat2, SYS_restart_syscall, SYS_rmdir, SYS_rseq, SYS_rt_sigaction, SYS_rt_sigpending,
	SYS_rt_sigprocmask, SYS_rt_sigqueueinfo, SYS_rt_sigreturn, SYS_rt_sigsuspend, SYS_rt_sigtimedwait,
	SYS_rt_tgsigqueueinfo, SYS_sched_getaffinity, SYS_sched_yield, SYS_select, SYS_sendmsg, SYS_sendto,
	SYS_set_robust_list, SYS_set_tid_address, SYS_setitimer, SYS_sigaltstack, SYS_socket, SYS_socketpair,
	SYS_stat, SYS_statfs, SYS_statx, SYS_symlink, SYS_tgkill, SYS_time, SYS_timer_create, SYS_timerfd_create,
	SYS_tkill, SYS_umask, SYS_uname, SYS_unlink, SYS_unlinkat, SYS_wait4, SYS_waitid, SYS_write, SYS_writev,
};

/* What this program itself calls once the filter is in (strace), and glibc may (arenas). */
static const int own[] = {
	SYS_brk, SYS_clock_nanosleep, SYS_nanosleep, SYS_clone, SYS_exit, SYS_exit_group, SYS_futex, SYS_ioctl,
	SYS_madvise, SYS_mmap, SYS_mprotect, SYS_munmap, SYS_newfstatat, SYS_fstat, SYS_rseq, SYS_rt_sigaction,
	SYS_rt_sigprocmask, SYS_rt_sigreturn, SYS_set_robust_list, SYS_write, SYS_getrandom, SYS_sched_getaffinity,
	SYS_sched_yield, SYS_openat, SYS_read, SYS_close, SYS_lseek,
};

#define LOAD(field) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, field))
#define RET(action) BPF_STMT(BPF_RET | BPF_K, action)

static int sandbox(const char *how)
{
	struct sock_filter f[2 * sizeof docker / sizeof *docker + 2 * sizeof own / sizeof *own + 256] = {
		LOAD(arch), BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		RET(SECCOMP_RET_KILL_PROCESS), LOAD(nr),
	};
	unsigned short n = 4;
	int strict = !strcmp(how, "strict");
	if (strict || !strcmp(how, "docker")) {
		f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1);
		f[n++] = (struct sock_filter)RET(SECCOMP_RET_ERRNO | ENOSYS);
		for (size_t i = 0; i < sizeof docker / sizeof *docker; i++) {
			if (strict && (docker[i] == SYS_ftruncate || docker[i] == SYS_fallocate))
				continue;
			f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)docker[i], 0, 1);
			f[n++] = (struct sock_filter)RET(SECCOMP_RET_ALLOW);
		}
		f[n++] = (struct sock_filter)RET(strict ? SECCOMP_RET_KILL_PROCESS : SECCOMP_RET_ERRNO | EPERM);
	} else if (!strncmp(how, "tight:", 6)) {
		f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1);
		f[n++] = (struct sock_filter)RET(SECCOMP_RET_ERRNO | ENOSYS);
		for (size_t i = 0; i < sizeof own / sizeof *own; i++) {
			f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)own[i], 0, 1);
			f[n++] = (struct sock_filter)RET(SECCOMP_RET_ALLOW);
		}
		for (char *p = (char *)how + 6, *end; *p && n < sizeof f / sizeof *f - 3; p = *end ? end + 1 : end) {
			f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)strtoul(p, &end, 10), 0, 1);
			f[n++] = (struct sock_filter)RET(SECCOMP_RET_ALLOW);
			if (end == p)
				return -1;
		}
		f[n++] = (struct sock_filter)RET(SECCOMP_RET_KILL_PROCESS);
	} else if (!strcmp(how, "noexec")) {
		f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mmap, 0, 3);
		f[n++] = (struct sock_filter)LOAD(args[2]);
		f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 1);
		f[n++] = (struct sock_filter)RET(SECCOMP_RET_ERRNO | EPERM);
		f[n++] = (struct sock_filter)RET(SECCOMP_RET_ALLOW);
	} else
		return -1;
	struct sock_fprog prog = {n, f};
	return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) ? -1 : 0;
}

static void *worker(void *arg)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg, *sum = malloc(sizeof *sum);
	*sum = 0;
	for (long i = 0; i < ticks * 20; i++) {
		*sum += churn(&seed);
		if (i % 20 == 19) {
			struct timespec d = {0, 8000000};
			nanosleep(&d, NULL);
		}
	}
	return sum;
}

__attribute__((noinline)) static void serve(void)
{
	char *req = malloc(4096);
	snprintf(req, 4096, "GET /%d", rand());
	sink = req;
	free(req);
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	ticks = atol(argv[1]) * 100;
	FILE *log = fopen(argv[argc - 1], "w");
	if (!log)
		return 2;
	setvbuf(log, NULL, _IOLBF, 0);
	if (argc > 3 && sandbox(argv[2]) != 0)
		return 3;
	pthread_t w[3];
	for (int i = 0; i < 3; i++)
		pthread_create(&w[i], NULL, worker, (void *)(uintptr_t)(i + 1));
	void **kept = calloc((size_t)ticks / 10 + 1, sizeof *kept);
	int64_t start = now(), worst = 0;
	size_t leaked = 0;
	for (long t = 1; t <= ticks; t++) {
		serve();
		if (t % 10 == 0) {
			kept[t / 10] = leak_slowly();
			leaked += LEAK;
			fprintf(log, "%lld %zu\n", (long long)now(), leaked);
		}
		if (t % 100 == 0) {
			printf("tick %ld\n", t);
			fflush(stdout);
		}
		int64_t due = start + t * 10000000;
		struct timespec ts = {due / 1000000000, due % 1000000000};
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
		int64_t late = now() - due;
		if (late > worst && now() - start > 0)
			worst = late;
	}
	uint64_t total = 0;
	for (int i = 0; i < 3; i++) {
		uint64_t *s;
		pthread_join(w[i], (void **)&s);
		total += *s;
		free(s);
	}
	printf("checksum %llu\n", (unsigned long long)total);
	fprintf(log, "worst-late-ns %lld\n", (long long)worst);
	fclose(log);
	sink = kept;
	return 0;
}
