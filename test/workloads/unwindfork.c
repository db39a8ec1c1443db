/*
 * unwindfork: fork while other threads are inside the unwinder. This
 * program registers its own .eh_frame with __register_frame_info, as JITs
 * register theirs, so that libgcc's unwinder takes its object_mutex for
 * every frame it looks up. THREADS threads allocate (under heaplens at
 * --rate 1, every allocation is unwound) while the main thread forks
 * CHILDREN children that allocate too. A child forked while another thread
 * held that mutex would wait for it forever at its first unwind: fork does
 * not reset it. Prints how many children exited with 0.
 */
#define _GNU_SOURCE
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 3
#define CHILDREN 60

void __register_frame_info(const void *eh_frame, void *object); /* libgcc */

static atomic_int stop;
static const void *eh_frame;
static char object[256] __attribute__((aligned(16))); /* libgcc's struct object, opaque */

/* The main program's .eh_frame, from its PT_GNU_EH_FRAME (.eh_frame_hdr). */
static int find_eh_frame(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size, (void)arg;
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME) {
			const uint8_t *hdr = (const uint8_t *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
			if (hdr[0] != 1 || hdr[1] != 0x1b) /* version 1, eh_frame_ptr pcrel|sdata4 */
				return 1;
			int32_t rel;
			memcpy(&rel, hdr + 4, 4);
			eh_frame = hdr + 4 + rel;
			return 1;
		}
	return 1; /* the first object is the main program */
}

__attribute__((noinline)) static void *allocate(size_t n)
{
	void *p = malloc(n);
	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}

static void *worker(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop))
		free(allocate(64));
	return NULL;
}

int main(void)
{
	dl_iterate_phdr(find_eh_frame, NULL);
	if (!eh_frame) {
		printf("no .eh_frame_hdr\n");
		return 2;
	}
	__register_frame_info(eh_frame, object);
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, worker, NULL);
	int ok = 0;
	for (int k = 0; k < CHILDREN; k++) {
		usleep(1000);
		pid_t pid = fork();
		if (pid == 0) {
			for (int i = 0; i < 100; i++)
				free(allocate(100));
			_exit(0);
		}
		int st;
		if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0)
			ok++;
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	printf("children ok %d of %d\n", ok, CHILDREN);
	return ok != CHILDREN;
}
