/*
 * Python: the interpreter, its frames and code objects (python.c), the
 * PyMem hooks and pymalloc's arena allocator (pymem.c). See docs/python.md.
 */
#ifndef HEAPLENS_PYTHON_H
#define HEAPLENS_PYTHON_H

#include "core.h"

#pragma GCC visibility push(hidden)

/* pymem.c */
void pymem_install(void);       /* from py_detect, in the constructor */
void pymem_check(void);         /* the hooks still in place (a sampled slow path) */
void pymem_atfork_child(void);
extern int py_pending; /* a supported interpreter is loaded; its PyMem hooks are not installed yet */
void py_try_install(void);

/* python.c */
int py_gil_checkable(void);
int py_gil_held(void);          /* this thread holds the GIL (lock-free reads only) */
void py_detect(void);
int py_walk(void); /* 1: this thread has a thread state (no foreign thread) */
int py_emit_codes(uint32_t n); /* 1: the code objects of the innermost n frames of tls.scratch->py are in the ring (sent now or before) */
void py_check_final(void);
int py_final_sent(void);
void py_new_ring(void);      /* a new ring (fork child, attach session): state and code records again */
int py_running(void);       /* 1: an initialised interpreter, not finalizing */
int py_thread(void);        /* 1: this thread has a Python thread state */
int py_foreign_thread(void); /* 1: a running interpreter, and this thread is not one of its threads */
int py_waiter(uintptr_t ra); /* a Python thread waiting, called from ra outside the interpreter */

#pragma GCC visibility pop

#endif
