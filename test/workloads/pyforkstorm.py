"""pyforkstorm: a fork storm from a multithreaded Python process.

Three threads keep starting short-lived threads that allocate, while the
main thread forks CHILDREN children with os.fork. Each child keeps CHILD_N
bytes objects of CHILD bytes (request 33 + CHILD each) from child_keep and
leaves through os._exit(0). Prints how many children exited with 0.
"""
import os
import threading
import warnings

CHILDREN, CHILD_N, CHILD = 40, 10, 1000
KEPT = [None] * CHILD_N  # made before the fork: only the bytes objects are child_keep's
stop = threading.Event()


def work():
    junk = [bytes(100 + i) for i in range(200)]
    del junk


def churn():
    while not stop.is_set():
        t = threading.Thread(target=work)
        t.start()
        t.join()


def child_keep():
    for i in range(CHILD_N):
        KEPT[i] = bytes(CHILD)


def main():
    warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork() of a threaded process
    threads = [threading.Thread(target=churn) for _ in range(3)]
    for t in threads:
        t.start()
    ok = 0
    for _ in range(CHILDREN):
        pid = os.fork()
        if pid == 0:
            child_keep()
            os._exit(0 if all(len(b) == CHILD for b in KEPT) else 1)
        _, status = os.waitpid(pid, 0)
        ok += status == 0
    stop.set()
    for t in threads:
        t.join()
    print("children ok %d of %d" % (ok, CHILDREN))


main()
