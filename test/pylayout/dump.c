/*
 * Prints, for the libpython named on the command line, each field of
 * heaplens's verified layout for its minor version beside the value its
 * _Py_DebugOffsets gives (preload/pylayout.c), one "name table debug" line
 * per field, after a "version HEX status N" line. The library is only
 * loaded, never initialised: _PyRuntime's debug offsets are static data.
 *
 * Built with -DPY_HEADERS against a 3.13+ interpreter's own include
 * directory, each line gets a third value, the field's offset as that
 * version's headers define it (-1 where heaplens reads no such field), and
 * the dumped library must be that version.
 */
#include <dlfcn.h>
#include <stdio.h>

#ifdef PY_HEADERS
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include "internal/pycore_code.h"
#include "internal/pycore_frame.h"
#include "internal/pycore_runtime.h"
#endif

#include "pylayout.h"

#ifdef PY_HEADERS
#if PY_VERSION_HEX >= 0x030E0000
#define EXEC_TAG 3 /* _PyStackRef: Py_TAG_BITS is 1 in 3.14's default build, 3 in 3.15's */
#else
#define EXEC_TAG 0
#endif
static const struct pylayout headers = {
	.ts_frame = offsetof(PyThreadState, current_frame),
	.cf_current = -1,
	.f_back = offsetof(_PyInterpreterFrame, previous),
	.f_code = offsetof(_PyInterpreterFrame, f_executable),
	.f_pos = offsetof(_PyInterpreterFrame, instr_ptr),
	.f_owner = offsetof(_PyInterpreterFrame, owner),
	.f_is_entry = -1,
	.co_filename = offsetof(PyCodeObject, co_filename),
	.co_name = offsetof(PyCodeObject, co_qualname),
	.co_table = offsetof(PyCodeObject, co_linetable),
	.co_firstlineno = offsetof(PyCodeObject, co_firstlineno),
	.co_firsttraceable = offsetof(PyCodeObject, _co_firsttraceable),
	.co_adaptive = offsetof(PyCodeObject, co_code_adaptive),
	.str_ascii = sizeof(PyASCIIObject),
	.str_compact = sizeof(PyCompactUnicodeObject),
	.rt_finalizing = offsetof(_PyRuntimeState, _finalizing),
	.f_code_tag = EXEC_TAG,
};
#define HEADER(f) printf(" %d", (int)headers.f)
#else
#define HEADER(f) (void)0
#endif

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s LIBPYTHON\n", argv[0]);
		return 2;
	}
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	const unsigned long *version = dlsym(h, "Py_Version");
	const void *runtime = dlsym(h, "_PyRuntime");
	if (!version || !runtime) {
		fprintf(stderr, "%s lacks Py_Version or _PyRuntime\n", argv[1]);
		return 1;
	}
	uint32_t hex = (uint32_t)*version, minor = hex >> 16 & 0xff;
	if (minor < PY_MINOR_MIN || minor > PY_MINOR_MAX) {
		fprintf(stderr, "Python 3.%u has no layout\n", minor);
		return 1;
	}
	struct pylayout table = py_layouts[minor], debug = table;
	int status = py_debug_layout(runtime, hex, &debug);
	printf("version %08x status %d\n", hex, status);
#ifdef PY_HEADERS
	if (hex >> 16 != PY_VERSION_HEX >> 16) {
		fprintf(stderr, "%s is %08x, the headers %08x\n", argv[1], hex, (unsigned)PY_VERSION_HEX);
		return 1;
	}
#endif
#define FIELD(f) (printf("%s %d %d", #f, table.f, debug.f), HEADER(f), printf("\n"))
	FIELD(ts_frame);
	FIELD(cf_current);
	FIELD(f_back);
	FIELD(f_code);
	FIELD(f_pos);
	FIELD(f_owner);
	FIELD(f_is_entry);
	FIELD(co_filename);
	FIELD(co_name);
	FIELD(co_table);
	FIELD(co_firstlineno);
	FIELD(co_firsttraceable);
	FIELD(co_adaptive);
	FIELD(str_ascii);
	FIELD(str_compact);
	FIELD(rt_finalizing);
	FIELD(f_code_tag);
	return 0;
}
