"""pyserver: a threaded Python service with a slow leak, for heaplens attach.

Usage: pyserver.py SECONDS LOG

Every 10 ms tick, for SECONDS seconds, the main thread serves a request;
every 10th tick leak_slowly keeps a 512 KiB bytes object forever and
appends "CLOCK_MONOTONIC-ns bytes" to LOG, so that a test knows what leaked
when. Two worker threads churn meanwhile, a fixed amount per tick: dicts,
lists and strings (pymalloc objects) and 8 KiB bytes objects (malloc).
stdout is the same in every run: every 100th tick, then a checksum of the
workers' results. Exits 0.
"""
import sys
import threading
import time

LEAK = 512 << 10
kept = []


def leak_slowly():
    kept.append(bytes(LEAK))


def serve(t):
    req = {"path": "/%d" % t, "headers": [("k%d" % i, "v" * i) for i in range(8)]}
    return len(req["headers"])


def churn(ticks, out, i):
    total = 0
    for n in range(ticks):
        junk = [{"k%d" % j: str(j) * 3} for j in range(50)]
        blob = [bytes(8192) for _ in range(4)]
        total += len(junk) + sum(len(b) for b in blob) + n
        del junk, blob
        time.sleep(0.008)
    out[i] = total


def main():
    seconds, log = float(sys.argv[1]), open(sys.argv[2], "w", buffering=1)
    ticks = int(seconds * 100)
    results = [0, 0]
    workers = [threading.Thread(target=churn, args=(ticks, results, i)) for i in range(2)]
    for w in workers:
        w.start()
    start, leaked = time.monotonic_ns(), 0
    for t in range(1, ticks + 1):
        serve(t)
        if t % 10 == 0:
            leak_slowly()
            leaked += LEAK
            log.write("%d %d\n" % (time.monotonic_ns(), leaked))
        if t % 100 == 0:
            print("tick %d" % t, flush=True)
        delay = (start + t * 10_000_000 - time.monotonic_ns()) / 1e9
        if delay > 0:
            time.sleep(delay)
    for w in workers:
        w.join()
    print("checksum %d" % sum(results), flush=True)


if __name__ == "__main__":
    main()
