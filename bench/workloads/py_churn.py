"""Allocation-heavy pure Python: dict/list/str churn, json round trips and
small objects, with a rolling window of live data so the heap has a
working set. Usage: py_churn.py ROUNDS. The last line is
"checksum=... loop_s=... maxrss_kb=... cpu_s=...": the checksum depends only on
ROUNDS, so runs under different profilers can be compared."""
import collections
import json
import sys
import time

from peak_rss import peak_rss_kb  # beside this script


class Item:
    """A small object with a __dict__ (two allocations per instance)."""

    def __init__(self, i, name):
        self.i = i
        self.name = name
        self.tags = [name[:3], i & 7]


class Slot:
    """A small object without a __dict__."""

    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a = a
        self.b = b


def one_round(r):
    d = {}
    for i in range(1500):
        key = "k%d_%d" % (r, i)
        d[key] = [i, str(i * 7), (i, r), {"v": i * 2, "s": key[::-1]}]
    words = sorted(k.upper() + "-" + str(len(v)) for k, v in d.items())
    text = " ".join(words[::10])
    parts = text.split(" ")
    items = [Item(i, w) for i, w in enumerate(parts)]
    slots = [Slot(i, str(i)) for i in range(800)]
    blob = json.dumps({"r": r, "items": [[it.i, it.name, it.tags] for it in items],
                       "m": {str(i): "x" * (i % 23) for i in range(300)}})
    back = json.loads(blob)
    total = sum(len(x[1]) for x in back["items"]) + len(back["m"]) + len(blob)
    total += sum(s.a for s in slots) + len(words)
    return d, total


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    window = collections.deque(maxlen=40)  # ~40 rounds of dicts stay live
    checksum = 0
    t0 = time.perf_counter()
    for r in range(rounds):
        d, total = one_round(r)
        window.append(d)
        checksum = (checksum * 31 + total) % 1000000007
    loop = time.perf_counter() - t0
    rss = peak_rss_kb()
    print("checksum=%d loop_s=%.4f maxrss_kb=%d cpu_s=%.4f" % (checksum, loop, rss, time.process_time()))


if __name__ == "__main__":
    main()
