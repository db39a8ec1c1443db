"""pyunwind: allocations under many kinds of native frames, for a while.

The library walks native stacks with the agent's unwind tables and, with
HEAPLENS_UNWIND_CHECK=1, with libgcc too, counting the stacks on which they
differ. This keeps allocating for SECONDS (argv[1]) under the interpreter's
eval loop, C functions that call back into Python (sorted's key, map,
json's encoder, re), deep recursion, ctypes, and a second thread, so that
most stacks are walked after the agent has written the tables.
"""
import ctypes
import json
import re
import sys
import threading
import time

libc = ctypes.CDLL(None)  # find_library would run ldconfig: a second process
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]


def deep(n):
    if n == 0:
        return bytearray(3000)
    return deep(n - 1)


def key(x):
    return bytes(2000 + x % 7)


def work(until):
    doc = {"k%d" % i: [i, "x" * 50, {"n": i}] for i in range(200)}
    pat = re.compile(r"(\w+)-(\d+)")
    while time.monotonic() < until:
        deep(60)
        sorted(range(50), key=key)
        list(map(lambda i: bytearray(1500 + i), range(50)))
        json.dumps(doc)
        pat.findall("abc-123 " * 400)
        p = libc.malloc(5000)
        libc.free(p)


until = time.monotonic() + float(sys.argv[1])
t = threading.Thread(target=work, args=(until,))
t.start()
work(until)
t.join()
print("done")
