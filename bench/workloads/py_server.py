"""A long-running "server" loop with a slow leak. Each request parses a
JSON body, looks things up, builds a response and renders it; a cache
keeps the payload of one request in every KEEP and never evicts it.

Usage: py_server.py REQUESTS [KEEP [PAYLOAD]]

The leak has a known size: REQUESTS // KEEP payloads, each a bytes object
of PAYLOAD bytes (PAYLOAD + 33 bytes with CPython's header and trailing
NUL, more than pymalloc's 512-byte limit, so one malloc each), all
allocated on the line marked LEAK SITE and live at exit. The last line is
"checksum=... loop_s=... maxrss_kb=... leaked=N leaked_bytes=B cpu_s=..."."""
import json
import sys
import time

from peak_rss import peak_rss_kb  # beside this script

USERS = [{"id": i, "name": "user%04d" % i, "roles": ["r%d" % (i % 5), "all"]} for i in range(500)]
INDEX = {u["name"]: u for u in USERS}
# Module-level, as a real server's cache is: what it holds is still live
# when the program finishes (a local of main() would be freed on return).
CACHE = []


def make_payload(req_id, size):
    # One fresh bytes object of exactly size bytes; the bytearray it is cut
    # from is a temporary of about the same size.
    buf = bytearray(b"%08d" % req_id) * (size // 8 + 1)
    return bytes(buf[:size])  # LEAK SITE (when kept)


def handle(req_id, cache, keep, size):
    body = json.dumps({"user": "user%04d" % (req_id % 500), "q": [req_id, req_id * 3, "x" * (req_id % 40)]})
    req = json.loads(body)
    user = INDEX[req["user"]]
    rows = [{"k": "%s-%d" % (user["name"], j), "v": j * req_id % 97} for j in range(30)]
    resp = {"user": user["id"], "roles": user["roles"], "rows": rows, "n": len(req["q"])}
    out = json.dumps(resp, sort_keys=True)
    payload = make_payload(req_id, size)
    if req_id % keep == 0:
        cache.append(payload)
    return len(out) + payload[3]


def main():
    requests = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    keep = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 4000
    cache = CACHE
    checksum = 0
    t0 = time.perf_counter()
    for req_id in range(requests):
        checksum = (checksum * 31 + handle(req_id, cache, keep, size)) % 1000000007
    loop = time.perf_counter() - t0
    rss = peak_rss_kb()
    print("checksum=%d loop_s=%.4f maxrss_kb=%d leaked=%d leaked_bytes=%d cpu_s=%.4f"
          % (checksum, loop, rss, len(cache), sum(sys.getsizeof(p) for p in cache), time.process_time()))


if __name__ == "__main__":
    main()
