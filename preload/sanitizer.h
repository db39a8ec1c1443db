/*
 * sanitizer.c: with a sanitizer runtime loaded, restarts the process
 * without us (returns only if that failed: the kind of runtime) or
 * returns 0. The marker unprofiled.<pid>.<HL_UNPROFILED_SANITIZER + kind>
 * tells the agent (internal/collect/notes.go).
 */
#ifndef HEAPLENS_SANITIZER_H
#define HEAPLENS_SANITIZER_H

#pragma GCC visibility push(hidden)

#define HL_UNPROFILED_SANITIZER 4096
int sanitizer_restart(void);

#pragma GCC visibility pop

#endif
