"""getattr with a computed name on a class without it: CPython's type
attribute cache keys on the name string's address, so an interned name
whose address differs from its siblings' lives on in the cache. A profiler
that moves sampled strings elsewhere makes them outlive the loop; bare, the
loop keeps nothing. Usage: pylookup.py N."""
import sys


class V:
    def visit_x(self):
        pass


def lookup_loop(n):
    v = V()
    for i in range(n):
        getattr(v, f"visit_{i % 5000}", None)  # SITE:lookup


lookup_loop(int(sys.argv[1]))
print("pylookup done")
