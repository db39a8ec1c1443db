/*
 * A SIGUSR1 handler that allocates on a small alternate signal stack (6 and
 * 7 KiB: above MINSIGSTKSZ, below what a deep unwinder needs). Each size
 * takes ROUNDS signals; each handler call keeps one block of a known size
 * (handler_alloc), so the profile must show ROUNDS * (HSIZE) bytes there per
 * stack size. Usage: altstack [rounds [paint|plain [size1 size2]]] (sizes
 * in bytes, at most 7 KiB). Prints a checksum and "done"; with paint, also
 * the most of the alternate stack any handler call used (painted before
 * each signal, the untouched paint measured after).
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HSIZE 1200
#define MAXROUNDS 100000

static void *kept[2 * MAXROUNDS];
static volatile sig_atomic_t nkept;
static volatile unsigned long sum;

__attribute__((noinline)) static void *handler_alloc(size_t n)
{
	char *p = malloc(n);
	if (p)
		memset(p, (int)(nkept & 0x7f), n);
	return p;
}

static void on_usr1(int sig)
{
	(void)sig;
	char *p = handler_alloc(HSIZE);
	if (!p)
		_exit(3);
	sum += (unsigned char)p[HSIZE / 2] + (uintptr_t)nkept;
	kept[nkept] = p;
	nkept = nkept + 1;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 2000, paint = argc > 2 && !strcmp(argv[2], "paint");
	size_t used = 0;
	if (rounds < 1 || rounds > MAXROUNDS)
		return 2;
	size_t sizes[] = {6 << 10, 7 << 10};
	for (int s = 0; s < 2 && argc > 3 + s; s++)
		sizes[s] = (size_t)atoi(argv[3 + s]);
	if (sizes[0] < 2048 || sizes[0] > 7 << 10 || sizes[1] < 2048 || sizes[1] > 7 << 10) /* 2048: the ABI's MINSIGSTKSZ */
		return 2;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_usr1;
	sa.sa_flags = SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, NULL))
		return 4;
	for (int s = 0; s < 2; s++) {
		/* Not malloc'd: an allocation of its own would show up in the profile. */
		static char stacks[2][7 << 10] __attribute__((aligned(64)));
		stack_t ss = {.ss_sp = stacks[s], .ss_size = sizes[s], .ss_flags = 0};
		if (sigaltstack(&ss, NULL))
			return 5;
		for (int i = 0; i < rounds; i++) {
			if (paint)
				memset(stacks[s], 0xa5, sizes[s]);
			raise(SIGUSR1);
			size_t low = 0;
			while (paint && low < sizes[s] && (unsigned char)stacks[s][low] == 0xa5)
				low++;
			if (paint && sizes[s] - low > used)
				used = sizes[s] - low;
		}
	}
	if (paint)
		printf("most used %zu\n", used);
	for (int i = 0; i < nkept; i++)
		free(kept[i]);
	printf("signals %d sum %lu\ndone\n", (int)nkept, sum);
	return 0;
}
