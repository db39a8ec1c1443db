/*
 * The shared-memory ring this process writes its records into (layout:
 * heaplens_ring.h, docs/ring-format.md): created per process image,
 * backed as it fills, never blocking a writer; what does not fit is
 * dropped and counted.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core.h"
#include "heaplens.h"
#include "limits.h"
#include "python.h"
#include "resident.h"
#include "ring.h"

/* ---- the ring ---- */

#define FIRST_CHUNK (64u << 10) /* data bytes backed at creation; the rest as the ring fills */
#define GROW_STEP (1u << 20)    /* backed at most at once: a sampled call waits ~0.5 ms for it */

struct hl_ring_header *ring_now(void) { return __atomic_load_n(&g.ring, __ATOMIC_ACQUIRE); }

/*
 * Backs data bytes [from, to) of the mapped ring: a sparse page first written
 * on a full tmpfs would raise SIGBUS in the program, MADV_POPULATE_WRITE
 * (Linux 5.14) fails instead. Needs no file descriptor, which a program that
 * closes every fd it does not know of (or reuses its number) would break.
 * Returns 0 or an errno; EFAULT (the fault would have been SIGBUS) is a full
 * file system.
 */
static int populate(uint8_t *data, uint64_t from, uint64_t to)
{
	int tries = 0;
	while (madvise(data + from, to - from, MADV_POPULATE_WRITE) != 0) {
		if (errno != EINTR || ++tries == 8)
			return errno == EFAULT ? ENOSPC : errno;
	}
	return 0;
}

/* Keeps half of what is backed, up to half a step, ahead of the head. */
static uint64_t grow_at(uint64_t backed)
{
	if (backed >= g.ring_size)
		return UINT64_MAX;
	return backed - (backed / 2 < GROW_STEP / 2 ? backed / 2 : GROW_STEP / 2);
}

