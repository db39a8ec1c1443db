/*
 * Where CPython keeps what python.c reads, per minor version: the verified
 * layouts table, and for 3.13 and later the interpreter's own
 * _Py_DebugOffsets (pylayout.c). Kept apart from python.c so that a test
 * (test/e2e/pylayout_test.go) can check one against the other on real
 * interpreters. See docs/python.md.
 */
#ifndef HEAPLENS_PYLAYOUT_H
#define HEAPLENS_PYLAYOUT_H

#include <stdint.h>

#define PY_MINOR_MIN 8
#define PY_MINOR_MAX 15

/* Offsets in bytes; -1 = absent in that version. */
struct pylayout {
	int ts_frame;    /* tstate -> frame (≤3.10), cframe (3.11/3.12), current_frame (3.13+) */
	int cf_current;  /* cframe -> current_frame (3.11: 8, 3.12: 0) */
	int f_back, f_code, f_pos, f_owner, f_is_entry;
	int co_filename, co_name, co_table, co_firstlineno, co_firsttraceable, co_adaptive;
	int str_ascii, str_compact; /* sizeof(PyASCIIObject), sizeof(PyCompactUnicodeObject) */
	int rt_finalizing;
	int f_code_tag;   /* 3.14+: f_executable is a _PyStackRef whose low bits are tags */
};

/* The verified layouts, indexed by minor version (0 .. PY_MINOR_MAX). */
extern const struct pylayout py_layouts[PY_MINOR_MAX + 1];

/* Why py_debug_layout refused an interpreter's _Py_DebugOffsets. */
enum {
	PYDBG_OK,
	PYDBG_NO_COOKIE,     /* no "xdebugpy" at the start of _PyRuntime */
	PYDBG_VERSION,       /* its version is not the interpreter's, or one heaplens has no indices for */
	PYDBG_FREE_THREADED, /* a free-threaded (no-GIL) build */
	PYDBG_IMPLAUSIBLE,   /* an offset lies outside its struct: the indices do not fit this build */
};

/*
 * Overwrites the fields of L that _Py_DebugOffsets publishes with the values
 * read at runtime (the start of _PyRuntime) for an interpreter of version
 * hex (PY_VERSION_HEX); L keeps the others. Returns PYDBG_*.
 */
int py_debug_layout(const void *runtime, uint32_t hex, struct pylayout *L);

#endif
