/*
 * mapper: memory a program maps itself, for the mmap kind. Sites and their
 * exact bytes (MiB = 1 << 20):
 *   map_big      mmap 64 MiB anonymous, kept                (leaked)
 *   map_temp     mmap 8 MiB, munmap'd                       (allocated, not leaked)
 *   map_grow     mmap 4 MiB, mremap'd to 16 MiB, kept       (4 + 16 allocated, 16 leaked)
 *   grow_break   sbrk 1 MiB, kept                           (leaked)
 *   malloc_big   malloc 32 MiB, kept: glibc maps it itself, (malloc kind only)
 *   map_file     mmap of a file, kept: not anonymous        (not counted)
 * Each touches only its first 4096 bytes: map_big and map_grow have one
 * resident page each. With an argument, it waits 1.5 s before exiting, so
 * that the agent reads the blocks' residency. Prints nothing; exits 0.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MiB (1ul << 20)

static void *volatile sink;

__attribute__((noinline)) static void *anon(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		exit(3);
	memset(p, 1, 4096);
	return p;
}

__attribute__((noinline)) static void *map_big(void)
{
	void *p = anon(64 * MiB);
	sink = p; /* not a tail call: map_big stays in the stack */
	return p;
}

__attribute__((noinline)) static void map_temp(void)
{
	void *p = anon(8 * MiB);
	sink = p;
	munmap(p, 8 * MiB);
}

__attribute__((noinline)) static void *map_grow(void)
{
	void *p = anon(4 * MiB);
	p = mremap(p, 4 * MiB, 16 * MiB, MREMAP_MAYMOVE);
	if (p == MAP_FAILED)
		exit(4);
	return p;
}

__attribute__((noinline)) static void *grow_break(void)
{
	void *p = sbrk((intptr_t)MiB);
	if (p == (void *)-1)
		exit(5);
	return p;
}

__attribute__((noinline)) static void *malloc_big(void)
{
	char *p = malloc(32 * MiB);
	memset(p, 1, 4096);
	return p;
}

__attribute__((noinline)) static void *map_file(const char *path)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		exit(6);
	void *p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	return p;
}

int main(int argc, char **argv)
{
	static void *keep[6];
	keep[0] = map_big();
	map_temp();
	keep[1] = map_grow();
	keep[2] = grow_break();
	keep[3] = malloc_big();
	keep[4] = map_file(argv[0]);
	sink = keep;
	if (argc > 1)
		usleep(1500 * 1000);
	return 0;
}
