"""Small objects only: pymalloc serves them from arenas it maps itself
(256 KiB each up to 3.9, 1 MiB from 3.10). python3 pyarenas.py N keeps N
3-tuples of distinct floats (about 64 + 2·24 bytes each, all from
pymalloc): arenas of N·112 bytes or more, which heaplens must not count
again as mappings."""
import sys

def fill(n):
    return [(float(i), float(i) + 0.5, None) for i in range(n)]  # SITE:fill

keep = fill(int(sys.argv[1]))
print(len(keep))
