/*
 * Native stacks from the agent's unwind tables (docs/unwind-format.md):
 * a cache probe or a short search per frame (~45-75 instructions) where
 * libgcc's unwinder decodes the frame's CFI afresh (~1 300). A stack the
 * tables do not cover end to end is left to libgcc (sampler.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <ucontext.h>
#include <stddef.h>

#include "core.h"
#include "modules.h"
#include "reserve.h"
#include "ring.h"
#include "scratch.h"
#include "stacks.h"
#include "unwind.h"

#define TAB_HEADER 96u
#define TAB_MAX_ROWS (1u << 24)
#define TAB_RETRY_NS 5000000 /* a table the agent has not written yet: look again after 5 ms (an open that fails) */
#define MAX_FRAME_SP (64u << 10)  /* kind 0: the offset field's range */
#define MAX_FRAME_BP (16u << 20)  /* kind 1: an rbp (x29) farther up is not a frame pointer */

enum { KIND_RSP, KIND_RBP, KIND_UNKNOWN, KIND_END };

static const char magic[8] = {'H', 'L', 'U', 'N', 'W', 'N', 'D', '1'}; /* then version 2 */

static uint32_t rd32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

/*
 * Checks a mapped table file's header against the module it should
 * describe and takes its rows and index; 1 if it may be used. The rows and
 * the index are not checked one by one (~10 instructions a row, in every
 * process: 3 M for python3.11): a lookup stays within the rows its bucket's
 * entries name, and those within the table (rule_at), and the walk reads
 * only the stack (table_walk). A wrong table gives wrong stacks, no more.
 */
static int table_take(struct module *m, const uint8_t *b, uint64_t size)
{
	uint32_t rows = rd32(b + 12), id_len = rd32(b + 24), shift = rd32(b + 28);
	if (memcmp(b, magic, 8) || rd32(b + 8) != 2 || rows == 0 || rows > TAB_MAX_ROWS || shift > 31 ||
	    size < TAB_HEADER + 8 * (uint64_t)rows || id_len != m->id_len || memcmp(b + 32, m->id, id_len))
		return 0;
	const uint32_t *addr = (const uint32_t *)(const void *)(b + TAB_HEADER);
	uint64_t buckets = (addr[rows - 1] >> shift) + 2ull; /* the last entry ends the final bucket's search */
	if (size != TAB_HEADER + 8 * (uint64_t)rows + 4 * buckets)
		return 0;
	m->tab_rows = rows, m->tab_addr = addr, m->tab_rule = addr + rows;
	m->tab_first = addr + 2 * (uint64_t)rows, m->tab_shift = shift;
	return 1;
}

/*
 * Maps $HEAPLENS_DIR/unwind.<build id> for m: one thread at a time, each
 * module at most once every TAB_RETRY_NS until the file exists. 1 if m has
 * its table now.
 */
