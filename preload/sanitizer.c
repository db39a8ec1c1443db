/*
 * A process with a sanitizer runtime that owns the allocator (ASan, TSan,
 * LSan, MSan, HWASan) cannot have us in front of it: TSan's interceptors
 * are not set up when its start-up first calls malloc (and so us), LSan's
 * blocks sit at the start of a mapping where free's look below a block
 * faults, ASan refuses to start (the agent turns that check off:
 * verify_asan_link_order=0 in ASAN_OPTIONS). heaplens run never preloads
 * us into a command built so; a process that execs one (a shell script, a
 * test runner) brings us in all the same. Then, at the first call of any hook,
 * before anything else, the process restarts itself as it was started but
 * without us: the same pid, arguments and environment less heaplens's
 * LD_PRELOAD entry and HEAPLENS_ variables, and ASAN_OPTIONS as it was,
 * so it runs as bare. It leaves
 * the marker unprofiled.<pid>.<HL_UNPROFILED_SANITIZER + kind>.0.<comm>
 * for the agent to say why.
 *
 * It runs before the sanitizer's interceptors work: raw system calls
 * only, no allocation, static buffers.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <link.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "core.h"
#include "resident.h"
#include "ring.h"
#include "sanitizer.h"

#if !defined(HEAPLENS_ATTACH) && !defined(HEAPLENS_HARNESS) /* attached, we come late; the harness is sanitized on purpose */

/* Runtimes by the name of their shared object; the index + 1 is the kind in the marker. */
static const char *const runtimes[] = {"libasan.so", "libtsan.so", "liblsan.so", "libmsan.so", "libhwasan.so",
				       "libclang_rt.asan", "libclang_rt.tsan", "libclang_rt.lsan",
				       "libclang_rt.msan", "libclang_rt.hwasan"};

static const char *base(const char *p)
{
	const char *b = p;
	for (; *p; p++)
		if (*p == '/')
			b = p + 1;
	return b;
}

/* The string functions, our own (NOLIBC). */
static NOLIBC size_t slen(const char *s)
{
	size_t n = 0;
	while (s[n])
		n++;
	return n;
}
static NOLIBC void scopy(char *d, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		d[i] = s[i];
}
static int has_prefix(const char *s, const char *p)
{
	for (; *p; s++, p++)
		if (*s != *p)
			return 0;
	return 1;
}

/* The kind (1-based index in runtimes) of a loaded sanitizer runtime, 0 if none. */
static int sanitizer_loaded(void)
{
	for (struct link_map *m = _r_debug.r_map; m; m = m->l_next)
		for (size_t i = 0; m->l_name && i < sizeof runtimes / sizeof *runtimes; i++)
			if (has_prefix(base(m->l_name), runtimes[i]))
				return (int)i + 1;
	return 0;
}

/* LD_PRELOAD less our own entries (libheaplens-*.so): into buf, 0 if it does not fit. */
static int strip_preload(const char *v, char *buf, size_t cap)
{
	size_t n = 0;
	while (*v) {
		size_t len = 0;
		while (v[len] && v[len] != ':' && v[len] != ' ')
			len++;
		char item[4096];
		if (len < sizeof item) {
			scopy(item, v, len), item[len] = 0;
			if (len && !has_prefix(base(item), "libheaplens")) {
				if (n + len + 2 > cap)
					return 0;
				if (n)
					buf[n++] = ':';
				scopy(buf + n, v, len), n += len;
			}
		}
		v += len;
		if (*v)
			v++;
	}
	buf[n] = 0;
	return 1;
}

/* The NUL-separated strings of a /proc file into v (NULL-ended): 0 if they do not all fit. */
static int split(const char *path, char *buf, size_t cap, char **v, size_t nv)
{
	long n = read_small_file(path, buf, cap - 1);
	if (n < 0 || n == (long)cap - 1)
		return 0;
	buf[n] = 0;
	size_t k = 0;
	for (long i = 0; i < n; i += (long)slen(buf + i) + 1) {
		if (k == nv - 1)
			return 0;
		v[k++] = buf + i;
	}
	v[k] = NULL;
	return 1;
}

/* The file this process was started from, as it was named then (so that comm stays as it was). */
static const char *started_from(void)
{
	static char exe[4096];
	const char *fn = (const char *)getauxval(AT_EXECFN);
	struct stat a, b;
#ifdef SYS_stat
	if (fn && syscall(SYS_stat, fn, &a) == 0 && syscall(SYS_stat, "/proc/self/exe", &b) == 0 &&
	    a.st_dev == b.st_dev && a.st_ino == b.st_ino)
		return fn;
	long n = syscall(SYS_readlink, "/proc/self/exe", exe, sizeof exe - 1); /* a script: its interpreter */
#else /* aarch64 has only the *at calls */
	if (fn && syscall(SYS_newfstatat, AT_FDCWD, fn, &a, 0) == 0 &&
	    syscall(SYS_newfstatat, AT_FDCWD, "/proc/self/exe", &b, 0) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
		return fn;
	long n = syscall(SYS_readlinkat, AT_FDCWD, "/proc/self/exe", exe, sizeof exe - 1); /* a script: its interpreter */
#endif
	if (n <= 0)
		return NULL;
	exe[n] = 0;
	return exe;
}

int sanitizer_restart(void)
{
	int kind = sanitizer_loaded();
	if (!kind)
		return 0;
	/*
	 * Arguments and environment as the process started: /proc tells, as
	 * environ may not be set yet (a sanitizer starts from .preinit_array).
	 */
	static char args[256 << 10], env[512 << 10], preload[8192];
	static char *argv[8192], *envp[16384];
	const char *path = started_from(), *dir = NULL;
	if (!path || !split("/proc/self/cmdline", args, sizeof args, argv, sizeof argv / sizeof *argv) ||
	    !split("/proc/self/environ", env, sizeof env, envp, sizeof envp / sizeof *envp))
		return kind;
	/* ASAN_OPTIONS as it was before the agent let ASan start behind us (HEAPLENS_ASAN_OPTIONS: 0 unset, 1VALUE). */
	static char asan[8192];
	const char *saved = NULL;
	for (char **e = envp; *e; e++)
		if (has_prefix(*e, "HEAPLENS_ASAN_OPTIONS="))
			saved = *e + 22;
	if (saved && saved[0] == '1') {
		size_t sl = slen(saved);
		if (sl + 13 > sizeof asan)
			return kind;
		scopy(asan, "ASAN_OPTIONS=", 13);
		scopy(asan + 13, saved + 1, sl); /* its NUL too */
	}
	size_t ne = 0;
	for (char **e = envp; *e; e++) {
		if (has_prefix(*e, "HEAPLENS_DIR="))
			dir = *e + 13;
		if (has_prefix(*e, "HEAPLENS_"))
			continue;
		if (saved && has_prefix(*e, "ASAN_OPTIONS=")) {
			if (saved[0] == '1')
				envp[ne++] = asan;
			continue;
		}
		if (has_prefix(*e, "LD_PRELOAD=")) {
			scopy(preload, "LD_PRELOAD=", 11);
			if (!strip_preload(*e + 11, preload + 11, sizeof preload - 11))
				return kind;
			if (preload[11])
				envp[ne++] = preload;
			continue;
		}
		envp[ne++] = *e;
	}
	envp[ne] = NULL;
	if (dir && dir[0] == '/' && slen(dir) <= MAX_DIR)
		leave_unprofiled(dir, HL_UNPROFILED_SANITIZER + (uint64_t)kind, 0);
	syscall(SYS_execve, path, argv, envp);
	return kind; /* the restart failed: the caller stays inert */
}
#endif