/* Backs [b, to) past backed b, then raises backed to at least to. 0 or an errno. */
static int extend(struct hl_ring_header *h, uint64_t b, uint64_t to)
{
	int e = populate(g.data, b, to);
	if (e) {
		SET_RELAXED(h->backing_errno, (uint32_t)e);
		SET_RELAXED(g.stopped, 1);
		__atomic_fetch_or(&h->flags, HL_FLAG_BACKING_STOPPED, __ATOMIC_RELEASE);
		return e;
	}
	while (b < to && !__atomic_compare_exchange_n(&h->backed, &b, to, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
	return 0;
}

/*
 * Backs the ring ahead of need, doubling what is backed, by at most
 * GROW_STEP, until need leaves headroom: one thread at a time. Meanwhile a
 * thread that finds no room backs the little it needs itself (populating a
 * page twice is harmless), rather than drop or wait. A failure stops the
 * backing for good, and the header says so. Returns the backed size now.
 */
static COLD uint64_t grow(struct hl_ring_header *h, uint64_t need)
{
	uint64_t b = __atomic_load_n(&h->backed, __ATOMIC_ACQUIRE), to = b;
	if (RELAXED(g.stopped) || NO_NEW_CALLS() || (need <= b && RELAXED(g.growing)))
		return b;
	if (__atomic_exchange_n(&g.growing, 1, __ATOMIC_ACQUIRE)) {
		uint64_t want = (need + FIRST_CHUNK - 1) & ~(uint64_t)(FIRST_CHUNK - 1);
		if (need > b)
			extend(h, b, want < g.ring_size ? want : g.ring_size);
		return __atomic_load_n(&h->backed, __ATOMIC_ACQUIRE);
	}
	while (need > grow_at(to))
		to += to < GROW_STEP ? to : GROW_STEP;
	to = to < g.ring_size ? to : g.ring_size;
	if (to > b)
		extend(h, b, to);
	__atomic_store_n(&g.grow_at, grow_at(__atomic_load_n(&h->backed, __ATOMIC_ACQUIRE)), __ATOMIC_RELEASE);
	__atomic_store_n(&g.growing, 0, __ATOMIC_RELEASE);
	return __atomic_load_n(&h->backed, __ATOMIC_ACQUIRE);
}

/*
 * Backs the rest of the ring at once: a seccomp filter goes in, after which
 * no madvise may come. Beside a thread growing it (extend takes backed up
 * only); a failure stops the backing as in grow.
 */
void ring_back_all(void)
{
	struct hl_ring_header *h = ring_now();
	if (!h || RELAXED(g.stopped))
		return;
	uint64_t b = __atomic_load_n(&h->backed, __ATOMIC_ACQUIRE);
	if (b < g.ring_size)
		extend(h, b, g.ring_size);
	__atomic_store_n(&g.grow_at, grow_at(__atomic_load_n(&h->backed, __ATOMIC_ACQUIRE)), __ATOMIC_RELEASE);
}

/*
 * head was read before the agent moved tail past it (the thread was
 * preempted between the two loads while others wrote and the agent read):
 * head - tail would wrap and look like a full ring, a drop at any size.
 */
#define STALE(head, tail) ((int64_t)((head) - (tail)) < 0)

/*
 * The soft lap: in a ring larger than SOFT_LAP, a writer past its first
 * SOFT_LAP bytes, finding at most SOFT_LAG bytes unread, skips to the
 * ring's end (a SKIP record) and writes on from its start. While the agent
 * keeps up, a ring thus cycles through its first SOFT_LAP bytes: the
 * writers' stores land in lines the agent read a lap before, and the pages
 * beyond are neither backed nor touched, where a 128 MiB ring costs a page
 * fault per 4 KiB in both processes, lines the caches have long lost, and
 * 128 MiB of /dev/shm and of the program's RSS (cpp_maps at --rate 1: peak
 * RSS 129 → 33 MiB, page faults 40 k → 15 k, tree CPU −5 %). While it
 * lags, writers go on past SOFT_LAP into the rest, the headroom that bursts
 * need. The skipped bytes count as unread until the reader passes the
 * skip, so a skip leaves SOFT_LAP - SOFT_LAG free at least, and all of the
 * ring once the reader has read the SOFT_LAG before it. They were read, and
 * zeroed, on the lap before, so only the skip's header is written (which
 * must be backed: the backing may have stopped short of it).
 * docs/ring-format.md, "Protocol".
 */
#define SOFT_LAP (16u << 20)
#define SOFT_LAG (SOFT_LAP / 4)

/*
 * ring_reserve's slow path: at a soft lap's end, the skip first; near (or
 * past) the end of what is backed, more backing. What is backed is the
 * ring's first bytes: [off, off + len) is writable iff off + len <= backed,
 * or the record reaches the ring's end (and wraps to its start, always
 * backed) and the whole ring is.
 */
static COLD int reserve_slow(uint64_t len, uint64_t *pos)
{
	struct hl_ring_header *h = RELAXED(g.ring);
	uint64_t head = __atomic_load_n(&h->head, __ATOMIC_RELAXED);
	for (;;) {
		uint64_t tail = __atomic_load_n(&h->tail, __ATOMIC_ACQUIRE), off = head & g.mask;
		if (unlikely(STALE(head, tail))) {
			head = __atomic_load_n(&h->head, __ATOMIC_RELAXED);
			continue;
		}
		if (off >= SOFT_LAP && head - tail <= SOFT_LAG && off + 8 <= __atomic_load_n(&h->backed, __ATOMIC_ACQUIRE)) {
			uint64_t skip = g.ring_size - off;
			if (__atomic_compare_exchange_n(&h->head, &head, head + skip, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
				ring_commit(head, hl_rec_header((uint32_t)skip, HL_REC_SKIP, 0, 0));
				head += skip;
			}
			continue;
		}
		uint64_t end = off + len < g.ring_size ? off + len : g.ring_size;
		if (head + len - tail > g.ring_size || end > grow(h, end))
			return 0;
		if (__atomic_compare_exchange_n(&h->head, &head, head + len, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			break;
	}
	*pos = head;
	return 1;
}

/* g.grow_at <= backed: below it no page needs backing. Tail calls keep this path free of spills. */
int ring_reserve(uint64_t len, uint64_t *pos)
{
	struct hl_ring_header *h = RELAXED(g.ring);
	uint64_t head = __atomic_load_n(&h->head, __ATOMIC_RELAXED);
	for (;;) {
		uint64_t tail = __atomic_load_n(&h->tail, __ATOMIC_ACQUIRE), off = head & g.mask;
		if (unlikely(head + len - tail > g.ring_size)) {
			if (!STALE(head, tail))
				return 0;
			head = __atomic_load_n(&h->head, __ATOMIC_RELAXED);
			continue;
		}
		if (unlikely(off >= SOFT_LAP) && head - tail <= SOFT_LAG)
			return reserve_slow(len, pos);
		if (unlikely(off + len > __atomic_load_n(&g.grow_at, __ATOMIC_ACQUIRE)))
			return reserve_slow(len, pos);
		if (__atomic_compare_exchange_n(&h->head, &head, head + len, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			break;
	}
	*pos = head;
	return 1;
}

/* Writes n bytes from pos, zero-padded to whole words: whole words as single loads, the tail apart (x86-64 and arm64 are little-endian). */
void ring_put_bytes(uint64_t pos, const void *src, uint64_t n)
{
	uint64_t i = 0, w;
	for (; i + 8 <= n; i += 8) {
		memcpy(&w, (const char *)src + i, 8);
		ring_put(pos + i, w);
	}
	if (i < n) { /* byte by byte, little-endian as a word's memcpy: no call to memcpy */
		const unsigned char *b = (const unsigned char *)src + i;
		w = 0;
		for (uint64_t k = 0; k < n - i; k++)
			w |= (uint64_t)b[k] << (8 * k);
		ring_put(pos + i, w);
	}
}

void ring_commit(uint64_t pos, uint64_t hdr)
{
	__atomic_store_n((uint64_t *)(g.data + (pos & g.mask)), hdr, __ATOMIC_RELEASE);
}

void count_drop(uint64_t *field)
{
	if (ring_now())
		__atomic_fetch_add(field, 1, __ATOMIC_RELAXED);
	else
		__atomic_fetch_add(&g.early_drops, 1, __ATOMIC_RELAXED);
}

char *put_num(char *q, uint64_t v)
{
	char num[24];
	int k = 0;
	do
		num[k++] = (char)('0' + v % 10);
	while (v /= 10);
	while (k)
		*q++ = num[--k];
	return q;
}

/* dir + "/" + name + number ...: the caller checked that the directory leaves room. */
char *put_name(char *q, const char *name)
{
	size_t dl = strlen(g.dir), nl = strlen(name);
	memcpy(q, g.dir, dl), q += dl;
	*q++ = '/';
	memcpy(q, name, nl);
	return q + nl;
}

/*
 * An empty file dir/unprofiled.<pid>.<why>.<ring bytes>.<comm> (an inode,
 * no blocks: it fits where a ring did not): the process runs unprofiled,
 * and the agent reports why. Raw system calls and no string function: the
 * sanitizer check calls it before a sanitizer's runtime is set up. The
 * caller checked that dir leaves room.
 */
NOLIBC void leave_unprofiled(const char *dir, uint64_t why, uint64_t size)
{
	char path[4096], comm[32];
	char *q = path;
	while (*dir)
		*q++ = *dir++;
	for (const char *s = "/unprofiled."; *s;)
		*q++ = *s++;
	q = put_num(q, (uint64_t)syscall(SYS_getpid)), *q++ = '.';
	q = put_num(q, why), *q++ = '.';
	q = put_num(q, size), *q++ = '.';
	long cl = read_small_file("/proc/self/comm", comm, sizeof comm - 1);
	for (long i = 0; i < cl && comm[i] != '\n'; i++) {
		char c = comm[i];
		int plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
		*q++ = plain ? c : '_';
	}
	*q = 0;
	long fd = syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd >= 0)
		syscall(SYS_close, (int)fd);
}

/* Backs the file's first bytes (posix_fallocate). Returns 0 or an errno. */
static int back(int fd, uint64_t bytes)
{
	int e, tries = 0;
	while ((e = posix_fallocate(fd, 0, (off_t)bytes)) == EINTR && ++tries < 100)
		;
	return e;
}

/*
 * Creates HEAPLENS_DIR/ring.<pid>.<seq> of g.want_size data bytes (fewer
 * under an address-space limit: limits.c), backing
 * only the header and the first FIRST_CHUNK bytes now (backing it all cost
 * milliseconds and megabytes per process image); ring_reserve backs the rest
 * as the ring fills. When not even the first chunk can be backed it leaves
 * g.ring NULL and marks the process unprofiled. The ring is built as
 * new.<pid> and linked into place complete, so that the agent never maps a
 * file still being sized. Only syscalls, no allocation.
 */
void ring_create(uint32_t flags, int64_t parent_pid, uint32_t parent_seq)
{
	char tmp[4096], path[4096];
	int64_t pid = getpid();
	uint64_t size = limits_ring(g.want_size);
	if (!size) {
		struct rlimit r;
		getrlimit(RLIMIT_AS, &r);
		leave_unprofiled(g.dir, HL_UNPROFILED_ASLIMIT, r.rlim_cur);
		return;
	}
	*put_num(put_name(tmp, "new."), (uint64_t)pid) = 0;
	unlink(tmp); /* left by an earlier image of this pid, killed while it made its ring */
	int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		leave_unprofiled(g.dir, (uint64_t)errno, size);
		return;
	}
	uint64_t first = size < FIRST_CHUNK ? size : FIRST_CHUNK;
	int err = ftruncate(fd, (off_t)(HL_RING_HEADER_SIZE + size)) ? errno : back(fd, HL_RING_HEADER_SIZE + first);
	void *m = err ? MAP_FAILED : mmap(NULL, HL_RING_HEADER_SIZE + size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED && !err)
		err = errno;
	uint64_t backed = first;
	int late = 0;
	/*
	 * Populating pages that are backed already fails only without
	 * MADV_POPULATE_WRITE (before Linux 5.14, or a seccomp filter): then
	 * back it all now, as far as the file system lets.
	 */
	if (!err && populate((uint8_t *)m + HL_RING_HEADER_SIZE, 0, first)) {
		late = back(fd, HL_RING_HEADER_SIZE + size);
		backed = late ? first : size;
	}
	close(fd);
	if (m == MAP_FAILED) {
		unlink(tmp);
		leave_unprofiled(g.dir, (uint64_t)err, size);
		return;
	}
	struct hl_ring_header *h = m;
	h->version = HL_RING_VERSION;
	h->header_size = HL_RING_HEADER_SIZE;
	h->data_size = size;
	h->pid = pid;
	h->ppid = getppid();
	h->start_mono_ns = now_ns(CLOCK_MONOTONIC);
	h->start_real_ns = now_ns(CLOCK_REALTIME);
	h->rate = g.rate;
	h->parent_pid = parent_pid;
	h->parent_seq = parent_seq;
	h->backed = backed;
	if (late) {
		flags |= HL_FLAG_BACKING_STOPPED;
		h->backing_errno = (uint32_t)late;
	}
	h->dropped_alloc = __atomic_exchange_n(&g.early_drops, 0, __ATOMIC_RELAXED);
	h->allocator_flags = g.alloc_flags;
	h->allocator_len = (uint32_t)strnlen(g.alloc_path, sizeof g.alloc_path);
	memcpy(h->allocator, g.alloc_path, h->allocator_len);
	long cn = read_small_file("/proc/self/cmdline", h->cmdline, sizeof h->cmdline);
	h->cmdline_len = cn > 0 ? (uint32_t)cn : 0;
	ssize_t el = readlink("/proc/self/exe", h->exe, sizeof h->exe - 1);
	h->exe_len = el > 0 ? (uint32_t)el : 0;
	h->flags = flags | (EXACT() ? HL_FLAG_EXACT_FREES : 0);
	h->magic = HL_RING_MAGIC;
	/* The first free seq from 0: an exec keeps the pid and takes the next. */
	err = EEXIST;
	for (uint32_t seq = 0; seq < 1000 && err == EEXIST; seq++) {
		char *q = put_name(path, "ring.");
		q = put_num(q, (uint64_t)pid), *q++ = '.';
		*put_num(q, seq) = 0;
		h->seq = g.seq = seq;
		err = link(tmp, path) ? errno : 0;
	}
	unlink(tmp);
	if (err) {
		munmap(m, HL_RING_HEADER_SIZE + size);
		leave_unprofiled(g.dir, (uint64_t)err, size);
		return;
	}
	/* Only now: attached, a late writer of an earlier session may still use these. */
	g.data = (uint8_t *)m + HL_RING_HEADER_SIZE;
	g.ring_size = size;
	g.growing = 0;
	g.stopped = late != 0;
	g.mask = size - 1;
	g.grow_at = grow_at(backed);
	__atomic_store_n(&g.ring, h, __ATOMIC_RELEASE);
	rss_mark();
}

/* Deletes h's file, and the directory if nothing else is left in it (attach.c: the agent is gone). */
void ring_remove(const struct hl_ring_header *h)
{
	char path[4096];
	char *q = put_name(path, "ring.");
	q = put_num(q, (uint64_t)h->pid), *q++ = '.';
	*put_num(q, h->seq) = 0;
	unlink(path);
	rmdir(g.dir);
}

int emit_mark(uint64_t kind, uint64_t value)
{
	uint64_t pos;
	struct hl_ring_header *h = ring_now();
	if (!h)
		return 0;
	if (!ring_reserve(32, &pos)) {
		__atomic_fetch_add(&h->dropped_other, 1, __ATOMIC_RELAXED);
		return 0;
	}
	ring_put(pos + 8, (uint64_t)now_ns(CLOCK_MONOTONIC));
	ring_put(pos + 16, kind);
	ring_put(pos + 24, value);
	ring_commit(pos, hl_rec_header(32, HL_REC_MARK, 0, 0));
	return 1;
}

EXPORT int heaplens_mark(uint64_t value)
{
	if (!hl_active())
		return 0;
	tls.busy++;
	int ok = emit_mark(HL_MARK_USER, value);
	tls.busy--;
	return ok;
}

EXPORT uint64_t heaplens_dropped(void)
{
	struct hl_ring_header *h = hl_active() ? ring_now() : NULL;
	if (!h)
		return 0;
	return __atomic_load_n(&h->dropped_alloc, __ATOMIC_RELAXED) + __atomic_load_n(&h->dropped_free, __ATOMIC_RELAXED);
}

/* The exit status of a process heaplens does not wait for itself, and its
 * peak RSS, which the agent cannot read once the parent reaps it (getrusage
 * is one syscall, no lock). _exit and signals leave no mark. */
void on_exit_mark(int status, void *arg)
{
	(void)arg;
	tls.busy++;
	if (!py_final_sent()) /* else read before shutdown freed the program's blocks */
		resident_report();
	struct rusage ru;
	if (!RELAXED(g.sandboxed) && getrusage(RUSAGE_SELF, &ru) == 0 && ru.ru_maxrss > 0) /* no new system call under a filter */
		emit_mark(HL_MARK_HIGH_WATER, (uint64_t)ru.ru_maxrss * 1024);
	rss_mark();
	emit_mark(HL_MARK_EXIT, (uint64_t)(uint32_t)status);
	tls.busy--;
}
