/*
 * modules.c: the loaded objects (g.mod), each sent once as a MODULE record,
 * and the lookups of a pc among them.
 */
#ifndef HEAPLENS_MODULES_H
#define HEAPLENS_MODULES_H

#include "core.h"

#pragma GCC visibility push(hidden)

int emit_module(struct module *m);
void resend_modules(void);
void scan_modules(void);
int covered(uintptr_t pc, uint32_t *hint);
int new_module(uintptr_t pc);
int module_range(uintptr_t pc, uintptr_t *lo, uintptr_t *hi);
void modules_drop_tables(void); /* no unwind table is mapped from now on (a seccomp filter) */

#pragma GCC visibility pop

#endif
