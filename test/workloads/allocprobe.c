/*
 * Probes for jemalloc, mimalloc and tcmalloc the way programs do (a weak
 * reference, dlsym), prints what it found, and allocates through mallocx
 * when it is there: probe_alloc makes 50 blocks of 10,000 bytes, frees
 * them with dallocx. heaplens must leave what it finds as it is bare.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

extern void *mallocx(size_t n, int flags) __attribute__((weak));
extern void dallocx(void *p, int flags) __attribute__((weak));
extern void *mi_malloc(size_t n) __attribute__((weak));
extern void *tc_malloc(size_t n) __attribute__((weak));

static const char *found(const void *p) { return p ? "found" : "absent"; }

__attribute__((noinline)) unsigned probe_alloc(void)
{
	unsigned sum = 0;
	for (int i = 0; i < 50; i++) {
		unsigned char *p = mallocx(10000, 0);
		memset(p, i, 10000);
		sum += p[9999];
		dallocx(p, 0);
	}
	return sum;
}

int main(void)
{
	const char *names[] = {"mallocx", "sdallocx", "mi_malloc", "tc_malloc", "_rjem_mallocx"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		printf("dlsym %s: %s\n", names[i], found(dlsym(RTLD_DEFAULT, names[i])));
	printf("weak mallocx: %s, mi_malloc: %s, tc_malloc: %s\n", found((void *)mallocx), found((void *)mi_malloc),
	       found((void *)tc_malloc));
	if (mallocx && dallocx)
		printf("sum %u\n", probe_alloc());
	return 0;
}
