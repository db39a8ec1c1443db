/*
 * slowinfo: a preloaded mallinfo2 whose first call sleeps 20 ms, as a
 * reading preempted on a loaded machine would take, then answers as glibc's.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <time.h>

struct mallinfo2 mallinfo2(void)
{
	static int calls;
	struct mallinfo2 (*next)(void) = (struct mallinfo2 (*)(void))dlsym(RTLD_NEXT, "mallinfo2");
	if (!calls++)
		nanosleep(&(struct timespec){0, 20000000}, NULL);
	return next();
}
