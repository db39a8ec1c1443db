/* seccomp.c: prctl and syscall wrapped; a filter inherited across exec. */
#ifndef HEAPLENS_SECCOMP_H
#define HEAPLENS_SECCOMP_H

#pragma GCC visibility push(hidden)

int seccomp_read(void);      /* at start: the mode (0 none), noted for seccomp_inherited */
int seccomp_inherited(void); /* started under a filter of the program's */
void seccomp_leave_preload(void); /* heaplens's LD_PRELOAD entry blanked, for what it execs */

#pragma GCC visibility pop

#endif
