"""pysites: Python allocation sites with known sizes, for heaplens's tests.

Runs unchanged on CPython 3.8-3.13. Each site allocates objects whose
allocation request is known exactly: bytes(n) asks the allocator for
33 + n bytes (the PyBytesObject header plus the terminating NUL),
bytearray(n) for n + 1 bytes of buffer. Lines marked "# SITE:name" are
where the tests expect the bytes to be charged.
"""
import asyncio
import ctypes
import sys
import threading

SMALL_N, SMALL = 100000, 100      # 133-byte objects from pymalloc's arenas
MEDIUM_N, MEDIUM = 20000, 1000    # 1033-byte objects: beyond pymalloc, through malloc
LARGE_N, LARGE = 8, 4 << 20       # bytearrays: a 56-byte object and a LARGE + 1 byte buffer each
CHURN_N, CHURN = 200000, 200      # allocated and dropped at once
THREAD_N, THREAD = 20000, 500     # kept by a threading.Thread
GEN_N, GEN = 20000, 300           # made in a generator
CORO_N, CORO = 20000, 400         # made in a coroutine
NATIVE_N, NATIVE = 200, 50000     # libc malloc through ctypes
DEPTH, DEEP = 150, 1 << 20        # one block at the bottom of C-level recursion

KEEP = []


def keep_small():
    out = [None] * SMALL_N
    for i in range(SMALL_N):
        out[i] = bytes(SMALL)  # SITE:keep_small
    return out


def keep_medium():
    out = [None] * MEDIUM_N
    for i in range(MEDIUM_N):
        out[i] = bytes(MEDIUM)  # SITE:keep_medium
    return out


def keep_large():
    return [bytearray(LARGE) for _ in range(LARGE_N)]  # SITE:keep_large


def churn():
    x = None
    for i in range(CHURN_N):
        x = bytes(CHURN)  # SITE:churn
    return x is not None


def thread_site(out):
    for i in range(THREAD_N):
        out[i] = bytes(THREAD)  # SITE:thread_site


def gen_site():
    for i in range(GEN_N):
        yield bytes(GEN)  # SITE:gen_site


async def coro_site():
    out = [None] * CORO_N
    for i in range(CORO_N):
        out[i] = bytes(CORO)  # SITE:coro_site
        if i % 5000 == 0:
            await asyncio.sleep(0)
    return out


def native_alloc():
    libc = ctypes.CDLL(None)
    malloc = libc.malloc
    malloc.restype = ctypes.c_void_p
    malloc.argtypes = [ctypes.c_size_t]
    kept = (ctypes.c_void_p * NATIVE_N)()  # the pointers only: no Python int survives the loop
    for i in range(NATIVE_N):
        kept[i] = malloc(NATIVE)  # SITE:native_alloc
    return kept


def deep(n):
    """Re-enters itself through C (sorted calls the key) n times, then allocates."""
    if n == 0:
        return bytes(DEEP)  # SITE:deep
    out = []
    sorted([1], key=lambda x: out.append(deep(n - 1)))
    return out[0]


def main():
    sys.setrecursionlimit(10000)
    if sys.argv[1:] == ["deep"]:
        KEEP.append(deep(DEPTH))
        print("pysites deep done")
        return
    KEEP.append(keep_small())
    KEEP.append(keep_medium())
    KEEP.append(keep_large())
    # pymalloc counts its blocks (sys.getallocatedblocks); a profiler must
    # not unbalance the count by allocating or freeing behind its back.
    blocks = sys.getallocatedblocks()
    churn()
    print("blocks_delta=%d" % (sys.getallocatedblocks() - blocks))
    held = [None] * THREAD_N
    t = threading.Thread(target=thread_site, args=(held,))
    t.start()
    t.join()
    KEEP.append(held)
    KEEP.append(list(gen_site()))
    KEEP.append(asyncio.run(coro_site()))
    KEEP.append(native_alloc())
    if sys.argv[1:] != ["nodeep"]:  # at --rate 1 each of deep's allocations unwinds 300 frames: seconds
        KEEP.append(deep(DEPTH))
    print("pysites done", sys.version_info[0], sys.version_info[1])


if __name__ == "__main__":
    main()