static int table_load(struct module *m)
{
	uint32_t st = __atomic_load_n(&m->tab_state, __ATOMIC_ACQUIRE);
	if (st == TAB_READY)
		return 1;
#ifdef HEAPLENS_ATTACH
	return 0; /* attached, the agent writes no tables: every frame's rule comes from its FDE */
#endif
	if (st != TAB_NEW || !m->id_len || !g.dir)
		return 0;
	int64_t now = now_ns(CLOCK_MONOTONIC);
	if (now < RELAXED(m->tab_retry) ||
	    !__atomic_compare_exchange_n(&m->tab_state, &st, TAB_LOADING, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return 0;
	char *path = tls.scratch->buf; /* not the caller's stack: a signal handler's may be small */
	char *q = put_name(path, "unwind.");
	for (uint32_t i = 0; i < m->id_len; i++)
		*q++ = "0123456789abcdef"[m->id[i] >> 4], *q++ = "0123456789abcdef"[m->id[i] & 15];
	*q = 0;
	int saved = errno, fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	uint32_t next = TAB_NONE;
	struct stat sb;
	if (fd < 0) {
		if (errno == ENOENT)
			SET_RELAXED(m->tab_retry, now + TAB_RETRY_NS), next = TAB_NEW;
	} else if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size >= TAB_HEADER &&
		   (uint64_t)sb.st_size <= TAB_HEADER + 12ull * TAB_MAX_ROWS + 8) {
		uint64_t size = (uint64_t)sb.st_size;
		const uint8_t *b = reserve_map(size, PROT_READ, MAP_PRIVATE, fd);
		if (b != MAP_FAILED && table_take(m, b, size)) {
			uint64_t base;
			memcpy(&base, b + 16, 8);
			m->tab_lo = m->bias + base;
			next = TAB_READY;
		} else if (b != MAP_FAILED)
			reserve_unmap((void *)(uintptr_t)b, size);
	}
	if (fd >= 0)
		close(fd);
	errno = saved;
	__atomic_store_n(&m->tab_state, next, __ATOMIC_RELEASE);
	return next == TAB_READY;
}

/* The module whose table a walk last used: neighbouring frames mostly share one. */
struct walk_module {
	const uint32_t *addr, *rule, *first;
	uint64_t lo;   /* pc - lo is the row address */
	uint32_t span; /* the final row's start: row addresses below it are covered */
	uint32_t rows, shift;
	uint32_t hint; /* its index in g.mod */
};

/* The module whose code holds pc: one compare per module, starting from the last one found. */
static int text_module(uintptr_t pc, uint32_t *hint)
{
	uint32_t n = __atomic_load_n(&g.nmod, __ATOMIC_ACQUIRE), i = *hint < n ? *hint : 0;
	for (uint32_t k = 0; k < n; k++, i = i + 1 < n ? i + 1 : 0)
		if (pc - g.mod[i].text_lo < g.mod[i].text_len) {
			*hint = i;
			return 1;
		}
	return 0;
}

/*
 * The rule of the row holding pc, from the table of its module: 1, or
 * NO_TABLE (a module without one, yet or for good), or NO_CODE (pc is in
 * the code of no module we know).
 */
enum { NO_CODE = 0, NO_TABLE = -1 };
static inline int rule_at(uintptr_t pc, struct walk_module *w, uint32_t *rule)
{
	uint64_t a = pc - w->lo;
	if (a >= w->span) { /* another module's */
		if (!text_module(pc, &w->hint))
			return NO_CODE;
		struct module *m = &g.mod[w->hint];
		if (__atomic_load_n(&m->tab_state, __ATOMIC_ACQUIRE) != TAB_READY && !table_load(m))
			return NO_TABLE;
		w->addr = m->tab_addr, w->rule = m->tab_rule, w->first = m->tab_first;
		w->lo = m->tab_lo, w->rows = m->tab_rows, w->shift = m->tab_shift, w->span = w->addr[m->tab_rows - 1];
		a = pc - w->lo;
		if (a >= w->span) /* before the first row (wrapped) or in the final one */
			return NO_TABLE;
	}
	/* The last row starting at or below a, which its bucket's first rows bound. */
	const uint32_t *addr = w->addr;
	uint32_t k = (uint32_t)a >> w->shift, lo = w->first[k], hi = w->first[k + 1], n = hi - lo + 1;
	if (hi >= w->rows || lo > hi) /* an index that is not the table's */
		return NO_TABLE;
	while (n > 1) {
		uint32_t half = n / 2;
		lo = addr[lo + half] <= a ? lo + half : lo;
		n -= half;
	}
	*rule = w->rule[lo];
	return 1;
}

int table_rule(uintptr_t look, uint32_t *rule)
{
	struct walk_module w = {0};
	return rule_at(look, &w, rule) > 0;
}

#ifdef __aarch64__
/* mov x8, #139; svc #0: rt_sigreturn (the vDSO's __kernel_rt_sigreturn; libgcc looks for the same). */
static const unsigned char code[8] = {0x68, 0x11, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4};
#else
/* mov $15, %rax; syscall: rt_sigreturn, where a signal handler returns (libgcc looks for the same). */
static const unsigned char code[9] = {0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05};
#endif
int sigreturn_at(uintptr_t pc)
{
	uint32_t hint = 0;
	if (!text_module(pc, &hint) || g.mod[hint].text_lo + g.mod[hint].text_len - pc < sizeof code)
		return 0;
	return memcmp((const void *)pc, code, sizeof code) == 0;
}

/*
 * Steps from a signal handler's frame to the code the signal interrupted:
 * the kernel's frame (a ucontext) lies at the handler's CFA, sp. 0 if it
 * is not within the stack or the interrupted sp is on no stack we know.
 */
#ifdef __aarch64__
/* aarch64: the kernel's frame is a siginfo, then the ucontext. */
static int through_signal(uintptr_t *pc, uintptr_t *sp, uintptr_t *bp, struct stack_region *r)
{
	const size_t uc = sizeof(siginfo_t), end = uc + offsetof(ucontext_t, uc_mcontext.pstate);
	if (*sp < r->lo || r->hi - *sp < end)
		return 0;
	const mcontext_t *mc = (const mcontext_t *)(*sp + uc + offsetof(ucontext_t, uc_mcontext));
	uintptr_t nsp = (uintptr_t)mc->sp;
	if (!stack_of(nsp, r))
		return 0;
	*pc = (uintptr_t)mc->pc, *sp = nsp, *bp = (uintptr_t)mc->regs[29];
	return 1;
}
#else
static int through_signal(uintptr_t *pc, uintptr_t *sp, uintptr_t *bp, struct stack_region *r)
{
	const size_t rip = offsetof(ucontext_t, uc_mcontext.gregs[REG_RIP]);
	if (*sp < r->lo || r->hi - *sp < rip + 8)
		return 0;
	const greg_t *gr = (const greg_t *)(*sp + offsetof(ucontext_t, uc_mcontext.gregs));
	uintptr_t nsp = (uintptr_t)gr[REG_RSP];
	if (!stack_of(nsp, r))
		return 0;
	*pc = (uintptr_t)gr[REG_RIP], *sp = nsp, *bp = (uintptr_t)gr[REG_RBP];
	return 1;
}
#endif

#define MAX_SIGNAL_FRAMES 8 /* nested handlers; a loop of forged ones ends here */

/* A walk's registers, where it leaves its loop for a frame whose rule is not a table's row. */
struct walk_regs {
	uintptr_t pc, sp, bp, look;
	uint32_t n, signals;
	int unscanned; /* a frame is in a library the module table does not have yet */
};

/*
 * The frame at w->pc has no rule the walk follows: a signal frame, stepped
 * through (-1: the walk goes on from w), or the end of the walk, as
 * table_walk returns. Out of the walk's loop, which keeps its registers.
 */
static COLD int other_frame(struct walk_regs *w, struct stack_region *r)
{
	uintptr_t self_lo = RELAXED(g.self_lo), self_len = RELAXED(g.self_hi) - self_lo;
	uint32_t rule;
	if (w->look == w->pc - 1 && w->signals < MAX_SIGNAL_FRAMES && sigreturn_at(w->pc)) {
		if (!through_signal(&w->pc, &w->sp, &w->bp, r))
			return WALK_CUT;
		w->signals++, w->look = w->pc; /* the interrupted instruction, not a return address */
		if (w->pc - self_lo >= self_len && w->n < HL_MAX_FRAMES)
			tls.scratch->frames[w->n++] = w->pc;
		return w->n < HL_MAX_FRAMES ? -1 : WALK_DONE;
	}
	struct walk_module m = {0};
	int got = rule_at(w->look, &m, &rule);
	if (got == NO_CODE && !new_module(w->pc)) { /* a return into no code: not a frame */
		w->n -= w->n > 0 && tls.scratch->frames[w->n - 1] == w->pc;
		return WALK_CUT;
	}
	if (fde_rule(w->look, &rule) == NO_FDE)
		return WALK_DONE; /* code that no FDE describes: the stack ends here, as libgcc's walk would */
	return WALK_LIBGCC;
}

/*
 * Splicing onto the thread's last walk. Consecutive samples of a thread
 * mostly differ in a few inner frames (a Python stack's ~100 native frames:
 * ~80 % of samples differ only in 1-6). A walk keeps its steps (pc, sp, bp
 * and the rule followed, in the thread's scratch); the next walk, at a
 * frame whose sp and rule equal a kept step's (the rule looked up as
 * always: the same function, as an eval loop's frame called from another
 * opcode, or the same pc), follows the kept rules from there instead of
 * looking each up, and checks as it goes that each load the full walk would
 * make reads what the kept walk read: the return address slot at each CFA
 * and, where a rule's CFA is from bp, that bp is the kept one (a saved bp
 * is loaded, not compared: it matters only where a later rule uses it,
 * which compares it). Given a frame's rule, sp, bp (where used) and the
 * stack's end, the rest of a walk is a function of the stack memory it
 * reads, so where every load matches, the walk's frames are the kept ones,
 * exactly; at the first that differs the walk goes on from that frame as a
 * full walk would. The kept rule of a pc is the one the rule cache gives
 * (both keep what the tables or the FDE said). Only whole walks are kept:
 * not one through a signal frame, cut, at the frame limit, through an
 * unscanned library or longer than TRACE_MAX steps, and only frames of the
 * same stack (its end) are spliced onto. All loads are at CFAs the kept
 * walk checked against the same stack's end, above the current walk's sp.
 * One function reached from two call sites at equal depth has equal rule
 * and sp: its caller's return address differs, and the walk goes on in
 * full from there (TestUnwindSplice). In Python processes only: the
 * bookkeeping costs a native program's shallow stacks more than it saves
 * (cpp_maps).
 */
#define TRACE_NONE (2u * TRACE_MAX) /* the sentinel step: sp UINTPTR_MAX */
#define TRACE_OFF UINT32_MAX /* a walk not kept */
_Static_assert(2 * TRACE_MAX < HL_MAX_FRAMES, "a spliced walk never reaches the frame limit");

/*
 * Follows the kept walk t from step *at, the walk's registers at sp
 * t[*at].sp with the same rule, storing frames at *n. 1 at the kept walk's
 * end; 0 where a load differs, with *pc, *sp, *bp the registers at step *at.
 */
static inline int follow_kept(const struct trace_step *t, uint32_t *at, uintptr_t *pc, uintptr_t *sp, uintptr_t *bp,
			      uint32_t *n, uintptr_t *restrict frames)
{
	const struct trace_step *e = t + *at;
	uintptr_t *f = frames + *n, b = *bp, p = *pc;
	int done = 0;
	for (;; e++) {
		uint32_t kind = e->kind;
		if (unlikely(kind != KIND_RSP)) { /* one test where most steps are rsp-based */
			if (kind == KIND_END) {
				done = 1;
				break;
			}
			if (kind == KIND_RBP && b != e->bp)
				break;
		}
		const uintptr_t *frame = (const uintptr_t *)e[1].sp;
#ifdef __aarch64__
		uintptr_t ra = STRIP_PAC(frame[-(intptr_t)e->ra]);
#else
		uintptr_t ra = frame[-1]; /* e->ra is RULE_RA_SLOT, the ABI's 1 */
#endif
		if (ra != e[1].pc)
			break;
		if (e->k)
			b = frame[-(intptr_t)e->k];
		p = ra;
		*f = ra, f += e[1].emit; /* frames has room: a spliced walk is short of the limit */
	}
	*at = (uint32_t)(e - t), *n = (uint32_t)(f - frames), *pc = p, *sp = e->sp, *bp = b;
	return done;
}

/* Copies n steps: a walk keeps a few inner ones at a time, where a call of memcpy would cost more. */
static inline void copy_steps(struct trace_step *restrict to, const struct trace_step *restrict from, uint32_t n)
{
	for (uint32_t j = 0; j < n; j++) {
		to[j].pc = from[j].pc, to[j].sp = from[j].sp, to[j].bp = from[j].bp, to[j].h = from[j].h;
		to[j].rule = from[j].rule, to[j].kind = from[j].kind, to[j].k = from[j].k, to[j].ra = from[j].ra;
		to[j].emit = from[j].emit;
	}
}

/*
 * The walk (table_walk), keeping its steps for the next (keep: compiled
 * twice, so that a walk that does not splice pays nothing for it).
 */
static inline __attribute__((always_inline)) int walk(const struct walk_start *from, struct stack_region *r, const int keep)
{
	struct scratch *s = tls.scratch;
	uintptr_t pc = from->pc, sp = from->sp, bp = from->bp, look = pc - 1, hi = r->hi;
	uintptr_t self_lo = RELAXED(g.self_lo), self_len = RELAXED(g.self_hi) - self_lo;
	uint32_t n = 0, rule;
	struct walk_regs wr = {.signals = 0, .unscanned = 0};
	if (pc - self_lo >= self_len)
		s->frames[n++] = pc;
	struct walk_module w = {0};
	/* The kept walk: its step c is the first whose sp is not below this walk's, at next_sp. i: this walk's steps so far. */
	struct trace_step *t = s->trace;
	uint32_t c = TRACE_NONE, i = TRACE_OFF;
	uintptr_t next_sp = UINTPTR_MAX;
	if (keep) {
		c = s->trace_start, i = 0, s->trace_frames = 0;
		if (c < TRACE_MAX || c > TRACE_NONE || s->trace_hi != hi)
			c = TRACE_NONE;
		t[TRACE_NONE].sp = UINTPTR_MAX;
		next_sp = t[c].sp;
	}
	for (;;) {
		/*
		 * A thread's stacks share most frames: a small cache of rules by
		 * address first, two ways a set, the newer first. Direct-mapped, two
		 * of a walk's frames often shared an entry and missed at every walk
		 * (py_jsontool: 3 misses of ~90 instructions in a sample's 28 frames).
		 */
		size_t h = (size_t)((look * 0x9e3779b97f4a7c15ull) >> 57) * 2;
		int got;
		if (s->rule_pc[h] == look)
			rule = s->rule_of[h];
		else if (s->rule_pc[h + 1] == look)
			rule = s->rule_of[h + 1];
		else if ((got = rule_at(look, &w, &rule)) > 0 || (got == NO_TABLE && fde_rule(look, &rule) > 0)) {
			s->rule_pc[h + 1] = s->rule_pc[h], s->rule_of[h + 1] = s->rule_of[h];
			s->rule_pc[h] = look, s->rule_of[h] = rule; /* no table yet: its .eh_frame's rule */
		} else if (got == NO_CODE && new_module(look + 1) && fde_rule(look, &rule) > 0)
			wr.unscanned = 1, i = TRACE_OFF; /* a library loaded since the last scan: not cached, so that the next walk says so too */
		else
			rule = (uint32_t)KIND_UNKNOWN << 24;
		if (keep) {
			if (unlikely(sp >= next_sp)) {
				while (t[c].sp < sp)
					c++;
				next_sp = t[c].sp;
				if (next_sp == sp && t[c].rule == rule && i < TRACE_MAX) {
					/*
					 * The anchor's own pc (the memory holds it now), with the
					 * same rule: the kept walk stays one a walk may follow.
					 */
					uint32_t at = c;
					if (t[c].pc != pc) {
						t[c].pc = pc, t[c].emit = pc - self_lo >= self_len;
						if (s->trace_hashed <= c)
							s->trace_hashed = c + 1;
					}
					if (follow_kept(t, &at, &pc, &sp, &bp, &n, s->frames)) {
						if (i <= c - TRACE_MAX) { /* this walk's steps, then the kept walk's from c */
							copy_steps(t + c - i, t, i);
							s->trace_start = c - i, s->trace_frames = 1;
							if (s->trace_hashed < c)
								s->trace_hashed = c;
						}
						tls.nframes = n;
						return WALK_DONE;
					}
					if (at > c) { /* it followed kept steps: this walk's too, and on from step at */
						if (i + (at - c) < TRACE_MAX)
							copy_steps(t + i, t + c, at - c), i += at - c;
						else
							i = TRACE_OFF;
						c = at, next_sp = t[at + 1].sp, look = pc - 1, rule = t[at].rule;
					}
				}
			}
			if (likely(i < TRACE_MAX)) {
				uint32_t kk = rule >> 16 & 0xff;
				t[i++] = (struct trace_step){pc, sp, bp, 0, rule, (uint8_t)(rule >> 24 & 3), (uint8_t)kk,
							     (uint8_t)RULE_RA_SLOT(rule, kk), pc - self_lo >= self_len};
			}
			else
				i = TRACE_OFF, next_sp = UINTPTR_MAX;
		}
		uint32_t kind = rule >> 24 & 3, k = rule >> 16 & 0xff;
		if (kind == KIND_END)
			break;
		if (unlikely(kind == KIND_UNKNOWN)) {
			i = TRACE_OFF, next_sp = UINTPTR_MAX; /* through a signal frame, or the end: not kept */
			wr.pc = pc, wr.sp = sp, wr.bp = bp, wr.look = look, wr.n = n;
			int end = other_frame(&wr, r);
			pc = wr.pc, sp = wr.sp, bp = wr.bp, look = wr.look, n = wr.n, hi = r->hi;
			if (end >= 0) {
				tls.nframes = n;
				return end;
			}
			continue;
		}
		uintptr_t cfa = (kind == KIND_RSP ? sp : bp) + (rule & 0xffff);
		if (cfa < sp + 8 || cfa > hi || cfa - sp > (kind == KIND_RSP ? MAX_FRAME_SP : MAX_FRAME_BP) ||
		    8 * (uintptr_t)k > cfa - sp
#ifdef __aarch64__
		    || !RULE_RA_SLOT(rule, k) || 8 * (uintptr_t)RULE_RA_SLOT(rule, k) > cfa - sp
#endif
		) {
			tls.nframes = n;
			return WALK_CUT;
		}
		const uintptr_t *frame = (const uintptr_t *)cfa;
		pc = STRIP_PAC(frame[-(intptr_t)RULE_RA_SLOT(rule, k)]);
		if (k)
			bp = frame[-(intptr_t)k];
		sp = cfa, look = pc - 1;
		if (!pc) { /* the last step: nothing follows */
			if (keep && i < TRACE_MAX)
				t[i++] = (struct trace_step){0, sp, bp, 0, (uint32_t)KIND_END << 24, KIND_END, 0, 0, 0};
			else
				i = TRACE_OFF;
			break;
		}
		if (pc - self_lo < self_len)
			continue;
		if (n >= HL_MAX_FRAMES) {
			i = TRACE_OFF;
			break;
		}
		s->frames[n++] = pc;
	}
	tls.nframes = n;
	if (keep && i <= TRACE_MAX) { /* kept whole for the next walk, at the end of the array */
		copy_steps(t + TRACE_NONE - i, t, i);
		s->trace_start = TRACE_NONE - i, s->trace_hi = hi, s->trace_hashed = TRACE_NONE, s->trace_frames = 1;
	}
	return wr.unscanned ? WALK_UNSCANNED : WALK_DONE;
}

/*
 * Walks this thread's stack into tls.scratch->frames from the frame from
 * describes (the caller of the library's entry point), skipping the
 * library's own frames, reading only within the stack r (updated when it
 * steps through a signal frame onto another stack). Returns WALK_DONE at
 * the outermost frame (or the frame limit); WALK_LIBGCC at a frame whose
 * rule neither the tables nor its FDE give as one the walk follows (a row
 * of kind 2): libgcc may go on from the start; WALK_CUT where the stack
 * cannot be followed: a return address into no code (a coroutine's stale
 * slice of the stack, a forged frame), a frame outside the stack. A table
 * that does not describe the code gives wrong frames, never a read outside
 * the stack.
 */
__attribute__((noinline)) int table_walk(const struct walk_start *from, struct stack_region *r)
{
	return RELAXED(g.walk_splice) ? walk(from, r, 1) : walk(from, r, 0);
}

/* walk_hash of the kept walk's frames: its steps keep the hash from each step out. */
uint64_t kept_hash(void)
{
	struct scratch *s = tls.scratch;
	uint64_t x = 0;
	struct trace_step *t = s->trace;
	uint32_t m = s->trace_hashed;
	if (m < TRACE_NONE)
		x = t[m].h;
	while (m-- > s->trace_start) {
		if (t[m].emit)
			MIX(x, t[m].pc);
		t[m].h = x;
	}
	s->trace_hashed = s->trace_start;
	return x;
}
