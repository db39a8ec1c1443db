/*
 * Native stacks: unwind.c walks them with the agent's unwind tables
 * (docs/unwind-format.md), cfi.c finds a rule in .eh_frame where no table
 * covers a frame yet.
 */
#ifndef HEAPLENS_UNWIND_H
#define HEAPLENS_UNWIND_H

#include "core.h"
#include "scratch.h"
#include "stacks.h"

#pragma GCC visibility push(hidden)

/*
 * Where a walk starts: the frame of the library's entry point that called
 * it (record_alloc, record_origin), read from its frame pointer, so that
 * the walk does not step through the frames in between, which are always
 * the library's own (~3 of a C++ program's ~10 frames a sample).
 */
struct walk_start {
	uintptr_t pc, sp, bp; /* its return address, its CFA, its caller's frame pointer (rbp, x29) */
};
#ifdef __aarch64__
/*
 * aarch64: x29 points at the frame record {caller's x29, x30}, which need
 * not be at the CFA's end of the frame; the CFA is asked of the compiler.
 * A return address may carry a pointer-authentication code in its top bits.
 */
#define WALK_START() \
	({ \
		const uintptr_t *fp_ = __builtin_frame_address(0); \
		(struct walk_start){STRIP_PAC(fp_[1]), (uintptr_t)__builtin_dwarf_cfa(), fp_[0]}; \
	})
#define DWARF_FP 29 /* x29 */
/* The return address is at CFA - 8 * slot: bits 26-31, or 0: in the frame record, above x29's slot k. */
#define RULE_RA_SLOT(rule, k) ((rule) >> 26 ? (rule) >> 26 : (k) - 1u)
#define STRIP_PAC(v) ((v) & 0xffffffffffffull) /* 48-bit user addresses */
#else
#define WALK_START() \
	({ \
		const uintptr_t *fp_ = __builtin_frame_address(0); \
		(struct walk_start){fp_[1], (uintptr_t)(fp_ + 2), fp_[0]}; \
	})
#define DWARF_FP 6 /* rbp */
#define RULE_RA_SLOT(rule, k) 1u /* the ABI's: CFA - 8 */
#define STRIP_PAC(v) (v)
#endif
/* How a table walk ended: at the outermost frame, at a frame no table covers yet (libgcc may go on), or cut. */
enum { WALK_DONE, WALK_LIBGCC, WALK_CUT, WALK_UNSCANNED /* done, through a library loaded since the last scan */ };
int table_walk(const struct walk_start *from, struct stack_region *r);
#define MIX(x, v) ((x) = ((x) ^ (v)) * 0x9e3779b97f4a7c15ull, (x) ^= (x) >> 29)
uint64_t kept_hash(void);
/*
 * A hash of the native frames taken (tls.scratch->frames), folded from the
 * outermost in: where they are the kept walk's (unwind.c), the hash of the
 * frames from each of its steps out is kept too, so that a walk that
 * spliced hashes only the steps it walked itself. Both ways give the same
 * hash (the check mode compares one with the other: sampler.c).
 */
static inline uint64_t walk_hash(void)
{
	const struct scratch *s = tls.scratch;
	if (s->trace_frames)
		return kept_hash();
	uint64_t x = 0;
	for (const uintptr_t *f = s->frames + tls.nframes; f != s->frames;)
		f--, MIX(x, *f);
	return x;
}
int table_rule(uintptr_t look, uint32_t *rule); /* the rule of the row holding look, from the tables; 0 if none */
int sigreturn_at(uintptr_t pc); /* pc is the kernel's signal return trampoline (__restore_rt) */
#define NO_FDE (-2)
int fde_rule(uintptr_t look, uint32_t *rule); /* cfi.c: the rule from the module's .eh_frame, for code no table covers */

#pragma GCC visibility pop

#endif
