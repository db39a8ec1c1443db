"""pyserver: a Python service with a slow leak, for heaplens attach.

Usage: pyserver.py SECONDS [LEAK_BYTES]

Every 10 ms tick, for SECONDS seconds, the main thread calls leak_slowly,
which keeps one bytes object of LEAK_BYTES (default 64 KiB) forever, and
two worker threads churn: they build and drop dicts, lists and strings
(pymalloc objects) and 8 KiB bytes objects (malloc). Every 100 ticks it
prints "tick N leaked B" (B = N * LEAK_BYTES). Exits 0 after a last line
with the number of objects kept, so that a run under attach can be
compared with a bare run byte for byte.
"""
import sys
import threading
import time

kept = []


def leak_slowly(n):
    kept.append(bytes(n))


def churn(stop):
    while not stop.is_set():
        junk = [{"k%d" % i: str(i) * 3} for i in range(200)]
        blob = [bytes(8192) for _ in range(8)]
        del junk, blob
        time.sleep(0.002)


def main():
    seconds = float(sys.argv[1])
    leak = int(sys.argv[2]) if len(sys.argv) > 2 else 64 << 10
    stop = threading.Event()
    workers = [threading.Thread(target=churn, args=(stop,)) for _ in range(2)]
    for w in workers:
        w.start()
    ticks = int(seconds * 100)
    start = time.monotonic()
    for t in range(1, ticks + 1):
        leak_slowly(leak)
        if t % 100 == 0:
            print("tick %d leaked %d" % (t, t * leak), flush=True)
        delay = start + t * 0.01 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    stop.set()
    for w in workers:
        w.join()
    print("done: %d objects kept" % len(kept), flush=True)


if __name__ == "__main__":
    main()
