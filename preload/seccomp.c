/*
 * Programs that sandbox themselves with seccomp: a filter that kills on
 * any system call it does not list (SECCOMP_RET_KILL) lists what the
 * program makes, not what the library would. Once a filter may be in
 * place the library makes no new system calls: no unwind table is mapped
 * (stacks come from libgcc's unwinder, which makes none), the ring is not
 * backed further (it is backed whole as the filter goes in, the last
 * moment it may be), and a fork child gets no ring (it runs unprofiled;
 * the agent says why). What cannot be recorded is dropped and counted.
 *
 * A filter is seen going in through glibc's prctl(PR_SET_SECCOMP) and
 * syscall(SYS_seccomp) (libseccomp's way), wrapped here, and as inherited
 * across exec by the Seccomp lines of /proc/self/status, read at start
 * (openat, read and close, which the loader needed to load us) and
 * compared with the agent's own. A program that makes the system call
 * itself, not through glibc, is not seen.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "core.h"
#include "modules.h"
#include "ring.h"
#include "scratch.h"
#include "seccomp.h"
#include "stacks.h"

#if !defined(HEAPLENS_ATTACH) && !defined(HEAPLENS_HARNESS)

/* The system call itself, as glibc's syscall() makes it; no errno. */
#ifdef __aarch64__
static long raw6(long n, long a, long b, long c, long d, long e, long f)
{
	register long x8 __asm__("x8") = n, x0 __asm__("x0") = a, x1 __asm__("x1") = b, x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d, x4 __asm__("x4") = e, x5 __asm__("x5") = f;
	__asm__ volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
	return x0;
}
#else
static long raw6(long n, long a, long b, long c, long d, long e, long f)
{
	register long r10 __asm__("r10") = d, r8 __asm__("r8") = e, r9 __asm__("r9") = f;
	long ret;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}
#endif

static long with_errno(long r)
{
	if (r < 0 && r > -4096) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

static int mode_at_start;
static uint64_t filters_at_start = UINT64_MAX; /* unknown before Linux 5.9 */

static const char *field(const char *buf, const char *name)
{
	const char *s = strstr(buf, name);
	if (!s)
		return NULL;
	for (s += strlen(name); *s == ' ' || *s == '\t'; s++)
		;
	return s;
}

static uint64_t dec(const char *s)
{
	uint64_t v = 0;
	for (; s && *s >= '0' && *s <= '9'; s++)
		v = v * 10 + (uint64_t)(*s - '0');
	return v;
}

/*
 * Reads the seccomp mode and filter count this process started with
 * (/proc/self/status) and returns the mode: 0 none, 1 strict, 2 filters.
 */
int seccomp_read(void)
{
	char buf[4096];
	long fd = raw6(SYS_openat, AT_FDCWD, (long)"/proc/self/status", O_RDONLY | O_CLOEXEC, 0, 0, 0), n = 0, r;
	if (fd < 0)
		return 0;
	while (n < (long)sizeof buf - 1 && (r = raw6(SYS_read, fd, (long)(buf + n), (long)sizeof buf - 1 - n, 0, 0, 0)) > 0)
		n += r;
	raw6(SYS_close, fd, 0, 0, 0, 0, 0);
	buf[n > 0 ? n : 0] = 0;
	const char *m = field(buf, "\nSeccomp:"), *f = field(buf, "\nSeccomp_filters:");
	mode_at_start = m ? (int)dec(m) : 0;
	if (f && *f >= '0' && *f <= '9')
		filters_at_start = dec(f);
	return mode_at_start;
}

/*
 * Whether this process began under a filter of the profiled program's:
 * more than the agent's own (HEAPLENS_SECCOMP="mode filters"; a container
 * runs everything under a filter of its own, which lists what any program
 * may do), or any at all when that is not known.
 */
int seccomp_inherited(void)
{
	if (mode_at_start == 0)
		return 0;
	if (mode_at_start == 1)
		return 1;
	const char *s = getenv("HEAPLENS_SECCOMP");
	if (!s || *s != '2' || s[1] != ' ' || filters_at_start == UINT64_MAX)
		return 1;
	return filters_at_start > dec(s + 2);
}

/*
 * Takes heaplens's entry out of LD_PRELOAD, in place (blanks are skipped):
 * an image exec'd under the filter would get no ring anyway, and the
 * loader's expansion of the entry's $PLATFORM reads /proc/self/exe, a
 * system call the filter may kill the process for.
 */
void seccomp_leave_preload(void)
{
	extern char **environ;
	for (char **e = environ; e && *e; e++) {
		if (strncmp(*e, "LD_PRELOAD=", 11))
			continue;
		for (char *t = *e + 11; *t;) {
			size_t n = strcspn(t, ": ");
			char c = t[n];
			t[n] = 0;
			int ours = strstr(t, "libheaplens") != NULL;
			t[n] = c;
			if (ours)
				memset(t, ' ', n);
			t += n + (c != 0);
		}
	}
}

/*
 * A filter goes in now: the last system calls the library may make. Backs
 * the whole ring, and takes the unwind tables off the list.
 */
static void sandbox_enter(void)
{
	int saved = errno;
	tls.busy++;
	/* This thread's scratch and tid, while it may still ask: the filter usually goes in on the thread that works on. */
	if (RELAXED(g.active) && scratch_get()) {
		struct stack_region r;
		tid();
		stack_of((uintptr_t)__builtin_frame_address(0), &r);
	}
	if (__atomic_exchange_n(&g.sandboxed, 1, __ATOMIC_ACQ_REL)) {
		tls.busy--;
		errno = saved;
		return;
	}
	seccomp_leave_preload();
	modules_drop_tables();
	ring_back_all();
	tls.busy--;
	errno = saved;
}

EXPORT int prctl(int option, ...)
{
	va_list ap;
	va_start(ap, option);
	unsigned long a = va_arg(ap, unsigned long), b = va_arg(ap, unsigned long);
	unsigned long c = va_arg(ap, unsigned long), d = va_arg(ap, unsigned long);
	va_end(ap);
	if (option == PR_SET_SECCOMP)
		sandbox_enter();
	return (int)with_errno(raw6(SYS_prctl, option, (long)a, (long)b, (long)c, (long)d, 0));
}

EXPORT long syscall(long nr, ...)
{
	va_list ap;
	va_start(ap, nr);
	long a[6];
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if ((nr == SYS_seccomp && (a[0] == SECCOMP_SET_MODE_FILTER || a[0] == SECCOMP_SET_MODE_STRICT)) ||
	    (nr == SYS_prctl && a[0] == PR_SET_SECCOMP))
		sandbox_enter();
	return with_errno(raw6(nr, a[0], a[1], a[2], a[3], a[4], a[5]));
}

#endif
