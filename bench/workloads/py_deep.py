"""The cost of one sampled allocation at a deep, mixed Python/native stack.

Usage: py_deep.py LEVELS N [SIZE]. LEVELS times, a Python function re-enters
the interpreter through C (functools.reduce calling a Python callback, which
calls the next level), then a loop makes N allocations of SIZE bytes
(bytes(SIZE - 33): one PyObject_Malloc of SIZE bytes; at SIZE > 512 it goes
on to malloc, so heaplens --no-python samples it too) and frees each at the
next iteration. The loop allocates nothing else: itertools.repeat yields the
same None. The last line is "ns_per_alloc=... levels=... n=...", timed
around the loop only.

Frames at the allocation, CPython 3.11: per level the Python frames
`level` and `step` and the native re-entry (_PyEval_EvalFrameDefault of the
caller, functools_reduce, a vectorcall helper or two, _PyEval_EvalFrameDefault
of the callback); plus the fixed part: <module>, main, measure and the
native start-up (_start ... Py_RunMain ... PyEval_EvalCode) and the
allocation itself (bytes_new ... PyObject_Malloc). The harness counts the
frames of the actual stack from a capture and reports them."""
import functools
import itertools
import sys
import time


def measure(n, size):
    body = size - 33  # sizeof(PyBytesObject) - 1: the object is SIZE bytes
    rep = itertools.repeat
    b = None
    t0 = time.perf_counter_ns()
    for _ in rep(None, n):
        b = bytes(body)
    t = time.perf_counter_ns() - t0
    del b
    return t


def step(acc, levels_left):
    return level(levels_left, acc)


def level(left, args):
    if left == 0:
        return measure(*args)
    return functools.reduce(step, (left - 1,), args)


def main():
    levels = int(sys.argv[1])
    n = int(sys.argv[2])
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 1024
    measure(min(n, 1000), size)  # warm up
    t = level(levels, (n, size))
    print("ns_per_alloc=%.2f levels=%d n=%d size=%d" % (t / n, levels, n, size))


if __name__ == "__main__":
    main()
