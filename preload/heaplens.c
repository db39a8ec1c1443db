/*
 * libheaplens.so: preloaded into the target. Samples allocations with a
 * per-thread byte countdown, unwinds sampled stacks, and writes records into
 * a per-process shared-memory ring (layout: heaplens_ring.h,
 * docs/ring-format.md). It copies facts and never interprets them; it never
 * blocks, and when it cannot record it drops and counts. It owns no mutex;
 * docs/preload-safety.md lists every call a hook can make and what that may
 * lock, in the program and in a fork child.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <link.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <unwind.h>

#include "internal.h"

/*
 * A sampled block carries two words just below the pointer we return:
 * p[-1] is a random per-process secret and p[-2] is the offset from the real
 * block to p mixed with p. free() of an unsampled pointer costs one load of
 * p[-1], a word glibc's own free reads next anyway, and one compare: glibc
 * keeps its chunk size there, which can never equal a random 64-bit secret.
 * The slow path then checks p[-2] against the address, so a stray copy of a
 * header elsewhere is never taken for a sampled block.
 */
typedef void *(*malloc_fn)(size_t);
typedef void (*free_fn)(void *);
typedef void *(*calloc_fn)(size_t, size_t);
typedef void *(*realloc_fn)(void *, size_t);
typedef void *(*memalign_fn)(size_t, size_t);
typedef int (*posix_memalign_fn)(void **, size_t, size_t);
typedef size_t (*usable_fn)(void *);

static void *boot_malloc(size_t n);
static void boot_free(void *p);
static void *boot_calloc(size_t k, size_t n);
static void *boot_realloc(void *p, size_t n);
static void *boot_memalign(size_t a, size_t n);
static int boot_posix_memalign(void **r, size_t a, size_t n);
static void *boot_aligned_alloc(size_t a, size_t n);
static void *boot_valloc(size_t n);
static void *boot_pvalloc(size_t n);
static size_t boot_usable(void *p);

/* Read on every call: keep it together, in one cache line where possible. */
struct hl_real real __attribute__((aligned(64))) = {
	0, 0, boot_malloc, boot_free, boot_calloc, boot_realloc, boot_memalign,
	boot_posix_memalign, boot_aligned_alloc, boot_valloc, boot_pvalloc, boot_usable,
};

struct module {
	uint64_t bias;
	uint32_t path_off, path_len;
	uint32_t nseg;
	uint64_t seg[HL_MAX_SEGMENTS][4]; /* vaddr, memsz, offset, flags */
};

#define MAX_MODULES 2048
#define MIN_RING (64u << 10)
#define FIRST_CHUNK (64u << 10) /* data bytes backed at creation; the rest as the ring fills */
#define GROW_STEP (1u << 20)    /* backed at most at once: a sampled call waits ~0.5 ms for it */
#define DEFAULT_RING (16u << 20)
#define MAX_RING (1u << 30)
#define MAX_RATE (1ull << 48)
#define MAX_DIR 3000 /* room under it for our names in a 4096-byte path */
#define PATH_POOL (512u << 10)

static struct {
	int state; /* 0 new, 1 initialising, 2 ready */
	int active;
	int follow; /* profile fork and exec children too */
	uint64_t rate;
	double inv_log_keep; /* 1 / -log(1 - 1/rate): geometric gap scale */
	uint64_t seed;
	int seeded;
	uint64_t ring_size; /* this ring's data size */
	uint64_t grow_at;   /* a reservation past this backs more first (grow) */
	int growing;        /* a thread is backing more of the ring */
	int stopped;        /* backing failed: the ring never grows again */
	uint64_t want_size; /* HEAPLENS_RING_SIZE */
	const char *dir;
	struct hl_ring_header *ring;
	uint8_t *data;
	uint64_t mask;
	uint32_t seq;
	uint32_t threads;
	uintptr_t self_lo, self_hi; /* our own code, skipped in stacks */
	int scanning;               /* a module rescan is under way */
	unsigned long long adds;    /* dlpi_adds at the last scan */
	char exe[1024];
	uint32_t nmod;              /* published with release */
	struct module mod[MAX_MODULES];
	uint32_t pool_used;
	char pool[PATH_POOL];
	uint64_t early_drops; /* samples before the ring existed */
	/*
	 * Threads inside the unwinder or dl_iterate_phdr, whose locks (libgcc's
	 * object_mutex, the loader's dl_load_write_lock, which glibc 2.36's fork
	 * does not reset) they may hold. Nonzero at a fork: the child never
	 * unwinds (no_unwind), as those locks may stay held there for good.
	 */
	int unwinding;
	int no_unwind;
	int (*find_object)(void *pc, struct dl_find_object *); /* glibc 2.35+, lock-free; else NULL */
} g;


_Thread_local struct tls tls __asm__("heaplens_tls") __attribute__((tls_model("initial-exec"), used));

static uint32_t tid(void)
{
	if (unlikely(!tls.tid))
		tls.tid = (uint32_t)syscall(SYS_gettid);
	return tls.tid;
}

uint32_t hl_tid(void) { return tid(); }

int64_t now_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- bootstrap: dlsym may allocate before the real functions are known ---- */

static char boot_buf[64 << 10] __attribute__((aligned(16)));
static size_t boot_used;

static int in_boot(const void *p)
{
	return (const char *)p >= boot_buf && (const char *)p < boot_buf + sizeof boot_buf;
}


