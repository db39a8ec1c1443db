"""Thread-pool workloads with known origins: python3 pools.py LIB MODE [ARGS].

Each job function is named for the Python code that owns the pool work, and
uses its own allocation size so the test can tell whose bytes are whose.
"""
import ctypes
import sys
import threading

mode = sys.argv[2]
# omp-copies: two libraries, each linked against its own libgomp copy, both
# loaded RTLD_LOCAL (as Python loads extensions); omp-copies-global puts the
# first one's libgomp in the global scope, where the second binds to it too.
lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL if mode == "omp-copies-global" else ctypes.DEFAULT_MODE)
if mode.startswith("omp-copies"):
    other = ctypes.CDLL(sys.argv[3])
    args = [int(a) for a in sys.argv[4:]]
else:
    args = [int(a) for a in sys.argv[3:]]


def omp_job_a(n, size, reps):
    for _ in range(reps):
        assert lib.work_alloc(n, size, 4) > 0, "no iteration ran on a worker"


def omp_job_b(n, size, reps, on=None):
    for _ in range(reps):
        assert (on or lib).work_alloc(n, size, 4) > 0, "no iteration ran on a worker"


def pool_job_a(n, size, api):
    assert lib.pool_run(n, size, api) == n


def pool_job_b(n, size, api):
    assert lib.pool_run(n, size, api) == n


failed = []


def both(fa, fb, a, b):
    def guarded(f, args):
        try:
            f(*args)
        except BaseException as e:
            failed.append(e)
            raise

    ta = threading.Thread(target=guarded, args=(fa, a))
    tb = threading.Thread(target=guarded, args=(fb, b))
    ta.start()
    tb.start()
    ta.join()
    tb.join()
    if failed:
        sys.exit("a job failed: %r" % failed)


if mode == "omp-one":  # n size reps
    omp_job_a(*args)
elif mode == "omp-two":  # n size_a size_b reps
    n, sa, sb, reps = args
    both(omp_job_a, omp_job_b, (n, sa, reps), (n, sb, reps))
elif mode.startswith("omp-copies"):  # OTHERLIB n size_a size_b reps: each library on its own libgomp copy
    n, sa, sb, reps = args
    both(omp_job_a, omp_job_b, (n, sa, reps), (n, sb, reps, other))
elif mode == "pool-one":  # n size api
    lib.pool_start(3)
    pool_job_a(*args)
elif mode == "pool-two":  # n size_a size_b api
    n, sa, sb, api = args
    lib.pool_start(3)
    lib.pool_gate(2)
    both(pool_job_a, pool_job_b, (n, sa, api), (n, sb, api))
else:
    sys.exit("unknown mode " + mode)
