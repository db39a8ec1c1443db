/*
 * CPython's layouts, per minor version, and the reader of _Py_DebugOffsets
 * (3.13+), the table of offsets each interpreter keeps at the start of
 * _PyRuntime for debuggers. Raw facts only: python.c walks frames with them.
 */
#include <string.h>

#include "pylayout.h"

/*
 * The layouts, verified against each version's headers and by the tests on
 * real interpreters (docs/python.md). Fields a version lacks are -1.
 */
const struct pylayout py_layouts[PY_MINOR_MAX + 1] = {
	[8] = {.ts_frame = 24, .f_back = 24, .f_code = 32, .f_pos = 104, .co_filename = 104,
	        .co_name = 112, .co_table = 120, .co_firstlineno = 40, .str_ascii = 48, .str_compact = 72,
	        .rt_finalizing = 16, .cf_current = -1, .f_owner = -1, .f_is_entry = -1,
	        .co_firsttraceable = -1, .co_adaptive = -1},
	[9] = {.ts_frame = 24, .f_back = 24, .f_code = 32, .f_pos = 104, .co_filename = 104,
	        .co_name = 112, .co_table = 120, .co_firstlineno = 40, .str_ascii = 48, .str_compact = 72,
	        .rt_finalizing = 16, .cf_current = -1, .f_owner = -1, .f_is_entry = -1,
	        .co_firsttraceable = -1, .co_adaptive = -1},
	[10] = {.ts_frame = 24, .f_back = 24, .f_code = 32, .f_pos = 96, .co_filename = 104,
	        .co_name = 112, .co_table = 120, .co_firstlineno = 40, .str_ascii = 48, .str_compact = 72,
	        .rt_finalizing = 16, .cf_current = -1, .f_owner = -1, .f_is_entry = -1,
	        .co_firsttraceable = -1, .co_adaptive = -1},
	[11] = {.ts_frame = 56, .cf_current = 8, .f_back = 48, .f_code = 32, .f_pos = 56, .f_owner = 69,
	        .f_is_entry = 68, .co_filename = 112, .co_name = 128, .co_table = 136,
	        .co_firstlineno = 72, .co_firsttraceable = 168, .co_adaptive = 184, .str_ascii = 48,
	        .str_compact = 72, .rt_finalizing = 24},
	[12] = {.ts_frame = 56, .cf_current = 0, .f_back = 8, .f_code = 0, .f_pos = 56, .f_owner = 70,
	        .co_filename = 112, .co_name = 128, .co_table = 136, .co_firstlineno = 68,
	        .co_firsttraceable = 176, .co_adaptive = 192, .str_ascii = 40, .str_compact = 56,
	        .rt_finalizing = 24, .f_is_entry = -1},
	[13] = {.ts_frame = 72, .f_back = 8, .f_code = 0, .f_pos = 56, .f_owner = 70, .co_filename = 112,
	        .co_name = 128, .co_table = 136, .co_firstlineno = 68, .co_firsttraceable = 184,
	        .co_adaptive = 200, .str_ascii = 40, .str_compact = 56, .rt_finalizing = 608,
	        .cf_current = -1, .f_is_entry = -1},
	/* 3.14 and 3.15: f_executable is a _PyStackRef (Py_TAG_BITS 1 and 3). */
	[14] = {.ts_frame = 72, .f_back = 8, .f_code = 0, .f_pos = 56, .f_owner = 74, .co_filename = 112,
	        .co_name = 128, .co_table = 136, .co_firstlineno = 68, .co_firsttraceable = 192,
	        .co_adaptive = 208, .str_ascii = 40, .str_compact = 56, .rt_finalizing = 784,
	        .cf_current = -1, .f_is_entry = -1, .f_code_tag = 3},
	[15] = {.ts_frame = 72, .f_back = 8, .f_code = 0, .f_pos = 56, .f_owner = 74, .co_filename = 112,
	        .co_name = 128, .co_table = 136, .co_firstlineno = 68, .co_firsttraceable = 192,
	        .co_adaptive = 208, .str_ascii = 40, .str_compact = 56, .rt_finalizing = 912,
	        .cf_current = -1, .f_is_entry = -1, .f_code_tag = 3},
};

/*
 * Word indices in _Py_DebugOffsets of the fields read, per minor version,
 * as Include/internal/pycore_debug_offsets.h lays them out (3.13:
 * pycore_runtime.h): a cookie, the version, free_threaded, then per-struct
 * sizes and offsets. Each struct's size is read too, to check its offsets.
 */
