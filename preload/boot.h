/* boot.c: start-up, the allocator below us, a fork child's fresh start. */
#ifndef HEAPLENS_BOOT_H
#define HEAPLENS_BOOT_H

#include "core.h"

#pragma GCC visibility push(hidden)

int in_boot(const void *p); /* a block of the static buffer that serves dlsym */
size_t boot_size(const void *p); /* the size asked for such a block */
void init_global(void);
void hl_atfork_child(void); /* a fork child's own ring */
void find_allocator(void); /* where real.malloc lives; at start-up only (dlsym, dl_iterate_phdr) */

#pragma GCC visibility pop

#endif
