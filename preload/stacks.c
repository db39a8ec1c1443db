/*
 * Where the stack a sample runs on begins and ends, so that a walk reads
 * nothing outside it (docs/unwind-format.md, "Stacks"). A thread's own
 * stack is known once: the main thread's from AT_EXECFN and RLIMIT_STACK
 * at start-up, another's from the mapping that holds its
 * thread pointer (glibc puts the thread's descriptor at the top of its
 * stack), read from /proc/self/maps at its first sample. Any other stack
 * (a signal's alternate stack, a coroutine's or a ucontext's) is found
 * when a sample runs on it: sigaltstack() says the first; the others are
 * the readable mapping that holds sp, the last FOREIGN_STACKS of them
 * remembered per thread and checked with mincore() before each use (one
 * may have been unmapped since).
 * pthread_getattr_np would do the first job but allocates and, for the
 * main thread, reads /proc itself under a lock.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core.h"
#include "scratch.h"
#include "stacks.h"
#include "unwind.h"

extern void *__libc_stack_end; /* ld.so: the stack pointer at the program's entry */

#define PAGE 4096u
#define FOREIGN_SPAN (1u << 20) /* a walk on a stack not the thread's reads at most this far above sp */

static uintptr_t main_lo, main_hi;

/*
 * At start-up: the main thread's stack, as deep as it may grow. Its top is
 * the end of the program's file name, the last thing the kernel put there
 * (AT_EXECFN); __libc_stack_end, where ld.so's first frame was, lies
 * below some frames of __libc_start_main.
 */
void stacks_init(void)
{
	struct rlimit rl;
	uintptr_t top = (uintptr_t)__libc_stack_end, fn = (uintptr_t)getauxval(AT_EXECFN);
	if (fn > top && fn - top < (256u << 20)) /* as it should be: above, past the arguments and environment */
		top = fn + strlen((const char *)fn) + 1;
	uintptr_t hi = (top + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
	uint64_t deep = 8u << 20;
	if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		deep = rl.rlim_cur;
	if (deep > (1u << 30))
		deep = 1u << 30; /* unlimited: mmap then fills from the bottom, far below */
	/*
	 * libgcc_s's calls into the loader are bound at their first use,
	 * through a trampoline that saves every vector register on the stack
	 * (~3 KiB with AVX-512): made here, not in a sample on a small stack.
	 */
	uint32_t rule;
	fde_rule((uintptr_t)&stacks_init, &rule);
	if (!hi || hi < deep)
		return;
	main_lo = hi - deep, main_hi = hi;
}

static uintptr_t hexword(const char **p)
{
	uintptr_t v = 0;
	for (;; (*p)++) {
		char c = **p;
		unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10) : 16;
		if (d == 16)
			return v;
		v = v << 4 | d;
	}
}

/*
 * The readable mapping of /proc/self/maps that holds a, into *lo, *hi; 0
 * if none (or the file cannot be read). Lines are parsed as they stream
 * through scratch's buffer: no allocation, a few hundred bytes of stack.
 */
static int mapping_of(uintptr_t a, uintptr_t *lo, uintptr_t *hi)
{
	char *buf = tls.scratch->buf;
	int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	size_t have = 0;
	int found = 0;
	for (;;) {
		ssize_t got = (ssize_t)syscall(SYS_read, fd, buf + have, sizeof tls.scratch->buf - 1 - have);
		if (got <= 0)
			break;
		have += (size_t)got;
		buf[have] = 0;
		char *line = buf, *nl;
		while ((nl = strchr(line, '\n')) != NULL) {
			const char *p = line;
			uintptr_t l = hexword(&p);
			p++;
			uintptr_t h = hexword(&p);
			if (a - l < h - l) {
				*lo = l, *hi = h, found = p[1] == 'r';
				goto out;
			}
			if (l > a)
				goto out; /* sorted: no later line holds it */
			line = nl + 1;
		}
		have = (size_t)(buf + have - line);
		memmove(buf, line, have);
		if (have == sizeof tls.scratch->buf - 1)
			break; /* a line longer than the buffer: give up rather than misparse */
	}
out:
	syscall(SYS_close, fd);
	return found;
}

/*
 * This thread's own stack, into tls.stack.lo/hi, once (tls.stack.hi stays 1 if
 * it cannot be known), even if this first sample is on another stack.
 */
static void own_stack(uintptr_t sp)
{
	uintptr_t tp, lo, hi;
#ifdef __x86_64__
	__asm__("mov %%fs:0, %0" : "=r"(tp));
#else
	/* aarch64 (TLS variant I): tpidr_el0 is just above the descriptor, below the static TLS, in the same mapping. */
	tp = (uintptr_t)__builtin_thread_pointer();
#endif
	tls.stack.lo = 0, tls.stack.hi = 1;
	if ((sp - main_lo < main_hi - main_lo || syscall(SYS_gettid) == getpid()) && main_hi)
		tls.stack.lo = main_lo, tls.stack.hi = main_hi;
	/* glibc's threads: stack, static TLS and descriptor in one mapping, the descriptor at the top. */
	else if (mapping_of(tp - 1, &lo, &hi))
		tls.stack.lo = lo, tls.stack.hi = tp;
}

/*
 * stack_of's slow path: sp is not on this thread's own stack as far as it
 * knows (or it does not know that stack yet). 0 if the stack cannot be
 * known: the walk then records no native frame.
 */
COLD int stack_elsewhere(uintptr_t sp, struct stack_region *r)
{
	if (NO_NEW_CALLS()) /* no new system call under a seccomp filter (seccomp.c) */
		return 0;
	if (!tls.stack.hi) {
		own_stack(sp);
		if (sp - tls.stack.lo < tls.stack.hi - tls.stack.lo) {
			r->lo = tls.stack.lo, r->hi = tls.stack.hi, r->own = 1;
			return 1;
		}
	}
	r->own = 0;
	stack_t ss;
	if (syscall(SYS_sigaltstack, NULL, &ss) == 0 && (ss.ss_flags & SS_ONSTACK) &&
	    sp - (uintptr_t)ss.ss_sp < ss.ss_size) {
		r->lo = (uintptr_t)ss.ss_sp, r->hi = (uintptr_t)ss.ss_sp + ss.ss_size;
		return 1;
	}
	/* The stacks found before (a few coroutines' stacks, each its own mapping), else the maps. */
	struct scratch *s = tls.scratch;
	uint32_t i = 0;
	while (i < FOREIGN_STACKS && !(sp - s->foreign_lo[i] < s->foreign_hi[i] - s->foreign_lo[i]))
		i++;
	if (i == FOREIGN_STACKS) {
		uintptr_t lo, hi;
		if (!mapping_of(sp, &lo, &hi))
			return 0;
		i = s->foreign_next++ % FOREIGN_STACKS;
		s->foreign_lo[i] = lo, s->foreign_hi[i] = hi;
	}
	/* Only as far above sp as the walk may read, and only if every page of that is still mapped. */
	uintptr_t from = sp & ~(uintptr_t)(PAGE - 1), hi = s->foreign_hi[i];
	if (hi - from > FOREIGN_SPAN)
		hi = from + FOREIGN_SPAN;
	if (syscall(SYS_mincore, from, hi - from, s->vec) != 0) {
		s->foreign_lo[i] = s->foreign_hi[i] = 0;
		return 0;
	}
	r->lo = s->foreign_lo[i], r->hi = hi;
	return 1;
}
