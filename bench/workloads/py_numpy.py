"""A numpy pipeline with large temporaries: every step creates and frees
arrays of several MB (N float64 = 8·N bytes each). Usage: py_numpy.py
ITERS [N]. The last line is "checksum=... loop_s=... maxrss_kb=... cpu_s=...", the
checksum fixed by the seed, ITERS and N."""
import sys
import time

import numpy as np

from peak_rss import peak_rss_kb  # beside this script


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    rng = np.random.default_rng(12345)
    base = rng.standard_normal(n)
    checksum = 0.0
    t0 = time.perf_counter()
    for it in range(iters):
        a = base * (1.0 + it * 1e-3) + 0.5  # two temporaries
        b = np.sqrt(np.abs(a)) * np.sin(a)  # four
        c = np.concatenate([a[: n // 2], b[n // 2:]])
        m = c.reshape(-1, 1000)
        col = m.mean(axis=0)
        row = (m - col).std(axis=1)  # an N-element temporary
        idx = np.argsort(row)[:100]
        mask = b > 0.1
        sel = a[mask]  # boolean indexing: a fresh array of varying size
        s = np.cumsum(sel[::7])
        checksum += float(row[idx].sum()) + float(s[-1] if s.size else 0) + int(mask.sum()) * 1e-6
    loop = time.perf_counter() - t0
    rss = peak_rss_kb()
    print("checksum=%.6e loop_s=%.4f maxrss_kb=%d cpu_s=%.4f" % (checksum, loop, rss, time.process_time()))


if __name__ == "__main__":
    main()