/* Bootstrap blocks are tagged like sampled blocks; p[-3] holds their size. */
static void *boot_alloc(size_t n)
{
	size_t need = 2 * HDR + ((n + 15) & ~(size_t)15);
	size_t at = __atomic_fetch_add(&boot_used, need, __ATOMIC_RELAXED);
	if (n > sizeof boot_buf || at + need > sizeof boot_buf)
		return NULL;
	uint64_t *p = tag(boot_buf + at + HDR, HDR);
	p[-3] = n;
	return p;
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int resolving;

static void resolve_real(void)
{
	if (__atomic_exchange_n(&resolving, 1, __ATOMIC_ACQ_REL))
		return;
	if (!RELAXED(real.secret)) {
		uint64_t s = 0;
		if (getrandom(&s, sizeof s, GRND_NONBLOCK) != sizeof s)
			s = (uint64_t)now_ns(CLOCK_MONOTONIC) ^ (uint64_t)(uintptr_t)&s;
		SET_RELAXED(real.mix, splitmix(&s) | 1);
		__atomic_store_n(&real.secret, splitmix(&s) | 1, __ATOMIC_RELEASE);
	}
	/* free and realloc first: once malloc is real, its blocks must never reach a bootstrap free. */
	free_fn f = (free_fn)dlsym(RTLD_NEXT, "free");
	realloc_fn r = (realloc_fn)dlsym(RTLD_NEXT, "realloc");
	usable_fn u = (usable_fn)dlsym(RTLD_NEXT, "malloc_usable_size");
	calloc_fn c = (calloc_fn)dlsym(RTLD_NEXT, "calloc");
	memalign_fn m = (memalign_fn)dlsym(RTLD_NEXT, "memalign");
	posix_memalign_fn pm = (posix_memalign_fn)dlsym(RTLD_NEXT, "posix_memalign");
	memalign_fn aa = (memalign_fn)dlsym(RTLD_NEXT, "aligned_alloc");
	malloc_fn v = (malloc_fn)dlsym(RTLD_NEXT, "valloc");
	malloc_fn pv = (malloc_fn)dlsym(RTLD_NEXT, "pvalloc");
	malloc_fn ma = (malloc_fn)dlsym(RTLD_NEXT, "malloc");
	if (!f || !r || !u || !c || !m || !pm || !aa || !v || !pv || !ma)
		abort(); /* no allocator below us: nothing sane is possible */
	SET_RELAXED(real.free, f), SET_RELAXED(real.realloc, r), SET_RELAXED(real.usable, u);
	SET_RELAXED(real.calloc, c), SET_RELAXED(real.memalign, m), SET_RELAXED(real.posix_memalign, pm);
	SET_RELAXED(real.aligned_alloc, aa), SET_RELAXED(real.valloc, v), SET_RELAXED(real.pvalloc, pv);
	__atomic_store_n(&real.malloc, ma, __ATOMIC_RELEASE);
	resolve_cond(); /* now, not at a thread's first wait: dlsym takes the loader lock */
}

/* While resolving (dlsym re-entered us) serve from the static buffer. */
#define BOOT_READY() (resolve_real(), __atomic_load_n(&real.malloc, __ATOMIC_ACQUIRE) != boot_malloc)
static void *boot_malloc(size_t n) { return BOOT_READY() ? NEXT(malloc)(n) : boot_alloc(n); }
static void *boot_calloc(size_t k, size_t n)
{
	if (BOOT_READY())
		return NEXT(calloc)(k, n);
	size_t t;
	return __builtin_mul_overflow(k, n, &t) ? NULL : boot_alloc(t); /* static memory is zero */
}
static void boot_free(void *p)
{
	if (BOOT_READY() && !in_boot(p))
		NEXT(free)(p);
}
static void *boot_realloc(void *p, size_t n) { return BOOT_READY() ? NEXT(realloc)(p, n) : NULL; }
static void *boot_memalign(size_t a, size_t n) { return BOOT_READY() ? NEXT(memalign)(a, n) : NULL; }
static int boot_posix_memalign(void **r, size_t a, size_t n) { return BOOT_READY() ? NEXT(posix_memalign)(r, a, n) : ENOMEM; }
static void *boot_aligned_alloc(size_t a, size_t n) { return BOOT_READY() ? NEXT(aligned_alloc)(a, n) : NULL; }
static void *boot_valloc(size_t n) { return BOOT_READY() ? NEXT(valloc)(n) : NULL; }
static void *boot_pvalloc(size_t n) { return BOOT_READY() ? NEXT(pvalloc)(n) : NULL; }
static size_t boot_usable(void *p) { return BOOT_READY() ? NEXT(usable)(p) : 0; }

/* ---- the ring ---- */

struct hl_ring_header *ring_now(void) { return __atomic_load_n(&g.ring, __ATOMIC_ACQUIRE); }

/*
 * Backs data bytes [from, to) of the mapped ring: a sparse page first written
 * on a full tmpfs would raise SIGBUS in the program, MADV_POPULATE_WRITE
 * (Linux 5.14) fails instead. Needs no file descriptor, which a program that
 * closes every fd it does not know of (or reuses its number) would break.
 * Returns 0 or an errno; EFAULT (the fault would have been SIGBUS) is a full
 * file system.
 */
static int populate(uint64_t from, uint64_t to)
{
	int tries = 0;
	while (madvise(g.data + from, to - from, MADV_POPULATE_WRITE) != 0) {
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
	int e = populate(b, to);
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
	if (RELAXED(g.stopped) || (need <= b && RELAXED(g.growing)))
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
 * Until backed reaches the ring size, positions are offsets (the ring has not
 * wrapped), so [head, head + len) is writable iff head + len <= backed.
 * ring_reserve near (or past) the end of what is backed: grows it first.
 */
static COLD int reserve_growing(uint64_t len, uint64_t *pos)
{
	struct hl_ring_header *h = RELAXED(g.ring);
	uint64_t head = __atomic_load_n(&h->head, __ATOMIC_RELAXED);
	for (;;) {
		uint64_t tail = __atomic_load_n(&h->tail, __ATOMIC_ACQUIRE);
		if (head + len - tail > g.ring_size || head + len > grow(h, head + len))
			return 0;
		if (__atomic_compare_exchange_n(&h->head, &head, head + len, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			break;
	}
	*pos = head;
	return 1;
}

/* g.grow_at <= backed: below it no page needs backing. A tail call keeps this path free of spills. */
int ring_reserve(uint64_t len, uint64_t *pos)
{
	struct hl_ring_header *h = RELAXED(g.ring);
	uint64_t head = __atomic_load_n(&h->head, __ATOMIC_RELAXED);
	for (;;) {
		uint64_t tail = __atomic_load_n(&h->tail, __ATOMIC_ACQUIRE);
		if (head + len - tail > g.ring_size)
			return 0;
		if (unlikely(head + len > __atomic_load_n(&g.grow_at, __ATOMIC_ACQUIRE)))
			return reserve_growing(len, pos);
		if (__atomic_compare_exchange_n(&h->head, &head, head + len, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			break;
	}
	*pos = head;
	return 1;
}

void ring_put(uint64_t pos, uint64_t w)
{
	*(uint64_t *)(g.data + (pos & g.mask)) = w;
}

/* Writes n bytes from pos, zero-padded to whole words. */
void ring_put_bytes(uint64_t pos, const void *src, uint64_t n)
{
	for (uint64_t i = 0; i < n; i += 8) {
		uint64_t w = 0;
		memcpy(&w, (const char *)src + i, n - i < 8 ? n - i : 8);
		ring_put(pos + i, w);
	}
}

void ring_commit(uint64_t pos, uint64_t hdr)
{
	__atomic_store_n((uint64_t *)(g.data + (pos & g.mask)), hdr, __ATOMIC_RELEASE);
}

static void count_drop(uint64_t *field)
{
	if (ring_now())
		__atomic_fetch_add(field, 1, __ATOMIC_RELAXED);
	else
		__atomic_fetch_add(&g.early_drops, 1, __ATOMIC_RELAXED);
}

static void read_file(const char *path, char *buf, uint32_t cap, uint32_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	uint32_t n = 0;
	if (fd >= 0) {
		ssize_t r;
		while (n < cap && (r = read(fd, buf + n, cap - n)) > 0)
			n += (uint32_t)r;
		close(fd);
	}
	*len = n;
}

/* Appends v in decimal (snprintf may allocate). */
static char *put_num(char *q, uint64_t v)
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
static char *put_name(char *q, const char *name)
{
	size_t dl = strlen(g.dir), nl = strlen(name);
	memcpy(q, g.dir, dl), q += dl;
	*q++ = '/';
	memcpy(q, name, nl);
	return q + nl;
}

/*
 * No ring for this process image: it runs unprofiled, and says so with an
 * empty file (an inode, no blocks: it fits where the ring did not),
 * unprofiled.<pid>.<errno>.<ring bytes>.<comm>, which the agent reports.
 */
static void mark_unprofiled(int err, uint64_t size)
{
	char path[4096], comm[32];
	uint32_t cl;
	char *q = put_name(path, "unprofiled.");
	q = put_num(q, (uint64_t)getpid()), *q++ = '.';
	q = put_num(q, (uint64_t)err), *q++ = '.';
	q = put_num(q, size), *q++ = '.';
	read_file("/proc/self/comm", comm, sizeof comm - 1, &cl);
	for (uint32_t i = 0; i < cl && comm[i] != '\n'; i++) {
		char c = comm[i];
		int plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
		*q++ = plain ? c : '_';
	}
	*q = 0;
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
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
 * Creates HEAPLENS_DIR/ring.<pid>.<seq> of g.want_size data bytes, backing
 * only the header and the first FIRST_CHUNK bytes now (backing it all cost
 * milliseconds and megabytes per process image); ring_reserve backs the rest
 * as the ring fills. When not even the first chunk can be backed it leaves
 * g.ring NULL and marks the process unprofiled. The ring is built as
 * new.<pid> and linked into place complete, so that the agent never maps a
 * file still being sized. Only syscalls, no allocation.
 */
static void ring_create(uint32_t flags, int64_t parent_pid, uint32_t parent_seq)
{
	char tmp[4096], path[4096];
	int64_t pid = getpid();
	*put_num(put_name(tmp, "new."), (uint64_t)pid) = 0;
	unlink(tmp); /* left by an earlier image of this pid, killed while it made its ring */
	int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		mark_unprofiled(errno, g.want_size);
		return;
	}
	uint64_t size = g.want_size, first = size < FIRST_CHUNK ? size : FIRST_CHUNK;
	int err = ftruncate(fd, (off_t)(HL_RING_HEADER_SIZE + size)) ? errno : back(fd, HL_RING_HEADER_SIZE + first);
	void *m = err ? MAP_FAILED : mmap(NULL, HL_RING_HEADER_SIZE + size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED && !err)
		err = errno;
	g.data = (uint8_t *)m + HL_RING_HEADER_SIZE;
	g.ring_size = size;
	g.growing = g.stopped = 0;
	uint64_t backed = first;
	int late = 0;
	/*
	 * Populating pages that are backed already fails only without
	 * MADV_POPULATE_WRITE (before Linux 5.14, or a seccomp filter): then
	 * back it all now, as far as the file system lets.
	 */
	if (!err && populate(0, first)) {
		late = back(fd, HL_RING_HEADER_SIZE + size);
		backed = late ? first : size;
	}
	close(fd);
	if (m == MAP_FAILED) {
		unlink(tmp);
		mark_unprofiled(err, g.want_size);
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
		g.stopped = 1;
	}
	h->dropped_alloc = __atomic_exchange_n(&g.early_drops, 0, __ATOMIC_RELAXED);
	read_file("/proc/self/cmdline", h->cmdline, sizeof h->cmdline, &h->cmdline_len);
	ssize_t el = readlink("/proc/self/exe", h->exe, sizeof h->exe - 1);
	h->exe_len = el > 0 ? (uint32_t)el : 0;
	h->flags = flags;
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
		mark_unprofiled(err, g.want_size);
		return;
	}
	g.mask = size - 1;
	g.grow_at = grow_at(backed);
	__atomic_store_n(&g.ring, h, __ATOMIC_RELEASE);
}

void emit_mark(uint64_t kind, uint64_t value)
{
	uint64_t pos;
	struct hl_ring_header *h = ring_now();
	if (!h)
		return;
	if (!ring_reserve(32, &pos)) {
		__atomic_fetch_add(&h->dropped_other, 1, __ATOMIC_RELAXED);
		return;
	}
	ring_put(pos + 8, (uint64_t)now_ns(CLOCK_MONOTONIC));
	ring_put(pos + 16, kind);
	ring_put(pos + 24, value);
	ring_commit(pos, hl_rec_header(32, HL_REC_MARK, 0, 0));
}

/* The exit status of a process heaplens does not wait for itself. _exit and signals leave no mark. */
static void on_exit_mark(int status, void *arg)
{
	(void)arg;
	tls.busy++;
	emit_mark(HL_MARK_EXIT, (uint64_t)(uint32_t)status);
	tls.busy--;
}

/* ---- modules: what the Go side needs to symbolize a pc ---- */

static void emit_module(const struct module *m)
{
	uint64_t plen = m->path_len, len = 32 + 32 * (uint64_t)m->nseg + ((plen + 7) & ~7ull), pos;
	struct hl_ring_header *h = ring_now();
	if (!h)
		return;
	if (!ring_reserve(len, &pos)) {
		count_drop(&h->dropped_other);
		return;
	}
	uint64_t at = pos + 8;
	ring_put(at, (uint64_t)now_ns(CLOCK_MONOTONIC)), at += 8;
	ring_put(at, m->bias), at += 8;
	ring_put(at, plen), at += 8;
	for (uint32_t i = 0; i < m->nseg; i++)
		for (int j = 0; j < 4; j++)
			ring_put(at, m->seg[i][j]), at += 8;
	ring_put_bytes(at, g.pool + m->path_off, plen);
	ring_commit(pos, hl_rec_header((uint32_t)len, HL_REC_MODULE, 0, m->nseg));
}

static int known_module(uint64_t bias, const char *name)
{
	for (uint32_t i = 0; i < g.nmod; i++)
		if (g.mod[i].bias == bias && strncmp(g.pool + g.mod[i].path_off, name, g.mod[i].path_len) == 0 &&
		    name[g.mod[i].path_len] == 0)
			return 1;
	return 0;
}

static int scan_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	int *first = arg;
	if (*first) { /* nothing loaded since the last scan: stop at once */
		*first = 0;
		if (size >= offsetof(struct dl_phdr_info, dlpi_subs) && info->dlpi_adds == g.adds)
			return 1;
		if (size >= offsetof(struct dl_phdr_info, dlpi_subs))
			g.adds = info->dlpi_adds;
	}
	const char *name = info->dlpi_name;
	if (!name || !*name) { /* the main program */
		if (!g.exe[0]) {
			ssize_t n = readlink("/proc/self/exe", g.exe, sizeof g.exe - 1);
			g.exe[n > 0 ? n : 0] = 0;
		}
		name = g.exe;
	}
	if (known_module(info->dlpi_addr, name) || g.nmod >= MAX_MODULES)
		return 0;
	size_t plen = strlen(name);
	if (g.pool_used + plen > PATH_POOL)
		return 0;
	struct module *m = &g.mod[g.nmod];
	memset(m, 0, sizeof *m);
	m->bias = info->dlpi_addr;
	m->path_off = g.pool_used;
	m->path_len = (uint32_t)plen;
	memcpy(g.pool + g.pool_used, name, plen);
	g.pool_used += (uint32_t)plen;
	for (int i = 0; i < info->dlpi_phnum && m->nseg < HL_MAX_SEGMENTS; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		uint64_t *s = m->seg[m->nseg++];
		s[0] = ph->p_vaddr, s[1] = ph->p_memsz, s[2] = ph->p_offset, s[3] = ph->p_flags;
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr, self = (uintptr_t)&scan_cb;
		if ((ph->p_flags & PF_X) && self >= lo && self < lo + ph->p_memsz)
			SET_RELAXED(g.self_lo, lo), SET_RELAXED(g.self_hi, lo + ph->p_memsz);
	}
	emit_module(m);
	__atomic_store_n(&g.nmod, g.nmod + 1, __ATOMIC_RELEASE);
	return 0;
}

/* Emits a MODULE record for every loaded object not yet sent. One scanner at a time; others skip. */
static void scan_modules(void)
{
	if (RELAXED(g.no_unwind) || __atomic_exchange_n(&g.scanning, 1, __ATOMIC_ACQUIRE))
		return;
	int first = 1;
	__atomic_fetch_add(&g.unwinding, 1, __ATOMIC_SEQ_CST);
	dl_iterate_phdr(scan_cb, &first);
	__atomic_fetch_sub(&g.unwinding, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&g.scanning, 0, __ATOMIC_RELEASE);
}

/* Neighbouring frames mostly share a module: start from the last hit. */
static int covered(uintptr_t pc, uint32_t *hint)
{
	uint32_t n = __atomic_load_n(&g.nmod, __ATOMIC_ACQUIRE);
	for (uint32_t k = 0; k < n; k++) {
		uint32_t i = (*hint + k) % n;
		const struct module *m = &g.mod[i];
		for (uint32_t j = 0; j < m->nseg; j++)
			if (pc - m->bias - m->seg[j][0] < m->seg[j][1]) {
				*hint = i;
				return 1;
			}
	}
	return 0;
}

/*
 * pc is in no module we know: is it in a library loaded since the last scan
 * (or in code no library holds, such as a JIT's, that no scan would find)?
 */
static int new_module(uintptr_t pc)
{
	struct dl_find_object o;
	return !g.find_object || g.find_object((void *)(pc - 1), &o) == 0;
}

/* The executable segment of the module holding pc. */
int module_range(uintptr_t pc, uintptr_t *lo, uintptr_t *hi)
{
	uint32_t i = 0;
	if (!covered(pc, &i))
		return 0;
	const struct module *m = &g.mod[i];
	for (uint32_t j = 0; j < m->nseg; j++)
		if (m->seg[j][3] & 1 /* PF_X */) {
			*lo = m->bias + m->seg[j][0], *hi = *lo + m->seg[j][1];
			return 1;
		}
	return 0;
}

int hl_active(void) { return RELAXED(g.active); }
uint64_t hl_rate(void) { return g.rate; }

/* ---- initialisation ---- */

/*
 * The environment is the program's and may hold anything: a value that is
 * not a decimal number fitting in 64 bits within [lo, hi] gives dflt, so no
 * value can make the program fail.
 */
static int parse_num(const char *s, uint64_t *v)
{
	if (!s || !*s)
		return 0;
	for (*v = 0; *s >= '0' && *s <= '9'; s++)
		if (__builtin_mul_overflow(*v, 10, v) || __builtin_add_overflow(*v, (uint64_t)(*s - '0'), v))
			return 0;
	return !*s;
}

static uint64_t env_u64(const char *name, uint64_t lo, uint64_t hi, uint64_t dflt)
{
	uint64_t v;
	return parse_num(getenv(name), &v) && v >= lo && v <= hi ? v : dflt;
}

/* An absolute path short enough for our names under it, else NULL: the library stays inert. */
static const char *env_dir(void)
{
	const char *d = getenv("HEAPLENS_DIR");
	return d && d[0] == '/' && strnlen(d, MAX_DIR + 1) <= MAX_DIR ? d : NULL;
}

static void atfork_child(void);

static void init_global(void)
{
	int expect = 0;
	if (!__atomic_compare_exchange_n(&g.state, &expect, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return;
	int saved = errno; /* a hook that succeeds leaves errno alone */
	if (__atomic_load_n(&real.malloc, __ATOMIC_ACQUIRE) == boot_malloc)
		resolve_real();
	g.dir = env_dir();
	g.rate = env_u64("HEAPLENS_RATE", 1, MAX_RATE, 512 << 10);
	g.inv_log_keep = g.rate > 1 ? -1.0 / log1p(-1.0 / (double)g.rate) : 0;
	g.seeded = parse_num(getenv("HEAPLENS_SEED"), &g.seed);
	if (!g.seeded)
		g.seed = RELAXED(real.secret);
	g.want_size = env_u64("HEAPLENS_RING_SIZE", MIN_RING, MAX_RING, DEFAULT_RING);
	if (g.want_size & (g.want_size - 1))
		g.want_size = DEFAULT_RING;
	/* --no-follow: only the agent's own child (before and after an exec) is profiled. */
	g.follow = env_u64("HEAPLENS_FOLLOW", 0, 1, 1);
	uint64_t agent = env_u64("HEAPLENS_AGENT_PID", 1, INT32_MAX, 0);
	g.find_object = (int (*)(void *, struct dl_find_object *))dlsym(RTLD_DEFAULT, "_dl_find_object");
	if (g.dir && (g.follow || (uint64_t)getppid() == agent)) {
		ring_create(0, 0, 0);
		SET_RELAXED(g.active, g.ring != NULL);
	}
	if (g.active) {
		pthread_atfork(NULL, NULL, atfork_child);
		on_exit(on_exit_mark, NULL);
	}
	errno = saved;
	__atomic_store_n(&g.state, 2, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void heaplens_init(void)
{
	tls.busy++;
	init_global();
	pools_init();
	if (g.active) {
		scan_modules();
		py_detect();
		__atomic_fetch_or(&g.ring->flags, HL_FLAG_INIT_DONE, __ATOMIC_RELEASE);
	}
	tls.busy--;
}

/*
 * A fork child gets a fresh ring of its own: it must never write into the
 * parent's, which the parent still shares. It is the only thread now, and
 * runs nothing that another thread of the parent may have left locked: the
 * module table is inherited (no loader lock), the ring is made with syscalls,
 * and if any thread was unwinding at the fork this process never unwinds.
 * docs/preload-safety.md lists what every hook may lock.
 */
static void atfork_child(void)
{
	if (__atomic_exchange_n(&g.unwinding, 0, __ATOMIC_RELAXED))
		g.no_unwind = 1; /* for good, and in its own children */
	tls.tid = 0;
	pools_atfork_child();
	struct hl_ring_header *parent = g.ring;
	if (!parent)
		return;
	int64_t ppid = parent->pid;
	uint32_t pseq = g.seq;
	g.ring = NULL;
	g.scanning = 0;
	munmap(parent, HL_RING_HEADER_SIZE + g.ring_size);
	if (!g.follow) {
		g.active = 0;
		tls.remaining = INT64_MAX / 2, tls.owed = 0;
		return;
	}
	ring_create(HL_FLAG_FORKED | (g.no_unwind ? HL_FLAG_NO_UNWIND : 0), ppid, pseq);
	if (!g.ring) {
		g.active = 0;
		tls.remaining = INT64_MAX / 2, tls.owed = 0;
		return;
	}
	for (uint32_t i = 0; i < g.nmod; i++)
		emit_module(&g.mod[i]);
	py_atfork_child();
	__atomic_fetch_or(&g.ring->flags, HL_FLAG_INIT_DONE, __ATOMIC_RELEASE);
	if (!g.seeded)
		g.seed ^= (uint64_t)getpid() * 0x9e3779b97f4a7c15ull;
	tls.rng = splitmix(&g.seed);
}

/* ---- the sampler ---- */

/*
 * Per-byte Bernoulli sampling with p = 1/rate: the distance to the next
 * sampled byte is geometric, G = 1 + floor(ln U / ln(1 - p)). An allocation
 * is sampled when it contains that byte; by memorylessness the next distance
 * is drawn afresh from its end. At rate 1 every byte is sampled; the gap of 0
 * also samples zero-byte calls, so `--rate 1` sees every call.
 */
static int64_t draw_gap(void)
{
	if (g.rate <= 1)
		return 0;
	uint64_t x = splitmix(&tls.rng);
	double u = (double)((x >> 11) + 1) * 0x1.0p-53; /* (0, 1] */
	double gap = 1.0 + floor(-log(u) * g.inv_log_keep);
	return gap > 4e18 ? (int64_t)4e18 : (int64_t)gap;
}

/*
 * Called when the countdown crossed zero. Returns 1 when this allocation is
 * sampled. While a Python interpreter's PyMem hooks wait to be installed,
 * the countdown is cut to 1 byte so that every allocation comes here and the
 * hooks go in right after the interpreter starts; the bytes held back are
 * kept in tls.owed, so the sampling itself is unchanged.
 */
COLD int sample_slow(size_t n)
{
	if (tls.busy) { /* our own allocations: invisible to the sampler */
		tls.remaining += (int64_t)n;
		return 0;
	}
	if (!tls.init) {
		tls.busy++;
		if (__atomic_load_n(&g.state, __ATOMIC_ACQUIRE) != 2)
			init_global();
		tls.busy--;
		if (__atomic_load_n(&g.state, __ATOMIC_ACQUIRE) != 2) { /* another thread initialises: retry later */
			tls.remaining = 0;
			return 0;
		}
		tls.init = 1;
		if (!g.active) {
			tls.remaining = INT64_MAX / 2;
			return 0;
		}
		uint64_t idx = __atomic_add_fetch(&g.threads, 1, __ATOMIC_RELAXED);
		uint64_t s = g.seed ^ (idx * 0xd1b54a32d192ed03ull);
		tls.rng = splitmix(&s);
		/* Starting from a drawn gap, not from zero, keeps the first allocation of a thread unbiased. */
		tls.remaining += draw_gap();
	}
	if (!g.active) {
		tls.remaining = INT64_MAX / 2;
		return 0;
	}
	int pending = __atomic_load_n(&py_pending, __ATOMIC_RELAXED);
	if (pending) {
		tls.busy++;
		py_try_install();
		tls.busy--;
		pending = __atomic_load_n(&py_pending, __ATOMIC_RELAXED);
	}
	int64_t left = tls.remaining + tls.owed;
	int sampled = left <= 0;
	if (sampled)
		left = draw_gap();
	tls.remaining = left, tls.owed = 0;
	if (pending && left > 1)
		tls.remaining = 1, tls.owed = left - 1;
	return sampled;
}


static _Unwind_Reason_Code unwind_cb(struct _Unwind_Context *ctx, void *arg)
{
	(void)arg;
	uintptr_t ip = _Unwind_GetIP(ctx);
	if (!ip)
		return _URC_END_OF_STACK;
	uintptr_t lo = RELAXED(g.self_lo);
	if (ip - lo < RELAXED(g.self_hi) - lo)
		return _URC_NO_REASON;
	if (tls.nframes >= HL_MAX_FRAMES)
		return _URC_END_OF_STACK;
	tls.frames[tls.nframes++] = ip;
	return _URC_NO_REASON;
}

/*
 * Unwinds this thread into tls.frames and, unless the caller already did,
 * reads its Python frames into tls.py; then makes sure the agent can name
 * every pc and code object. Returns the ALLOC/ORIGIN flags.
 */
static uint32_t take_stack(int walked)
{
	tls.nframes = 0;
	if (!RELAXED(g.no_unwind)) {
		__atomic_fetch_add(&g.unwinding, 1, __ATOMIC_SEQ_CST);
		_Unwind_Backtrace(unwind_cb, NULL);
		__atomic_fetch_sub(&g.unwinding, 1, __ATOMIC_RELEASE);
	}
	py_check_final();
	if (!walked)
		py_walk();
	uint32_t nf = tls.nframes, flags = 0;
	if (nf >= HL_MAX_FRAMES)
		flags |= HL_ALLOC_TRUNCATED;
	uint32_t hint = 0;
	for (uint32_t i = 0; i < nf; i++)
		if (!covered(tls.frames[i], &hint) && new_module(tls.frames[i])) {
			scan_modules();
			break;
		}
	if (tls.npy)
		py_emit_codes();
	return flags;
}

/* Writes the taken stack at pos: native frames, then Python frames. */
static void put_stack(uint64_t pos)
{
	for (uint32_t i = 0; i < tls.nframes; i++)
		ring_put(pos + 8 * (uint64_t)i, tls.frames[i]);
	for (uint32_t i = 0; i < 2 * tls.npy; i++)
		ring_put(pos + 8 * (uint64_t)(tls.nframes + i), tls.py[i]);
}

static uint64_t stack_words(void) { return (uint64_t)tls.nframes + 2 * (uint64_t)tls.npy; }

COLD void record_alloc(void *p, size_t n, int func)
{
	int saved = errno;
	struct countdown cd = pause_sampling(); /* what the unwinder allocates is not the program's */
	struct hl_ring_header *h = __atomic_load_n(&g.ring, __ATOMIC_ACQUIRE);
	if (!h) {
		__atomic_fetch_add(&g.early_drops, 1, __ATOMIC_RELAXED); /* sampled before the ring existed */
		goto out;
	}
	uint32_t flags = take_stack(0);
	uint64_t token = 0;
	uint32_t method = (uint32_t)pool_origin(&token);
	flags |= method << HL_ALLOC_METHOD_SHIFT;
	if (token)
		flags |= HL_ALLOC_ORIGIN;
	if (func >= HL_FUNC_PYMEM_MALLOC)
		flags |= HL_ALLOC_PYMEM;
	uint64_t body = token ? 48 : 40;
	uint64_t len = body + 8 * stack_words(), pos;
	if (!ring_reserve(len, &pos)) {
		count_drop(&h->dropped_alloc);
		goto out;
	}
	if (flags & HL_ALLOC_TRUNCATED)
		__atomic_fetch_add(&h->truncated_stacks, 1, __ATOMIC_RELAXED);
	ring_put(pos + 8, (uint64_t)now_ns(CLOCK_MONOTONIC));
	ring_put(pos + 16, (uint64_t)(uintptr_t)p);
	ring_put(pos + 24, n);
	ring_put(pos + 32, (uint64_t)tid() | (uint64_t)flags << 32 | (uint64_t)tls.npy << 48);
	if (token)
		ring_put(pos + 40, token);
	put_stack(pos + body);
	ring_commit(pos, hl_rec_header((uint32_t)len, HL_REC_ALLOC, (uint32_t)func, tls.nframes));
out:
	resume_sampling(cd);
	errno = saved;
}

/*
 * The stack of an origin thread, for the pool work done under token: taken
 * by that thread itself, while it waits for the work (or when it submits).
 * walked: tls.py already holds this thread's Python frames.
 */
COLD void record_origin(uint64_t token, int walked)
{
	struct hl_ring_header *h = __atomic_load_n(&g.ring, __ATOMIC_ACQUIRE);
	if (!h)
		return;
	int saved = errno;
	struct countdown cd = pause_sampling();
	uint32_t flags = take_stack(walked);
	uint64_t len = 32 + 8 * stack_words(), pos;
	if (ring_reserve(len, &pos)) {
		ring_put(pos + 8, (uint64_t)now_ns(CLOCK_MONOTONIC));
		ring_put(pos + 16, token);
		ring_put(pos + 24, (uint64_t)tid() | (uint64_t)flags << 32 | (uint64_t)tls.npy << 48);
		put_stack(pos + 32);
		ring_commit(pos, hl_rec_header((uint32_t)len, HL_REC_ORIGIN, 0, tls.nframes));
	} else
		__atomic_fetch_add(&h->dropped_other, 1, __ATOMIC_RELAXED);
	resume_sampling(cd);
	errno = saved;
}

/* Must be called before the block is released, so that a reuse of the address is recorded after it. */
COLD void record_free(void *p)
{
	struct hl_ring_header *h = __atomic_load_n(&g.ring, __ATOMIC_ACQUIRE);
	uint64_t pos;
	if (!h)
		return;
	int saved = errno;
	py_check_final();
	if (!ring_reserve(32, &pos)) {
		__atomic_fetch_add(&h->dropped_free, 1, __ATOMIC_RELAXED);
		errno = saved;
		return;
	}
	ring_put(pos + 8, (uint64_t)now_ns(CLOCK_MONOTONIC));
	ring_put(pos + 16, (uint64_t)(uintptr_t)p);
	ring_put(pos + 24, (uint64_t)tid());
	ring_commit(pos, hl_rec_header(32, HL_REC_FREE, 0, 0));
	errno = saved;
}

/* ---- sampled blocks ---- */


void *tag(void *raw, uint64_t off)
{
	uint64_t *p = (uint64_t *)((char *)raw + off);
	p[-2] = off ^ ((uint64_t)(uintptr_t)p * RELAXED(real.mix));
	p[-1] = RELAXED(real.secret);
	return p;
}

static void untag_and_free(void *p)
{
	void *raw = raw_of(p);
	((uint64_t *)p)[-1] = 0;
	NEXT(free)(raw);
}

static COLD void *sampled_malloc(size_t n, int func, int zero)
{
	if (n > SIZE_MAX - HDR) {
		errno = ENOMEM;
		return NULL;
	}
	void *raw = zero ? NEXT(calloc)(1, n + HDR) : NEXT(malloc)(n + HDR);
	if (!raw)
		return NULL;
	void *p = tag(raw, HDR);
	record_alloc(p, n, func);
	return p;
}

/* glibc 2.36 semantics: memalign and aligned_alloc round a non-power-of-two alignment up. */
static COLD void *sampled_aligned(size_t align, size_t n, int func)
{
	size_t a = 16;
	while (a < align && a <= SIZE_MAX / 4)
		a <<= 1;
	if (a < align || n > SIZE_MAX - a)
		return NULL; /* only reached for sizes libc rejects too; caller retries with libc */
	void *raw = NEXT(memalign)(a, n + a);
	if (!raw)
		return NULL;
	void *p = tag(raw, a);
	record_alloc(p, n, func);
	return p;
}

static void free_sampled(void *p)
{
	if (in_boot(p))
		return;
	if (!tagged(p)) { /* p[-1] matched by accident: an ordinary block */
		NEXT(free)(p);
		return;
	}
	record_free(p);
	untag_and_free(p);
}

/* ---- the hooks ---- */

EXPORT HOT void *HOOK(malloc)(size_t n)
{
	if (likely(!sample_now(n)))
		return NEXT(malloc)(n);
	return sampled_malloc(n, HL_FUNC_MALLOC, 0);
}

EXPORT HOT void HOOK(free)(void *p)
{
	if (unlikely(p && word_below(p, 1) == RELAXED(real.secret))) {
		free_sampled(p);
		return;
	}
	NEXT(free)(p);
}

EXPORT void *HOOK(calloc)(size_t k, size_t n)
{
	size_t t;
	if (unlikely(__builtin_mul_overflow(k, n, &t))) {
		errno = ENOMEM;
		return NULL;
	}
	if (likely(!sample_now(t)))
		return NEXT(calloc)(k, n);
	return sampled_malloc(t, HL_FUNC_CALLOC, 1);
}

static size_t sampled_size(void *p)
{
	void *raw = raw_of(p);
	if (in_boot(p))
		return ((uint64_t *)p)[-3];
	return NEXT(usable)(raw) - (size_t)((char *)p - (char *)raw);
}

static void *do_realloc(void *p, size_t n, int func)
{
	if (!p) {
		if (likely(!sample_now(n)))
			return NEXT(malloc)(n);
		return sampled_malloc(n, func, 0);
	}
	int old = tagged(p);
	if (n == 0 && !in_boot(p)) { /* glibc frees and returns NULL */
		if (!old)
			return NEXT(realloc)(p, 0);
		record_free(p);
		((uint64_t *)p)[-1] = 0;
		return NEXT(realloc)(raw_of(p), 0);
	}
	int new = sample_now(n);
	if (likely(!old && !new))
		return NEXT(realloc)(p, n);
	if (!old) { /* plain -> sampled */
		size_t have = NEXT(usable)(p);
		void *q = sampled_malloc(n, func, 0);
		if (q) {
			memcpy(q, p, have < n ? have : n);
			NEXT(free)(p);
		}
		return q;
	}
	size_t have = sampled_size(p);
	if (new && !in_boot(p) && off_of(p) == HDR && n <= SIZE_MAX - HDR) {
		/* sampled -> sampled: record the free first, as the old address may be reused at once */
		record_free(p);
		void *raw = NEXT(realloc)(raw_of(p), n + HDR);
		if (!raw) {
			record_alloc(p, have, func); /* the old block lives on */
			return NULL;
		}
		void *q = tag(raw, HDR);
		record_alloc(q, n, func);
		return q;
	}
	/* sampled (or bootstrap, or over-aligned) -> new block */
	void *q = new ? sampled_malloc(n, func, 0) : NEXT(malloc)(n);
	if (!q)
		return NULL;
	memcpy(q, p, have < n ? have : n);
	free_sampled(p);
	return q;
}

EXPORT void *HOOK(realloc)(void *p, size_t n) { return do_realloc(p, n, HL_FUNC_REALLOC); }

EXPORT void *HOOK(reallocarray)(void *p, size_t k, size_t n)
{
	size_t t;
	if (__builtin_mul_overflow(k, n, &t)) {
		errno = ENOMEM;
		return NULL;
	}
	return do_realloc(p, t, HL_FUNC_REALLOCARRAY);
}

static int pow2(size_t a) { return a && !(a & (a - 1)); }

EXPORT int HOOK(posix_memalign)(void **r, size_t align, size_t n)
{
	if (likely(!sample_now(n)) || align % sizeof(void *) || !pow2(align))
		return NEXT(posix_memalign)(r, align, n);
	void *p = sampled_aligned(align, n, HL_FUNC_POSIX_MEMALIGN);
	if (!p)
		return NEXT(posix_memalign)(r, align, n);
	*r = p;
	return 0;
}

EXPORT void *HOOK(aligned_alloc)(size_t align, size_t n)
{
	void *p;
	if (likely(!sample_now(n)) || align > SIZE_MAX / 2 + 1 || !(p = sampled_aligned(align, n, HL_FUNC_ALIGNED_ALLOC)))
		return NEXT(aligned_alloc)(align, n);
	return p;
}

EXPORT void *HOOK(memalign)(size_t align, size_t n)
{
	void *p;
	if (likely(!sample_now(n)) || align > SIZE_MAX / 2 + 1 || !(p = sampled_aligned(align, n, HL_FUNC_MEMALIGN)))
		return NEXT(memalign)(align, n);
	return p;
}

EXPORT void *HOOK(valloc)(size_t n)
{
	void *p;
	if (likely(!sample_now(n)) || !(p = sampled_aligned((size_t)sysconf(_SC_PAGESIZE), n, HL_FUNC_VALLOC)))
		return NEXT(valloc)(n);
	return p;
}

EXPORT void *HOOK(pvalloc)(size_t n)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), r;
	void *p;
	if (n > SIZE_MAX - page)
		return NEXT(pvalloc)(n);
	r = n ? (n + page - 1) & ~(page - 1) : page;
	if (likely(!sample_now(r)) || !(p = sampled_aligned(page, r, HL_FUNC_PVALLOC)))
		return NEXT(pvalloc)(n);
	return p;
}

EXPORT size_t HOOK(malloc_usable_size)(void *p)
{
	if (p && tagged(p))
		return sampled_size(p);
	return NEXT(usable)(p);
}
