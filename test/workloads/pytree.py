"""pytree: a Python process tree whose every process retains a known amount.

Workers of a fork, a spawn and a forkserver multiprocessing pool each keep
KEEP_N bytes objects of KEEP bytes (allocation request 33 + KEEP each) from
their initializer; a subprocess.run child and a child wrapped in `sh -c`
keep CHILD_N of CHILD bytes. Lines marked "# SITE:name" are where the
tests expect the bytes.
"""
import multiprocessing as mp
import os
import subprocess
import sys

KEEP_N, KEEP = 4000, 1000
CHILD_N, CHILD = 3000, 2000
KEPT = []


def keep_init(n):
    for _ in range(n):
        KEPT.append(bytes(KEEP))  # SITE:keep_init


def where(_):
    return os.getpid()


def child_code():
    return ("import os, sys\n"
            "def child_keep():\n"
            "    return [bytes(%d) for _ in range(%d)]  # SITE:child\n"
            "kept = child_keep()\n"
            "sys.stdout.flush()\n"
            "os._exit(0)\n") % (CHILD, CHILD_N)


def pool_pids(method):
    ctx = mp.get_context(method)
    with ctx.Pool(2, initializer=keep_init, initargs=(KEEP_N,)) as pool:
        pids = set(pool.map(where, range(8), chunksize=1))
        pool.close()
        pool.join()
    return pids


def main():
    for method in ("fork", "spawn", "forkserver"):
        print(method, "workers", len(pool_pids(method)) > 0)
    subprocess.run([sys.executable, "-c", child_code()], check=True)
    subprocess.run(["sh", "-c", '"$0" -c "$1"', sys.executable, child_code()], check=True)
    print("pytree done")


if __name__ == "__main__":
    main()
