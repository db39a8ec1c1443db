/* attach.c: the attach build's sessions, seen from the hooks (docs/attach.md). */
#ifndef HEAPLENS_ATTACH_H
#define HEAPLENS_ATTACH_H

#include "core.h"

#pragma GCC visibility push(hidden)

#ifdef HEAPLENS_ATTACH
extern struct hl_control hl_ctl; /* exported as heaplens_control */

/* 0 while another thread switches; else the session now running (0 none), in *session. */
int attach_poll(uint64_t *session);
#endif

/*
 * Attached, the loader's own allocations may come through the hooks (see
 * attach.c); preloaded, they never reach a sampled path.
 */
#ifdef HEAPLENS_ATTACH
extern uintptr_t loader_lo, loader_len;
#define FROM_LOADER() ((uintptr_t)__builtin_return_address(0) - loader_lo < loader_len)
#else
#define FROM_LOADER() 0
#endif

#pragma GCC visibility pop

#endif
