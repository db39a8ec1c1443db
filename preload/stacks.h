/* stacks.c: the stack a walk is on; it reads only within [lo, hi). */
#ifndef HEAPLENS_STACKS_H
#define HEAPLENS_STACKS_H

#include "core.h"

#pragma GCC visibility push(hidden)

struct stack_region {
	uintptr_t lo, hi;
	int own; /* the thread's own stack, not a signal's, a coroutine's or a ucontext's */
};
void stacks_init(void);
int stack_elsewhere(uintptr_t sp, struct stack_region *r);

/* The stack that holds sp, into *r; 0 if it cannot be known. Needs tls.scratch. */
static inline int stack_of(uintptr_t sp, struct stack_region *r)
{
	if (likely(sp - tls.stack.lo < tls.stack.hi - tls.stack.lo)) {
		r->lo = tls.stack.lo, r->hi = tls.stack.hi, r->own = 1;
		return 1;
	}
	return stack_elsewhere(sp, r);
}

#pragma GCC visibility pop

#endif
