"""app: a small request handler with a memory leak, for the README's quick start.

Usage: python3 examples/app.py [REQUESTS]        handle REQUESTS requests (default 1000), then exit
       python3 examples/app.py --serve           handle one request every 10 ms until killed

Each request renders a 64 KiB page. remember() keeps every page in a cache that is never
emptied: 1000 requests leak 1000 x 64 KiB = 62.5 MiB, allocated in render() and kept by remember().
render() also builds about 40 KiB of garbage per request that is freed at once: allocated,
not leaked.
"""
import sys
import time

PAGE = 64 * 1024
cache = {}


def render(n):
    rows = [("row %d of request %d" % (i, n)).encode() for i in range(500)]  # temporary
    return bytes(PAGE - 1) + rows[-1][:1]


def remember(n, page):
    cache[n] = page  # the leak: nothing ever leaves the cache


def handle(n):
    remember(n, render(n))


def main():
    if sys.argv[1:] == ["--serve"]:
        n = 0
        while True:
            n += 1
            handle(n)
            time.sleep(0.01)
    for n in range(int(sys.argv[1]) if len(sys.argv) > 1 else 1000):
        handle(n)
    print("handled %d requests, cached %d pages" % (len(cache), len(cache)))


if __name__ == "__main__":
    main()
