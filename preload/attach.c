/*
 * libheaplens-attach.so: the library built (-DHEAPLENS_ATTACH) to be loaded
 * into a process that is already running, by `heaplens attach`
 * (docs/attach.md). The agent loads it with the loader's own dlopen, run
 * on one thread of the process through ptrace; everything else goes through
 * heaplens_control, a block the agent reads and writes in the process's
 * memory (layout: heaplens_ring.h). The agent itself points the GOT
 * entries of the malloc family at the hooks here, and back at detach.
 *
 * What differs from the preloaded library:
 *  - blocks sampled in a session stay in the sampled set (hooks.c) after
 *    it; a free that bypasses the hooks (a pointer taken before the
 *    attach, or after the detach) frees it correctly, and only its FREE
 *    record is missed then;
 *  - a session starts and ends in a hook's slow path, when it sees a new
 *    start or stop in the control block (attach_poll); between sessions the
 *    hooks stay in place and idle, coming to the slow path every few
 *    kilobytes (IDLE_GAP) to look for the next one;
 *  - a session also ends when its agent is gone (killed): then the library
 *    deletes its ring file itself.
 */
#ifdef HEAPLENS_ATTACH
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>

#include "allocapi.h"
#include "attach.h"
#include "blockset.h"
#include "boot.h"
#include "core.h"
#include "heapstats.h"
#include "scratch.h"
#include "hooks.h"
#include "modules.h"
#include "pools.h"
#include "python.h"
#include "reserve.h"
#include "ring.h"
#include "stacks.h"

struct hl_control hl_ctl __attribute__((aligned(64)));
extern struct hl_control heaplens_control __attribute__((alias("hl_ctl"), visibility("default")));
#define CTL hl_ctl

/*
 * The loader's own allocations come here too when an executable's PLT
 * entry is the process's malloc (the executable takes its address): the
 * loader calls it through that entry, whose GOT entry now leads here. One
 * of them allocates this library's thread-local block on a thread's first
 * hook call, so they must not touch it: calls from the loader's code go
 * straight on, unsampled (as they are when preloaded): FROM_LOADER.
 */
uintptr_t loader_lo, loader_len;

/* The table of routed functions (hooks.h's HL_HOOKED) fits the control block. */
#define ONE(name, ...) +1
_Static_assert(0 HL_HOOKED(ONE) <= HL_CONTROL_HOOKS, "HL_CONTROL_HOOKS in heaplens_ring.h");
#undef ONE

/* ---- sessions ---- */

static char dir[HL_CONTROL_DIR];
static int switching;        /* a thread is starting or ending a session */
static uint64_t beginning;   /* the session begin_session begins, for a child forked meanwhile */
static int64_t next_agent_check; /* CLOCK_MONOTONIC ns */
static int heartbeat;        /* the agent's liveness is CTL.alive_ns, not kill() (another PID namespace) */

/* An agent that has not written alive_ns for this long is gone (it writes it every quarter second). */
#define HEARTBEAT_LOST 5000000000ll

/* The agent's settings, checked as untrusted: a bad one gives the default. */
static void take_settings(void)
{
	uint64_t rate = RELAXED(CTL.rate), size = RELAXED(CTL.ring_size), flags = RELAXED(CTL.flags);
	g.rate = rate >= 1 && rate <= MAX_RATE ? rate : HL_DEFAULT_RATE;
	g.inv_log_keep = g.rate > 1 ? -1.0 / log1p(-1.0 / (double)g.rate) : 0;
	g.want_size = size >= MIN_RING && size <= MAX_RING && !(size & (size - 1)) ? size : DEFAULT_RING;
	g.seed = RELAXED(CTL.seed);
	g.seeded = g.seed != 0;
	if (!g.seeded)
		g.seed = (uint64_t)now_ns(CLOCK_MONOTONIC) * (uint64_t)0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
	g.follow = !(flags & HL_CTL_NO_FOLLOW);
	SET_RELAXED(heartbeat, (flags & HL_CTL_HEARTBEAT) != 0);
	SET_RELAXED(g.no_python, (flags & HL_CTL_NO_PYTHON) != 0);
	if (flags & HL_CTL_SANDBOXED) { /* for good: a filter never comes off; no unwind table to map (core.h, NO_NEW_CALLS) */
		SET_RELAXED(g.sandboxed, 1);
		modules_drop_tables();
	}
	memcpy(dir, CTL.dir, sizeof dir);
	dir[sizeof dir - 1] = 0;
	g.dir = dir[0] == '/' && strlen(dir) <= MAX_DIR ? dir : NULL;
}

