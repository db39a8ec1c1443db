/*
 * Blocks crossing an RTLD_DEEPBIND library (deeplib.c), both ways:
 * handed_over allocates 1000 blocks of 4000 bytes that the library frees
 * with libc's free; taken_back frees 1000 blocks the library allocated
 * with libc's malloc; then reuse allocates 1000 blocks of 4000 bytes
 * again (at the addresses handed_over's had, as glibc hands freed chunks
 * out again) and frees them. Usage: deepmain LIBRARY.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 1000
#define SIZE 4000

static void (*deep_free)(void *);
static void *(*deep_alloc)(size_t);
static char *blocks[N];

__attribute__((noinline)) void handed_over(void)
{
	for (int i = 0; i < N; i++) {
		blocks[i] = malloc(SIZE);
		memset(blocks[i], 1, SIZE);
	}
	for (int i = 0; i < N; i++)
		deep_free(blocks[i]);
}

__attribute__((noinline)) void taken_back(void)
{
	for (int i = 0; i < N; i++)
		blocks[i] = deep_alloc(SIZE);
	for (int i = 0; i < N; i++)
		free(blocks[i]);
}

__attribute__((noinline)) int reuse(void)
{
	int sum = 0;
	for (int i = 0; i < N; i++) {
		blocks[i] = malloc(SIZE);
		blocks[i][0] = 2;
	}
	for (int i = 0; i < N; i++) {
		sum += blocks[i][0];
		free(blocks[i]);
	}
	return sum;
}

int main(int argc, char **argv)
{
	void *h = argc > 1 ? dlopen(argv[1], RTLD_NOW | RTLD_DEEPBIND) : NULL;
	if (!h || !(deep_free = (void (*)(void *))dlsym(h, "deep_free")) ||
	    !(deep_alloc = (void *(*)(size_t))dlsym(h, "deep_alloc"))) {
		fprintf(stderr, "deepmain: %s\n", dlerror());
		return 2;
	}
	handed_over();
	taken_back();
	printf("ok %d\n", reuse());
	return 0;
}
