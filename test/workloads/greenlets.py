# 100 greenlets, each at its own recursion depth, switching after every
# allocation (what gevent and eventlet do under gunicorn or Celery): greenlet
# copies each one's slice of the C stack in and out, so the frames above a
# greenlet's own are another's, or stale. Each greenlet keeps ROUNDS bytes
# objects of 2000 + its index bytes, allocated at the line marked glet.
# Usage: greenlets.py [rounds] [greenlet|gevent|eventlet]. Prints a checksum
# and "done".
import sys

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 50
N = 100
kept = []


def at_depth(n, f):
    """f() under n more native frames: each level is called back by map, in C."""
    if n == 0:
        return f()
    return list(map(lambda _: at_depth(n - 1, f), [0]))[0]


def dive(i, depth, switch):
    if depth > 0:
        return at_depth(1, lambda: dive(i, depth - 1, switch)) + 1
    total = 0
    for r in range(ROUNDS):
        b = bytes(2000 + i)  # SITE:glet
        kept.append(b)
        total += len(b) + r
        switch()
    return total


def run_greenlets():
    from greenlet import greenlet, getcurrent
    hub = getcurrent()
    glets = []
    for i in range(N):
        glets.append(greenlet(lambda i=i: dive(i, (i * 7) % 40, hub.switch)))
    results = {}
    turn = 0
    while len(results) < N:
        for i, g in enumerate(glets):
            if i not in results:
                # Resumed from a varying depth: what lies above a greenlet's own slice changes.
                turn += 1
                v = at_depth((i + turn) % 13, g.switch)
                if g.dead:
                    results[i] = v
    return sum(results.values())


def run_gevent():
    import gevent
    jobs = [gevent.spawn(at_depth, i % 13, lambda i=i: dive(i, (i * 7) % 40, lambda: gevent.sleep(0))) for i in range(N)]
    gevent.joinall(jobs)
    return sum(j.value for j in jobs)


def run_eventlet():
    import eventlet
    pool = [eventlet.spawn(at_depth, i % 13, lambda i=i: dive(i, (i * 7) % 40, lambda: eventlet.sleep(0))) for i in range(N)]
    return sum(g.wait() for g in pool)


mode = sys.argv[2] if len(sys.argv) > 2 else "greenlet"
total = {"greenlet": run_greenlets, "gevent": run_gevent, "eventlet": run_eventlet}[mode]()
print(len(kept), total)
print("done")
