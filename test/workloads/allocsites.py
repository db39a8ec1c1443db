"""Known Python allocation sites for any allocator: stash_blocks keeps 50
bytearrays of 1 MiB (each is sys.getsizeof(bytearray(1 << 20)) bytes:
its buffer from malloc, its object from pymalloc), live at exit; churn
makes and drops 2000 of 100 KiB. Prints what stash_blocks holds."""
import sys

N = 1 << 20
keep = [None] * 50


def stash_blocks():
    for i in range(50):
        keep[i] = bytearray(N)


def churn():
    total = 0
    for i in range(2000):
        total += len(bytearray(100 << 10))
    return total


stash_blocks()
churn()
print("stash_blocks", 50 * sys.getsizeof(keep[0]))
