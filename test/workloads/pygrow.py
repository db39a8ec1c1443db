"""Python objects that start small (pymalloc) and grow past pymalloc's
512-byte limit by realloc: python3 pygrow.py N. Each of the N bytearrays
ends at least 3200 bytes long, allocated by its extend line."""
import sys

keep = []
for _ in range(int(sys.argv[1])):
    b = bytearray(200)
    b.extend(b"x" * 3000)  # SITE:grow
    keep.append(b)
