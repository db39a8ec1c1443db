"""pyleakserver: a Python service leaking in a named function, for the OTLP
export tests (test/e2e/otlp_test.go).

Usage: pyleakserver.py SECONDS

Every 10 ms tick, for SECONDS seconds, serve() handles a request: it builds
and drops some garbage, and leak_slowly keeps one LEAK-byte bytes object
forever. After each tick it prints "tick N UNIX-NS", the wall clock after
the tick's leak, so that a test knows how much leaked by when. Exits 0.
"""
import sys
import time

LEAK = 64 << 10
kept = []


def leak_slowly():
    kept.append(bytes(LEAK))  # the leak: heaplens must name this line


def serve(t):
    junk = [bytes(4096) for _ in range(8)]
    req = {"path": "/%d" % t, "headers": [("k%d" % i, "v" * i) for i in range(8)]}
    leak_slowly()
    return len(req["headers"]) + len(junk)


def main():
    ticks = int(float(sys.argv[1]) * 100)
    start = time.monotonic()
    for t in range(1, ticks + 1):
        serve(t)
        print("tick", t, time.time_ns(), flush=True)
        time.sleep(max(0, start + t / 100 - time.monotonic()))


if __name__ == "__main__":
    main()