static void begin_session(uint64_t session)
{
	SET_RELAXED(beginning, session);
	take_settings();
	g.threads = 0;
	struct hl_ring_header *last = g.ring; /* an earlier session's, which late writers may still use */
	if (g.dir)
		ring_create(HL_FLAG_ATTACHED, 0, 0);
	if (g.ring == last) { /* leave_unprofiled told the agent why */
		SET_RELAXED(CTL.ended, session);
		return;
	}
	for (uint32_t i = 0; i < g.nmod; i++)
		emit_module(&g.mod[i]);
	scan_modules();
	py_new_ring();
	next_agent_check = now_ns(CLOCK_MONOTONIC) + 1000000000;
	SET_RELAXED(g.active, 1);
	/*
	 * The window opens now, not at the ring's creation: until this switch
	 * ends the other threads' calls went unsampled (attach_poll). The agent
	 * reads the start once INIT_DONE is set (docs/ring-format.md).
	 */
	int64_t mono = now_ns(CLOCK_MONOTONIC);
	g.ring->start_real_ns += mono - g.ring->start_mono_ns;
	g.ring->start_mono_ns = mono;
	__atomic_fetch_or(&g.ring->flags, HL_FLAG_INIT_DONE, __ATOMIC_RELEASE);
	__atomic_store_n(&CTL.session, session, __ATOMIC_RELEASE);
}

/*
 * Ends the session: the ring says so, and its pages are replaced by fresh
 * anonymous ones rather than unmapped, since other threads may still be
 * writing records into it (g.ring stays: they read it again): the file's
 * memory goes back to the system once the agent deletes the file, and a
 * late write lands in memory nobody reads. No new record is begun once
 * g.active is 0 (record_free checks). With the agent gone, the library
 * deletes the file. at: when the switch began, from which the other
 * threads' calls went unsampled: the window's end.
 */
static void end_session(uint64_t session, int orphaned, int64_t at)
{
	SET_RELAXED(g.active, 0);
	struct hl_ring_header *h = g.ring;
	if (h) {
		h->detached_mono_ns = at;
		__atomic_fetch_or(&h->flags, HL_FLAG_DETACHED, __ATOMIC_RELEASE);
		if (orphaned && g.dir)
			ring_remove(h);
		mmap(h, HL_RING_HEADER_SIZE + g.ring_size, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
	}
	SET_RELAXED(CTL.ended, session);
	__atomic_store_n(&CTL.session, 0, __ATOMIC_RELEASE);
}

/*
 * From every slow path (sample_slow), where every thread comes at its next
 * call after the agent raised the epoch: a session to end (stopped, its
 * agent gone, or a newer one asked for) or to start? Four loads when
 * nothing changed; a clock read once a sample while a session runs, and a
 * kill(agent, 0) once a second. One thread at a time switches; the others
 * get 0 meanwhile and come back at their next call (their epoch is kept
 * old), so that none goes on with the state of the session that ends.
 */
int attach_poll(uint64_t *session)
{
	uint64_t start = RELAXED(CTL.start), stop = RELAXED(CTL.stop), cur = RELAXED(CTL.session);
	int orphaned = 0;
	if (cur && stop != cur && now_ns(CLOCK_MONOTONIC) >= RELAXED(next_agent_check)) {
		int saved = errno; /* the program's */
		int64_t t = now_ns(CLOCK_MONOTONIC);
		SET_RELAXED(next_agent_check, t + 1000000000);
		if (RELAXED(heartbeat))
			orphaned = t - (int64_t)RELAXED(CTL.alive_ns) > HEARTBEAT_LOST;
		else
			orphaned = kill((pid_t)RELAXED(CTL.agent_pid), 0) != 0 && errno == ESRCH;
		errno = saved;
	}
	int change = cur ? stop == cur || start > cur || orphaned : start > RELAXED(CTL.ended);
	*session = cur;
	if (!change)
		return 1;
	if (__atomic_exchange_n(&switching, 1, __ATOMIC_ACQUIRE))
		return 0;
	int saved = errno;
	int64_t at = now_ns(CLOCK_MONOTONIC);
	struct countdown cd = pause_sampling();
	cur = RELAXED(CTL.session);
	if (cur && (RELAXED(CTL.stop) == cur || start > cur || orphaned))
		end_session(cur, orphaned, at);
	if (!RELAXED(CTL.session) && start > RELAXED(CTL.ended)) {
		if (RELAXED(CTL.stop) == start) /* stopped before it began */
			SET_RELAXED(CTL.ended, start);
		else
			begin_session(start);
	}
	resume_sampling(cd);
	errno = saved;
	*session = __atomic_load_n(&CTL.session, __ATOMIC_ACQUIRE);
	__atomic_store_n(&switching, 0, __ATOMIC_RELEASE);
	return 1;
}

/*
 * After hl_atfork_child, which gave the child a ring only if the session was
 * running (g.active). The child's only thread may have been forked while
 * another switched: that one is gone, and its switch with it. A child not
 * profiled (--no-follow, or forked before the window opened or after it
 * closed) must not start the session on its own; one forked between
 * begin_session's g.active and its store of the session is in it.
 */
static void attach_child(void)
{
	SET_RELAXED(switching, 0);
	if (!g.active) {
		SET_RELAXED(CTL.ended, RELAXED(CTL.start));
		SET_RELAXED(CTL.session, 0);
	} else if (!RELAXED(CTL.session)) {
		SET_RELAXED(CTL.session, RELAXED(beginning));
	}
}

void init_global(void) {}

static int loader_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	if (info->dlpi_addr != (uintptr_t)arg)
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X))
			loader_lo = info->dlpi_addr + ph->p_vaddr, loader_len = ph->p_memsz;
	}
	return 1;
}

