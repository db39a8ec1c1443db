/*
 * Native stacks: unwind.c walks them with the agent's unwind tables
 * (docs/unwind-format.md), cfi.c finds a rule in .eh_frame where no table
 * covers a frame yet.
 */
#ifndef HEAPLENS_UNWIND_H
#define HEAPLENS_UNWIND_H

#include "core.h"
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
uint64_t walk_hash(void); /* of the native frames taken: incremental where the walk spliced */
int table_rule(uintptr_t look, uint32_t *rule); /* the rule of the row holding look, from the tables; 0 if none */
int sigreturn_at(uintptr_t pc); /* pc is the kernel's signal return trampoline (__restore_rt) */
#define NO_FDE (-2)
int fde_rule(uintptr_t look, uint32_t *rule); /* cfi.c: the rule from the module's .eh_frame, for code no table covers */

#pragma GCC visibility pop

#endif