struct dbg_index {
	uint8_t free_threaded, rt_size, rt_finalizing;
	uint8_t ts_size, ts_current_frame;
	uint8_t f_size, f_previous, f_executable, f_instr_ptr, f_owner;
	uint8_t co_size, co_filename, co_qualname, co_linetable, co_firstlineno, co_adaptive;
	uint8_t str_ascii_size;
};

static const struct dbg_index dbg_indices[PY_MINOR_MAX + 1] = {
	[13] = {.free_threaded = 2, .rt_size = 3, .rt_finalizing = 4, .ts_size = 19, .ts_current_frame = 23,
	        .f_size = 28, .f_previous = 29, .f_executable = 30, .f_instr_ptr = 31, .f_owner = 33,
	        .co_size = 34, .co_filename = 35, .co_qualname = 37, .co_linetable = 38,
	        .co_firstlineno = 39, .co_adaptive = 43, .str_ascii_size = 70},
	[14] = {.free_threaded = 2, .rt_size = 3, .rt_finalizing = 4, .ts_size = 22, .ts_current_frame = 26,
	        .f_size = 31, .f_previous = 32, .f_executable = 33, .f_instr_ptr = 34, .f_owner = 36,
	        .co_size = 39, .co_filename = 40, .co_qualname = 42, .co_linetable = 43,
	        .co_firstlineno = 44, .co_adaptive = 48, .str_ascii_size = 80},
	[15] = {.free_threaded = 2, .rt_size = 3, .rt_finalizing = 4, .ts_size = 22, .ts_current_frame = 26,
	        .f_size = 39, .f_previous = 40, .f_executable = 41, .f_instr_ptr = 42, .f_owner = 44,
	        .co_size = 47, .co_filename = 48, .co_qualname = 50, .co_linetable = 51,
	        .co_firstlineno = 52, .co_adaptive = 56, .str_ascii_size = 92},
};

/* An offset that fits in a struct of the given size, as an int; -1 if not. */
static int within(uint64_t off, uint64_t size, uint64_t width)
{
	return size < (1u << 20) && off + width <= size ? (int)off : -1;
}

int py_debug_layout(const void *runtime, uint32_t hex, struct pylayout *L)
{
	const uint64_t *d = runtime;
	if (memcmp(runtime, "xdebugpy", 8) != 0)
		return PYDBG_NO_COOKIE;
	uint32_t minor = hex >> 16 & 0xff;
	/* The major and minor must match; the patch level may not (a header of one release, a library of another). */
	if ((d[1] >> 16) != (hex >> 16) || minor > PY_MINOR_MAX || !dbg_indices[minor].rt_size)
		return PYDBG_VERSION;
	const struct dbg_index *x = &dbg_indices[minor];
	if (d[x->free_threaded])
		return PYDBG_FREE_THREADED;
	struct pylayout n = *L;
	uint64_t rt = d[x->rt_size], ts = d[x->ts_size], f = d[x->f_size], co = d[x->co_size];
	n.rt_finalizing = within(d[x->rt_finalizing], rt, 8);
	n.ts_frame = within(d[x->ts_current_frame], ts, 8);
	n.f_back = within(d[x->f_previous], f, 8);
	n.f_code = within(d[x->f_executable], f, 8);
	n.f_pos = within(d[x->f_instr_ptr], f, 8);
	n.f_owner = within(d[x->f_owner], f, 1);
	n.co_filename = within(d[x->co_filename], co, 8);
	n.co_name = within(d[x->co_qualname], co, 8);
	n.co_table = within(d[x->co_linetable], co, 8);
	n.co_firstlineno = within(d[x->co_firstlineno], co, 4);
	n.co_adaptive = within(d[x->co_adaptive], co, 2);
	n.str_ascii = d[x->str_ascii_size] >= 32 && d[x->str_ascii_size] <= 64 ? (int)d[x->str_ascii_size] : -1;
	if (n.rt_finalizing < 0 || n.ts_frame < 0 || n.f_back < 0 || n.f_code < 0 || n.f_pos < 0 || n.f_owner < 0 ||
	    n.co_filename < 0 || n.co_name < 0 || n.co_table < 0 || n.co_firstlineno < 0 || n.co_adaptive < 0 ||
	    n.str_ascii < 0)
		return PYDBG_IMPLAUSIBLE;
	*L = n;
	return PYDBG_OK;
}