/* The loader's code: the interpreter the kernel mapped (AT_BASE). */
static void find_loader(void)
{
	uintptr_t base = (uintptr_t)getauxval(AT_BASE);
	if (base)
		dl_iterate_phdr(loader_cb, (void *)base);
}

/*
 * At load, inside dlopen: the only place that may call dlsym. Finds the
 * allocator below (the first global definitions: the ones the program's
 * calls reached), the interpreter, and fills the control block; magic is
 * written last, for the agent to see that all went well.
 */
__attribute__((constructor)) static void heaplens_attach_load(void)
{
	tls.busy++;
#define FIND(name, ret, params)                                          \
	if (!(*(void **)&real.name = dlsym(RTLD_DEFAULT, #name))) {    \
		tls.busy--;                                               \
		return;                                                   \
	}
	HL_ALLOCATOR(FIND)
#undef FIND
	g.rate = 1; /* the tables are sized for the finest rate a session may ask for */
	if (!blockset_init(&sampled_blocks)) {
		tls.busy--;
		return;
	}
	g.rate = HL_DEFAULT_RATE;
	find_loader();
	g.find_object = (int (*)(void *, struct dl_find_object *))dlsym(RTLD_DEFAULT, "_dl_find_object");
	find_allocator();
	allocapi_resolve();
	allocapi_route_all();
	allocapi_started();
	heapstats_init();
	scratch_init();
	reserve_init();
	stacks_init();
	pools_init();
	py_detect();
	pthread_atfork(NULL, NULL, hl_atfork_child);
	pthread_atfork(NULL, NULL, attach_child);
	on_exit(on_exit_mark, NULL);
	uint32_t n = 0;
#define NAME(f, ...)                                                       \
	strncpy(CTL.name[n], #f, HL_CONTROL_NAME - 1);                      \
	CTL.hook[n] = (uint64_t)(uintptr_t)&f;                              \
	CTL.real[n] = (uint64_t)(uintptr_t)dlsym(RTLD_DEFAULT, #f);         \
	n++;
	HL_HOOKED(NAME)
#undef NAME
	CTL.nhooks = n;
	CTL.version = HL_CONTROL_VERSION;
	__atomic_store_n(&g.state, 2, __ATOMIC_RELEASE);
	__atomic_store_n(&CTL.magic, HL_CONTROL_MAGIC, __ATOMIC_RELEASE);
	tls.busy--;
}
#endif
