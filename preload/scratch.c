/*
 * A thread's working memory for taking a sample: the native frames, the
 * Python frames, the unwind rule cache, the last walk's steps and the last
 * stack sent, about 80 KiB. It is not in the thread-local block: glibc
 * carves static TLS out of every new thread's stack, so 80 KiB there would
 * make pthread_create fail for the 16 KiB stacks programs may ask for
 * (docs/preload-safety.md). It is mapped on the thread's first sample,
 * with the system call itself (no lock, no hook), in the range reserved
 * for the library's later mappings while it has room (reserve.c), and
 * unmapped when the thread ends, by a thread-specific key's destructor. A thread that
 * cannot get it drops its samples, counted.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core.h"
#include "reserve.h"
#include "scratch.h"

enum { KEY_NONE, KEY_MAKING, KEY_READY, KEY_FAILED };
static int key_state;
static pthread_key_t key;

static void release(void *s)
{
	if (tls.scratch == s) {
		tls.scratch = NULL;
		tls.scratch_gone = 1; /* a later destructor's allocation finds none: dropped, not mapped again */
	}
	reserve_unmap(s, sizeof(struct scratch));
}

/*
 * Without a key the memory would outlive its thread: then no thread gets
 * any. A thread that finds another making it drops its sample rather than
 * wait: scratch_init makes it before the program's threads can ask at once.
 */
static int key_ready(void)
{
	int s = __atomic_load_n(&key_state, __ATOMIC_ACQUIRE);
	if (s == KEY_NONE && __atomic_compare_exchange_n(&key_state, &s, KEY_MAKING, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		s = pthread_key_create(&key, release) == 0 ? KEY_READY : KEY_FAILED;
		__atomic_store_n(&key_state, s, __ATOMIC_RELEASE);
	}
	return s == KEY_READY;
}

void scratch_init(void) { (void)key_ready(); }

COLD struct scratch *scratch_make(void)
{
	if (tls.scratch_gone || NO_NEW_CALLS() || !key_ready()) /* no new system call under a seccomp filter */
		return NULL;
	void *m = reserve_map(sizeof(struct scratch), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1);
	if (m == MAP_FAILED)
		return NULL;
	if (pthread_setspecific(key, m) != 0) {
		reserve_unmap(m, sizeof(struct scratch));
		return NULL;
	}
	tls.scratch = m;
	return m;
}
