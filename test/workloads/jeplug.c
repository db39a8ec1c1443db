/*
 * A plugin (dlopen'ed by jehost.c, which links jemalloc) that allocates
 * through mallocx: plugin_work mallocs 100 bytes, then makes and frees 100
 * blocks of 10,000 bytes with mallocx and dallocx. Built with -z now (its
 * GOT read-only once loaded) and -z lazy.
 */
#include <jemalloc/jemalloc.h>
#include <stdlib.h>
#include <string.h>
__attribute__((noinline)) unsigned plugin_work(void)
{
	void *volatile first = malloc(100); /* a sampled frame of this library: the rescan that routes it */
	free(first);
	unsigned s = 0;
	for (int i = 0; i < 100; i++) {
		unsigned char *p = mallocx(10000, 0);
		memset(p, i, 10000);
		s += p[9999];
		dallocx(p, 0);
	}
	return s;
}
